"""The Triton tile attention kernel against per-sequence SDPA in float64, on random packed layouts:
sequences shorter and longer than a tile, empty slots, head dims that are and are not powers of
two (split into two column blocks or padded to one), a strided value (the view the tower's qkv
product leaves), and one CUDA graph replayed over boundaries that change between replays (what
the encoder graphs do). The rotary kernel against the fused forward's torch code."""

from __future__ import annotations

import random

import pytest
import torch
import torch.nn.functional as F

pytestmark = pytest.mark.gpu
kernel = pytest.importorskip("framewise.core.kernels.vision_attention", reason="needs Triton")

from framewise.core.families.qwen3_vl.fused import _rotate_qk  # noqa: E402
from framewise.core.kernels.tile_schedule import tile_schedule  # noqa: E402

DEVICE = "cuda"
# float32 multiplies in full precision, so only the summation order differs; bfloat16 inputs
# and the bfloat16 probabilities in the value product leave a few units of 2**-8.
TOLERANCE = {torch.float32: 1e-5, torch.bfloat16: 2e-2}


def packed_inputs(lengths: list[int], empty_slots: int, heads: int, head_dim: int, dtype: torch.dtype, seed: int):
    """q, k (contiguous) and v (a strided view of a qkv tensor), (rows, heads, head_dim); cu_seqlens."""
    generator = torch.Generator(device=DEVICE).manual_seed(seed)
    rows = sum(lengths)
    qkv = torch.randn(rows, 3, heads, head_dim, device=DEVICE, generator=generator).to(dtype)
    cu_seqlens = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist(), *[rows] * empty_slots], dtype=torch.int32)
    return qkv[:, 0].contiguous(), qkv[:, 1].contiguous(), qkv[:, 2], cu_seqlens.to(DEVICE)


def reference(q, k, v, cu_seqlens) -> torch.Tensor:
    out = torch.empty(q.shape, dtype=torch.float64, device=DEVICE)
    bounds = cu_seqlens.tolist()
    for start, end in zip(bounds[:-1], bounds[1:]):
        if end > start:
            per_head = [t[start:end].double().transpose(0, 1) for t in (q, k, v)]
            out[start:end] = F.scaled_dot_product_attention(*per_head).transpose(0, 1)
    return out


def relative_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    return float((actual.double() - expected).norm() / expected.norm())


@pytest.mark.parametrize("split", [True, False], ids=["two_blocks", "one_block"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("head_dim", [40, 64, 72, 80, 96, 128])
@pytest.mark.parametrize("seed", range(6))
def test_matches_sdpa_within_each_sequence(dtype, head_dim, seed, split):
    rng = random.Random(seed)
    lengths = [rng.choice([1, 5, 31, 32, 33, 63, 64, 65, 196, 300, 784]) for _ in range(rng.randint(1, 8))]
    q, k, v, cu_seqlens = packed_inputs(lengths, rng.randint(0, 8), 4, head_dim, dtype, seed)
    schedule = tile_schedule(cu_seqlens, q.shape[0])
    out = kernel.tile_attention(q, k, v, cu_seqlens, schedule, head_dim**-0.5, split_head_dim=split)
    assert out.shape == q.shape and out.dtype == dtype
    assert torch.isfinite(out).all()
    assert relative_error(out, reference(q, k, v, cu_seqlens)) < TOLERANCE[dtype]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_large_budgets_split_the_head_dim_and_agree_with_one_padded_block(dtype):
    assert kernel.column_blocks(72, split=True) == (64, 16) and kernel.column_blocks(72, split=False) == (128, 0)
    lengths = [784] * 8 + [300, 65, 1]
    assert sum(lengths) >= kernel.SPLIT_FROM_ROWS
    q, k, v, cu_seqlens = packed_inputs(lengths, 40, 16, 72, dtype, seed=11)
    schedule = tile_schedule(cu_seqlens, q.shape[0])
    default = kernel.tile_attention(q, k, v, cu_seqlens, schedule, 72**-0.5)
    padded = kernel.tile_attention(q, k, v, cu_seqlens, schedule, 72**-0.5, split_head_dim=False)
    # Only the summation order differs (float32) or the rounding of p for the value product (bf16).
    assert relative_error(default, padded.double()) < TOLERANCE[dtype] / 2
    assert relative_error(default, reference(q, k, v, cu_seqlens)) < TOLERANCE[dtype]


@pytest.mark.parametrize(("head_dim", "blocks"), [(40, (32, 16)), (64, (64, 0)), (72, (64, 16)), (80, (64, 16)), (96, (128, 0))])
def test_two_blocks_only_with_a_16_wide_second_block(head_dim, blocks):
    assert kernel.column_blocks(head_dim, split=True) == blocks
    assert kernel.column_blocks(head_dim, split=False) == (max(16, 1 << (head_dim - 1).bit_length()), 0)


@pytest.mark.parametrize("block_n", [16, 64])
def test_two_blocks_refuse_the_key_blocks_that_were_miscompiled(block_n):
    q, k, v, cu_seqlens = packed_inputs([100], 0, 2, 72, torch.bfloat16, seed=1)
    with pytest.raises(ValueError, match="keys per loop turn"):
        kernel.tile_attention(q, k, v, cu_seqlens, tile_schedule(cu_seqlens, 100), 1.0, split_head_dim=True, block_n=block_n)


@pytest.mark.parametrize("budget", [1024, 4096], ids=["one_block", "two_blocks"])
def test_one_graph_serves_changing_boundaries(budget):
    slots, heads, head_dim = 16, 4, 72
    q, k, v, _ = packed_inputs([budget], 0, heads, head_dim, torch.bfloat16, seed=7)
    cu_seqlens = torch.full((slots + 2,), budget, dtype=torch.int32, device=DEVICE)
    cu_seqlens[0] = 0
    kernel.register_op()

    def attend():
        schedule = tile_schedule(cu_seqlens, budget)
        return torch.ops.framewise.tile_attention(q, k, v, cu_seqlens, schedule, head_dim**-0.5)

    attend()  # compile outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = attend()
    for lengths in ([budget], [100, 200, 300, 424], [1] * slots + [budget - slots], [784, 240]):
        layout = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)
        cu_seqlens.fill_(budget)
        cu_seqlens[: len(layout)] = layout.to(DEVICE)
        graph.replay()
        assert relative_error(out, reference(q, k, v, cu_seqlens)) < TOLERANCE[torch.bfloat16], lengths


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(("rows", "heads", "head_dim"), [(6272, 16, 72), (37, 16, 64), (5, 3, 80)])
def test_rotary_matches_the_fused_forwards_torch_code(dtype, rows, heads, head_dim):
    generator = torch.Generator(device=DEVICE).manual_seed(rows)
    qkv = torch.randn(rows, 3, heads, head_dim, device=DEVICE, generator=generator).to(dtype)
    half = torch.randn(rows, head_dim // 2, device=DEVICE, generator=generator) * 20
    angles = torch.cat([half, half], dim=-1)
    query, key = kernel.rotary_qk(qkv, angles.cos(), angles.sin())
    expected_query, expected_key, _ = _rotate_qk(qkv, angles.cos(), angles.sin())
    assert query.is_contiguous() and key.is_contiguous()
    # The same float32 arithmetic; only a fused multiply-add may round once where torch rounds twice.
    torch.testing.assert_close(query, expected_query, rtol=1e-5 if dtype == torch.float32 else 8e-3, atol=1e-5)
    torch.testing.assert_close(key, expected_key, rtol=1e-5 if dtype == torch.float32 else 8e-3, atol=1e-5)
