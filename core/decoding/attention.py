"""The attention function the decoder runs the language model with.

Registered with transformers' ``AttentionInterface`` and switched on only around the decoder's
own forward passes (:func:`decoder_attention`), so ``generate()`` and every other caller keep
transformers' own. Queries under an additive mask (a decode step over its cache bucket, a
follow-up prefill graph) attend in one ``scaled_dot_product_attention`` call in which the query
heads that share a key/value head attend as that head's queries, so the keys and values are not
copied per query head (:func:`grouped_query_attention`). A prefill chunk after cached tokens
attends under :func:`prefill_mask`'s causal bias through flash attention, which shares the heads
itself; a prefill from an empty cache goes to transformers' ``sdpa``, causal.

Keys and values of a scaled (e4m3) cache come unread (:class:`ScaledEntries`); where they span more
than one segment of positions, the queries attend over each segment read back on its own, and the
segments' results are merged exactly by their log-sum-exp (:func:`segmented_attention`), so a pass
never holds the whole context's keys and values in the activations' dtype.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator

import torch
import torch.nn.functional as F
from torch.backends.cuda import SDPAParams, can_use_flash_attention
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.attention.bias import CausalBias, causal_lower_right
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from framewise.core.decoding.kv_cache import CachedEntries
from framewise.core.quantization.kv_formats import ScaledEntries

DECODER_ATTENTION = "framewise_decoder"
# What the decoder's passes attend under: an additive mask tensor, a :func:`prefill_mask` bias, or
# None for causal from an empty cache.
AttentionMask = torch.Tensor | CausalBias | None
# Head sizes flash attention takes without padding them (torch pads others before its kernel).
FLASH_HEAD_ALIGNMENT = 8
# The memory-efficient kernel reads an additive mask in rows of a multiple of this many elements.
MASK_ROW_ALIGNMENT = 16
# The log-sum-exp a query that sees no key of a segment merges with: its weight exp(this - total)
# is 0 beside any segment it sees, and finite, so two such segments merge without a NaN.
NO_KEY_LOG_SUM_EXP = -1e30


def decoder_attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: CachedEntries,
    value: CachedEntries,
    attention_mask: AttentionMask,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers' attention signature: ``query`` (1, heads, q, d), ``key``/``value``
    (1, kv_heads, k, d) or a scaled cache's :class:`ScaledEntries` of k positions,
    ``attention_mask`` additive, broadcastable to (1, 1, q, k), a :func:`prefill_mask` bias, or
    ``None`` (causal). Returns ((1, q, heads, d), None)."""
    if attention_mask is None:
        # From an empty cache: the keys are the pass's own, read back whole.
        key, value = read_whole(key), read_whole(value)
        with prefill_attention_backends():
            return sdpa_attention_forward(
                module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
            )
    return attend(query, key, value, attention_mask, scaling).transpose(1, 2), None


def attend(
    query: torch.Tensor, keys: CachedEntries, values: CachedEntries, mask: AttentionMask, scaling: float | None
) -> torch.Tensor:
    """Attention of ``query`` (1, heads, n, d) over a layer's cached ``keys``/``values``
    ((1, kv_heads, length, d), or a scaled cache's :class:`ScaledEntries`) under the additive
    ``mask`` (broadcastable to (1, 1, n, length)), a :func:`prefill_mask` bias, or causally when
    ``mask`` is None (then ``length`` is n). Returns (1, heads, n, d)."""
    if isinstance(keys, ScaledEntries):
        assert isinstance(values, ScaledEntries)
        # (a bias is a tensor too: asked for by its type)
        causal = mask is None or isinstance(mask, CausalBias)
        if len(read_segments(keys.length, query.shape[2], keys.segment, causal)) > 1:
            return segmented_attention(query, keys, values, None if causal else mask, scaling)
        keys, values = keys.read(), values.read()
    if isinstance(mask, CausalBias):
        return causal_chunk_attention(query, keys, values, mask, scaling)
    if mask is None:
        # Causal from an empty cache: flash attention shares the key/value heads itself.
        with prefill_attention_backends():
            return F.scaled_dot_product_attention(query, keys, values, is_causal=True, scale=scaling, enable_gqa=True)
    return grouped_query_attention(query, keys, values, mask, scaling)


