"""The decoder's masked attention shares each key/value head among its query heads instead of
copying it: the same result as attending with the heads repeated."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from framewise.core.decoding.attention import causal_mask, grouped_query_attention

HEADS, KV_HEADS, HEAD_DIM = 8, 2, 16


def repeated_heads_attention(query, keys, values, mask, scaling):
    """The reference: every key/value head copied to the query heads it serves."""
    group = query.shape[1] // keys.shape[1]
    keys, values = keys.repeat_interleave(group, 1), values.repeat_interleave(group, 1)
    return F.scaled_dot_product_attention(query, keys, values, attn_mask=mask, scale=scaling)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(("count", "length"), [(1, 40), (7, 64), (32, 96)])
def test_grouped_heads_equal_repeated_heads_under_a_causal_mask(dtype: torch.dtype, count: int, length: int) -> None:
    generator = torch.Generator().manual_seed(count)
    query = torch.randn(1, count, HEADS, HEAD_DIM, generator=generator).to(dtype).transpose(1, 2)  # as a layer's view
    keys, values = (torch.randn(1, KV_HEADS, length, HEAD_DIM, generator=generator).to(dtype) for _ in range(2))
    # the queries sit at the end of a cache bucket's real positions, with unused positions after them
    positions = torch.arange(length - count - 5, length - 5)
    mask = causal_mask(length, positions, dtype)
    got = grouped_query_attention(query, keys, values, mask, HEAD_DIM**-0.5)
    want = repeated_heads_attention(query, keys, values, mask, HEAD_DIM**-0.5)
    assert got.shape == (1, HEADS, count, HEAD_DIM)
    torch.testing.assert_close(got, want, rtol=1e-5 if dtype == torch.float32 else 2e-2, atol=1e-5 if dtype == torch.float32 else 2e-2)


def test_a_query_head_attends_through_its_own_key_value_head() -> None:
    """Each group of query heads reads only its key/value head: values that differ by head show it."""
    count, length = 3, 10
    query = torch.zeros(1, HEADS, count, HEAD_DIM)
    keys = torch.zeros(1, KV_HEADS, length, HEAD_DIM)
    values = torch.arange(KV_HEADS, dtype=torch.float32).view(1, KV_HEADS, 1, 1).expand(1, KV_HEADS, length, HEAD_DIM)
    mask = causal_mask(length, torch.arange(length - count, length), torch.float32)
    out = grouped_query_attention(query, keys, values.contiguous(), mask, 1.0)
    group = HEADS // KV_HEADS
    expected_head = torch.arange(HEADS) // group
    assert torch.equal(out[0, :, :, 0], expected_head[:, None].float().expand(HEADS, count))


def test_the_result_does_not_depend_on_the_layout_the_kernel_returns(monkeypatch: pytest.MonkeyPatch) -> None:
    """On CUDA the memory-efficient kernel returns its output with the query rows outermost (a
    transposed layout, as on the GPU where regrouping it with a view failed); the same values in
    that layout give the same result."""
    count, length = 5, 32
    generator = torch.Generator().manual_seed(3)
    query = torch.randn(1, HEADS, count, HEAD_DIM, generator=generator)
    keys, values = (torch.randn(1, KV_HEADS, length, HEAD_DIM, generator=generator) for _ in range(2))
    mask = causal_mask(length, torch.arange(length - count, length), torch.float32)
    want = grouped_query_attention(query, keys, values, mask, HEAD_DIM**-0.5)
    attend = F.scaled_dot_product_attention

    def rows_outermost(*args, **kwargs):
        out = attend(*args, **kwargs)
        return out.transpose(1, 2).contiguous().transpose(1, 2)

    monkeypatch.setattr(F, "scaled_dot_product_attention", rows_outermost)
    got = grouped_query_attention(query, keys, values, mask, HEAD_DIM**-0.5)
    assert torch.equal(got, want)
