"""Vision-encoder benchmark: transformers eager (sdpa) against Framewise's CUDA graphs, same run.

Random weights at the real Qwen3-VL tower sizes, bf16, pixel rows already on the GPU (the
encoder alone is measured). Every request is timed on the host around ``encode()`` with the
device synchronized before and after, so planning, metadata, copies and the slicing of outputs
count. Modes:

- ``eager``: transformers' own forward with stock ``sdpa`` attention (``EagerVisionEncoder``);
- ``graphs``: ``GraphVisionEncoder`` with the default encoder settings (the app's default);
- ``exact``: a graph captured for exactly the workload's shape: the padding-free floor.

Writes ``encoder_bench.json`` and ``encoder_bench.md`` under ``--out`` and prints the table.

    python3 benchmarks/encoder_bench.py --out results/ [--towers 8B,2B] [--runs 100] [--stream 200]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import random
import sys
import time
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from transformers.models.qwen3_vl.configuration_qwen3_vl import Qwen3VLVisionConfig  # noqa: E402
from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLVisionModel  # noqa: E402

from core.encoder import EagerVisionEncoder, VisionItem  # noqa: E402
from core.encoder_graphs import GraphVisionEncoder, percentile  # noqa: E402
from core.settings import EncoderSettings  # noqa: E402

# depth, hidden, heads, mlp, out_hidden, deepstack layers (DESIGN §4)
TOWERS = {
    "2B": (24, 1024, 16, 4096, 2048, (5, 11, 17)),
    "4B": (24, 1024, 16, 4096, 2560, (5, 11, 17)),
    "8B": (27, 1152, 16, 4304, 4096, (8, 16, 24)),
    "32B": (27, 1152, 16, 4304, 5120, (8, 16, 24)),
    "30B-A3B": (27, 1152, 16, 4304, 2048, (8, 16, 24)),
}
# name -> (modality, frames, height, width)
WORKLOADS = {
    "image 448x448": ("image", 1, 448, 448),
    "video 8x320x576": ("video", 8, 320, 576),
    "video 16x448x448": ("video", 16, 448, 448),
    "video 64x224x224": ("video", 64, 224, 224),
}
PATCH = 16


def build_tower(name: str) -> torch.nn.Module:
    depth, hidden, heads, mlp, out_hidden, deepstack = TOWERS[name]
    config = Qwen3VLVisionConfig(
        depth=depth, hidden_size=hidden, num_heads=heads, intermediate_size=mlp, out_hidden_size=out_hidden,
        num_position_embeddings=2304, deepstack_visual_indexes=list(deepstack),
    )
    with torch.device("cuda"):
        visual = Qwen3VLVisionModel(config)
    return visual.to(torch.bfloat16).eval()


def make_item(modality: str, frames: int, height: int, width: int, generator: torch.Generator) -> VisionItem:
    t = 1 if modality == "image" else frames // 2
    grid = (t, height // PATCH, width // PATCH)
    pixels = torch.randn(t * grid[1] * grid[2], 1536, generator=generator, device="cuda", dtype=torch.bfloat16)
    return VisionItem(pixel_values=pixels, grid_thw=grid, modality=modality)


@contextmanager
def stock_attention(visual: torch.nn.Module):
    saved = visual.config._attn_implementation
    visual.config._attn_implementation = "sdpa"
    try:
        yield
    finally:
        visual.config._attn_implementation = saved


def time_requests(encoder, requests, warmup: int) -> tuple[list[float], list]:
    """Host milliseconds of each ``encode`` (device synchronized around it), after ``warmup`` untimed calls."""
    for items in requests[:warmup]:
        encoder.encode(items)
    times, outputs = [], []
    with torch.inference_mode():
        for items in requests[warmup:]:
            torch.cuda.synchronize()
            started = time.perf_counter()
            output = encoder.encode(items)
            torch.cuda.synchronize()
            times.append((time.perf_counter() - started) * 1e3)
            outputs.append(output)
    return times, outputs


def summary(times: list[float], frames: int) -> dict:
    ordered = sorted(times)
    mean = sum(ordered) / len(ordered)
    return {
        "runs": len(ordered),
        "mean_ms": mean,
        "p50_ms": percentile(ordered, 50),
        "p99_ms": percentile(ordered, 99),
        "mean_ms_per_frame": mean / frames,
        "p50_ms_per_frame": percentile(ordered, 50) / frames,
        "p99_ms_per_frame": percentile(ordered, 99) / frames,
    }


def relative_error(got, expected) -> float:
    pairs = [(got.embeds, expected.embeds), *zip(got.deepstack, expected.deepstack)]
    return max(
        (torch.linalg.vector_norm((a - b).double()) / torch.linalg.vector_norm(b.double())).item() for a, b in pairs
    )


def bench_workload(visual, graphs: GraphVisionEncoder, spec, runs: int, warmup: int) -> dict:
    modality, frames, height, width = spec
    item = make_item(modality, frames, height, width, torch.Generator(device="cuda").manual_seed(0))
    requests = [[item]] * (warmup + runs)
    with stock_attention(visual):
        eager_times, eager_out = time_requests(EagerVisionEncoder(visual), requests, warmup)
    graph_times, graph_out = time_requests(graphs, requests, warmup)
    t, h, w = item.grid_thw
    exact_settings = EncoderSettings(budgets=(item.patches,), max_items_per_batch=1, max_frames_per_batch=t)
    exact = GraphVisionEncoder(visual, exact_settings)
    exact_times, _ = time_requests(exact, requests, warmup)
    exact.clear()
    chunk = graph_out[-1].chunks[0]
    result = {
        "patches": item.patches,
        "frames": item.frames,
        "budget": chunk.budget,
        "padding_fraction": chunk.padding_fraction,
        "eager": summary(eager_times, item.frames),
        "graphs": summary(graph_times, item.frames),
        "exact": summary(exact_times, item.frames),
        "graph_gpu_ms": sum(c.encode_ms for c in graph_out[-1].chunks),
        "bf16_rel_err_vs_eager": relative_error(graph_out[-1].items[0], eager_out[-1].items[0]),
        "nan_in_output_buffer": any(
            not torch.isfinite(buffer).all().item() for buffer in graphs.static_outputs(chunk.budget)
        ),
    }
    result["speedup_vs_eager"] = result["eager"]["mean_ms"] / result["graphs"]["mean_ms"]
    result["padding_overhead_vs_exact"] = result["graphs"]["mean_ms"] / result["exact"]["mean_ms"] - 1
    result["p99_over_mean"] = result["graphs"]["p99_ms"] / result["graphs"]["mean_ms"] - 1
    return result


def random_stream(count: int, seed: int) -> list[tuple[str, int, int, int]]:
    """Requests of random sizes: images up to 1344 px a side, videos of 4-64 frames under a clip pixel budget."""
    rng = random.Random(seed)
    stream = []
    for _ in range(count):
        if rng.random() < 0.4:
            stream.append(("image", 1, 32 * rng.randint(7, 42), 32 * rng.randint(7, 42)))
        else:
            frames = 2 * rng.randint(2, 32)
            per_frame = 32 * 256 * 256 // frames  # the default whole-clip pixel budget
            height = 32 * rng.randint(4, 24)
            width = 32 * max(4, min(24, per_frame // height // 32))
            stream.append(("video", frames, height, width))
    return stream


def bench_stream(visual, graphs: GraphVisionEncoder, count: int, warmup: int) -> dict:
    specs = random_stream(count + warmup, seed=1)
    generator = torch.Generator(device="cuda").manual_seed(1)
    requests = [[make_item(*spec, generator)] for spec in specs]
    frames = [request[0].frames for request in requests[warmup:]]
    with stock_attention(visual):
        eager_times, _ = time_requests(EagerVisionEncoder(visual), requests, warmup)
    before = graphs.stats()
    graph_times, graph_out = time_requests(graphs, requests, warmup)
    after = graphs.stats()
    replayed = after.items_replayed - before.items_replayed
    eager_items = after.items_eager - before.items_eager
    chunks = [chunk for output in graph_out for chunk in output.chunks]

    def per_frame(times):
        ordered = sorted(t / f for t, f in zip(times, frames))
        return {"mean": sum(ordered) / len(ordered), "p50": percentile(ordered, 50), "p99": percentile(ordered, 99)}

    result = {
        "requests": count,
        "frames_total": sum(frames),
        "eager": summary(eager_times, 1),
        "graphs": summary(graph_times, 1),
        "eager_ms_per_frame": per_frame(eager_times),
        "graphs_ms_per_frame": per_frame(graph_times),
        "hit_rate": replayed / (replayed + eager_items),
        "mean_padding_fraction": sum(c.padding_fraction for c in chunks) / len(chunks),
        "passes": len(chunks),
    }
    result["speedup_vs_eager"] = result["eager"]["mean_ms"] / result["graphs"]["mean_ms"]
    return result


def bench_tower(name: str, runs: int, warmup: int, stream: int) -> dict:
    visual = build_tower(name)
    torch.cuda.synchronize()
    graphs = GraphVisionEncoder(visual, EncoderSettings())
    report = graphs.report
    result = {
        "tower": name,
        "capture_seconds": report.seconds,
        "graph_memory_mib": report.graph_memory_bytes / 2**20,
        "budgets": list(report.budgets),
        "attention_backend": report.attention_backend,
        "workloads": {},
    }
    for workload, spec in WORKLOADS.items():
        result["workloads"][workload] = bench_workload(visual, graphs, spec, runs, warmup)
        print(f"{name} {workload}: {json.dumps(result['workloads'][workload])}", flush=True)
    if stream:
        result["stream"] = bench_stream(visual, graphs, stream, warmup)
        print(f"{name} stream: {json.dumps(result['stream'])}", flush=True)
    stats = graphs.stats()
    result["metadata_cache"] = {"hits": stats.metadata_hits, "misses": stats.metadata_misses}
    graphs.clear()
    del visual, graphs
    torch.cuda.empty_cache()
    return result


def attention_probe(budgets=(1024, 8192, 16384), frame=784, slots=(66, 10), repeats=50) -> list[dict]:
    """How the baked ``max_seqlen`` and the cu_seqlens slot count cost in the varlen kernel (8B heads)."""
    from torch.nn.attention.varlen import varlen_attn

    rows_out = []
    for budget in budgets:
        real = (min(budget, 8 * frame) // frame) * frame
        q, k, v = (torch.randn(budget, 16, 72, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        for slot_count in slots:
            boundaries = list(range(0, real + 1, frame)) + [budget]
            if len(boundaries) > slot_count:
                continue
            cu = torch.tensor(boundaries + [budget] * (slot_count - len(boundaries)), device="cuda", dtype=torch.int32)
            for max_seqlen in (budget, max(frame, budget - real)):
                for _ in range(3):
                    varlen_attn(q, k, v, cu, cu, max_seqlen, max_seqlen)
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                for _ in range(repeats):
                    varlen_attn(q, k, v, cu, cu, max_seqlen, max_seqlen)
                end.record()
                end.synchronize()
                rows_out.append({
                    "budget": budget, "real_rows": real, "slots": slot_count, "max_seqlen": max_seqlen,
                    "us_per_call": start.elapsed_time(end) / repeats * 1e3,
                })
                print("probe", rows_out[-1], flush=True)
    return rows_out


def markdown(results: dict) -> str:
    lines = [
        f"Device: {results['device']}; torch {results['torch']}, transformers {results['transformers']}; "
        f"{results['date']}; runs per mode {results['runs']} after {results['warmup']} warm-up.",
        "",
    ]
    for tower in results["towers"]:
        lines += [
            f"### Qwen3-VL-{tower['tower']} tower (random weights, bf16, {tower['attention_backend']} attention)",
            "",
            f"Capture: {len(tower['budgets'])} graphs ({tower['budgets'][0]}..{tower['budgets'][-1]} patches) "
            f"in {tower['capture_seconds']:.1f} s, {tower['graph_memory_mib']:.0f} MiB.",
            "",
            "| workload | patches | budget | eager mean / p50 / p99 ms | graphs mean / p50 / p99 ms | exact-shape graph "
            "mean ms | speedup | padding overhead | graphs ms/frame mean / p99 | bf16 rel err |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for workload, row in tower["workloads"].items():
            e, g, x = row["eager"], row["graphs"], row["exact"]
            lines.append(
                f"| {workload} | {row['patches']} | {row['budget']} | {e['mean_ms']:.2f} / {e['p50_ms']:.2f} / "
                f"{e['p99_ms']:.2f} | {g['mean_ms']:.2f} / {g['p50_ms']:.2f} / {g['p99_ms']:.2f} | {x['mean_ms']:.2f} | "
                f"{row['speedup_vs_eager']:.2f}x | {100 * row['padding_overhead_vs_exact']:+.1f} % | "
                f"{g['mean_ms_per_frame']:.3f} / {g['p99_ms_per_frame']:.3f} | {row['bf16_rel_err_vs_eager']:.1e} |"
            )
        if "stream" in tower:
            s = tower["stream"]
            lines += [
                "",
                f"Stream of {s['requests']} random requests ({s['frames_total']} frames): "
                f"eager {s['eager']['mean_ms']:.2f} / {s['eager']['p50_ms']:.2f} / {s['eager']['p99_ms']:.2f} ms "
                f"(mean / p50 / p99 per request), graphs {s['graphs']['mean_ms']:.2f} / {s['graphs']['p50_ms']:.2f} / "
                f"{s['graphs']['p99_ms']:.2f} ms, speedup {s['speedup_vs_eager']:.2f}x; per frame eager "
                f"{s['eager_ms_per_frame']['mean']:.3f} / {s['eager_ms_per_frame']['p99']:.3f} ms, graphs "
                f"{s['graphs_ms_per_frame']['mean']:.3f} / {s['graphs_ms_per_frame']['p99']:.3f} ms (mean / p99); "
                f"hit rate {100 * s['hit_rate']:.0f} %, mean padding {100 * s['mean_padding_fraction']:.1f} % "
                f"over {s['passes']} passes.",
            ]
        lines.append("")
    if results.get("attention_probe"):
        lines += ["### varlen attention alone (16 heads x 72, bf16)", "",
                  "| budget | real rows | cu_seqlens slots | max_seqlen | us per call |", "|---|---|---|---|---|"]
        for row in results["attention_probe"]:
            lines.append(f"| {row['budget']} | {row['real_rows']} | {row['slots']} | {row['max_seqlen']} | "
                         f"{row['us_per_call']:.1f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("."))
    parser.add_argument("--towers", default="8B,2B", help=f"comma-separated, of {', '.join(TOWERS)}")
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--stream", type=int, default=200, help="random requests per tower (0: none)")
    parser.add_argument("--probe", action="store_true", help="also time varlen attention alone")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("The encoder benchmark needs a CUDA GPU.", file=sys.stderr)
        return 2
    import transformers

    results = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "runs": args.runs,
        "warmup": args.warmup,
        "default_settings": dataclasses.asdict(EncoderSettings()),
        "towers": [],
    }
    if args.probe:
        results["attention_probe"] = attention_probe()
    for name in args.towers.split(","):
        results["towers"].append(bench_tower(name.strip(), args.runs, args.warmup, args.stream))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "encoder_bench.json").write_text(json.dumps(results, indent=2))
    table = markdown(results)
    (args.out / "encoder_bench.md").write_text(table)
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