def read_whole(entries: CachedEntries) -> torch.Tensor:
    """A layer's cached keys or values as one tensor (1, kv_heads, length, d): ``entries`` itself,
    or a scaled cache's read back whole."""
    return entries.read() if isinstance(entries, ScaledEntries) else entries


def grouped_query_attention(
    query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor | None, scaling: float | None
) -> torch.Tensor:
    """Attention of ``query`` (batch, heads, n, d) over ``keys``/``values`` (batch, kv_heads,
    length, d) under the additive ``mask`` (broadcastable to (batch, 1, n, length)); returns
    (batch, heads, n, d). Graph-safe.

    The query heads that share a key/value head attend as that head's ``group * n`` queries, so the
    keys and values are never copied per query head: the mask-taking kernels (memory-efficient,
    math) do not share heads themselves, and over a long context those copies are the largest thing
    a follow-up prefill holds. A mask of several query rows is repeated for the group instead
    (``group * n * length`` elements, against ``2 * heads * length * d`` for the copies). cuDNN's
    kernels are left out (:func:`prefill_attention_backends`): for a decode step's one query they
    took 79 us a layer on an H100 (docs/benchmarks.md, the Qwen3.5-9B step)."""
    batch, heads, count, head_dim = query.shape
    kv_heads = keys.shape[1]
    group = heads // kv_heads
    grouped = query.reshape(batch, kv_heads, group * count, head_dim)
    if mask is not None and count > 1:
        length = mask.shape[-1]
        mask = mask.expand(batch, group, count, length).reshape(batch, 1, group * count, length)
    with prefill_attention_backends():
        output = F.scaled_dot_product_attention(grouped, keys, values, attn_mask=mask, scale=scaling)
    return output.reshape(batch, heads, count, head_dim)


def prefill_attention_backends():
    """SDPA's kernels without cuDNN's, for a prefill and for a decode step: cuDNN builds an
    execution plan for every new key length, and every follow-up attends over a new one, so with
    cuDNN each follow-up's prefill took about twice as long (docs/benchmarks.md, "A follow-up's
    prefill"); and one query is not what its kernels are built for."""
    return sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH])


def register_decoder_attention() -> None:
    """Make :data:`DECODER_ATTENTION` known to transformers (idempotent)."""
    AttentionInterface.register(DECODER_ATTENTION, decoder_attention_forward)


@contextmanager
def decoder_attention(config: Any) -> Iterator[None]:
    """Run the layers configured by ``config`` with :func:`decoder_attention_forward` inside the block."""
    register_decoder_attention()
    saved = config._attn_implementation
    config._attn_implementation = DECODER_ATTENTION
    try:
        yield
    finally:
        config._attn_implementation = saved


