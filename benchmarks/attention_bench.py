"""The vision tower's attention alone, at its head dim, in the layout the encoder graphs give it.

Every kernel runs one call replayed from a CUDA graph (GPU time per call by CUDA events, the
mean of ``--replays``). The workloads are the encoder benchmark's packed sequences; "slots" is
the graphs' layout: ``cu_seqlens`` has a slot for every frame pair a pass could hold (unused ones
empty, padding rows one trailing sequence) and the longest sequence is the whole budget. Kernels:

- ``varlen exact``: torch's varlen flash kernel on exactly the workload's sequences;
- ``varlen slots``: the same kernel in the graphs' layout;
- ``tiles slots ...``: Framewise's tile-list kernel in the graphs' layout, per launch configuration,
  the head dim in one column block (72 padded to 128) or, marked ``split``, in two (64 + 16);
- ``sdpa flash`` / ``sdpa cudnn``: dense SDPA on the workload as a batch of equal sequences (the
  speed a dense layout reaches; the graphs cannot use it, their batches vary).

Also checks every kernel against per-sequence SDPA in float32 (the largest error is printed). Writes
``attention_bench.json`` under ``--out``.

    python3 benchmarks/attention_bench.py --out results/ [--head-dim 72 --heads 16]
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.attention.varlen import varlen_attn

from framewise.core.kernels.vision_attention import tile_attention
from framewise.core.kernels.tile_schedule import tile_schedule
from graph_timing import graph_replay_ms

# (name, sequence length, sequences, budget rows): the encoder benchmark's workloads, one
# sequence per frame pair; the budget is the graph the default settings pick.
WORKLOADS = (
    ("image 448x448", 784, 1, 1024),
    ("video 8x320x576", 720, 4, 3072),
    ("video 16x448x448", 784, 8, 6400),
    ("video 64x224x224", 196, 32, 6400),
)
SLOTS = 64
# (BLOCK_M, BLOCK_N, num_warps, num_stages, two column blocks) tried for the tile kernel.
CONFIGS = (
    (64, 64, 4, 3, False), (64, 64, 4, 2, False), (128, 64, 8, 3, False), (64, 32, 4, 3, False),
    (64, 32, 4, 3, True), (64, 32, 4, 2, True), (128, 32, 8, 3, True),
)


def boundaries(lengths: list[int], slots: int, rows: int, device: torch.device) -> torch.Tensor:
    """cu_seqlens for ``lengths``, then padding up to ``rows`` as one sequence, then empty slots."""
    cu = torch.full((slots + 2,), rows, dtype=torch.int32)
    cu[0] = 0
    cu[1 : len(lengths) + 1] = torch.tensor(lengths).cumsum(0)
    return cu.to(device)


def reference(q, k, v, cu: torch.Tensor, scale: float) -> torch.Tensor:
    """Per-sequence SDPA in float32: (rows, heads, dim)."""
    out = torch.zeros_like(q, dtype=torch.float32)
    bounds = cu.tolist()
    for start, end in zip(bounds[:-1], bounds[1:]):
        if end > start:
            pieces = [t[start:end].float().transpose(0, 1) for t in (q, k, v)]
            out[start:end] = F.scaled_dot_product_attention(*pieces, scale=scale).transpose(0, 1)
    return out


def run_workload(name: str, length: int, sequences: int, budget: int, heads: int, head_dim: int, replays: int) -> dict:
    device = torch.device("cuda")
    scale = head_dim**-0.5
    rows = length * sequences
    qkv = torch.randn(budget, 3, heads, head_dim, device=device, dtype=torch.bfloat16)
    q, k = (t.contiguous() for t in qkv.unbind(1)[:2])
    v = qkv[:, 2]  # a strided view, as the tower's qkv product leaves it
    exact_cu = torch.arange(sequences + 1, device=device, dtype=torch.int32) * length
    slot_cu = boundaries([length] * sequences, SLOTS, budget, device)
    truth = reference(q[:rows], k[:rows], v[:rows], exact_cu, scale)
    results: dict[str, dict] = {}

    def measure(label: str, fn: Callable[[], torch.Tensor]) -> None:
        out = fn()
        error = (out[:rows].float() - truth).abs().max().item()
        results[label] = {"us": round(graph_replay_ms(fn, replays) * 1e3, 1), "max_error": error}

    vc = v.contiguous()
    measure("varlen exact", lambda: varlen_attn(q[:rows], k[:rows], vc[:rows], exact_cu, exact_cu, length, length, scale=scale))
    measure("varlen slots", lambda: varlen_attn(q, k, vc, slot_cu, slot_cu, budget, budget, scale=scale))
    for block_m, block_n, warps, stages, split in CONFIGS:
        schedule = tile_schedule(slot_cu, budget, block_m)
        label = f"tiles slots {block_m}x{block_n} w{warps} s{stages}" + (" split" if split else "")
        launch = {
            "block_m": block_m, "block_n": block_n, "num_warps": warps, "num_stages": stages, "split_head_dim": split,
        }
        try:
            measure(label, lambda: tile_attention(q, k, v, slot_cu, schedule, scale, **launch))
        except Exception as error:  # a configuration the compiler refuses (shared memory)
            results[label] = {"error": str(error).splitlines()[0][:200]}
    dense = [t[:rows].view(sequences, length, heads, head_dim).transpose(1, 2) for t in (q, k, vc)]
    for label, backend in (("sdpa flash", SDPBackend.FLASH_ATTENTION), ("sdpa cudnn", SDPBackend.CUDNN_ATTENTION)):
        def dense_call(backend=backend):
            with sdpa_kernel(backend):
                out = F.scaled_dot_product_attention(*dense, scale=scale)
            return out.transpose(1, 2).reshape(rows, heads, head_dim)
        try:
            measure(label, dense_call)
        except Exception as error:
            results[label] = {"error": str(error).splitlines()[0][:200]}
    flops = 4 * sequences * heads * length * length * head_dim
    return {"workload": name, "rows": rows, "budget": budget, "us_at_500_tflops": round(flops / 500e12 * 1e6, 1), "kernels": results}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--head-dim", type=int, default=72)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--replays", type=int, default=200)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    report = []
    for workload in WORKLOADS:
        entry = run_workload(*workload, heads=args.heads, head_dim=args.head_dim, replays=args.replays)
        report.append(entry)
        print(json.dumps(entry), flush=True)
    (args.out / "attention_bench.json").write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
