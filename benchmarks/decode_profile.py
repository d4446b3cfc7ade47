"""Where a decode step's GPU time goes, and what a follow-up's prefill costs.

For one Qwen3-VL text size (random weights, bf16), with the cache filled to ``--position``:

- each way a decode step can run (``kernels``: the Triton kernels; ``ops``: the same arithmetic
  as torch ops; ``layers``: the model's own layers) under ``torch.profiler``, kernels sorted into
  matrix-vector products, attention and the rest, with the bandwidth the products reach, then
  the step's time through a CUDA graph (CUDA events over replays): the graph time minus the
  kernels' own time is what the launches cost;
- a follow-up's prefill (``--follow-up`` new tokens after the cached prefix) through the model's
  own layers (SDPA without cuDNN, as the decoder runs it), at a new key length every time (as
  every follow-up has) and at one length thrice, and where its host time goes (``torch.profiler``).

Prints one JSON line per measurement and writes ``decode_profile.json`` under ``--out``.

- with ``--first-prefill N``, a first question's prefill of N tokens under ``torch.profiler``, its
  GPU kernels sorted by their time (where a first question's time to first token goes).

``--dtype fp8`` quantizes the decoder layers first, as quantize-on-load does.

    python3 benchmarks/decode_profile.py --out results/ [--size 8B] [--position 1700] [--dtype fp8]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parent))

from decode_bench import build_model, language_weight_bytes, quantize_decoder_layers  # noqa: E402
from encoder_profile import profile_pass  # noqa: E402

from framewise.core.decoding.kv_cache import StaticKVCache  # noqa: E402
from framewise.core.decoding.step_graphs import StepGraphs  # noqa: E402
from framewise.core.families.qwen3_vl.language import Qwen3VLLanguageModel  # noqa: E402

STEP_MODES = {"kernels": dict(fused_steps=True, step_kernels=True), "ops": dict(fused_steps=True, step_kernels=False),
              "layers": dict(fused_steps=False)}


def kernel_kind(name: str) -> str:
    lowered = name.lower()
    if "attention" in lowered or "fmha" in lowered or "flash" in lowered:
        return "attention"
    if any(marker in lowered for marker in ("gemv", "gemm", "linear", "nvjet", "cublas", "sm90_xmma", "splitk")):
        return "matrix-vector"
    return "other"


def graph_step_ms(language, cache: StaticKVCache, position: int, bucket: int, replays: int = 50) -> float:
    """Mean milliseconds of one decode step replayed from a CUDA graph of ``bucket`` positions."""
    steps = StepGraphs(language, cache, (bucket,), direct=False)
    steps.run(torch.tensor([7], device=cache.device), position, position)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    graph = steps._graphs[bucket]
    for _ in range(5):
        graph.replay()
    start.record()
    for _ in range(replays):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    steps.clear()
    return start.elapsed_time(end) / replays


def prefill_ms(language, cache: StaticKVCache, start: int, count: int) -> float:
    """Milliseconds of a prefill of ``count`` random tokens after ``start`` cached positions."""
    ids = torch.randint(1000, 100000, (1, count))
    rope = torch.arange(start, start + count).expand(3, count)
    torch.cuda.synchronize()
    began = time.perf_counter()
    language.prefill(cache, start, ids, rope, None)
    torch.cuda.synchronize()
    return (time.perf_counter() - began) * 1e3


def first_prefill_profile(language, device: torch.device, tokens: int) -> dict:
    """A first question's prefill of ``tokens`` random tokens: its wall time (after one warm-up)
    and its GPU kernels by total time, printed as a table."""
    cache = StaticKVCache(language.layers, language.kv_heads, language.head_dim, tokens + 64, language.dtype, device)
    prefill_ms(language, cache, 0, tokens)
    wall = [round(prefill_ms(language, cache, 0, tokens), 2) for _ in range(3)]
    with profile(activities=[ProfilerActivity.CUDA]) as trace:
        prefill_ms(language, cache, 0, tokens)
    print(trace.key_averages().table(sort_by="self_cuda_time_total", row_limit=20), flush=True)
    kernels = {event.key: round(event.self_device_time_total / 1e3, 3) for event in trace.key_averages()
               if event.self_device_time_total > 0}
    print(json.dumps({"first_prefill": tokens, "ms": wall}), flush=True)
    return {"tokens": tokens, "ms": wall, "kernel_ms": dict(sorted(kernels.items(), key=lambda kv: -kv[1])[:25])}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("."))
    parser.add_argument("--size", default="8B")
    parser.add_argument("--position", type=int, default=1700)
    parser.add_argument("--bucket", type=int, default=2048)
    parser.add_argument("--follow-up", type=int, default=31)
    parser.add_argument("--modes", default="kernels,ops,layers")
    parser.add_argument("--dtype", choices=("bfloat16", "fp8"), default="bfloat16")
    parser.add_argument("--first-prefill", type=int, default=0, help="profile a first question of this many tokens")
    args = parser.parse_args(argv)
    device = torch.device("cuda")
    torch.manual_seed(0)
    model = build_model(args.size, device, torch.bfloat16)
    if args.dtype == "fp8":
        quantize_decoder_layers(model, device)
    weight_bytes = language_weight_bytes(model)
    results: dict = {"size": args.size, "position": args.position, "bucket": args.bucket, "weight_bytes": weight_bytes}
    with torch.inference_mode():
        for mode in args.modes.split(","):
            language = Qwen3VLLanguageModel(model, **STEP_MODES[mode])
            cache = StaticKVCache(language.layers, language.kv_heads, language.head_dim, args.bucket + 64,
                                  language.dtype, device)
            for tensor in (*cache.keys, *cache.values):
                tensor.normal_()
            cache.view_length = args.bucket
            token = language.embed(torch.tensor([[7]]))
            position = torch.tensor([args.position], device=device)
            measured = profile_pass(lambda: language.step(cache, token, position, position), kernel_kind)
            measured["graph_step_ms"] = round(graph_step_ms(language, cache, args.position, args.bucket), 4)
            measured["kernel_ms"] = round(sum(measured["ms"].values()), 4)
            mv_ms = measured["ms"].get("matrix-vector", 0.0)
            measured["matrix_vector_gb_per_s"] = round(weight_bytes / (mv_ms * 1e-3) / 1e9, 1) if mv_ms else None
            measured["kernels_per_layer"] = round(sum(measured["kernels"].values()) / language.layers, 1)
            results[mode] = measured
            print(json.dumps({"mode": mode, **measured}), flush=True)
            del cache
            torch.cuda.empty_cache()
        language = Qwen3VLLanguageModel(model)
        cache = StaticKVCache(language.layers, language.kv_heads, language.head_dim, 4096, language.dtype, device)
        prefill_ms(language, cache, 500, args.follow_up)  # module loading and first-call setup
        prefills = {}
        start = args.position
        times = []
        for _ in range(4):  # a new key length each time, as every follow-up has
            times.append(round(prefill_ms(language, cache, start, args.follow_up), 2))
            start += args.follow_up + 5
        prefills["new key length each time"] = times
        print(json.dumps({"prefill": "new key length each time", "new_tokens": args.follow_up, "ms": times}), flush=True)
        same = [round(prefill_ms(language, cache, 1000, args.follow_up), 2) for _ in range(3)]
        prefills["same shape thrice"] = same
        print(json.dumps({"prefill": "same shape thrice", "ms": same}), flush=True)
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as trace:
            prefill_ms(language, cache, start + 50, args.follow_up)
        print(trace.key_averages().table(sort_by="self_cpu_time_total", row_limit=12), flush=True)
        results["prefill"] = prefills
        if args.first_prefill:
            results["first_prefill"] = first_prefill_profile(language, device, args.first_prefill)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"decode_profile_{args.size}_{args.dtype}.json").write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
