"""Where the vision encoder's GPU time goes: kernels per layer and time in GEMMs, attention and the rest.

Runs one pass of the Qwen3-VL tower (random weights, bf16) at one workload's shape under
``torch.profiler``, three times: the tower's own forward (torch's varlen attention), the fused
forward with torch's varlen attention, and the fused forward with the Triton tile attention that
the encoder graphs capture by default, each on the buffers of an exact-shape budget, after
warm-up. Kernels are sorted into GEMM (cuBLAS / CUTLASS products), attention (flash, varlen,
the tile kernel; not inductor's fused elementwise kernels) and the rest by name. Prints one JSON line per mode and writes ``encoder_profile.json`` under ``--out``.

    python3 benchmarks/encoder_profile.py --out results/ [--tower 8B] [--workload "image 448x448"]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Callable

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parent))

from encoder_bench import WORKLOADS, build_tower, make_item  # noqa: E402

from framewise.core.families.qwen3_vl.adapter import Qwen3VLAdapter  # noqa: E402

GEMM_MARKERS = ("gemm", "cutlass", "cublas", "sm90_xmma", "nvjet", "wgmma")
ATTENTION_MARKERS = ("flash", "fmha", "attention", "varlen")
# inductor names its kernels after the operations they fuse: the rotary kernel that feeds the
# attention is called "triton_poi_fused__to_copy__varlen_attn_add_cat_..." but is elementwise.
INDUCTOR_PREFIXES = ("triton_poi_", "triton_red_", "triton_per_")


def kernel_kind(name: str) -> str:
    lowered = name.lower()
    if not lowered.startswith(INDUCTOR_PREFIXES) and any(marker in lowered for marker in ATTENTION_MARKERS):
        return "attention"
    if any(marker in lowered for marker in GEMM_MARKERS):
        return "gemm"
    return "other"


def profile_pass(run, kind_of: Callable[[str], str] = kernel_kind, warmup: int = 3) -> dict:
    """Kernel count and GPU milliseconds by kind (``kind_of`` a kernel's name) over one call of
    ``run``, and the eight kernels that took the most time in all."""
    for _ in range(warmup):
        run()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as trace:
        run()
        torch.cuda.synchronize()
    counts: Counter[str] = Counter()
    milliseconds: Counter[str] = Counter()
    by_name: Counter[str] = Counter()
    for event in trace.events():
        if event.device_type != torch.autograd.DeviceType.CUDA:
            continue
        kind = kind_of(event.name)
        counts[kind] += 1
        milliseconds[kind] += event.device_time / 1e3
        by_name[event.name[:60]] += event.device_time / 1e3
    return {
        "kernels": dict(counts), "ms": {kind: round(ms, 3) for kind, ms in milliseconds.items()},
        "top": {name: round(ms, 3) for name, ms in by_name.most_common(8)},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("."))
    parser.add_argument("--tower", default="8B")
    parser.add_argument("--workload", default="image 448x448", choices=list(WORKLOADS))
    args = parser.parse_args(argv)
    adapter = Qwen3VLAdapter(build_tower(args.tower))
    depth = adapter.visual.config.depth
    item = make_item(*WORKLOADS[args.workload], torch.Generator(device="cuda").manual_seed(0))
    inputs = {name: tensor.cuda() for name, tensor in adapter.replay_inputs(
        [(item.modality, item.grid_thw)], rows=item.patches, max_sequences=item.grid_thw[0]
    ).items()}
    results = {"tower": args.tower, "workload": args.workload, "patches": item.patches, "depth": depth}
    with torch.inference_mode():
        modes = (("tower's own kernels", False, "varlen"), ("fused, varlen attention", True, "varlen"), ("fused", True, "triton"))
        for mode, fused, attention in modes:
            adapter.use_fused_forward(fused)
            adapter.use_attention(attention)
            measured = profile_pass(lambda: adapter.graph_forward(item.pixel_values, inputs, item.patches))
            measured["kernels_per_layer"] = round(sum(measured["kernels"].values()) / depth, 1)
            results[mode] = measured
            print(json.dumps({"mode": mode, **measured}), flush=True)
            adapter.release_graphs()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "encoder_profile.json").write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
