"""The decoder's masked attention shares each key/value head among its query heads instead of
copying it: the same result as attending with the heads repeated. Over an e4m3 cache the queries
attend a segment of positions at a time, merged by their log-sum-exp: the one-pass result."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from framewise.core.decoding import attention as attention_module
from framewise.core.decoding.attention import attend, causal_mask, grouped_query_attention, prefill_mask, read_segments
from framewise.core.quantization.kv_formats import ScaledEntries, quantize_heads

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


# ---------------------------------------------------------------------------- a scaled cache read in segments

# Qwen3-VL-8B's attention heads and Qwen3.5-9B's: (query heads, key/value heads, head dim).
HEAD_SHAPES = [(32, 8, 128), (16, 4, 256)]
# (cached positions before the queries, queries, segment): a segment boundary inside the cached
# context, one at the queries' start, a chunk longer than a segment, a context within one segment.
CHUNKS = {
    "boundary inside the context": (5 * 64 + 23, 40, 64),
    "boundary at the chunk start": (5 * 64, 40, 64),
    "chunk longer than a segment": (100, 70, 32),
    "context within a segment": (300, 40, 1024),
}


def scaled_entries(kv_heads: int, head_dim: int, length: int, segment: int, seed: int) -> tuple[ScaledEntries, ScaledEntries]:
    """Keys and values of ``length`` positions in e4m3 with their scales, a few unused positions after them."""
    generator = torch.Generator().manual_seed(seed)
    stored = [quantize_heads(torch.randn(1, kv_heads, length + 7, head_dim, generator=generator) * spread)
              for spread in (2.0, 1.0)]
    return tuple(ScaledEntries(codes, scales, length, torch.float32, segment) for codes, scales in stored)


def exact_attention(query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, visible: torch.Tensor) -> torch.Tensor:
    """float64 attention of ``query`` (1, heads, n, d) over the key/value heads repeated to the query
    heads, where ``visible`` (n, length) says which keys each query sees."""
    group = query.shape[1] // keys.shape[1]
    keys, values = (part.double().repeat_interleave(group, 1) for part in (keys, values))
    scores = query.double() @ keys.transpose(-1, -2) * query.shape[-1] ** -0.5
    return (scores.masked_fill(~visible, float("-inf")).softmax(-1) @ values).float()


def recorded_segments(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The number of positions of each segment the segmented attention attends over from now on."""
    widths: list[int] = []
    partial = attention_module.partial_attention

    def recording(query, keys, values, *rest):
        widths.append(keys.shape[2])
        return partial(query, keys, values, *rest)

    monkeypatch.setattr(attention_module, "partial_attention", recording)
    return widths


@pytest.mark.parametrize(("heads", "kv_heads", "head_dim"), HEAD_SHAPES)
@pytest.mark.parametrize("chunk", CHUNKS.values(), ids=CHUNKS.keys())
def test_a_chunk_attending_a_segment_at_a_time_equals_one_pass(
    monkeypatch: pytest.MonkeyPatch, heads: int, kv_heads: int, head_dim: int, chunk: tuple[int, int, int]
) -> None:
    """A prefill chunk after cached positions over an e4m3 cache (its causal bias): each segment's
    keys and values read back on their own, the results merged by their log-sum-exp, equal the
    attention over the whole context read back at once, within float32 rounding; no segment but
    the chunk's own is wider than a segment."""
    start, count, segment = chunk
    length = start + count
    keys, values = scaled_entries(kv_heads, head_dim, length, segment, seed=start + count)
    query = torch.randn(1, heads, count, head_dim, generator=torch.Generator().manual_seed(1))
    widths = recorded_segments(monkeypatch)
    got = attend(query, keys, values, prefill_mask(start, count), head_dim**-0.5)
    visible = torch.arange(length)[None, :] <= torch.arange(start, length)[:, None]
    torch.testing.assert_close(got, exact_attention(query, keys.read(), values.read(), visible), rtol=1e-5, atol=1e-5)
    ranges = read_segments(length, count, segment, causal=True)
    if length <= segment:
        assert widths == []  # read back whole in one pass, as without segments
    else:
        # the chunk's own segment first: the chunk whole, after the cached positions of its segment
        assert widths == [end - begin for begin, end in reversed(ranges)] and len(widths) > 2
        assert widths[0] == length - start // segment * segment and max(widths[1:]) == segment


def kernels_as_on_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    """From now on a masked segment on the CPU takes the CUDA path: the query heads grouped for
    the memory-efficient kernel, which :func:`efficient_kernel_as_on_cuda` stands in for."""
    monkeypatch.setattr(torch.ops.aten, "_scaled_dot_product_efficient_attention", efficient_kernel_as_on_cuda)
    monkeypatch.setattr(attention_module, "_cpu_flash_attention", attention_module._grouped_efficient_attention)


