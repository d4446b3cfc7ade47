"""One Triton kernel that quantizes activations to e4m3 per token, for the prefill's FP8
tensor-core products.

It computes what :func:`~framewise.core.quantization.fp8.quantize_per_channel` computes (each
row's largest magnitude mapped to 448, the row divided by its scale, rounded to e4m3), in one
pass over the row with no float32 copy of the activations: the torch version runs about eight
kernels through (M, K) float32 temporaries before every product, which cost more than the FP8
product saves. The kernel can also form the product's input from the layer's previous step, the
RMS norm before a projection or ``silu(gate) * up`` before the down projection, so that a prefill
launches one kernel where it ran two or three. This module needs Triton and a CUDA device.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from framewise.core.kernels.e4m3 import E4M3, E4M3_MAX, MIN_SCALE
from framewise.core.kernels.gemv_loads import load_chunk, load_inverse_rms, load_silu_mul_chunk


@triton.jit
def _row_chunk(row_ptr, norm_ptr, start, columns, inverse_rms, K: tl.constexpr, EVEN_K: tl.constexpr,
               NORM: tl.constexpr, SILU_MUL: tl.constexpr):
    """Elements ``start + columns`` of one row of the product's input as float32: the row itself,
    ``silu(gate) * up`` of a (2K,) row (``SILU_MUL``), or the row normed by ``inverse_rms`` and the
    norm weight (``NORM``), each rounded to the row's dtype as the torch ops round it."""
    if SILU_MUL:
        x = load_silu_mul_chunk(row_ptr, start, columns, K, EVEN_K)
    else:
        x = load_chunk(row_ptr, start, columns, K, EVEN_K)
    if NORM:
        g = load_chunk(norm_ptr, start, columns, K, EVEN_K).to(tl.float32)
        x = (x.to(tl.float32) * inverse_rms * g).to(x.dtype)
    return x.to(tl.float32)


@triton.jit
def _quantize_rows_kernel(
    x_ptr, norm_ptr, out_ptr, scale_ptr, largest_code, smallest_scale, eps,
    K: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr, NORM: tl.constexpr, SILU_MUL: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    row_ptr = x_ptr + row * (2 * K if SILU_MUL else K)
    columns = tl.arange(0, BLOCK_K)
    inverse_rms = 0.0
    if NORM:
        inverse_rms = load_inverse_rms(row_ptr, columns, eps, K, BLOCK_K, EVEN_K)
    largest = tl.zeros([BLOCK_K], dtype=tl.float32)
    for start in range(0, K, BLOCK_K):
        x = _row_chunk(row_ptr, norm_ptr, start, columns, inverse_rms, K, EVEN_K, NORM, SILU_MUL)
        largest = tl.maximum(largest, tl.abs(x))
    scale = tl.maximum(tl.math.div_rn(tl.max(largest, axis=0), largest_code), smallest_scale)
    for start in range(0, K, BLOCK_K):
        x = _row_chunk(row_ptr, norm_ptr, start, columns, inverse_rms, K, EVEN_K, NORM, SILU_MUL)
        scaled = tl.clamp(tl.math.div_rn(x, scale), -largest_code, largest_code).to(out_ptr.dtype.element_ty)
        if EVEN_K:
            tl.store(out_ptr + row * K + start + columns, scaled)
        else:
            tl.store(out_ptr + row * K + start + columns, scaled, mask=start + columns < K)
    tl.store(scale_ptr + row, scale)


def quantize_rows(
    x: torch.Tensor, norm: tuple[torch.Tensor, float] | None = None, silu_mul: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """(M, K) activations (bf16, fp16 or fp32, on CUDA) -> their e4m3 values (M, K) and float32
    scales (M, 1), equal to ``quantize_per_channel(x)``'s. With ``norm``, a (K,) weight and an
    epsilon, of ``rms_norm(x)`` instead; with ``silu_mul``, of ``silu(gate) * up`` for a (M, 2K)
    ``x`` with the gate first: the torch ops :func:`~framewise.core.quantization.matmul.product_input`
    runs, folded into the one kernel."""
    x = x.contiguous()
    rows, width = x.shape
    columns = width // 2 if silu_mul else width
    quantized = torch.empty(rows, columns, dtype=E4M3, device=x.device)
    scales = torch.empty(rows, 1, dtype=torch.float32, device=x.device)
    norm_weight, eps = norm if norm is not None else (x, 0.0)  # the pointer is not read without NORM
    if rows:
        block = min(triton.next_power_of_2(columns), 2048)
        _quantize_rows_kernel[(rows,)](
            x, norm_weight, quantized, scales, E4M3_MAX, MIN_SCALE, eps, K=columns, BLOCK_K=block,
            EVEN_K=columns % block == 0, NORM=norm is not None, SILU_MUL=silu_mul,
            num_warps=4 if block <= 1024 else 8,
        )
    return quantized, scales
