"""The attention function the decoder runs the language model with.

Registered with transformers' ``AttentionInterface`` and switched on only around the decoder's
own forward passes (:func:`decoder_attention`), so ``generate()`` and every other caller keep
transformers' own. Queries under an additive mask (a decode step over its cache bucket, a
follow-up prefill graph) attend in one ``scaled_dot_product_attention`` call in which the query
heads that share a key/value head attend as that head's queries, so the keys and values are not
copied per query head (:func:`grouped_query_attention`). A prefill chunk after cached tokens
attends under :func:`prefill_mask`'s causal bias through flash attention, which shares the heads
itself; a prefill from an empty cache goes to transformers' ``sdpa``, causal.
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

DECODER_ATTENTION = "framewise_decoder"
# What the decoder's passes attend under: an additive mask tensor, a :func:`prefill_mask` bias, or
# None for causal from an empty cache.
AttentionMask = torch.Tensor | CausalBias | None


def decoder_attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: AttentionMask,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers' attention signature: ``query`` (1, heads, q, d), ``key``/``value``
    (1, kv_heads, k, d), ``attention_mask`` additive, broadcastable to (1, 1, q, k), a
    :func:`prefill_mask` bias, or ``None`` (causal). Returns ((1, q, heads, d), None)."""
    if isinstance(attention_mask, CausalBias):
        return causal_chunk_attention(query, key, value, attention_mask, scaling).transpose(1, 2), None
    if attention_mask is None:
        with prefill_attention_backends():
            return sdpa_attention_forward(
                module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
            )
    return grouped_query_attention(query, key, value, attention_mask, scaling).transpose(1, 2), None


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