def causal_mask(view_length: int, positions: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """(1, 1, n, view_length) additive mask of the queries at cache ``positions`` (n,): each sees the
    positions up to and including its own (0), none after (the dtype's lowest value). Built on the
    device from ``positions``, so a captured graph re-reads them at every replay."""
    columns = torch.arange(view_length, device=positions.device)
    visible = columns[None, :] <= positions[:, None]
    mask = torch.where(visible, 0.0, torch.finfo(dtype).min).to(dtype)
    return mask.view(1, 1, positions.shape[0], view_length)


def prefill_mask(start: int, count: int) -> CausalBias | None:
    """The causal mask of ``count`` queries after ``start`` cached positions (query ``i`` sees the
    keys up to ``start + i``), or ``None`` (sdpa's own causal path, as transformers takes) when
    nothing is cached.

    Not a tensor but torch's lower-right causal bias: flash attention applies it in its kernel and
    shares the key/value heads itself, so a chunk late in a long prefill neither builds a
    (count, start + count) mask nor copies the keys and values to every query head, transients that
    grow with every chunk. Where flash attention cannot run (the CPU, float32) the mask is built."""
    return None if start == 0 else causal_lower_right(count, start + count)


def causal_chunk_attention(
    query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, bias: CausalBias, scaling: float | None
) -> torch.Tensor:
    """Attention of ``query`` (1, heads, n, d) over ``keys``/``values`` (1, kv_heads, length, d)
    under a :func:`prefill_mask` ``bias``; returns (1, heads, n, d).

    Where flash attention cannot run on a CUDA device (float32 activations, a head too wide), the
    mask is built for the memory-efficient kernel (:func:`grouped_query_attention`): torch's own way
    out for the bias there is the math kernel, whose scores over a long context take gigabytes."""
    with prefill_attention_backends():
        if query.device.type == "cuda" and not can_use_flash_attention(
            SDPAParams(query, keys, values, None, 0.0, False, True)
        ):
            length = keys.shape[2]
            positions = torch.arange(length - query.shape[2], length, device=query.device)
            return grouped_query_attention(query, keys, values, causal_mask(length, positions, query.dtype), scaling)
        return F.scaled_dot_product_attention(query, keys, values, attn_mask=bias, scale=scaling, enable_gqa=True)


def read_segments(length: int, count: int, segment: int, causal: bool) -> list[tuple[int, int]]:
    """The (begin, end) ranges of ``length`` cached positions that ``count`` queries attend over a
    segment at a time: ``segment`` positions each from position 0 on, the last range the rest. A
    causal pass's queries are the last ``count`` positions, and its last range holds them whole,
    with the cached positions from the last multiple of ``segment`` before them (so at most
    ``segment + count - 1`` positions); under a mask every range holds at most ``segment``.

    >>> read_segments(100, 10, 32, causal=True)
    [(0, 32), (32, 64), (64, 100)]
    >>> read_segments(100, 10, 32, causal=False)
    [(0, 32), (32, 64), (64, 96), (96, 100)]
    """
    held_whole = count if causal else 1
    last = (length - held_whole) // segment * segment
    return [(begin, begin + segment) for begin in range(0, last, segment)] + [(last, length)]


def segmented_attention(
    query: torch.Tensor, keys: ScaledEntries, values: ScaledEntries, mask: torch.Tensor | None, scaling: float | None
) -> torch.Tensor:
    """:func:`attend` over a scaled cache's entries one segment of positions at a time
    (:func:`read_segments`): each segment's keys and values read back on their own, the queries'
    attention over it computed with its log-sum-exp, and the segments merged exactly,
    ``out = sum_i exp(lse_i - lse) out_i`` with ``lse`` the log-sum-exp over all of them (in float32,
    as each segment comes). ``query`` (1, heads, n, d); ``mask`` additive, broadcastable to
    (1, 1, n, length), or None for a causal chunk: the queries are the last n positions, query
    ``i`` sees the positions up to ``length - n + i``. Returns (1, heads, n, d) in ``query``'s dtype.

    The segments are fixed by the lengths alone, so a captured graph replays the same ones. The
    last segment (a chunk's own keys, the largest) is read first, so that the others fit in the
    memory it leaves."""
    causal = mask is None
    merged: torch.Tensor | None = None
    merged_lse: torch.Tensor | None = None
    for begin, end in reversed(read_segments(keys.length, query.shape[2], keys.segment, causal)):
        segment_mask = None if mask is None else mask[..., begin:end]
        out, lse = partial_attention(
            query, keys.read(begin, end), values.read(begin, end), segment_mask, causal and end == keys.length, scaling
        )
        if merged is None or merged_lse is None:
            merged, merged_lse = out.float(), lse
            continue
        total = torch.logaddexp(merged_lse, lse)
        merged.mul_(torch.exp(merged_lse - total).unsqueeze(-1))
        merged.addcmul_(out, torch.exp(lse - total).unsqueeze(-1))
        merged_lse = total
    assert merged is not None
    return merged.to(query.dtype)


def partial_attention(
    query: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor | None,
    causal: bool,
    scaling: float | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention of ``query`` (1, heads, n, d) over one segment's ``keys``/``values``
    (1, kv_heads, m, d) under the additive ``mask`` (broadcastable to (1, 1, n, m)), or, without
    one, every key visible, or with ``causal`` aligned to the lower right (query ``i`` sees keys up
    to ``m - n + i``). Returns the output (1, heads, n, d) in ``query``'s dtype and each row's
    log-sum-exp of its scaled, masked scores (1, heads, n) float32.

    On CUDA through flash attention where it runs (no mask; it shares the key/value heads itself
    and aligns causal to the lower right), else the memory-efficient kernel with the query heads
    grouped by key/value head as :func:`grouped_query_attention` groups them; on the CPU through
    its flash kernel, which shares the heads and takes the mask."""
    on_cuda = query.device.type == "cuda"
    if on_cuda and mask is None and query.shape[-1] % FLASH_HEAD_ALIGNMENT == 0 and can_use_flash_attention(
        SDPAParams(query, keys, values, None, 0.0, False, True)
    ):
        # is_causal is flash attention's own rule here: aligned to the lower right
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention(query, keys, values, 0.0, causal, scale=scaling)[:2]
        return out, lse.reshape(query.shape[:3])
    if causal:
        width, count = keys.shape[2], query.shape[2]
        mask = causal_mask(width, torch.arange(width - count, width, device=query.device), query.dtype)
    kernel = _grouped_efficient_attention if on_cuda else _cpu_flash_attention
    out, lse = kernel(query, keys, values, mask, scaling)
    if causal or mask is None:  # every query sees a key: a causal segment holds each query's own
        return out, lse
    # A query may see no key of this segment (a decode step's bucket past its position). CUDA's
    # memory-efficient kernel returns a log-sum-exp of 0 for such a row, which would weigh its
    # output (0) into the merge; its log-sum-exp is set far below any real one instead.
    return out, lse.masked_fill(~sees_a_key(mask), NO_KEY_LOG_SUM_EXP)


def sees_a_key(mask: torch.Tensor) -> torch.Tensor:
    """Which queries of an additive ``mask`` (1, 1, n, m) see at least one key: (1, 1, n) bool. A
    key under the dtype's lowest value (or -inf) is not seen: the kernels' softmax overflows it to -inf."""
    return mask.amax(dim=-1) > torch.finfo(mask.dtype).min


def _cpu_flash_attention(
    query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor | None, scaling: float | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`partial_attention` through the CPU's flash kernel, which shares the key/value heads
    and takes the mask. Returns the output (1, heads, n, d) and the log-sum-exp (1, heads, n)."""
    out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
        query, keys, values, 0.0, False, attn_mask=mask, scale=scaling
    )
    return out, lse


def _grouped_efficient_attention(
    query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor | None, scaling: float | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`partial_attention` through CUDA's memory-efficient kernel: the query heads that share
    a key/value head attend as its ``group * n`` queries, the mask repeated for the group into rows
    the kernel can read. Returns the output (1, heads, n, d) and the log-sum-exp (1, heads, n)."""
    batch, heads, count, head_dim = query.shape
    kv_heads, width = keys.shape[1], keys.shape[2]
    group = heads // kv_heads
    rows = group * count
    grouped = query.reshape(batch, kv_heads, rows, head_dim)
    bias = None
    if mask is not None:
        padded = -(-width // MASK_ROW_ALIGNMENT) * MASK_ROW_ALIGNMENT
        bias = torch.empty(batch, 1, rows, padded, dtype=query.dtype, device=query.device)[..., :width]
        bias.view(batch, group, count, width).copy_(mask.expand(batch, group, count, width))
        bias = bias.expand(batch, kv_heads, rows, width)
    out, lse = torch.ops.aten._scaled_dot_product_efficient_attention(grouped, keys, values, bias, True, scale=scaling)[:2]
    # the log-sum-exp comes in rows padded to the kernel's block
    return out.reshape(batch, heads, count, head_dim), lse[..., :rows].reshape(batch, heads, count)
