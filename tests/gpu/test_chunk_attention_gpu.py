"""A prefill chunk after cached tokens on CUDA: its attention under the lower-right causal bias is
the masked attention, and in bf16 (flash attention) it holds nothing that grows with the context.
A follow-up prefill graph's masked attention over a long context copies no keys or values."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from framewise.core.decoding.attention import causal_chunk_attention, causal_mask, grouped_query_attention, prefill_mask

pytestmark = pytest.mark.gpu

DEVICE = "cuda"
HEADS, KV_HEADS, HEAD_DIM = 32, 8, 128  # Qwen3-VL-8B's


def chunk(start: int, count: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    generator = torch.Generator(DEVICE).manual_seed(0)
    query = torch.randn(1, HEADS, count, HEAD_DIM, device=DEVICE, generator=generator).to(dtype)
    keys, values = (torch.randn(1, KV_HEADS, start + count, HEAD_DIM, device=DEVICE, generator=generator).to(dtype)
                    for _ in range(2))
    return query, keys, values


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_a_chunk_sees_the_cached_keys_and_its_own_up_to_itself(dtype: torch.dtype) -> None:
    start, count = 3000, 1024
    query, keys, values = chunk(start, count, dtype)
    out = causal_chunk_attention(query, keys, values, prefill_mask(start, count), HEAD_DIM**-0.5)
    group = HEADS // KV_HEADS
    visible = torch.arange(start + count, device=DEVICE)[None, :] <= torch.arange(count, device=DEVICE)[:, None] + start
    scores = query.double() @ keys.double().repeat_interleave(group, 1).transpose(-1, -2) * HEAD_DIM**-0.5
    expected = scores.masked_fill(~visible, float("-inf")).softmax(-1) @ values.double().repeat_interleave(group, 1)
    error = ((out.double() - expected).norm() / expected.norm()).item()
    assert out.shape == query.shape and error < (1e-2 if dtype == torch.bfloat16 else 1e-5)


def test_in_bf16_a_chunk_late_in_a_long_prefill_holds_no_mask_or_repeated_keys() -> None:
    """At 64k cached tokens a mask of the chunk's rows by the context is 128 MiB and the keys and
    values repeated to every query head 1 GiB; the chunk's attention allocates far less than either."""
    start, count = 65536, 1024
    query, keys, values = chunk(start, count, torch.bfloat16)
    causal_chunk_attention(query, keys, values, prefill_mask(start, count), HEAD_DIM**-0.5)  # warm up
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    out = causal_chunk_attention(query, keys, values, prefill_mask(start, count), HEAD_DIM**-0.5)
    torch.cuda.synchronize()
    extra = torch.cuda.max_memory_allocated() - before
    mask_bytes = count * (start + count) * 2
    assert extra < mask_bytes / 4, f"{extra / 2**20:.1f} MiB beyond the inputs"
    assert not out.isnan().any()


def test_a_follow_up_prefill_over_64k_positions_copies_no_keys_or_values() -> None:
    """256 tokens at the end of a 64k-position cache bucket under an additive mask (as in a follow-up
    prefill graph): the keys and values repeated to every query head would be 1 GiB; the grouped
    attention holds the mask's copy for the group and little else, and equals the repeated-heads
    attention."""
    count, length = 256, 65536 + 256
    query, keys, values = chunk(length - count, count, torch.bfloat16)
    mask = causal_mask(length, torch.arange(length - count, length, device=DEVICE), torch.bfloat16)
    grouped_query_attention(query, keys, values, mask, HEAD_DIM**-0.5)  # warm up
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    out = grouped_query_attention(query, keys, values, mask, HEAD_DIM**-0.5)
    torch.cuda.synchronize()
    extra = torch.cuda.max_memory_allocated() - before
    group = HEADS // KV_HEADS
    repeated_bytes = 2 * HEADS * length * HEAD_DIM * 2
    assert extra < group * mask.numel() * 2 + repeated_bytes / 16, f"{extra / 2**20:.1f} MiB beyond the inputs"
    expected = F.scaled_dot_product_attention(
        query, keys.repeat_interleave(group, 1), values.repeat_interleave(group, 1), attn_mask=mask, scale=HEAD_DIM**-0.5
    )
    torch.testing.assert_close(out, expected, rtol=2e-2, atol=2e-2)
