"""A long clip's prefill in chunks: the memory its activations take, its time, how soon Stop
returns, and the same clip pruned, per chunk size, in one process.

Random weights at the released shapes (built from the config; nothing is downloaded): a language
model of ``decode_bench``'s sizes (Qwen3-VL's ``2B``, ``8B``; Qwen3.5's ``3.5-0.8B``, ``3.5-9B``), in
bf16 or with the decoder layers' linear layers in FP8 (``--dtype fp8``, per channel, as
``model.dtype = fp8`` quantizes on load), keys and values as ``--kv-cache`` says
(``decoding.kv_cache_dtype``). The prompt is a clip of ``--frames`` frames of a
1280x720 video sampled as Framewise samples it under ``--pixels`` (default: Qwen3-VL's released
preprocessing's budget), laid out as the prompt lays it out, its features random (Qwen3-VL's with three
deepstack layers). Per chunk size (``--chunks``, 0: the whole prompt in one pass):

- the activations: the allocator's peak above what it held before the prefill (the state and
  weights are allocated before), in GiB and per token of a chunk; the reserved memory's peak
  alike (what the process takes from the card);
- the prefill's milliseconds (the median of ``--repeats``, after one prefill of a short clip of
  the same frame size: the same kernels at the same chunk shapes);
- Stop: ``--stops`` requests at random times (seeded by ``--seed``) spread over one prefill, the
  first from an empty state, each later one resuming from what the one before left (as asking
  again after a Stop does). Each goes the way a person's Stop goes: the model family's cancel
  points in the language model (checked before each layer while the prompt is prefilled) and the
  decoder's check before each chunk. Per stop: where it fell (its share of one prefill's time,
  the prompt tokens the state held after it), the milliseconds until
  :meth:`~framewise.core.decoding.Decoder.answer` returned and until the device had finished
  what was queued before it (the next request's wait).

With ``--pruning RATE``, at the first chunk size: the clip pruned at that rate
(:mod:`~framewise.core.encoding.pruning`: the kept tokens chosen from the features on their
device, the prompt cut as the family cuts it, the unpruned positions kept) and prefilled, timed
from the choice of tokens to the first token (median of ``--repeats`` after one untimed), against
the unpruned prefill's time.

Writes ``prefill_chunks.json`` and ``prefill_chunks.md`` under ``--out``.

    python3 benchmarks/prefill_chunk_bench.py --size 8B --dtype fp8 --out results/prefill
    python3 benchmarks/prefill_chunk_bench.py --size 3.5-9B --dtype bfloat16 --out results/prefill
    python3 benchmarks/prefill_chunk_bench.py --size 8B --dtype fp8 --kv-cache fp8 --frames 2048 \\
        --pixels 134217728 --chunks 1024 --repeats 1 --stops 3 --pruning 0.75 --out results/64k   # 64k tokens
    python3 benchmarks/prefill_chunk_bench.py --size tiny --device cpu --dtype float32 --frames 8 \\
        --chunks 0,64 --out /tmp/prefill                                          # CPU smoke test
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import statistics
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Sequence

import torch

BENCHMARKS = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCHMARKS.parent))
sys.path.insert(0, str(BENCHMARKS))

from decode_bench import (  # noqa: E402
    FRAMEWISE_STEPS,
    QWEN3_5_SIZES,
    TEXT_SIZES,
    VIDEO_PAD,
    _free,
    _sync,
    app_frame_size,
    build_model,
    clip_prompt,
    features_for,
    language_model,
    make_conversation,
    quantize_decoder_layers,
)
from framewise.core.backends.cancel import CancelScope  # noqa: E402
from framewise.core.backends.local.cancel_points import cancel_points  # noqa: E402
from framewise.core.decoding import Decoder, Prompt, SamplingRule  # noqa: E402
from framewise.core.encoding.defs import VisionItem  # noqa: E402
from framewise.core.encoding.held_features import joined, settled  # noqa: E402
from framewise.core.encoding.pruning import prune_encoded, retained_mask  # noqa: E402
from framewise.core.errors import CancelledError  # noqa: E402
from framewise.core.families import family_for  # noqa: E402
from framewise.core.families.qwen3_vl.limits import QWEN3_VL_LIMITS  # noqa: E402
from framewise.core.families.qwen3_vl.processor import VideoInputs  # noqa: E402
from framewise.core.families.qwen3_vl.prompt import VIDEO_TOKEN, ChatInputs, _pruned  # noqa: E402
from framewise.core.quantization.kv_formats import KV_CACHE_FORMATS, kv_cache_format  # noqa: E402

GIB = 2**30
# Frames of the short clip whose prefill runs the kernels once before anything is timed.
WARM_UP_FRAMES = 64
MERGE_AREA = 4


def build_language(args, device: torch.device, dtype: torch.dtype):
    """The model of ``args.size`` (its linear layers in FP8 for ``--dtype fp8``) and the language
    model the decoder runs, its keys and values kept as ``--kv-cache`` says."""
    model = build_model(args.size, device, dtype)
    if args.dtype == "fp8":
        quantize_decoder_layers(model, device)
    return model, language_model(model, FRAMEWISE_STEPS["framewise"], kv_cache_format(args.kv_cache))


def make_prompt(model, frames: int, size: tuple[int, int], device: torch.device, dtype: torch.dtype) -> Prompt:
    """The prompt about a clip of ``frames`` frames of ``size`` (height, width), random features,
    held where the engine holds a clip's (a long clip's in the host's memory on CUDA)."""
    conversation = make_conversation(frames, *size, follow_ups=0)
    features = features_for(model, conversation.first.count(VIDEO_PAD), device, dtype)
    return clip_prompt(conversation.first, conversation.grid_thw, joined(settled([features])))


