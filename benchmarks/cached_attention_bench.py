"""Qwen3.5's decode-step attention (its 8 full-attention layers at the 9B's heads: 16 query heads
over 4 key/value heads of 256): the step's key and value written into the cache, then its query
heads attending, through the torch ops the step ran before (the layer's cache read back over the
context bucket, e4m3 entries multiplied by their scales, then ``grouped_query_attention`` under
the additive mask) and through the split attention kernel (``attend_cached``) over the launch
choices its module sets (``ATTENTION_PROGRAMS_PER_SM``, ``ATTENTION_BLOCK``, of which heads of 256
read half a loop turn, ``ATTENTION_WARPS``); over a bf16 and an e4m3 cache.

Each case runs the 8 layers, each over its own cache, inside one CUDA graph. The floor printed
beside it is the filled positions' keys and values (and scales) of the 8 layers at 3.35 TB/s (an
H100 SXM's memory).

    python3 benchmarks/cached_attention_bench.py
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from graph_timing import graph_replay_ms  # noqa: E402

from framewise.core.decoding.attention import causal_mask, grouped_query_attention  # noqa: E402
from framewise.core.kernels import decode_step  # noqa: E402
from framewise.core.quantization.kv_formats import E4M3_KV_CACHE, FLOAT_KV_CACHE, KVCacheFormat  # noqa: E402

LAYERS = 8
HEADS, KV_HEADS, HEAD_DIM = 16, 4, 256
# (context bucket, the step's position)
CONTEXTS = ((2048, 1200), (8192, 6000), (32768, 30000))
CACHES = {"bf16": FLOAT_KV_CACHE, "e4m3": E4M3_KV_CACHE}
BANDWIDTH = 3.35e12


class Layers:
    """Every layer's cache of ``view_length`` positions in ``cache_format``, filled at random, and
    the step's query, key and value."""

    def __init__(self, cache_format: KVCacheFormat, view_length: int, position: int) -> None:
        device, dtype = torch.device("cuda"), torch.bfloat16
        self.format, self.view_length = cache_format, view_length
        shape = (1, KV_HEADS, view_length, HEAD_DIM)
        stored = cache_format.storage_dtype(dtype)
        self.keys = [torch.zeros(shape, dtype=stored, device=device) for _ in range(LAYERS)]
        self.values = [torch.zeros(shape, dtype=stored, device=device) for _ in range(LAYERS)]
        scales = cache_format.scaled
        self.key_scales = [torch.ones(shape[:3], device=device) if scales else None for _ in range(LAYERS)]
        self.value_scales = [torch.ones(shape[:3], device=device) if scales else None for _ in range(LAYERS)]
        every = torch.arange(view_length, device=device)
        for entries, entry_scales in zip((*self.keys, *self.values), (*self.key_scales, *self.value_scales)):
            cache_format.write(entries, entry_scales, every, torch.randn(shape, device=device, dtype=dtype))
        self.query = torch.randn(HEADS, HEAD_DIM, device=device, dtype=dtype)
        self.key = torch.randn(1, KV_HEADS, 1, HEAD_DIM, device=device, dtype=dtype)
        self.value = torch.randn_like(self.key)
        self.position = torch.tensor([position], device=device)

    def write(self, layer: int) -> None:
        self.format.write(self.keys[layer], self.key_scales[layer], self.position, self.key)
        self.format.write(self.values[layer], self.value_scales[layer], self.position, self.value)

    def torch_step(self) -> None:
        """What the step ran before: the cache read back over the bucket, attention under the mask."""
        mask = causal_mask(self.view_length, self.position, torch.bfloat16)
        for layer in range(LAYERS):
            self.write(layer)
            keys = self.format.read(self.keys[layer], self.key_scales[layer], self.view_length, torch.bfloat16)
            values = self.format.read(self.values[layer], self.value_scales[layer], self.view_length, torch.bfloat16)
            grouped_query_attention(self.query.view(1, HEADS, 1, HEAD_DIM), keys, values, mask, HEAD_DIM**-0.5)

    def kernel_step(self) -> None:
        for layer in range(LAYERS):
            self.write(layer)
            decode_step.attend_cached(
                self.query, self.position, self.keys[layer], self.values[layer], self.view_length, HEAD_DIM**-0.5,
                self.key_scales[layer], self.value_scales[layer],
            )


def main() -> int:
    print("| cache | context bucket | position | path | programs a multiprocessor | keys a loop turn | warps "
          "| µs a layer | read floor µs |")
    print("|---|---|---|---|---|---|---|---|---|")
    chosen = decode_step.ATTENTION_PROGRAMS_PER_SM, decode_step.ATTENTION_BLOCK, decode_step.ATTENTION_WARPS
    for (name, cache_format), (view_length, position) in itertools.product(CACHES.items(), CONTEXTS):
        layers = Layers(cache_format, view_length, position)
        entry = cache_format.storage_dtype(torch.bfloat16).itemsize + (4 / HEAD_DIM if cache_format.scaled else 0)
        floor = 2 * KV_HEADS * (position + 1) * HEAD_DIM * entry / BANDWIDTH * 1e6
        row = f"| {name} | {view_length} | {position} |"
        us = graph_replay_ms(layers.torch_step, replays=20) * 1e3 / LAYERS
        print(f"{row} torch (read back, SDPA) | | | | {us:.1f} | {floor:.2f} |", flush=True)
        for per_sm, block, warps in itertools.product((1, 2, 4), (32, 64, 128), (4, 8)):
            decode_step.ATTENTION_PROGRAMS_PER_SM, decode_step.ATTENTION_BLOCK, decode_step.ATTENTION_WARPS = (
                per_sm, block, warps
            )
            us = graph_replay_ms(layers.kernel_step, replays=50) * 1e3 / LAYERS
            turn = decode_step.cached_attention_block(HEAD_DIM)
            print(f"{row} attend_cached | {per_sm} | {turn} | {warps} | {us:.2f} | {floor:.2f} |", flush=True)
        decode_step.ATTENTION_PROGRAMS_PER_SM, decode_step.ATTENTION_BLOCK, decode_step.ATTENTION_WARPS = chosen
        del layers
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
