"""Triton kernels for one decode step of a dense Qwen3 decoder layer, seven launches a layer.

A decode step reads every weight once and does almost no arithmetic, so its time is the weights'
bytes plus one launch per kernel. These kernels keep the launches few by doing the elementwise
work inside the matrix-vector products that need it:

- :func:`rms_norm_linear` normalises the hidden state (RMSNorm) while it multiplies it into a
  weight: the input norm with q/k/v, the post-attention norm with gate/up, the final norm with
  the output head;
- :func:`linear_residual` multiplies and adds the residual (o and down), and for the down
  projection forms ``silu(gate) * up`` from the gate/up product as it reads it;
- :func:`qk_norm_rope_cache` applies the per-head q and k norms and the rotary embedding (angles
  computed in the kernel from the position in device memory) and writes k and v into the cache;
- :func:`decode_attention` attends one token's query heads over the cache up to the position in
  device memory (flash-decoding: the keys split across programs, then one combining pass), so a
  step never reads more of the cache than the conversation has filled.

Rounding follows the model's own layers (transformers' Qwen3-VL text model): every value the
model rounds to its dtype (the normed hidden state before the norm weight, the product with the
norm weight, the rotated q and k, ``silu(gate)``, each projection's output, each residual sum) is
rounded here too; sums run in float32. This module needs Triton and a CUDA device; the decoder
runs the same arithmetic in torch ops elsewhere (:mod:`framewise.core.families.qwen3_vl.language`).
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice

from framewise.core.decoding.dependent_launch import launch_options, wait_for_previous
from framewise.core.decoding.gemv_loads import load_chunk, load_rows, load_silu_mul_chunk

# Keys one program of the attention kernel handles per loop turn.
ATTENTION_BLOCK = 64
# Programs the attention kernel aims for, per multiprocessor: enough to keep the memory busy.
ATTENTION_PROGRAMS_PER_SM = 2


def _gemv_config(rows: int, columns: int) -> tuple[int, int, int]:
    """(BLOCK_N, BLOCK_K, num_warps) for a (rows, columns) weight: at least ~4 programs per
    multiprocessor of a large GPU, each streaming 16-byte loads along the rows."""
    block_k = 512 if columns % 512 == 0 else triton.next_power_of_2(min(columns, 512))
    block_n = 4 if rows <= 8192 else 8
    return block_n, block_k, 4


@triton.jit
def _rms_norm_linear_kernel(
    x_ptr, norm_ptr, w_ptr, out_ptr, N, eps,
    K: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr, EVEN_N: tl.constexpr,
    PDL: tl.constexpr,
):
    wait_for_previous(PDL)
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    row_mask = rows < N
    columns = tl.arange(0, BLOCK_K)
    squares = tl.zeros([BLOCK_K], dtype=tl.float32)
    for start in range(0, K, BLOCK_K):
        x = load_chunk(x_ptr, start, columns, K, EVEN_K).to(tl.float32)
        squares += x * x
    inverse_rms = tl.rsqrt(tl.sum(squares, axis=0) / K + eps)
    acc = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)
    for start in range(0, K, BLOCK_K):
        x = load_chunk(x_ptr, start, columns, K, EVEN_K)
        g = load_chunk(norm_ptr, start, columns, K, EVEN_K)
        normed = (x.to(tl.float32) * inverse_rms).to(x.dtype) * g
        w = load_rows(w_ptr, rows, row_mask, start, columns, K, EVEN_K, EVEN_N)
        acc += w.to(tl.float32) * normed.to(tl.float32)[None, :]
    y = tl.sum(acc, axis=1).to(x_ptr.dtype.element_ty)
    tl.store(out_ptr + rows, y.to(out_ptr.dtype.element_ty), mask=row_mask)


def rms_norm_linear(
    x: torch.Tensor, norm_weight: torch.Tensor, weight: torch.Tensor, eps: float, out_dtype: torch.dtype | None = None
) -> torch.Tensor:
    """``linear(rms_norm(x) * norm_weight, weight)`` for one token.

    ``x`` (K,), ``norm_weight`` (K,), ``weight`` (N, K), all in the model's dtype; returns (N,) in
    ``out_dtype`` (default the model's; the product is rounded to the model's dtype first).
    """
    rows, columns = weight.shape
    out = torch.empty(rows, dtype=out_dtype or x.dtype, device=x.device)
    block_n, block_k, warps = _gemv_config(rows, columns)
    _rms_norm_linear_kernel[(triton.cdiv(rows, block_n),)](
        x, norm_weight, weight, out, rows, eps,
        K=columns, BLOCK_N=block_n, BLOCK_K=block_k, EVEN_K=columns % block_k == 0, EVEN_N=rows % block_n == 0,
        num_warps=warps, **launch_options(x.device),
    )
    return out


@triton.jit
def _linear_residual_kernel(
    x_ptr, w_ptr, residual_ptr, out_ptr, N,
    K: tl.constexpr, SILU_MUL: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr,
    EVEN_N: tl.constexpr, PDL: tl.constexpr,
):
    wait_for_previous(PDL)
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    row_mask = rows < N
    columns = tl.arange(0, BLOCK_K)
    acc = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)
    for start in range(0, K, BLOCK_K):
        if SILU_MUL:
            x = load_silu_mul_chunk(x_ptr, start, columns, K, EVEN_K)
        else:
            x = load_chunk(x_ptr, start, columns, K, EVEN_K)
        w = load_rows(w_ptr, rows, row_mask, start, columns, K, EVEN_K, EVEN_N)
        acc += w.to(tl.float32) * x.to(tl.float32)[None, :]
    residual = tl.load(residual_ptr + rows, mask=row_mask, other=0.0)
    y = tl.sum(acc, axis=1).to(residual.dtype)
    tl.store(out_ptr + rows, residual + y, mask=row_mask)


def linear_residual(x: torch.Tensor, weight: torch.Tensor, residual: torch.Tensor, *, silu_mul: bool = False) -> torch.Tensor:
    """``residual + linear(x, weight)`` for one token; with ``silu_mul``, ``x`` is the gate/up product
    (2K,), gate first, and the input is ``silu(gate) * up``.

    ``weight`` (N, K), ``residual`` (N,); returns a new (N,) tensor.
    """
    rows, columns = weight.shape
    out = torch.empty_like(residual)
    block_n, block_k, warps = _gemv_config(rows, columns)
    _linear_residual_kernel[(triton.cdiv(rows, block_n),)](
        x, weight, residual, out, rows,
        K=columns, SILU_MUL=silu_mul, BLOCK_N=block_n, BLOCK_K=block_k, EVEN_K=columns % block_k == 0,
        EVEN_N=rows % block_n == 0, num_warps=warps, **launch_options(x.device),
    )
    return out


@triton.jit
def _qk_norm_rope_cache_kernel(
    qkv_ptr, qk_norm_ptr, inv_freq_ptr, rope_position_ptr, cache_position_ptr,
    query_ptr, key_cache_ptr, value_cache_ptr, eps, attention_scaling, max_tokens,
    HEADS: tl.constexpr, KV_HEADS: tl.constexpr, HEAD_DIM: tl.constexpr, PDL: tl.constexpr,
):
    wait_for_previous(PDL)
    head = tl.program_id(0)
    dims = tl.arange(0, HEAD_DIM)
    half: tl.constexpr = HEAD_DIM // 2
    rotated = (dims + half) % HEAD_DIM
    x = tl.load(qkv_ptr + head * HEAD_DIM + dims)
    x_rotated = tl.load(qkv_ptr + head * HEAD_DIM + rotated)
    is_query = head < HEADS
    norm_ptr = qk_norm_ptr + (head >= HEADS).to(tl.int32) * HEAD_DIM  # row 0: q's norm, row 1: k's
    g = tl.load(norm_ptr + dims)
    g_rotated = tl.load(norm_ptr + rotated)
    x32 = x.to(tl.float32)
    inverse_rms = tl.rsqrt(tl.sum(x32 * x32, axis=0) / HEAD_DIM + eps)
    normed = (x32 * inverse_rms).to(x.dtype) * g
    normed_rotated = (x_rotated.to(tl.float32) * inverse_rms).to(x.dtype) * g_rotated
    # rotate_half: the second half negated comes first
    normed_rotated = tl.where(dims < half, -normed_rotated, normed_rotated)
    angle = tl.load(rope_position_ptr).to(tl.float32) * tl.load(inv_freq_ptr + dims % half)
    # libdevice's cos and sin reduce large angles exactly, as torch's do (late positions)
    cos = (libdevice.cos(angle) * attention_scaling).to(x.dtype)
    sin = (libdevice.sin(angle) * attention_scaling).to(x.dtype)
    out = normed * cos + normed_rotated * sin
    if is_query:
        tl.store(query_ptr + head * HEAD_DIM + dims, out)
    else:
        kv_head = head - HEADS
        position = tl.load(cache_position_ptr)
        slot = kv_head * max_tokens * HEAD_DIM + position * HEAD_DIM + dims
        tl.store(key_cache_ptr + slot, out)
        value = tl.load(qkv_ptr + (HEADS + KV_HEADS + kv_head) * HEAD_DIM + dims)
        tl.store(value_cache_ptr + slot, value)


def qk_norm_rope_cache(
    qkv: torch.Tensor,
    qk_norm: torch.Tensor,
    inv_freq: torch.Tensor,
    attention_scaling: float,
    rope_position: torch.Tensor,
    cache_position: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    heads: int,
    eps: float,
) -> torch.Tensor:
    """Norm and rotate one token's q and k heads, write k and v into the cache; return the query.

    ``qkv`` ((heads + 2 kv_heads) * head_dim,): q heads, k heads, v heads. ``qk_norm`` (2, head_dim):
    the q norm's weight, then the k norm's; ``inv_freq`` (head_dim/2,) float32; ``rope_position``/``cache_position`` (1,)
    int64 on the device; ``key_cache``/``value_cache`` (1, kv_heads, max_tokens, head_dim),
    contiguous. Returns the query (heads, head_dim).
    """
    _, kv_heads, max_tokens, head_dim = key_cache.shape
    query = torch.empty(heads, head_dim, dtype=qkv.dtype, device=qkv.device)
    _qk_norm_rope_cache_kernel[(heads + kv_heads,)](
        qkv, qk_norm, inv_freq, rope_position, cache_position, query, key_cache, value_cache,
        eps, attention_scaling, max_tokens, HEADS=heads, KV_HEADS=kv_heads, HEAD_DIM=head_dim,
        num_warps=1 if head_dim <= 64 else 2, **launch_options(qkv.device),
    )
    return query


@triton.jit
def _attention_split_kernel(
    query_ptr, key_cache_ptr, value_cache_ptr, cache_position_ptr, partial_max_ptr, partial_sum_ptr,
    partial_out_ptr, scale_log2, max_tokens, split_size, splits,
    GROUP: tl.constexpr, BLOCK_GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK: tl.constexpr,
    IEEE: tl.constexpr, PDL: tl.constexpr,
):
    wait_for_previous(PDL)
    kv_head = tl.program_id(0)
    split = tl.program_id(1)
    length = tl.load(cache_position_ptr) + 1
    start = split * split_size
    end = tl.minimum(start + split_size, length)
    group = tl.arange(0, BLOCK_GROUP)
    dims = tl.arange(0, HEAD_DIM)
    keys = tl.arange(0, BLOCK)
    query = tl.load(
        query_ptr + (kv_head * GROUP + group)[:, None] * HEAD_DIM + dims[None, :],
        mask=(group < GROUP)[:, None], other=0.0,
    )
    running_max = tl.full([BLOCK_GROUP], float("-inf"), dtype=tl.float32)
    running_sum = tl.zeros([BLOCK_GROUP], dtype=tl.float32)
    acc = tl.zeros([BLOCK_GROUP, HEAD_DIM], dtype=tl.float32)
    base = kv_head * max_tokens * HEAD_DIM
    for block_start in range(start, end, BLOCK):
        positions = block_start + keys
        valid = positions < end
        offsets = base + positions[:, None] * HEAD_DIM + dims[None, :]
        key = tl.load(key_cache_ptr + offsets, mask=valid[:, None], other=0.0)
        if IEEE:
            scores = tl.dot(query, tl.trans(key), input_precision="ieee")
        else:
            scores = tl.dot(query, tl.trans(key))
        scores = tl.where(valid[None, :], scores * scale_log2, float("-inf"))
        new_max = tl.maximum(running_max, tl.max(scores, axis=1))
        correction = tl.exp2(running_max - new_max)
        weights = tl.exp2(scores - new_max[:, None])
        running_sum = running_sum * correction + tl.sum(weights, axis=1)
        value = tl.load(value_cache_ptr + offsets, mask=valid[:, None], other=0.0)
        if IEEE:
            acc = acc * correction[:, None] + tl.dot(weights, value, input_precision="ieee")
        else:
            acc = acc * correction[:, None] + tl.dot(weights.to(value.dtype), value)
        running_max = new_max
    slot = (kv_head * splits + split) * BLOCK_GROUP + group
    tl.store(partial_max_ptr + slot, running_max)
    tl.store(partial_sum_ptr + slot, running_sum)
    tl.store(partial_out_ptr + slot[:, None] * HEAD_DIM + dims[None, :], acc)


@triton.jit
def _attention_combine_kernel(
    partial_max_ptr, partial_sum_ptr, partial_out_ptr, cache_position_ptr, out_ptr, split_size, splits,
    GROUP: tl.constexpr, BLOCK_GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_SPLITS: tl.constexpr,
    PDL: tl.constexpr,
):
    wait_for_previous(PDL)
    head = tl.program_id(0)
    kv_head = head // GROUP
    member = head % GROUP
    used = tl.cdiv(tl.load(cache_position_ptr) + 1, split_size)
    dims = tl.arange(0, HEAD_DIM)
    indices = tl.arange(0, BLOCK_SPLITS)
    maxima = tl.full([BLOCK_SPLITS], float("-inf"), dtype=tl.float32)
    for first in range(0, used, BLOCK_SPLITS):
        split = first + indices
        slot = (kv_head * splits + split) * BLOCK_GROUP + member
        maxima = tl.maximum(maxima, tl.load(partial_max_ptr + slot, mask=split < used, other=float("-inf")))
    overall_max = tl.max(maxima, axis=0)
    totals = tl.zeros([BLOCK_SPLITS], dtype=tl.float32)
    acc = tl.zeros([HEAD_DIM], dtype=tl.float32)
    for first in range(0, used, BLOCK_SPLITS):
        split = first + indices
        in_use = split < used
        slot = (kv_head * splits + split) * BLOCK_GROUP + member
        factor = tl.exp2(tl.load(partial_max_ptr + slot, mask=in_use, other=float("-inf")) - overall_max)
        totals += tl.load(partial_sum_ptr + slot, mask=in_use, other=0.0) * factor
        outs = tl.load(partial_out_ptr + slot[:, None] * HEAD_DIM + dims[None, :], mask=in_use[:, None], other=0.0)
        acc += tl.sum(outs * factor[:, None], axis=0)
    total = tl.sum(totals, axis=0)
    tl.store(out_ptr + head * HEAD_DIM + dims, (acc / total).to(out_ptr.dtype.element_ty))


def decode_attention(
    query: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    cache_position: torch.Tensor,
    view_length: int,
    scale: float,
) -> torch.Tensor:
    """One token's attention over the cache positions 0..``cache_position`` (inclusive).

    ``query`` (heads, head_dim); ``key_cache``/``value_cache`` (1, kv_heads, max_tokens, head_dim),
    contiguous; ``cache_position`` (1,) int64 on the device, read at run time; ``view_length``
    bounds it (the step's context bucket) and sizes the launch. Returns (heads * head_dim,).
    """
    heads, head_dim = query.shape
    _, kv_heads, max_tokens, _ = key_cache.shape
    group = heads // kv_heads
    block_group = max(16, triton.next_power_of_2(group))
    programs = ATTENTION_PROGRAMS_PER_SM * torch.cuda.get_device_properties(query.device).multi_processor_count
    split_size = ATTENTION_BLOCK * max(1, math.ceil(view_length / (ATTENTION_BLOCK * max(1, programs // kv_heads))))
    splits = math.ceil(view_length / split_size)
    partial_max = torch.empty(kv_heads * splits * block_group, dtype=torch.float32, device=query.device)
    partial_sum = torch.empty_like(partial_max)
    partial_out = torch.empty(kv_heads * splits * block_group, head_dim, dtype=torch.float32, device=query.device)
    _attention_split_kernel[(kv_heads, splits)](
        query, key_cache, value_cache, cache_position, partial_max, partial_sum, partial_out,
        scale * math.log2(math.e), max_tokens, split_size, splits,
        GROUP=group, BLOCK_GROUP=block_group, HEAD_DIM=head_dim, BLOCK=ATTENTION_BLOCK,
        IEEE=query.dtype == torch.float32, num_warps=4, **launch_options(query.device),
    )
    out = torch.empty(heads * head_dim, dtype=query.dtype, device=query.device)
    _attention_combine_kernel[(heads,)](
        partial_max, partial_sum, partial_out, cache_position, out, split_size, splits,
        GROUP=group, BLOCK_GROUP=block_group, HEAD_DIM=head_dim, BLOCK_SPLITS=32, num_warps=2,
        **launch_options(query.device),
    )
    return out
