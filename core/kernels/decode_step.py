"""Triton kernels for one decode step of a dense decoder layer (RMSNorm, per-head q and k norms,
rotary embedding, SiLU-gated MLP, no biases: the layer of Qwen3's text models), six launches a layer.

A decode step reads every weight once and does almost no arithmetic, so its time is the weights'
bytes plus one launch per kernel. These kernels keep the launches few by doing the elementwise
work inside the matrix-vector products that need it:

- :func:`rms_norm_linear` normalises the hidden state (RMSNorm) while it multiplies it into a
  weight: the input norm with q/k/v, the post-attention norm with gate/up, the final norm with
  the output head;
- :func:`linear_residual` multiplies and adds the residual (o and down), and for the down
  projection forms ``silu(gate) * up`` from the gate/up product as it reads it;
- :func:`attend_step` applies the per-head q and k norms and the rotary embedding (angles
  computed in the kernel from the position in device memory), writes k and v into the cache and
  attends the token's query heads over the cache up to that position (flash-decoding: the keys
  split across programs, each norming and rotating its own query heads, then one combining
  pass), so a step never reads more of the cache than the conversation has filled. A scaled
  cache (e4m3 entries, one float32 scale per token and head) is read and written here too: the
  step's key and value quantized as the cache's quantizer does it, the entries multiplied by their
  scales in registers as they are loaded;
- :func:`attend_cached` is the same attention (the same split and combining kernels) for a model
  that norms and rotates its q and k itself and has written the step's key and value into the
  cache (Qwen3.5, whose rotary embedding covers part of each head): the query heads attend over
  the cache up to the step's position, a scaled cache's entries and scales read as above.

Rounding follows the model's own layers (transformers' Qwen3 text layers): every value the
model rounds to its dtype (the normed hidden state before the norm weight, the product with the
norm weight, the rotated q and k, ``silu(gate)``, each projection's output, each residual sum) is
rounded here too; sums run in float32. A float32 norm weight is a zero-centred norm's scale
(Qwen3.5's): the normed state times it is rounded once, as that model rounds it. This module needs
Triton and a CUDA device (the tests also run its attention on the CPU through Triton's interpreter,
``TRITON_INTERPRET=1``); the decoder's dense layers run the same arithmetic in torch ops where it
cannot run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice

from framewise.core.kernels.dependent_launch import launch_options, wait_for_previous
from framewise.core.kernels.e4m3 import E4M3_MAX, INVERSE_E4M3_MAX, MIN_SCALE
from framewise.core.kernels.gemv_loads import (
    load_chunk,
    load_inverse_rms,
    load_rows,
    load_silu_mul_chunk,
    normed_chunk,
)

# e4m3's largest finite value and the smallest scale, as the cache's quantizer uses them.
E4M3_LARGEST = tl.constexpr(E4M3_MAX)
INVERSE_E4M3_LARGEST = tl.constexpr(INVERSE_E4M3_MAX)
SMALLEST_SCALE = tl.constexpr(MIN_SCALE)
# Keys one program of the attention kernel handles per loop turn.
ATTENTION_BLOCK = 64
# Programs the attention kernel aims for, per multiprocessor: enough to keep the memory busy.
ATTENTION_PROGRAMS_PER_SM = 2
# Warps of a program of the attention kernels.
ATTENTION_WARPS = 4


def _gemv_config(rows: int, columns: int) -> tuple[int, int, int]:
    """(BLOCK_N, BLOCK_K, num_warps) for a (rows, columns) weight: at least ~4 programs per
    multiprocessor of a large GPU, each streaming 16-byte loads along the rows."""
    block_k = 512 if columns % 512 == 0 else triton.next_power_of_2(min(columns, 512))
    block_n = 4 if rows <= 8192 else 8
    return block_n, block_k, 4


@triton.jit
def _rms_norm_linear_kernel(
    x_ptr, norm_ptr, w_ptr, out_ptr, N, eps,
    K: tl.constexpr, FLOAT_SCALE: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    EVEN_K: tl.constexpr, EVEN_N: tl.constexpr, PDL: tl.constexpr,
):
    wait_for_previous(PDL)
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    row_mask = rows < N
    columns = tl.arange(0, BLOCK_K)
    inverse_rms = load_inverse_rms(x_ptr, columns, eps, K, BLOCK_K, EVEN_K)
    acc = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)
    for start in range(0, K, BLOCK_K):
        x = load_chunk(x_ptr, start, columns, K, EVEN_K)
        normed = normed_chunk(x, norm_ptr, start, columns, inverse_rms, K, EVEN_K, FLOAT_SCALE)
        w = load_rows(w_ptr, rows, row_mask, start, columns, K, EVEN_K, EVEN_N)
        acc += w.to(tl.float32) * normed.to(tl.float32)[None, :]
    y = tl.sum(acc, axis=1).to(x_ptr.dtype.element_ty)
    tl.store(out_ptr + rows, y.to(out_ptr.dtype.element_ty), mask=row_mask)


def rms_norm_linear(
    x: torch.Tensor, norm_weight: torch.Tensor, weight: torch.Tensor, eps: float, out_dtype: torch.dtype | None = None
) -> torch.Tensor:
    """``linear(rms_norm(x) * norm_weight, weight)`` for one token.

    ``x`` (K,) and ``weight`` (N, K) in the model's dtype; ``norm_weight`` (K,) in the model's dtype
    (the normed ``x`` is rounded to it before the weight multiplies it, as Qwen3's norm does) or
    float32 (a zero-centred norm's scale, multiplied in before the one rounding, as Qwen3.5's does);
    returns (N,) in ``out_dtype`` (default the model's; the product is rounded to the model's dtype
    first).
    """
    rows, columns = weight.shape
    out = torch.empty(rows, dtype=out_dtype or x.dtype, device=x.device)
    block_n, block_k, warps = _gemv_config(rows, columns)
    _rms_norm_linear_kernel[(triton.cdiv(rows, block_n),)](
        x, norm_weight, weight, out, rows, eps,
        K=columns, FLOAT_SCALE=norm_weight.dtype == torch.float32, BLOCK_N=block_n, BLOCK_K=block_k,
        EVEN_K=columns % block_k == 0, EVEN_N=rows % block_n == 0,
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
def _norm_rope_heads(
    head_ptr, rows, row_mask, norm_ptr, cos, sin, eps, HEAD_DIM: tl.constexpr,
):
    """Heads ``rows`` (BLOCK,) of a (heads, HEAD_DIM) row-major block at ``head_ptr``, RMS-normed
    with the weight at ``norm_ptr`` (HEAD_DIM,) and rotated by ``cos``/``sin`` (HEAD_DIM,) float32
    (the attention scaling included), rounded as the model's layers round; zeros where
    ``row_mask`` is off. Returns (BLOCK, HEAD_DIM) in the heads' dtype."""
    dims = tl.arange(0, HEAD_DIM)
    half: tl.constexpr = HEAD_DIM // 2
    rotated = (dims + half) % HEAD_DIM
    x = tl.load(head_ptr + rows[:, None] * HEAD_DIM + dims[None, :], mask=row_mask[:, None], other=0.0)
    x_rotated = tl.load(head_ptr + rows[:, None] * HEAD_DIM + rotated[None, :], mask=row_mask[:, None], other=0.0)
    g = tl.load(norm_ptr + dims)
    g_rotated = tl.load(norm_ptr + rotated)
    x32 = x.to(tl.float32)
    inverse_rms = tl.rsqrt(tl.sum(x32 * x32, axis=1) / HEAD_DIM + eps)
    normed = (x32 * inverse_rms[:, None]).to(x.dtype) * g[None, :]
    normed_rotated = (x_rotated.to(tl.float32) * inverse_rms[:, None]).to(x.dtype) * g_rotated[None, :]
    # rotate_half: the second half negated comes first
    normed_rotated = tl.where((dims < half)[None, :], -normed_rotated, normed_rotated)
    return normed * cos.to(x.dtype)[None, :] + normed_rotated * sin.to(x.dtype)[None, :]


@triton.jit
def _store_step_key_value(
    qkv_ptr, qk_norm_ptr, key_slot_ptr, value_slot_ptr, key_scale_slot_ptr, value_scale_slot_ptr,
    kv_head, group, dims, cos, sin, eps,
    HEADS: tl.constexpr, KV_HEADS: tl.constexpr, HEAD_DIM: tl.constexpr, SCALED: tl.constexpr,
):
    """Write the step's key (normed with row 1 of the q/k norms, rotated) and value of ``kv_head``
    at the slots given (with their scales for a ``SCALED`` cache, :func:`_store_row`), in row 0 of
    a block (the other rows masked), where the block's threads see them."""
    first = group < 1
    key = _norm_rope_heads(
        qkv_ptr + HEADS * HEAD_DIM, kv_head + group * 0, first, qk_norm_ptr + HEAD_DIM, cos, sin, eps, HEAD_DIM
    )
    value = tl.load(
        qkv_ptr + (HEADS + KV_HEADS + kv_head) * HEAD_DIM + group[:, None] * 0 + dims[None, :],
        mask=first[:, None], other=0.0,
    )
    _store_row(key_slot_ptr, key_scale_slot_ptr, key, group, dims, first, SCALED)
    _store_row(value_slot_ptr, value_scale_slot_ptr, value, group, dims, first, SCALED)
    tl.debug_barrier()  # the block's threads see each other's stores


@triton.jit
def _store_row(slot_ptr, scale_slot_ptr, rows, group, dims, first, SCALED: tl.constexpr):
    """Store the ``first`` row of ``rows`` (BLOCK_GROUP, HEAD_DIM) at ``slot_ptr``: as it is, or
    (``SCALED``) as the cache's quantizer stores it: divided by a float32 scale that maps its
    largest magnitude to e4m3's largest value (that magnitude times :data:`INVERSE_E4M3_MAX`),
    rounded to e4m3, the scale at ``scale_slot_ptr``."""
    if SCALED:
        rows32 = rows.to(tl.float32)
        scale = tl.maximum(tl.max(tl.abs(rows32), axis=1) * INVERSE_E4M3_LARGEST, SMALLEST_SCALE)
        rows = tl.clamp(tl.math.div_rn(rows32, scale[:, None]), -E4M3_LARGEST, E4M3_LARGEST)
        tl.store(scale_slot_ptr + group * 0, scale, mask=first)
    slot = group[:, None] * 0 + dims[None, :]
    tl.store(slot_ptr + slot, rows.to(slot_ptr.dtype.element_ty), mask=first[:, None])


@triton.jit
def _load_entries(cache_ptr, scale_ptr, offsets, scale_offsets, valid, like, SCALED: tl.constexpr):
    """Cached keys or values at ``offsets`` (BLOCK, HEAD_DIM), zeros where not ``valid`` (BLOCK,): as
    stored, or (``SCALED``) times their scales at ``scale_offsets`` (BLOCK,), the product in float32
    rounded to ``like``'s dtype."""
    entries = tl.load(cache_ptr + offsets, mask=valid[:, None], other=0.0)
    if SCALED:
        scales = tl.load(scale_ptr + scale_offsets, mask=valid, other=0.0)
        entries = (entries.to(tl.float32) * scales[:, None]).to(like.dtype)
    return entries


@triton.jit
def _attend_span(
    query, key_cache_ptr, value_cache_ptr, key_scale_ptr, value_scale_ptr, base, scale_base, start, end,
    scale_log2, dims,
    BLOCK_GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK: tl.constexpr, IEEE: tl.constexpr, SCALED: tl.constexpr,
):
    """``query`` (BLOCK_GROUP, HEAD_DIM) attending over cache positions ``start`` .. ``end`` - 1 of one
    key/value head, whose entries start at ``base`` and scales at ``scale_base``: the running
    maximum and sum of the scores (BLOCK_GROUP,) in base 2 and the unnormalised output
    (BLOCK_GROUP, HEAD_DIM), float32, for the combining pass."""
    keys = tl.arange(0, BLOCK)
    running_max = tl.full([BLOCK_GROUP], float("-inf"), dtype=tl.float32)
    running_sum = tl.zeros([BLOCK_GROUP], dtype=tl.float32)
    acc = tl.zeros([BLOCK_GROUP, HEAD_DIM], dtype=tl.float32)
    for block_start in range(start, end, BLOCK):
        positions = block_start + keys
        valid = positions < end
        offsets = base + positions[:, None] * HEAD_DIM + dims[None, :]
        key = _load_entries(key_cache_ptr, key_scale_ptr, offsets, scale_base + positions, valid, query, SCALED)
        if IEEE:
            scores = tl.dot(query, tl.trans(key), input_precision="ieee")
        else:
            scores = tl.dot(query, tl.trans(key))
        scores = tl.where(valid[None, :], scores * scale_log2, float("-inf"))
        new_max = tl.maximum(running_max, tl.max(scores, axis=1))
        correction = tl.exp2(running_max - new_max)
        weights = tl.exp2(scores - new_max[:, None])
        running_sum = running_sum * correction + tl.sum(weights, axis=1)
        value = _load_entries(value_cache_ptr, value_scale_ptr, offsets, scale_base + positions, valid, query, SCALED)
        if IEEE:
            acc = acc * correction[:, None] + tl.dot(weights, value, input_precision="ieee")
        else:
            acc = acc * correction[:, None] + tl.dot(weights.to(value.dtype), value)
        running_max = new_max
    return running_max, running_sum, acc


@triton.jit
def _attention_split_kernel(
    qkv_ptr, qk_norm_ptr, inv_freq_ptr, rope_position_ptr, cache_position_ptr,
    key_cache_ptr, value_cache_ptr, key_scale_ptr, value_scale_ptr, partial_max_ptr, partial_sum_ptr, partial_out_ptr,
    eps, attention_scaling, scale_log2, max_tokens, split_size, splits,
    HEADS: tl.constexpr, KV_HEADS: tl.constexpr, GROUP: tl.constexpr, BLOCK_GROUP: tl.constexpr,
    HEAD_DIM: tl.constexpr, BLOCK: tl.constexpr, IEEE: tl.constexpr, SCALED: tl.constexpr, PDL: tl.constexpr,
):
    wait_for_previous(PDL)
    kv_head = tl.program_id(0)
    split = tl.program_id(1)
    position = tl.load(cache_position_ptr)
    start = split * split_size
    end = tl.minimum(start + split_size, position + 1)
    group = tl.arange(0, BLOCK_GROUP)
    dims = tl.arange(0, HEAD_DIM)
    angle = tl.load(rope_position_ptr).to(tl.float32) * tl.load(inv_freq_ptr + dims % (HEAD_DIM // 2))
    # libdevice's cos and sin reduce large angles exactly, as torch's do (late positions)
    cos = libdevice.cos(angle) * attention_scaling
    sin = libdevice.sin(angle) * attention_scaling
    # Every program norms and rotates its key/value head's query heads (row 0 of the q/k norms);
    # rows past the group are zeros.
    query = _norm_rope_heads(qkv_ptr, kv_head * GROUP + group, group < GROUP, qk_norm_ptr, cos, sin, eps, HEAD_DIM)
    base = kv_head * max_tokens * HEAD_DIM
    scale_base = kv_head * max_tokens
    if split == position // split_size:
        # The program whose keys end at the step's position writes the step's key and value there
        # first, then reads them back with the rest.
        _store_step_key_value(
            qkv_ptr, qk_norm_ptr, key_cache_ptr + base + position * HEAD_DIM, value_cache_ptr + base + position * HEAD_DIM,
            key_scale_ptr + scale_base + position, value_scale_ptr + scale_base + position,
            kv_head, group, dims, cos, sin, eps, HEADS, KV_HEADS, HEAD_DIM, SCALED,
        )
    running_max, running_sum, acc = _attend_span(
        query, key_cache_ptr, value_cache_ptr, key_scale_ptr, value_scale_ptr, base, scale_base, start, end,
        scale_log2, dims, BLOCK_GROUP, HEAD_DIM, BLOCK, IEEE, SCALED,
    )
    _store_partials(
        partial_max_ptr, partial_sum_ptr, partial_out_ptr, running_max, running_sum, acc, kv_head, split, splits,
        group, dims, BLOCK_GROUP, HEAD_DIM,
    )


@triton.jit
def _cached_attention_split_kernel(
    query_ptr, cache_position_ptr, key_cache_ptr, value_cache_ptr, key_scale_ptr, value_scale_ptr,
    partial_max_ptr, partial_sum_ptr, partial_out_ptr, scale_log2, max_tokens, split_size, splits,
    GROUP: tl.constexpr, BLOCK_GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK: tl.constexpr,
    IEEE: tl.constexpr, SCALED: tl.constexpr, PDL: tl.constexpr,
):
    wait_for_previous(PDL)
    kv_head = tl.program_id(0)
    split = tl.program_id(1)
    position = tl.load(cache_position_ptr)
    start = split * split_size
    end = tl.minimum(start + split_size, position + 1)
    group = tl.arange(0, BLOCK_GROUP)
    dims = tl.arange(0, HEAD_DIM)
    # The query heads of this key/value head; rows past the group are zeros.
    rows = kv_head * GROUP + group
    query = tl.load(query_ptr + rows[:, None] * HEAD_DIM + dims[None, :], mask=(group < GROUP)[:, None], other=0.0)
    running_max, running_sum, acc = _attend_span(
        query, key_cache_ptr, value_cache_ptr, key_scale_ptr, value_scale_ptr, kv_head * max_tokens * HEAD_DIM,
        kv_head * max_tokens, start, end, scale_log2, dims, BLOCK_GROUP, HEAD_DIM, BLOCK, IEEE, SCALED,
    )
    _store_partials(
        partial_max_ptr, partial_sum_ptr, partial_out_ptr, running_max, running_sum, acc, kv_head, split, splits,
        group, dims, BLOCK_GROUP, HEAD_DIM,
    )


@triton.jit
def _store_partials(
    partial_max_ptr, partial_sum_ptr, partial_out_ptr, running_max, running_sum, acc, kv_head, split, splits, group,
    dims, BLOCK_GROUP: tl.constexpr, HEAD_DIM: tl.constexpr,
):
    """One split's :func:`_attend_span` results for the query heads of ``kv_head`` at their slots of
    the partial buffers (kv_heads * splits * BLOCK_GROUP rows), where the combining pass reads them."""
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


@dataclass(frozen=True)
class _Splits:
    """How one token's attention is split (flash-decoding): ``kv_heads`` x ``count`` programs, each
    attending the ``group`` query heads of its key/value head (in ``block_group`` rows, at least the
    16 that ``tl.dot`` needs) over ``size`` positions, then one combining program a query head."""

    kv_heads: int
    group: int
    block_group: int
    size: int
    count: int

    @classmethod
    def of(cls, heads: int, kv_heads: int, view_length: int, device: torch.device) -> _Splits:
        """The splits of ``heads`` query heads over ``kv_heads`` attending over up to ``view_length``
        positions on ``device``: enough programs to keep its memory busy, whole key blocks each."""
        group = heads // kv_heads
        programs = ATTENTION_PROGRAMS_PER_SM * _multiprocessors(device)
        size = ATTENTION_BLOCK * max(1, math.ceil(view_length / (ATTENTION_BLOCK * max(1, programs // kv_heads))))
        return cls(kv_heads, group, max(16, triton.next_power_of_2(group)), size, math.ceil(view_length / size))

    def partials(self, head_dim: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Empty float32 buffers of the splits' running maxima and sums (rows,) and unnormalised
        outputs (rows, head_dim), a row per key/value head, split and query row."""
        rows = self.kv_heads * self.count * self.block_group
        partial_max = torch.empty(rows, dtype=torch.float32, device=device)
        partial_out = torch.empty(rows, head_dim, dtype=torch.float32, device=device)
        return partial_max, torch.empty_like(partial_max), partial_out

    def combine(
        self, partials: tuple[torch.Tensor, ...], cache_position: torch.Tensor, dtype: torch.dtype
    ) -> torch.Tensor:
        """The splits' ``partials`` (:meth:`partials`, filled) over positions 0..``cache_position``
        combined: the attention of every query head, (heads * head_dim,) in ``dtype``."""
        partial_max, partial_sum, partial_out = partials
        heads, head_dim = self.kv_heads * self.group, partial_out.shape[1]
        out = torch.empty(heads * head_dim, dtype=dtype, device=partial_out.device)
        _attention_combine_kernel[(heads,)](
            partial_max, partial_sum, partial_out, cache_position, out, self.size, self.count,
            GROUP=self.group, BLOCK_GROUP=self.block_group, HEAD_DIM=head_dim, BLOCK_SPLITS=32, num_warps=2,
            **launch_options(out.device),
        )
        return out


def _multiprocessors(device: torch.device) -> int:
    """A CUDA device's multiprocessors; 1 elsewhere (Triton's interpreter runs programs one by one)."""
    return torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 1


def attend_step(
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
    view_length: int,
    scale: float,
    key_scales: torch.Tensor | None = None,
    value_scales: torch.Tensor | None = None,
) -> torch.Tensor:
    """One token's attention: its q and k heads normed and rotated, its k and v written into the
    cache at ``cache_position``, its query heads attending over positions 0..``cache_position``.

    ``qkv`` ((heads + 2 kv_heads) * head_dim,): q heads, k heads, v heads. ``qk_norm`` (2, head_dim):
    the q norm's weight, then the k norm's; ``inv_freq`` (head_dim/2,) float32; ``rope_position``
    and ``cache_position`` (1,) int64 on the device, read at run time; ``key_cache``/``value_cache``
    (1, kv_heads, max_tokens, head_dim), contiguous; ``view_length`` bounds the position (the
    step's context bucket) and sizes the launch. A scaled cache holds e4m3 entries with
    ``key_scales``/``value_scales`` (1, kv_heads, max_tokens) float32: the step's key and value are
    stored as the cache's quantizer stores them, and entries are read multiplied by their scales
    (needs compute capability 8.9). Returns (heads * head_dim,).
    """
    _, kv_heads, max_tokens, head_dim = key_cache.shape
    splits = _Splits.of(heads, kv_heads, view_length, qkv.device)
    partials = splits.partials(head_dim, qkv.device)
    scaled = key_scales is not None and value_scales is not None
    _attention_split_kernel[(kv_heads, splits.count)](
        qkv, qk_norm, inv_freq, rope_position, cache_position, key_cache, value_cache,
        key_scales if scaled else key_cache, value_scales if scaled else value_cache,  # not read unscaled
        *partials, eps, attention_scaling, scale * math.log2(math.e), max_tokens, splits.size, splits.count,
        HEADS=heads, KV_HEADS=kv_heads, GROUP=splits.group, BLOCK_GROUP=splits.block_group, HEAD_DIM=head_dim,
        BLOCK=ATTENTION_BLOCK, IEEE=qkv.dtype == torch.float32, SCALED=scaled, num_warps=ATTENTION_WARPS,
        **launch_options(qkv.device),
    )
    return splits.combine(partials, cache_position, qkv.dtype)


def attend_cached(
    query: torch.Tensor,
    cache_position: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    view_length: int,
    scale: float,
    key_scales: torch.Tensor | None = None,
    value_scales: torch.Tensor | None = None,
) -> torch.Tensor:
    """One token's query heads attending over positions 0..``cache_position`` of a cache that holds
    the token's own key and value already (a model that norms and rotates q and k itself).

    ``query`` (heads, head_dim), contiguous, normed, rotated; ``cache_position`` (1,) int64 on the
    device, read at run time; ``key_cache``/``value_cache`` (1, kv_heads, max_tokens, head_dim),
    contiguous; ``view_length`` bounds the position (the step's context bucket) and sizes the launch.
    A scaled cache holds e4m3 entries with ``key_scales``/``value_scales`` (1, kv_heads, max_tokens)
    float32, read multiplied by their scales in registers (needs compute capability 8.9). Returns
    (heads * head_dim,) in ``query``'s dtype.
    """
    heads, head_dim = query.shape
    _, kv_heads, max_tokens, _ = key_cache.shape
    splits = _Splits.of(heads, kv_heads, view_length, query.device)
    partials = splits.partials(head_dim, query.device)
    scaled = key_scales is not None and value_scales is not None
    _cached_attention_split_kernel[(kv_heads, splits.count)](
        query, cache_position, key_cache, value_cache,
        key_scales if scaled else key_cache, value_scales if scaled else value_cache,  # not read unscaled
        *partials, scale * math.log2(math.e), max_tokens, splits.size, splits.count,
        GROUP=splits.group, BLOCK_GROUP=splits.block_group, HEAD_DIM=head_dim, BLOCK=cached_attention_block(head_dim),
        IEEE=query.dtype == torch.float32, SCALED=scaled, num_warps=ATTENTION_WARPS, **launch_options(query.device),
    )
    return splits.combine(partials, cache_position, query.dtype)


def cached_attention_block(head_dim: int) -> int:
    """Keys a split program of :func:`attend_cached` reads a loop turn over heads of ``head_dim``:
    :data:`ATTENTION_BLOCK` up to 128, fewer of wider heads (Qwen3.5's 256), so that a turn's tiles
    take the bytes they take at 128. Triton's software pipeline keeps three turns in shared memory:
    64 keys and values of 256 in bf16 took 141 KB, one program a multiprocessor of an H100; 32 take
    75 KB."""
    return max(16, ATTENTION_BLOCK * 128 // max(head_dim, 128))
