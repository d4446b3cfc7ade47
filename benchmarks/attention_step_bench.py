"""The decode step's attention alone (``attend_step``: the split kernel and the combining one), at
the Qwen3-VL 8B and 2B head shapes, over the launch choices its module sets
(``ATTENTION_PROGRAMS_PER_SM``, ``ATTENTION_BLOCK``).

Each case runs 36 times inside one CUDA graph, as the 36 layers of a step would, on one key/value
cache that stays in the L2 cache between calls: the time is the kernels' latency, which is what a
step's attention costs at these context lengths, not a read of memory. The floor printed beside it
is the keys' and values' bytes at 4 TB/s.

    python3 benchmarks/attention_step_bench.py
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from graph_timing import graph_replay_ms  # noqa: E402

from framewise.core.kernels import decode_step  # noqa: E402

LAYERS = 36
# size -> (query heads, key/value heads, head dim)
HEAD_SHAPES = {"8B": (32, 8, 128), "2B": (16, 8, 128)}
# (context bucket, the step's position)
CONTEXTS = ((2048, 1200), (4096, 1200), (4096, 3500))


def attention_us(heads: int, kv_heads: int, head_dim: int, view_length: int, position: int) -> float:
    """Microseconds of one ``attend_step`` call, bf16, at the module's current launch choices."""
    device = torch.device("cuda")
    qkv = torch.randn((heads + 2 * kv_heads) * head_dim, device=device, dtype=torch.bfloat16)
    qk_norms = torch.rand(2, head_dim, device=device, dtype=torch.bfloat16) + 0.5
    inv_freq = 1.0 / (5e6 ** (torch.arange(0, head_dim, 2, device=device).float() / head_dim))
    keys = torch.randn(1, kv_heads, view_length + 64, head_dim, device=device, dtype=torch.bfloat16)
    values = torch.randn_like(keys)
    at = torch.tensor([position], device=device)

    def layers() -> None:
        for _ in range(LAYERS):
            decode_step.attend_step(qkv, qk_norms, inv_freq, 1.0, at, at, keys, values, heads, 1e-6, view_length, head_dim**-0.5)

    return graph_replay_ms(layers, replays=50) * 1e3 / LAYERS


def main() -> int:
    print("| size | context bucket | position | programs a multiprocessor | keys a loop turn | µs a layer | read floor µs |")
    print("|---|---|---|---|---|---|---|")
    chosen = decode_step.ATTENTION_PROGRAMS_PER_SM, decode_step.ATTENTION_BLOCK
    for size, (heads, kv_heads, head_dim) in HEAD_SHAPES.items():
        for (view_length, position), per_sm, block in itertools.product(CONTEXTS, (1, 2, 4), (32, 64, 128)):
            decode_step.ATTENTION_PROGRAMS_PER_SM, decode_step.ATTENTION_BLOCK = per_sm, block
            floor = 2 * kv_heads * (position + 1) * head_dim * 2 / 4e12 * 1e6
            us = attention_us(heads, kv_heads, head_dim, view_length, position)
            print(f"| {size} | {view_length} | {position} | {per_sm} | {block} | {us:.2f} | {floor:.2f} |", flush=True)
    decode_step.ATTENTION_PROGRAMS_PER_SM, decode_step.ATTENTION_BLOCK = chosen
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
