"""Vision-encoder benchmark: transformers eager (sdpa) against Framewise's CUDA graphs, same run.

Random weights at the real Qwen3-VL tower sizes, bf16, pixel rows already on the GPU (the
encoder alone is measured). Every request is timed on the host around ``encode()`` with the
device synchronized before and after, so planning, metadata, copies and the slicing of outputs
count; the modes take turns request by request. Each graph pass is also timed with CUDA events
(its GPU time, averaged over the timed requests), and ``÷ floor`` divides both times by the
floor's. Modes:

- ``eager``: transformers' own forward with stock ``sdpa`` attention (``EagerVisionEncoder``);
- ``graphs``: ``GraphVisionEncoder`` replaying the tower's own (unfused) kernels, default budgets;
- ``fused``: the same with fused kernels (the app's default);
- ``exact``: a fused graph captured for exactly the workload's shape: the padding-free time;
- ``floor``: the tower's matrix products alone at the workload's shape, replayed from one graph
  (:func:`dense_floor_ms`): the denominator no forward can beat.

``--pruning-check RATE`` then sends a long clip (``--pruning-frames`` frames of a 1280x720 clip
within ``--pruning-pixels``, random pixels) through the default encoder twice, in the chunks the
engine cuts such a clip into, the second time pruned at RATE once encoded (the kept tokens chosen
on the GPU, :mod:`~framewise.core.encoding.pruning`): the graph hits and eager passes of each, and
the milliseconds the choice of tokens took. Pruning comes after the tower, so the two must match.

Writes ``encoder_bench.json`` and ``encoder_bench.md`` under ``--out`` and prints the table.
``--capture-only`` builds one tower's fused encoder and prints its capture seconds as JSON: run
it twice with the same ``FRAMEWISE_CACHE_DIR`` for a first and a second start.

    python3 benchmarks/encoder_bench.py --out results/ [--towers 8B,2B] [--runs 100] [--stream 200]
    python3 benchmarks/encoder_bench.py --towers 8B --runs 30 --warmup 3 --stream 50 --pruning-check 0.75 --out results/
    FRAMEWISE_CACHE_DIR=$(mktemp -d) python3 benchmarks/encoder_bench.py --capture-only --towers 8B
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import random
import sys
import time
from contextlib import nullcontext
from datetime import datetime, timezone
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from transformers.models.qwen3_vl.configuration_qwen3_vl import Qwen3VLVisionConfig  # noqa: E402
from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLVisionModel  # noqa: E402

from framewise.core.backends.local.clip_encoder import chunk_frames  # noqa: E402
from framewise.core.encoding.defs import VisionItem  # noqa: E402
from framewise.core.encoding.eager import EagerVisionEncoder, item_frames  # noqa: E402
from framewise.core.encoding.manager import GraphVisionEncoder  # noqa: E402
from framewise.core.encoding.pruning import retained_mask  # noqa: E402
from framewise.core.families.qwen3_vl.adapter import Qwen3VLAdapter  # noqa: E402
from framewise.core.families.qwen3_vl.limits import QWEN3_VL_LIMITS as QWEN3_VL  # noqa: E402
from framewise.core.metrics import percentile  # noqa: E402
from framewise.core.settings import EncoderSettings  # noqa: E402
from tests.core.families.qwen3_vl.references import stock_attention  # noqa: E402
from decode_bench import app_frame_size  # noqa: E402
from graph_timing import graph_replay_ms  # noqa: E402

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
# The long clip of --pruning-check: 2,048 frames within 64k video tokens (2,048 pixels a token).
PRUNING_FRAMES, PRUNING_PIXELS = 2048, 65536 * 2048


def build_tower(name: str) -> torch.nn.Module:
    depth, hidden, heads, mlp, out_hidden, deepstack = TOWERS[name]
    config = Qwen3VLVisionConfig(
        depth=depth, hidden_size=hidden, num_heads=heads, intermediate_size=mlp, out_hidden_size=out_hidden,
        num_position_embeddings=2304, deepstack_visual_indexes=list(deepstack),
    )
    with torch.device("cuda"):
        visual = Qwen3VLVisionModel(config)
    return visual.to(torch.bfloat16).eval()


def make_item(modality: str, frames: int, height: int, width: int, generator: torch.Generator,
              dtype: torch.dtype = torch.bfloat16) -> VisionItem:
    """Random patch rows of one image or clip of ``frames`` frames of ``height`` x ``width`` on
    ``generator``'s device."""
    t = 1 if modality == "image" else frames // 2
    grid = (t, height // PATCH, width // PATCH)
    pixels = torch.randn(t * grid[1] * grid[2], 1536, generator=generator, device=generator.device, dtype=dtype)
    return VisionItem(pixel_values=pixels, grid_thw=grid, modality=modality)


def time_modes(adapter: Qwen3VLAdapter, encoders: dict, requests: list, warmup: int) -> dict[str, dict]:
    """Host milliseconds of every ``encode`` (device synchronized around it), per mode.

    Modes take turns request by request, so drift in the machine's speed hits them alike; the
    first ``warmup`` requests are not timed. ``eager`` runs with transformers' stock attention.
    Keeps each mode's times, the chunk stats of every request and the last output.
    """
    runs = {mode: {"times": [], "chunks": [], "last": None} for mode in encoders}
    for index, items in enumerate(requests):
        for mode, encoder in encoders.items():
            with stock_attention(adapter.visual) if mode == "eager" else nullcontext():
                torch.cuda.synchronize()
                started = time.perf_counter()
                output = encoder.encode(items)
                torch.cuda.synchronize()
                elapsed = (time.perf_counter() - started) * 1e3
            if index >= warmup:
                runs[mode]["times"].append(elapsed)
                runs[mode]["chunks"].append(output.chunks)
                runs[mode]["last"] = output
    return runs


def dense_floor_ms(visual: torch.nn.Module, rows: int, replays: int = 50) -> float:
    """Milliseconds of the tower's matrix products alone at ``rows`` patch rows: the denominator.

    Patch embedding, every block's four products and every merger's two, on random bf16
    activations of the shapes the tower sees, captured in one CUDA graph and replayed; the mean
    over ``replays`` replays timed with CUDA events. Attention, norms and elementwise work are
    left out, so no forward of the tower can be faster.
    """
    config = visual.config
    options = {"device": "cuda", "dtype": torch.bfloat16}
    patches = torch.randn(rows, visual.patch_embed.proj.weight[0].numel(), **options)
    hidden = torch.randn(rows, config.hidden_size, **options)
    inner = torch.randn(rows, config.intermediate_size, **options)
    gathered = torch.randn(rows // 4, config.hidden_size * 4, **options)
    patch_weight = visual.patch_embed.proj.weight.reshape(config.hidden_size, -1)
    mergers = [visual.merger, *visual.deepstack_merger_list]

    def products() -> None:
        F.linear(patches, patch_weight)
        for block in visual.blocks:
            for weight in (block.attn.qkv.weight, block.attn.proj.weight, block.mlp.linear_fc1.weight):
                F.linear(hidden, weight)
            F.linear(inner, block.mlp.linear_fc2.weight)
        for merger in mergers:
            F.linear(F.linear(gathered, merger.linear_fc1.weight), merger.linear_fc2.weight)

    return graph_replay_ms(products, replays)


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


def bench_workload(
    adapter: Qwen3VLAdapter, encoders: dict[str, GraphVisionEncoder], spec, runs: int, warmup: int
) -> dict:
    """Eager, every graph encoder in ``encoders`` and an exact-shape graph on one workload, interleaved."""
    modality, frames, height, width = spec
    item = make_item(modality, frames, height, width, torch.Generator(device="cuda").manual_seed(0))
    t, _, _ = item.grid_thw
    exact_settings = EncoderSettings(budgets=(item.patches,), max_items_per_batch=1, max_frame_pairs_per_batch=t)
    exact = GraphVisionEncoder(adapter, exact_settings, limits=QWEN3_VL)
    floor = dense_floor_ms(adapter.visual, item.patches)
    modes = {"eager": EagerVisionEncoder(adapter), **encoders, "exact": exact}
    measured = time_modes(adapter, modes, [[item]] * (warmup + runs), warmup)
    exact.clear()
    mean = {mode: sum(m["times"]) / len(m["times"]) for mode, m in measured.items()}
    eager_item = measured["eager"]["last"].items[0]
    frames = item_frames(adapter, item)
    result = {"patches": item.patches, "frames": frames, "floor_ms": floor}
    for mode, m in measured.items():
        result[mode] = summary(m["times"], frames)
        if mode not in encoders:
            continue
        chunk = m["last"].chunks[0]
        gpu_times = sorted(sum(c.encode_ms for c in chunks) for chunks in m["chunks"])
        gpu_mean = sum(gpu_times) / len(gpu_times)
        result[mode] |= {
            "budget": chunk.budget,
            "padding_fraction": chunk.padding_fraction,
            "gpu_ms": gpu_mean,
            "gpu_p99_ms": percentile(gpu_times, 99),
            "gpu_over_floor": gpu_mean / floor,
            "mean_over_floor": mean[mode] / floor,
            "speedup_vs_eager": mean["eager"] / mean[mode],
            "padding_overhead_vs_exact": mean[mode] / mean["exact"] - 1,
            "p99_over_mean": percentile(sorted(m["times"]), 99) / mean[mode] - 1,
            "bf16_rel_err_vs_eager": relative_error(m["last"].items[0], eager_item),
            "nan_in_output_buffer": any(
                not torch.isfinite(buffer).all().item() for buffer in encoders[mode].static_outputs(chunk.budget)
            ),
        }
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


def bench_stream(adapter: Qwen3VLAdapter, encoders: dict[str, GraphVisionEncoder], count: int, warmup: int) -> dict:
    specs = random_stream(count + warmup, seed=1)
    generator = torch.Generator(device="cuda").manual_seed(1)
    requests = [[make_item(*spec, generator)] for spec in specs]
    frames = [item_frames(adapter, request[0]) for request in requests[warmup:]]

    def per_frame(times):
        ordered = sorted(t / f for t, f in zip(times, frames))
        return {"mean": sum(ordered) / len(ordered), "p50": percentile(ordered, 50), "p99": percentile(ordered, 99)}

    before = {mode: encoder.stats() for mode, encoder in encoders.items()}
    measured = time_modes(adapter, {"eager": EagerVisionEncoder(adapter), **encoders}, requests, warmup)
    eager_mean = sum(measured["eager"]["times"]) / count
    result = {"requests": count, "frames_total": sum(frames)}
    for mode, m in measured.items():
        result[mode] = summary(m["times"], 1) | {"ms_per_frame": per_frame(m["times"])}
        if mode not in encoders:
            continue
        after = encoders[mode].stats()
        replayed = after.items_replayed - before[mode].items_replayed
        eager_items = after.items_eager - before[mode].items_eager
        chunks = [chunk for request_chunks in m["chunks"] for chunk in request_chunks]
        result[mode] |= {
            "hit_rate": replayed / (replayed + eager_items),
            "mean_padding_fraction": sum(c.padding_fraction for c in chunks) / len(chunks),
            "passes": len(chunks),
            "speedup_vs_eager": eager_mean / (sum(m["times"]) / count),
        }
    return result


def pruning_hits(encoder: GraphVisionEncoder, rate: float, frames: int, size: tuple[int, int]) -> dict:
    """A clip of ``frames`` frames of ``size`` (height, width) through ``encoder`` in the chunks the
    engine cuts it into, twice: as it is, then pruned at ``rate`` once every chunk is encoded. Per
    run the items replayed and run eagerly, passes, video tokens kept, and the milliseconds of the
    whole run and of the choice of tokens; and whether the two runs' graph counts match."""
    counts = chunk_frames(frames, size, encoder.settings, QWEN3_VL)
    generator = torch.Generator(device=encoder.device).manual_seed(2)
    items = [make_item("video", count, *size, generator, encoder.dtype) for count in counts]
    grid = (frames // 2, size[0] // (2 * PATCH), size[1] // (2 * PATCH))
    result: dict = {"rate": rate, "frames": frames, "size": f"{size[1]}x{size[0]}", "chunks": len(items)}
    for label, prune in (("unpruned", False), ("pruned", True)):
        before = encoder.stats()
        _sync(encoder.device)
        started = time.perf_counter()
        outputs = [encoder.encode([item]) for item in items]
        embeds = torch.cat([output.items[0].embeds for output in outputs])
        _sync(encoder.device)
        chosen = time.perf_counter()
        kept = retained_mask(embeds, grid, rate).kept if prune else embeds.shape[0]
        _sync(encoder.device)
        done = time.perf_counter()
        after = encoder.stats()
        result[label] = {
            "items_replayed": after.items_replayed - before.items_replayed,
            "items_eager": after.items_eager - before.items_eager,
            "passes": sum(len(output.chunks) for output in outputs), "video_tokens": kept,
            "ms": (done - started) * 1e3, "choice_ms": (done - chosen) * 1e3 if prune else 0.0,
        }
        del outputs, embeds
    keys = ("items_replayed", "items_eager", "passes")
    result["graph_counts_equal"] = all(result["unpruned"][key] == result["pruned"][key] for key in keys)
    return result


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def bench_tower(name: str, runs: int, warmup: int, stream: int, pruning: float = 0.0) -> dict:
    adapter = Qwen3VLAdapter(build_tower(name))  # one per tower: it owns the tower's attention switch
    torch.cuda.synchronize()
    encoders = {
        "graphs": GraphVisionEncoder(adapter, EncoderSettings(fuse_kernels=False), limits=QWEN3_VL),
        "fused_varlen": GraphVisionEncoder(adapter, EncoderSettings(attention_backend="varlen"), limits=QWEN3_VL),
        "fused": GraphVisionEncoder(adapter, EncoderSettings(), limits=QWEN3_VL),
    }
    result = {"tower": name, "capture": {}, "workloads": {}}
    for mode, encoder in encoders.items():
        report = encoder.report
        result["capture"][mode] = {
            "budget_ratio": encoder.settings.budget_ratio,
            "graphs": len(report.budgets),
            "budgets": list(report.budgets),
            "seconds": report.seconds,
            "graph_memory_mib": report.graph_memory_bytes / 2**20,
            "attention_backend": report.attention_backend,
            "fused": report.fused,
        }
    for workload, spec in WORKLOADS.items():
        result["workloads"][workload] = bench_workload(adapter, encoders, spec, runs, warmup)
        print(f"{name} {workload}: {json.dumps(result['workloads'][workload])}", flush=True)
    if stream:
        result["stream"] = bench_stream(adapter, encoders, stream, warmup)
        print(f"{name} stream: {json.dumps(result['stream'])}", flush=True)
    if pruning:
        size = app_frame_size(PRUNING_FRAMES, PRUNING_PIXELS)
        result["pruning"] = pruning_hits(encoders["fused"], pruning, PRUNING_FRAMES, size)
        print(f"{name} pruning: {json.dumps(result['pruning'])}", flush=True)
    for mode, encoder in encoders.items():
        stats = encoder.stats()
        result["capture"][mode]["metadata_cache"] = {"hits": stats.metadata_hits, "misses": stats.metadata_misses}
        encoder.clear()
    del adapter, encoders
    torch.cuda.empty_cache()
    return result


def capture_only(name: str) -> int:
    """Capture one tower's fused graphs (default settings) in this process; print the seconds as JSON."""
    adapter = Qwen3VLAdapter(build_tower(name))
    started = time.perf_counter()
    encoder = GraphVisionEncoder(adapter, EncoderSettings(), limits=QWEN3_VL)
    report = encoder.report
    print(json.dumps({
        "tower": name, "fused": report.fused, "graphs": len(report.budgets), "capture_seconds": report.seconds,
        "encoder_seconds": time.perf_counter() - started, "graph_memory_mib": report.graph_memory_bytes / 2**20,
    }), flush=True)
    return 0


def markdown(results: dict) -> str:
    lines = [
        f"Device: {results['device']}; torch {results['torch']}, transformers {results['transformers']}; "
        f"{results['date']}; {results['runs']} timed runs per mode after {results['warmup']} warm-up; "
        "host milliseconds per request, device synchronized around each.",
        "",
    ]
    for tower in results["towers"]:
        capture = tower["capture"]
        lines += [f"### Qwen3-VL-{tower['tower']} tower (random weights, bf16)", ""]
        for mode, c in capture.items():
            lines.append(
                f"- `{mode}`: budget ratio {c['budget_ratio']}, {c['graphs']} graphs "
                f"({c['budgets'][0]}..{c['budgets'][-1]} "
                f"patches, {c['attention_backend']} attention, {'fused' if c['fused'] else 'unfused'}) "
                f"captured in {c['seconds']:.1f} s, holding "
                f"{c['graph_memory_mib']:.0f} MiB; metadata cache {c['metadata_cache']['hits']} hits / "
                f"{c['metadata_cache']['misses']} misses."
            )
        lines += [
            "",
            "| workload | patches | mode | budget | mean / p50 / p99 ms | ms per frame mean / p99 | GPU mean / p99 ms "
            "| speedup vs eager | ÷ floor (host / GPU) | overhead vs exact shape | p99 over mean | bf16 rel err vs eager |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for workload, row in tower["workloads"].items():
            for mode in ("eager", *capture, "exact"):
                m = row[mode]
                graph_mode = mode in capture
                lines.append(
                    f"| {workload} | {row['patches']} | {mode} | {m['budget'] if graph_mode else '-'} | "
                    f"{m['mean_ms']:.2f} / {m['p50_ms']:.2f} / {m['p99_ms']:.2f} | "
                    f"{m['mean_ms_per_frame']:.3f} / {m['p99_ms_per_frame']:.3f} | "
                    + (f"{m['gpu_ms']:.2f} / {m['gpu_p99_ms']:.2f} | "
                       f"{m['speedup_vs_eager']:.2f}x | {m['mean_over_floor']:.2f}x / {m['gpu_over_floor']:.2f}x | "
                       f"{100 * m['padding_overhead_vs_exact']:+.1f} % | "
                       f"{100 * m['p99_over_mean']:+.1f} % | {m['bf16_rel_err_vs_eager']:.1e} |" if graph_mode
                       else f"- | - | {m['mean_ms'] / row['floor_ms']:.2f}x / - | - | - | - |")
                )
            lines.append(
                f"| {workload} | {row['patches']} | floor | - | - | - | {row['floor_ms']:.2f} | - | 1 | - | - | - |"
            )
        if "stream" in tower:
            s = tower["stream"]
            lines += [
                "",
                f"Stream of {s['requests']} random requests, one item each ({s['frames_total']} frames):",
                "",
                "| mode | mean / p50 / p99 ms per request | ms per frame mean / p50 / p99 | speedup | hit rate "
                "| mean padding | passes |",
                "|---|---|---|---|---|---|---|",
            ]
            for mode in ("eager", *capture):
                m = s[mode]
                f = m["ms_per_frame"]
                extra = (f"{m['speedup_vs_eager']:.2f}x | {100 * m['hit_rate']:.0f} % | "
                         f"{100 * m['mean_padding_fraction']:.1f} % | {m['passes']} |" if mode in capture
                         else "- | - | - | - |")
                lines.append(
                    f"| {mode} | {m['mean_ms']:.2f} / {m['p50_ms']:.2f} / {m['p99_ms']:.2f} | "
                    f"{f['mean']:.3f} / {f['p50']:.3f} / {f['p99']:.3f} | " + extra
                )
        if "pruning" in tower:
            lines += ["", pruning_words(tower["pruning"])]
        lines.append("")
    return "\n".join(lines) + "\n"


def pruning_words(check: dict) -> str:
    """:func:`pruning_hits`' result in a sentence."""
    runs = {label: check[label] for label in ("unpruned", "pruned")}
    counts = "; ".join(f"{label}: {run['items_replayed']} items replayed, {run['items_eager']} eager, {run['passes']} passes, "
                       f"{run['video_tokens']:,} video tokens, {run['ms']:.0f} ms" for label, run in runs.items())
    return (f"Pruning at {check['rate']} after the encoder, {check['frames']} frames of {check['size']} in "
            f"{check['chunks']} chunks: {counts}; tokens chosen in {runs['pruned']['choice_ms']:.1f} ms; graph counts "
            f"{'equal' if check['graph_counts_equal'] else 'DIFFERENT'}.")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("."))
    parser.add_argument("--towers", default="8B,2B", help=f"comma-separated, of {', '.join(TOWERS)}")
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--stream", type=int, default=200, help="random requests per tower (0: none)")
    parser.add_argument("--capture-only", action="store_true", help="print the fused capture seconds of the first tower")
    parser.add_argument("--pruning-check", type=float, default=0.0,
                        help="also send a 2,048-frame, 64k-token clip through the default encoder with and without "
                             "pruning at this rate, counting graph hits (0: not)")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("The encoder benchmark needs a CUDA GPU.", file=sys.stderr)
        return 2
    import transformers

    if args.capture_only:
        return capture_only(args.towers.split(",")[0].strip())

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
    for name in args.towers.split(","):
        results["towers"].append(bench_tower(name.strip(), args.runs, args.warmup, args.stream, args.pruning_check))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "encoder_bench.json").write_text(json.dumps(results, indent=2))
    table = markdown(results)
    (args.out / "encoder_bench.md").write_text(table)
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
