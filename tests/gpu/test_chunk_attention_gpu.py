"""A prefill chunk after cached tokens on CUDA: its attention under the lower-right causal bias is
the masked attention, and in bf16 (flash attention) it holds nothing that grows with the context.
A follow-up prefill graph's masked attention over a long context copies no keys or values. Over an
e4m3 cache both attend a segment of positions at a time, merged by their log-sum-exp: the one-pass
attention, holding one segment's keys and values read back rather than the whole context's."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from framewise.core.decoding import attention as attention_module
from framewise.core.decoding.attention import (
    attend,
    causal_chunk_attention,
    causal_mask,
    grouped_query_attention,
    prefill_mask,
    read_segments,
)
from framewise.core.quantization.kv_formats import ScaledEntries, quantize_heads

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


# ---------------------------------------------------------------------------- an e4m3 cache read in segments

# (query heads, key/value heads, head dim) of Qwen3-VL-8B and Qwen3.5-9B.
MODEL_HEADS = {"Qwen3-VL-8B": (32, 8, 128), "Qwen3.5-9B": (16, 4, 256)}
# The segment the read-back was built with (main's format reads whole until these tests pass on a GPU).
SEGMENT = 8192
# A bf16 output rounds each value to within 2**-9 of itself. The one-pass output rounds once, the
# segmented one each segment's output and the merged sum: both stay within a few such roundings of
# the float32 attention over the same entries.
BF16_ROUNDINGS = 4 * 2**-9


def e4m3_context(kv_heads: int, head_dim: int, length: int, dtype: torch.dtype) -> tuple[ScaledEntries, ScaledEntries]:
    """Keys and values of ``length`` positions (and a few unused ones after them) stored as an e4m3
    cache stores them, handed to attention unread for activations of ``dtype``."""
    generator = torch.Generator(DEVICE).manual_seed(1)
    stored = [quantize_heads(torch.randn(1, kv_heads, length + 64, head_dim, device=DEVICE, generator=generator) * spread)
              for spread in (2.0, 1.0)]
    return tuple(ScaledEntries(codes, scales, length, dtype, SEGMENT) for codes, scales in stored)


def reference_attention(
    query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, visible: torch.Tensor, dtype: torch.dtype
) -> torch.Tensor:
    """Attention in ``dtype`` of ``query`` (1, heads, n, d) over ``keys``/``values`` repeated to the
    query heads, ``visible`` (n, length) the keys each query sees."""
    group = query.shape[1] // keys.shape[1]
    keys, values = (part.to(dtype).repeat_interleave(group, 1) for part in (keys, values))
    scores = query.to(dtype) @ keys.transpose(-1, -2) * query.shape[-1] ** -0.5
    return scores.masked_fill_(~visible, float("-inf")).softmax(-1) @ values


def relative(got: torch.Tensor, want: torch.Tensor) -> float:
    return ((got.float() - want.float()).norm() / want.float().norm()).item()


def counted_segments(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many positions each segment attended from now on holds."""
    widths: list[int] = []
    partial = attention_module.partial_attention
    monkeypatch.setattr(attention_module, "partial_attention",
                        lambda query, keys, *rest: widths.append(keys.shape[2]) or partial(query, keys, *rest))
    return widths


@pytest.mark.parametrize("model", MODEL_HEADS)
@pytest.mark.parametrize("start", [3 * SEGMENT + 1000, 3 * SEGMENT], ids=["boundary inside the context", "boundary at the chunk"])
def test_a_chunk_over_an_e4m3_cache_read_in_segments_is_the_one_pass_attention(
    monkeypatch: pytest.MonkeyPatch, model: str, start: int
) -> None:
    """bf16, flash attention on every segment (the chunk's own under its lower-right causal rule):
    the one-pass attention over the cache read back whole (the path without segments), within bf16
    rounding, and both as close to the float32 attention."""
    heads, kv_heads, head_dim = MODEL_HEADS[model]
    count = 1024
    keys, values = e4m3_context(kv_heads, head_dim, start + count, torch.bfloat16)
    query = torch.randn(1, heads, count, head_dim, device=DEVICE, generator=torch.Generator(DEVICE).manual_seed(2))
    query = query.to(torch.bfloat16)
    widths = counted_segments(monkeypatch)
    got = attend(query, keys, values, prefill_mask(start, count), head_dim**-0.5)
    assert widths == [end - begin for begin, end in reversed(read_segments(start + count, count, SEGMENT, True))]
    assert len(widths) == 4
    whole_keys, whole_values = keys.read(), values.read()
    one_pass = causal_chunk_attention(query, whole_keys, whole_values, prefill_mask(start, count), head_dim**-0.5)
    visible = torch.arange(start + count, device=DEVICE)[None, :] <= torch.arange(start, start + count, device=DEVICE)[:, None]
    exact = reference_attention(query, whole_keys, whole_values, visible, torch.float32)
    assert got.dtype == torch.bfloat16 and not got.isnan().any()
    assert relative(got, one_pass) < BF16_ROUNDINGS
    assert relative(got, exact) < BF16_ROUNDINGS and relative(one_pass, exact) < BF16_ROUNDINGS


def test_in_float32_a_chunk_read_in_segments_goes_through_the_masked_kernel_exactly() -> None:
    """float32 activations (flash attention cannot run): each segment through the memory-efficient
    kernel, the chunk's own under a mask, with the query heads grouped by key/value head."""
    heads, kv_heads, head_dim = MODEL_HEADS["Qwen3-VL-8B"]
    start, count = SEGMENT + 500, 256
    keys, values = e4m3_context(kv_heads, head_dim, start + count, torch.float32)
    query = torch.randn(1, heads, count, head_dim, device=DEVICE, generator=torch.Generator(DEVICE).manual_seed(3))
    got = attend(query, keys, values, prefill_mask(start, count), head_dim**-0.5)
    visible = torch.arange(start + count, device=DEVICE)[None, :] <= torch.arange(start, start + count, device=DEVICE)[:, None]
    assert relative(got, reference_attention(query, keys.read(), values.read(), visible, torch.float64)) < 1e-5


