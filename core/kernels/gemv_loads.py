"""Loads shared by the Triton matrix-vector kernels of a decode step (the model families' bf16
step kernels and the FP8 ones, and the prefill's activation kernel): a chunk of the input vector
(or, for the down projection, of ``silu(gate) * up`` formed from a gate/up product), its inverse
RMS and the normed chunk, and a block of weight rows, masked only where the block can reach past the matrix. This module needs Triton."""

import triton
import triton.language as tl


@triton.jit
def load_chunk(ptr, start, columns, K: tl.constexpr, EVEN_K: tl.constexpr):
    """Elements ``start + columns`` of a (K,) vector; zeros past its end."""
    if EVEN_K:
        chunk = tl.load(ptr + start + columns)
    else:
        chunk = tl.load(ptr + start + columns, mask=start + columns < K, other=0.0)
    return chunk


@triton.jit
def load_inverse_rms(ptr, columns, eps, K: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr):
    """``1 / sqrt(mean(x ** 2) + eps)`` of a (K,) vector ``x``, read ``BLOCK_K`` elements (``columns``)
    at a time, in float32."""
    squares = tl.zeros([BLOCK_K], dtype=tl.float32)
    for start in range(0, K, BLOCK_K):
        x = load_chunk(ptr, start, columns, K, EVEN_K).to(tl.float32)
        squares += x * x
    return tl.rsqrt(tl.sum(squares, axis=0) / K + eps)


@triton.jit
def normed_chunk(x, norm_ptr, start, columns, inverse_rms, K: tl.constexpr, EVEN_K: tl.constexpr,
                 FLOAT_SCALE: tl.constexpr):
    """The chunk ``x`` (BLOCK_K,) of the input at ``start + columns``, RMS-normed by ``inverse_rms``
    and multiplied by the norm weight there, in ``x``'s dtype: rounded once before the weight
    multiplies it (Qwen3's RMSNorm), or with ``FLOAT_SCALE`` a float32 scale multiplied in first and
    the product rounded once (Qwen3.5's zero-centred norm, its scale 1 + weight)."""
    g = load_chunk(norm_ptr, start, columns, K, EVEN_K)
    if FLOAT_SCALE:
        normed = (x.to(tl.float32) * inverse_rms * g).to(x.dtype)
    else:
        normed = (x.to(tl.float32) * inverse_rms).to(x.dtype) * g
    return normed


@triton.jit
def load_silu_mul_chunk(x_ptr, start, columns, K: tl.constexpr, EVEN_K: tl.constexpr):
    """Elements ``start + columns`` of ``silu(gate) * up`` for a (2K,) gate/up product ``x`` (gate
    first), rounded as the model rounds ``silu(gate)`` to its dtype; zeros past the end."""
    gate = load_chunk(x_ptr, start, columns, K, EVEN_K)
    up = load_chunk(x_ptr + K, start, columns, K, EVEN_K)
    gate32 = gate.to(tl.float32)
    return (gate32 * tl.sigmoid(gate32)).to(gate.dtype) * up


@triton.jit
def load_rows(w_ptr, rows, row_mask, start, columns, K: tl.constexpr, EVEN_K: tl.constexpr, EVEN_N: tl.constexpr):
    """Block (rows, start + columns) of a row-major (N, K) matrix; zeros outside it. The masks are
    left out where the block lies inside the matrix (``EVEN_K``, ``EVEN_N``)."""
    offsets = rows[:, None] * K + (start + columns)[None, :]
    if EVEN_K and EVEN_N:
        block = tl.load(w_ptr + offsets)
    elif EVEN_K:
        block = tl.load(w_ptr + offsets, mask=row_mask[:, None], other=0.0)
    else:
        block = tl.load(w_ptr + offsets, mask=row_mask[:, None] & (start + columns < K)[None, :], other=0.0)
    return block