def prefill_once(decoder: Decoder, prompt: Prompt, device: torch.device, should_stop=lambda: False) -> dict[str, Any]:
    """One prefill from an empty state: its milliseconds and its memory above what was held before."""
    decoder.state.reset()
    _free(device)
    allocated = reserved = 0
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        allocated, reserved = torch.cuda.memory_allocated(device), torch.cuda.memory_reserved(device)
    started = time.perf_counter()
    result = decoder.answer(prompt, SamplingRule(1), lambda token: None, should_stop)
    returned = time.perf_counter()
    _sync(device)
    idle = time.perf_counter()
    run = {"ms": (idle - started) * 1e3, "returned": returned, "idle": idle, "chunks": result.prefill_chunks,
           "stop_reason": result.stop_reason}
    if device.type == "cuda":
        run["activations_gib"] = (torch.cuda.max_memory_allocated(device) - allocated) / GIB
        run["reserved_gib"] = (torch.cuda.max_memory_reserved(device) - reserved) / GIB
    return run


def stop_once(decoder: Decoder, prompt: Prompt, device: torch.device, stop_points: Sequence[torch.nn.Module],
              after_s: float, request: int) -> dict[str, Any]:
    """Answer ``prompt`` from what the state holds, a Stop asked ``after_s`` seconds in, as request
    ``request`` of a cancel scope whose ``stop_points`` check it before they run. Milliseconds from
    the ask to the return and to idle, and the prompt tokens the state holds after it (None and
    ``stopped`` False when the prefill ended first)."""
    scope = CancelScope()
    asked: list[float] = []

    def ask() -> None:
        asked.append(time.perf_counter())
        scope.cancel(request)

    timer = threading.Timer(after_s, ask)
    with scope.request(request), cancel_points(stop_points, scope):
        timer.start()
        try:
            stopped = decoder.answer(prompt, SamplingRule(1), lambda token: None, scope.is_set).stop_reason == "cancelled"
        except CancelledError:
            stopped = True
        returned = time.perf_counter()
        timer.cancel()
    _sync(device)
    idle = time.perf_counter()
    if not (stopped and asked):
        return {"stopped": False, "to_return_ms": None, "to_idle_ms": None, "held_tokens": len(decoder.cache.tokens)}
    return {"stopped": True, "to_return_ms": (returned - asked[0]) * 1e3, "to_idle_ms": (idle - asked[0]) * 1e3,
            "held_tokens": len(decoder.cache.tokens)}


def stop_latencies(decoder: Decoder, prompt: Prompt, device: torch.device, stop_points: Sequence[torch.nn.Module],
                   prefill_ms: float, stops: int, seed: int) -> list[dict[str, Any]]:
    """``stops`` Stops at random shares of one prefill's ``prefill_ms`` (between 2 and 98 %,
    ascending), the first from an empty state, each later one resuming what the one before left."""
    draw = random.Random(seed)
    shares = sorted(draw.uniform(0.02, 0.98) for _ in range(stops))
    decoder.state.reset()
    results, previous = [], 0.0
    for request, share in enumerate(shares, start=1):
        result = stop_once(decoder, prompt, device, stop_points, (share - previous) * prefill_ms / 1e3, request)
        results.append({"share": share, **result})
        previous = share
    return results