@pytest.mark.parametrize("model", MODEL_HEADS)
def test_a_follow_up_over_an_e4m3_bucket_read_in_segments_is_the_one_pass_attention(
    monkeypatch: pytest.MonkeyPatch, model: str
) -> None:
    """256 queries under the additive mask of a 64k-position bucket, unused positions after them
    (a follow-up prefill graph): every segment a segment long, through the memory-efficient kernel;
    the grouped one-pass attention over the bucket read back whole, within bf16 rounding."""
    heads, kv_heads, head_dim = MODEL_HEADS[model]
    count, length = 256, 8 * SEGMENT
    keys, values = e4m3_context(kv_heads, head_dim, length, torch.bfloat16)
    query = torch.randn(1, heads, count, head_dim, device=DEVICE, generator=torch.Generator(DEVICE).manual_seed(4))
    query = query.to(torch.bfloat16)
    mask = causal_mask(length, torch.arange(length - count - 300, length - 300, device=DEVICE), torch.bfloat16)
    widths = counted_segments(monkeypatch)
    got = attend(query, keys, values, mask, head_dim**-0.5)
    assert widths == [SEGMENT] * 8
    one_pass = grouped_query_attention(query, keys.read(), values.read(), mask, head_dim**-0.5)
    assert not got.isnan().any() and relative(got, one_pass) < BF16_ROUNDINGS


def attention_extra_bytes(run) -> int:
    """Device memory ``run()`` allocates at its peak beyond what was allocated before it (warmed once)."""
    run()
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    run()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - before


def merge_bytes(heads: int, count: int, head_dim: int) -> int:
    """What the segments' merge holds at once for ``count`` queries: the float32 sum, two segments'
    bf16 outputs (the last one's while the next is computed) or the last one's and the bf16 result,
    and the rows' float32 log-sum-exps and weights (a few per query head)."""
    outputs = heads * count * head_dim
    return outputs * (4 + 2 + 2) + heads * count * 4 * 8


@pytest.mark.parametrize("model", MODEL_HEADS)
def test_a_chunk_late_in_a_long_prefill_reads_back_one_segment_at_a_time(model: str) -> None:
    """A chunk of 1,024 tokens after 72,000 cached positions (about a 64k-token clip's last) over an
    e4m3 cache: it allocates at most one segment's keys and values read back in bf16 (and a float32
    product of one of them, were the in-place product to make one) and the merge's outputs, against
    the whole context's read-back, which reading it at once held."""
    heads, kv_heads, head_dim = MODEL_HEADS[model]
    start, count = 72_000, 1024
    keys, values = e4m3_context(kv_heads, head_dim, start + count, torch.bfloat16)
    query = torch.randn(1, heads, count, head_dim, device=DEVICE, generator=torch.Generator(DEVICE).manual_seed(5))
    query = query.to(torch.bfloat16)
    extra = attention_extra_bytes(lambda: attend(query, keys, values, prefill_mask(start, count), head_dim**-0.5))
    widest = max(end - begin for begin, end in read_segments(start + count, count, SEGMENT, True))
    read_back = kv_heads * widest * head_dim * (2 * 2 + 4)
    bound = read_back + merge_bytes(heads, count, head_dim)
    whole_read_back = 2 * kv_heads * (start + count) * head_dim * 2
    assert extra <= bound, f"{extra / 2**20:.1f} MiB beyond the inputs, more than {bound / 2**20:.1f}"
    assert bound < whole_read_back / 2


@pytest.mark.parametrize("model", MODEL_HEADS)
def test_a_follow_up_over_a_long_e4m3_bucket_reads_back_one_segment_at_a_time(model: str) -> None:
    """256 queries under the mask of a 77,056-position bucket (a follow-up prefill graph after a
    64k-token clip): beside the mask, one segment's keys and values read back, the mask's rows for
    a segment repeated for the group, the grouped queries and the kernel's output with its
    regrouped copy, and the merge; not the whole bucket's read-back or the mask's copy for the group."""
    heads, kv_heads, head_dim = MODEL_HEADS[model]
    count, length = 256, 77_056
    keys, values = e4m3_context(kv_heads, head_dim, length, torch.bfloat16)
    query = torch.randn(1, heads, count, head_dim, device=DEVICE, generator=torch.Generator(DEVICE).manual_seed(6))
    query = query.to(torch.bfloat16)
    mask = causal_mask(length, torch.arange(length - count, length, device=DEVICE), torch.bfloat16)
    extra = attention_extra_bytes(lambda: attend(query, keys, values, mask, head_dim**-0.5))
    group = heads // kv_heads
    read_back = kv_heads * SEGMENT * head_dim * (2 * 2 + 4)
    grouped_mask = group * count * SEGMENT * 2
    # the grouped queries, the kernel's output and its regrouped copy; for heads wider than 128 the
    # kernel sums its output in a float32 buffer
    grouped_rows = heads * count * head_dim * (3 * 2 + (4 if head_dim > 128 else 0))
    bound = read_back + grouped_mask + grouped_rows + merge_bytes(heads, count, head_dim)
    whole = 2 * kv_heads * length * head_dim * 2 + group * mask.numel() * 2
    assert extra <= bound, f"{extra / 2**20:.1f} MiB beyond the inputs, more than {bound / 2**20:.1f}"
    assert bound < whole / 2
