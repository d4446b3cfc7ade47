"""One Triton kernel that quantizes activations to e4m3 per token, for the prefill's FP8
tensor-core products.

It computes what :func:`~framewise.core.quantization.fp8.quantize_per_channel` computes (each
row's largest magnitude mapped to 448, the row divided by its scale, rounded to e4m3), in one
pass over the row with no float32 copy of the activations: the torch version runs about eight
kernels through (M, K) float32 temporaries before every product, which cost more than the FP8
product saves. This module needs Triton and a CUDA device.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from framewise.core.quantization.fp8 import MIN_SCALE, E4M3, E4M3_MAX


@triton.jit
def _quantize_rows_kernel(
    x_ptr, out_ptr, scale_ptr, largest_code, smallest_scale, K: tl.constexpr, BLOCK_K: tl.constexpr
):
    row = tl.program_id(0).to(tl.int64)
    columns = tl.arange(0, BLOCK_K)
    largest = tl.zeros([BLOCK_K], dtype=tl.float32)
    for start in range(0, K, BLOCK_K):
        x = tl.load(x_ptr + row * K + start + columns, mask=start + columns < K, other=0.0).to(tl.float32)
        largest = tl.maximum(largest, tl.abs(x))
    scale = tl.maximum(tl.math.div_rn(tl.max(largest, axis=0), largest_code), smallest_scale)
    for start in range(0, K, BLOCK_K):
        in_range = start + columns < K
        x = tl.load(x_ptr + row * K + start + columns, mask=in_range, other=0.0).to(tl.float32)
        scaled = tl.clamp(tl.math.div_rn(x, scale), -largest_code, largest_code)
        tl.store(out_ptr + row * K + start + columns, scaled.to(out_ptr.dtype.element_ty), mask=in_range)
    tl.store(scale_ptr + row, scale)


def quantize_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(M, K) activations (bf16, fp16 or fp32, on CUDA) -> their e4m3 values (M, K) and float32
    scales (M, 1), equal to ``quantize_per_channel(x)``'s."""
    x = x.contiguous()
    rows, columns = x.shape
    quantized = torch.empty(rows, columns, dtype=E4M3, device=x.device)
    scales = torch.empty(rows, 1, dtype=torch.float32, device=x.device)
    if rows:
        block = min(triton.next_power_of_2(columns), 2048)
        _quantize_rows_kernel[(rows,)](
            x, quantized, scales, E4M3_MAX, MIN_SCALE, K=columns, BLOCK_K=block,
            num_warps=4 if block <= 1024 else 8,
        )
    return quantized, scales