def pruned_prompt(prompt: Prompt, rate: float) -> Prompt:
    """``prompt`` (one clip) with its video tokens pruned at ``rate``: the kept tokens chosen from its
    features where they lie, the prompt and features cut as the family cuts them."""
    item = prompt.items[0]
    modality, (t, h, w) = prompt.grids[0]
    retention = retained_mask(item.embeds, (t, h // 2, w // 2), rate)
    inputs = ChatInputs(prompt.input_ids, torch.ones_like(prompt.input_ids), prompt.token_types, prompt.spans,
                        prompt.grids, prompt_text="")
    video = VideoInputs(VisionItem(torch.empty(0), (t, h, w), modality), (), retention)
    cut = _pruned(inputs, [video], MERGE_AREA, "")
    kept = prune_encoded(item, retention)
    return Prompt(cut.input_ids, cut.mm_token_type_ids, cut.spans, cut.grids, (kept,), owner=kept, unpruned=cut.unpruned)


def pruned_prefill(decoder: Decoder, prompt: Prompt, device: torch.device, rate: float, repeats: int) -> dict[str, Any]:
    """The clip of ``prompt`` pruned at ``rate`` and prefilled from an empty state, timed from the
    choice of tokens to the first token: one untimed, then the median of ``repeats``."""
    times, cut = [], prompt
    for _ in range(1 + repeats):
        decoder.state.reset()
        _free(device)
        _sync(device)
        started = time.perf_counter()
        cut = pruned_prompt(prompt, rate)
        decoder.answer(cut, SamplingRule(1), lambda token: None, lambda: False)
        _sync(device)
        times.append((time.perf_counter() - started) * 1e3)
    video = int((prompt.token_types == VIDEO_TOKEN).sum())
    return {"rate": rate, "prompt_tokens": cut.input_ids.shape[1], "video_tokens_before": video,
            "video_tokens_after": cut.items[0].embeds.shape[0], "prefill_ms": statistics.median(times[1:])}


def chunk_row(decoder: Decoder, prompt: Prompt, chunk: int, args, stop_points) -> dict[str, Any]:
    """One chunk size's row: passes, the prefill's median milliseconds, its memory, and the Stops."""
    device = decoder.language.device
    length = prompt.input_ids.shape[1]
    decoder.prefill_chunk_tokens = chunk or length
    runs = [prefill_once(decoder, prompt, device) for _ in range(args.repeats)]
    row = {
        "chunk": chunk or length,
        "chunks": runs[0]["chunks"],
        "prefill_ms": statistics.median(run["ms"] for run in runs),
        **{key: max(run[key] for run in runs) for key in ("activations_gib", "reserved_gib") if key in runs[0]},
    }
    if "activations_gib" in row:
        row["activation_kib_per_chunk_token"] = row["activations_gib"] * GIB / 1024 / (chunk or length)
    if args.stops:
        row["stops"] = stop_latencies(decoder, prompt, device, stop_points, row["prefill_ms"], args.stops, args.seed)
    return row


def bench(args) -> dict[str, Any]:
    device = torch.device(args.device)
    dtype = torch.float32 if args.dtype == "float32" else torch.bfloat16
    torch.manual_seed(0)
    model, language = build_language(args, device, dtype)
    size = app_frame_size(args.frames, args.pixels or QWEN3_VL_LIMITS.released_clip_pixels)
    prompt = make_prompt(model, args.frames, size, device, dtype)
    length = prompt.input_ids.shape[1]
    decoder = Decoder(language, length + 64, 256, use_graphs=False)
    stop_points = family_for(model.config.model_type).cancel_points(model).language if args.stops else ()
    rows = []
    for chunk in args.chunks:
        decoder.prefill_chunk_tokens = chunk or length
        prefill_once(decoder, make_prompt(model, min(args.frames, WARM_UP_FRAMES), size, device, dtype), device)
        rows.append(chunk_row(decoder, prompt, chunk, args, stop_points))
        print(json.dumps(rows[-1]), flush=True)
    result = {"prompt_tokens": length, "clip": f"{args.frames} frames of {size[1]}x{size[0]}",
              "context_tokens": decoder.max_tokens, "state_gib": decoder.state_bytes / GIB, "rows": rows}
    if args.pruning:
        decoder.prefill_chunk_tokens = args.chunks[0] or length
        pruning = pruned_prefill(decoder, prompt, device, args.pruning, args.repeats)
        result["pruning"] = {**pruning, "unpruned_ms": rows[0]["prefill_ms"],
                             "ratio": pruning["prefill_ms"] / rows[0]["prefill_ms"]}
        print(json.dumps(result["pruning"]), flush=True)
    return result


def markdown(result: dict[str, Any], header: dict[str, Any]) -> str:
    lines = [
        f"{header['device']}, torch {header['torch']}, {header['date']}: `{header['command']}`",
        "",
        f"{header['size']} {header['dtype']}, KV cache {header['kv_cache']}: {result['clip']}, "
        f"{result['prompt_tokens']:,} prompt tokens, "
        f"state {result['state_gib']:.2f} GiB for {result['context_tokens']:,} positions",
        "",
        "| chunk (tokens) | passes | prefill (ms) | activations (GiB) | per chunk token (KiB) | reserved peak (GiB) "
        "| Stops: share of the prefill, tokens held after, to return / to idle (ms) |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in result["rows"]:
        memory = (f"{row['activations_gib']:.2f} | {row['activation_kib_per_chunk_token']:.0f} | "
                  f"{row['reserved_gib']:.2f}" if "activations_gib" in row else "– | – | –")
        lines.append(f"| {row['chunk']:,} | {row['chunks']} | {row['prefill_ms']:.0f} | {memory} | "
                     f"{_stop_words(row.get('stops', []))} |")
    pruning = result.get("pruning")
    if pruning:
        lines += ["", f"Pruned at {pruning['rate']}: {pruning['video_tokens_before']:,} → {pruning['video_tokens_after']:,} "
                  f"video tokens, {pruning['prompt_tokens']:,} prompt tokens, prefilled in {pruning['prefill_ms']:.0f} ms "
                  f"(token choice included) against {pruning['unpruned_ms']:.0f} ms unpruned: {pruning['ratio']:.2f}×"]
    return "\n".join(lines) + "\n"


def _stop_words(stops: list[dict[str, Any]]) -> str:
    return "; ".join(
        f"{stop['share']:.0%}, {stop['held_tokens']:,}: {stop['to_return_ms']:.1f} / {stop['to_idle_ms']:.1f}"
        if stop["stopped"] else f"{stop['share']:.0%}: ended before the Stop"
        for stop in stops
    ) or "–"


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    args.chunks = [int(value) for value in args.chunks.split(",")]
    result = bench(args)
    header = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "device": torch.cuda.get_device_name() if args.device == "cuda" else platform.processor() or "cpu",
        "torch": torch.__version__,
        "command": " ".join([Path(sys.argv[0]).name, *(sys.argv[1:] if argv is None else argv)]),
        "size": args.size, "dtype": args.dtype, "kv_cache": args.kv_cache,
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "prefill_chunks.json").write_text(json.dumps({**header, **result}, indent=1))
    table = markdown(result, header)
    (out / "prefill_chunks.md").write_text(table)
    print(table)
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", default="8B", choices=sorted({*TEXT_SIZES, *QWEN3_5_SIZES}),
                        help="a Qwen3-VL text size, or a Qwen3.5 one (3.5-...)")
    parser.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "fp8", "float32"))
    parser.add_argument("--kv-cache", default="auto", choices=sorted(KV_CACHE_FORMATS),
                        help="decoding.kv_cache_dtype: keys and values in the activations' dtype, or fp8")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--frames", type=int, default=768)
    parser.add_argument("--pixels", type=int, default=None, help="sampling max pixels (default: Qwen3-VL's released preprocessing's)")
    parser.add_argument("--chunks", default="0,4096,2048,1024,512", help="chunk sizes; 0 is one pass")
    parser.add_argument("--repeats", type=int, default=2, help="timed prefills per chunk size")
    parser.add_argument("--stops", type=int, default=1, help="Stops at random times per chunk size (0: none)")
    parser.add_argument("--seed", type=int, default=0, help="seeds the Stops' times")
    parser.add_argument("--pruning", type=float, default=0.0, help="also prefill the clip pruned at this rate (0: not)")
    parser.add_argument("--out", default="results/prefill")
    return parser


if __name__ == "__main__":
    raise SystemExit(main())
