"""A long clip's prefill in chunks: the memory its activations take, its time, and how soon Stop
returns, per chunk size, in one process.

Random weights at the released shapes (built from the config; nothing is downloaded): Qwen3-VL's
language model (``--family qwen3_vl``, sizes of ``decode_bench``) or a Qwen3.5 of the 9B's
shapes (``--family qwen3_5``; its MLP width is not in the sources this repository holds: 12,288
is assumed), in bf16 or with the decoder layers' linear layers in FP8 (``--dtype fp8``, per
channel, as ``model.dtype = fp8`` quantizes on load). The prompt is a clip of ``--frames`` frames
of a 1280x720 video sampled as Framewise samples it under ``--pixels`` (default: the most pixels a
clip may have), laid out as the prompt lays it out, its features random (Qwen3-VL's with three
deepstack layers). Per chunk size (``--chunks``, 0: the whole prompt in one pass):

- the activations: the allocator's peak above what it held before the prefill (the state and
  weights are allocated before), in GiB and per token of a chunk; the reserved memory's peak
  alike (what the process takes from the card);
- the prefill's milliseconds (the median of ``--repeats`` after one warm-up);
- Stop: a second thread asks to stop at ``--stop-at`` of the one-pass prefill's time; the
  milliseconds until :meth:`~framewise.core.decoding.Decoder.answer` returns, and until the
  device has finished what was queued before it (the next request's wait).

Writes ``prefill_chunks.json`` and ``prefill_chunks.md`` under ``--out``.

    python3 benchmarks/prefill_chunk_bench.py --family qwen3_vl --size 8B --dtype fp8 --out results/prefill
    python3 benchmarks/prefill_chunk_bench.py --family qwen3_5 --dtype bfloat16 --out results/prefill
    python3 benchmarks/prefill_chunk_bench.py --size tiny --device cpu --dtype float32 --frames 8 \\
        --chunks 0,64 --out /tmp/prefill                                          # CPU smoke test
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch

BENCHMARKS = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCHMARKS.parent))
sys.path.insert(0, str(BENCHMARKS))

from decode_bench import (  # noqa: E402
    TEXT_SIZES,
    VIDEO_PAD,
    _free,
    _sync,
    build_model,
    make_conversation,
    quantize_decoder_layers,
    random_features,
)
from framewise.core.decoding import Decoder, Prompt, SamplingRule  # noqa: E402
from framewise.core.families import family_for  # noqa: E402
from framewise.core.families.qwen3_vl.prompt import TEXT_TOKEN, VIDEO_TOKEN, vision_spans  # noqa: E402
from framewise.core.settings import AppSettings  # noqa: E402

GIB = 2**30
# Qwen3.5-9B's text config as far as this repository's sources give it, and the assumed MLP width.
QWEN3_5_9B = {
    "hidden_size": 4096, "intermediate_size": 12288, "vocab_size": 248320, "max_position_embeddings": 262144,
    "num_hidden_layers": 32, "full_attention_interval": 4, "num_attention_heads": 16, "num_key_value_heads": 4,
    "head_dim": 256, "linear_num_key_heads": 16, "linear_num_value_heads": 32, "linear_key_head_dim": 128,
    "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4,
    "rope_parameters": {"rope_type": "default", "rope_theta": 10_000_000.0, "partial_rotary_factor": 0.25,
                        "mrope_section": [11, 11, 10], "mrope_interleaved": True},
}


def clip_size(frames: int, pixels: int | None) -> tuple[int, int]:
    """(height, width) Framewise samples a 1280x720 clip of ``frames`` frames to under ``pixels``
    (None: the most a Qwen3-VL clip may have)."""
    family = family_for("qwen3_vl")
    settings = AppSettings().replace(
        "sampling", max_frames=max(frames, AppSettings().sampling.max_frames),
        max_pixels=pixels or family.limits.max_clip_pixels,
    )
    return family.frame_sizing(settings.sampling, family.limits).size(frames, 720, 1280)


def build_language(args, device: torch.device, dtype: torch.dtype):
    """The language model the decoder runs, its width, and how many deepstack layers it takes."""
    if args.family == "qwen3_vl":
        from framewise.core.families.qwen3_vl.language import Qwen3VLLanguageModel

        model = build_model(args.size, device, dtype)
        if args.dtype == "fp8":
            quantize_decoder_layers(model, device)
        return Qwen3VLLanguageModel(model), TEXT_SIZES[args.size][0], 3
    from transformers import Qwen3_5Config, Qwen3_5ForConditionalGeneration

    from framewise.core.families.qwen3_5.language import Qwen35LanguageModel

    config = Qwen3_5Config(
        text_config=QWEN3_5_9B,
        vision_config={"depth": 1, "hidden_size": 64, "intermediate_size": 128, "num_heads": 2,
                       "out_hidden_size": QWEN3_5_9B["hidden_size"]},
        video_token_id=VIDEO_PAD,
    )
    with torch.device(device):
        model = Qwen3_5ForConditionalGeneration(config).to(dtype).eval()
    if args.dtype == "fp8":
        quantize_decoder_layers(model, device)
    return Qwen35LanguageModel(model), QWEN3_5_9B["hidden_size"], 0


def make_prompt(args, hidden: int, deepstack: int, device: torch.device, dtype: torch.dtype) -> Prompt:
    height, width = clip_size(args.frames, args.pixels)
    conversation = make_conversation(args.frames, height, width, follow_ups=0)
    ids = torch.tensor([conversation.first])
    types = torch.where(ids == VIDEO_PAD, VIDEO_TOKEN, TEXT_TOKEN)
    grids = (("video", conversation.grid_thw),)
    features = random_features(int((types == VIDEO_TOKEN).sum()), hidden, device, dtype)
    features = type(features)(embeds=features.embeds, deepstack=features.deepstack[:deepstack])
    return Prompt(ids, types, vision_spans(types, grids, merge_area=4), grids, (features,), owner=features)


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


def stop_latency(decoder: Decoder, prompt: Prompt, device: torch.device, after_s: float) -> dict[str, float]:
    """Ask to stop ``after_s`` into a prefill; milliseconds from the ask to the return and to idle."""
    asked = threading.Event()
    at: list[float] = []

    def ask() -> None:
        at.append(time.perf_counter())
        asked.set()

    timer = threading.Timer(after_s, ask)
    timer.start()
    run = prefill_once(decoder, prompt, device, should_stop=asked.is_set)
    timer.join()
    return {"to_return_ms": (run["returned"] - at[0]) * 1e3, "to_idle_ms": (run["idle"] - at[0]) * 1e3,
            "stopped": run["stop_reason"] == "cancelled"}


def bench(args) -> dict[str, Any]:
    device = torch.device(args.device)
    dtype = torch.float32 if args.dtype == "float32" else torch.bfloat16
    torch.manual_seed(0)
    language, hidden, deepstack = build_language(args, device, dtype)
    prompt = make_prompt(args, hidden, deepstack, device, dtype)
    length = prompt.input_ids.shape[1]
    decoder = Decoder(language, length + 64, 256, use_graphs=False)
    rows = []
    one_pass_ms = None
    for chunk in args.chunks:
        decoder.prefill_chunk_tokens = chunk or length
        runs = [prefill_once(decoder, prompt, device) for _ in range(args.repeats + 1)][1:]
        row = {
            "chunk": chunk or length,
            "chunks": runs[0]["chunks"],
            "prefill_ms": statistics.median(run["ms"] for run in runs),
            **{key: max(run[key] for run in runs) for key in ("activations_gib", "reserved_gib") if key in runs[0]},
        }
        if "activations_gib" in row:
            row["activation_kib_per_chunk_token"] = row["activations_gib"] * GIB / 1024 / (chunk or length)
        one_pass_ms = one_pass_ms or row["prefill_ms"]
        row["stop"] = stop_latency(decoder, prompt, device, args.stop_at * one_pass_ms / 1e3)
        rows.append(row)
        print(json.dumps(row), flush=True)
    return {"prompt_tokens": length, "context_tokens": decoder.max_tokens, "state_gib": decoder.state_bytes / GIB,
            "rows": rows}


def markdown(result: dict[str, Any], header: dict[str, Any]) -> str:
    lines = [
        f"{header['device']}, torch {header['torch']}, {header['date']}: `{header['command']}`",
        "",
        f"{header['family']} {header['size']} {header['dtype']}: {result['prompt_tokens']:,} prompt tokens, "
        f"state {result['state_gib']:.2f} GiB for {result['context_tokens']:,} positions",
        "",
        "| chunk (tokens) | passes | prefill (ms) | activations (GiB) | per chunk token (KiB) | reserved peak (GiB) "
        "| Stop: to return / to idle (ms) |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in result["rows"]:
        stop = row["stop"]
        memory = (f"{row['activations_gib']:.2f} | {row['activation_kib_per_chunk_token']:.0f} | "
                  f"{row['reserved_gib']:.2f}" if "activations_gib" in row else "– | – | –")
        lines.append(f"| {row['chunk']:,} | {row['chunks']} | {row['prefill_ms']:.0f} | {memory} | "
                     f"{stop['to_return_ms']:.0f} / {stop['to_idle_ms']:.0f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    args.chunks = [int(value) for value in args.chunks.split(",")]
    result = bench(args)
    header = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "device": torch.cuda.get_device_name() if args.device == "cuda" else platform.processor() or "cpu",
        "torch": torch.__version__,
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "family": args.family, "size": args.size if args.family == "qwen3_vl" else "9B", "dtype": args.dtype,
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
    parser.add_argument("--family", default="qwen3_vl", choices=("qwen3_vl", "qwen3_5"))
    parser.add_argument("--size", default="8B", choices=sorted(TEXT_SIZES), help="Qwen3-VL's text size")
    parser.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "fp8", "float32"))
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--frames", type=int, default=768)
    parser.add_argument("--pixels", type=int, default=None, help="sampling max pixels (default: the most)")
    parser.add_argument("--chunks", default="0,4096,2048,1024,512", help="chunk sizes; 0 is one pass")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--stop-at", type=float, default=0.5, help="when Stop is asked, as a share of one pass")
    parser.add_argument("--out", default="results/prefill")
    return parser


if __name__ == "__main__":
    raise SystemExit(main())