@pytest.mark.parametrize(("heads", "kv_heads", "head_dim"), HEAD_SHAPES)
@pytest.mark.parametrize(("count", "first"), [(24, 300), (1, 330)], ids=["a follow-up prefill", "a decode step"])
@pytest.mark.parametrize("kernel", ["cpu", "cuda"], ids=["the CPU's kernel", "CUDA's memory-efficient kernel"])
def test_queries_under_a_mask_attending_a_segment_at_a_time_equal_one_pass(
    monkeypatch: pytest.MonkeyPatch, heads: int, kv_heads: int, head_dim: int, count: int, first: int, kernel: str
) -> None:
    """Queries at positions inside a bucket of the cache under its additive mask (as a follow-up
    prefill graph or a decode step attends, unused positions after them): segments of the bucket
    fixed by its length alone, whole segments no query sees among them (which CUDA's kernel gives
    a log-sum-exp of 0), merged to the one-pass result."""
    if kernel == "cuda":
        kernels_as_on_cuda(monkeypatch)
    length, segment = 448, 64
    keys, values = scaled_entries(kv_heads, head_dim, length, segment, seed=count)
    query = torch.randn(1, heads, count, head_dim, generator=torch.Generator().manual_seed(2))
    positions = torch.arange(first, first + count)
    widths = recorded_segments(monkeypatch)
    got = attend(query, keys, values, causal_mask(length, positions, torch.float32), head_dim**-0.5)
    visible = torch.arange(length)[None, :] <= positions[:, None]
    torch.testing.assert_close(got, exact_attention(query, keys.read(), values.read(), visible), rtol=1e-5, atol=1e-5)
    assert widths == [segment] * (length // segment)


@pytest.mark.parametrize(("length", "count", "segment"), [(100, 10, 32), (96, 1, 32), (64, 64, 32), (7, 3, 8), (4096, 1024, 8192)])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "masked"])
def test_segments_cover_the_context_in_order_each_at_most_a_segment(length: int, count: int, segment: int, causal: bool) -> None:
    ranges = read_segments(length, count, segment, causal)
    assert ranges[0][0] == 0 and ranges[-1][1] == length
    assert all(end == following for (_, end), (following, _) in zip(ranges, ranges[1:]))
    assert all(begin % segment == 0 for begin, _ in ranges)
    assert all(end - begin == segment for begin, end in ranges[:-1])
    last_begin, _ = ranges[-1]
    if causal:  # the queries' own positions in the last segment, which holds less than a segment before them
        assert last_begin <= length - count < last_begin + segment
    else:
        assert 0 < length - last_begin <= segment


def efficient_kernel_as_on_cuda(query, keys, values, bias, compute_log_sumexp, dropout_p=0.0, is_causal=False, *, scale=None):
    """CUDA's memory-efficient kernel as a CPU test sees it: the same attention and log-sum-exp, its
    output with the query rows outermost and the log-sum-exp in rows padded to its block of 32 (the
    padding holding anything), and a mask it can read only in aligned rows. A row whose every score
    overflows to -inf in the kernel's base-2 softmax (a mask of the dtype's lowest value throughout)
    comes out as the kernel writes it: output 0, log-sum-exp 0 (its sum set to 1, its max to 0)."""
    assert query.shape[1] == keys.shape[1] and compute_log_sumexp and not is_causal
    if bias is not None:
        assert bias.shape == (*query.shape[:3], keys.shape[2]) and bias.stride(-2) % 16 == 0
    scores = query @ keys.transpose(-1, -2) * scale + (0 if bias is None else bias)
    sees_a_key = ~torch.isneginf(scores * math.log2(math.e)).all(-1, keepdim=True)
    out = ((scores.softmax(-1) * sees_a_key) @ values).transpose(1, 2).contiguous().transpose(1, 2)
    rows = query.shape[2]
    lse = torch.full((*query.shape[:2], -(-rows // 32) * 32), float("nan"))
    lse[..., :rows] = torch.where(sees_a_key[..., 0], scores.logsumexp(-1), 0.0)
    return out, lse, torch.empty(()), torch.empty(())


@pytest.mark.parametrize(("count", "width", "masked"), [(5, 40, True), (1, 37, True), (6, 40, False)])
def test_the_cuda_kernel_path_groups_the_query_heads_and_their_log_sum_exp(
    monkeypatch: pytest.MonkeyPatch, count: int, width: int, masked: bool
) -> None:
    """Where flash attention cannot run on CUDA (a mask; float32), a segment goes to the memory-
    efficient kernel with the query heads grouped by key/value head and the mask repeated for the
    group: the output and log-sum-exp per query head are the CPU kernel's."""
    monkeypatch.setattr(torch.ops.aten, "_scaled_dot_product_efficient_attention", efficient_kernel_as_on_cuda)
    generator = torch.Generator().manual_seed(width)
    query = torch.randn(1, HEADS, count, HEAD_DIM, generator=generator)
    keys, values = (torch.randn(1, KV_HEADS, width, HEAD_DIM, generator=generator) for _ in range(2))
    mask = causal_mask(width, torch.arange(width - count - 3, width - 3), torch.float32) if masked else None
    got = attention_module._grouped_efficient_attention(query, keys, values, mask, HEAD_DIM**-0.5)
    want = attention_module.partial_attention(query, keys, values, mask, False, HEAD_DIM**-0.5)
    for ours, theirs in zip(got, want):
        assert ours.shape == theirs.shape
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5)
