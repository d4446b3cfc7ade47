"""A gated RMS norm in one Triton launch: each row of ``x`` RMS-normed, times the norm's weight,
times ``silu(gate)`` (the norm that closes a Gated DeltaNet layer's token mixing, Qwen3.5's
``Qwen3_5RMSNormGated``), where torch ops take about seven launches and float32 copies of both
inputs; for a decode step's few rows and a prefill's many.

The arithmetic is torch's, operation for operation: each row's squares summed in the order of
torch's CUDA norm (:mod:`.scaled_rms_norm`), the normed row rounded to the activations' dtype, its
product with the weight rounded again, then multiplied by ``silu(gate) = gate / (1 + exp(-gate))``
(libdevice's ``expf``, a rounded division: torch's SiLU kernel) in float32 and rounded once more.
This module needs Triton and a CUDA device (or ``TRITON_INTERPRET=1`` on CPU tensors).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice

from framewise.core.kernels.dependent_launch import launch_options, wait_for_previous
from framewise.core.kernels.scaled_rms_norm import launch_shape, row_sums_of_squares, tokens_by_heads


# Not specialized on the row count: one compiled kernel for every pass's length.
@triton.jit(do_not_specialize=["row_count"])
def _gated_rms_norm_kernel(
    x_ptr, gate_ptr, weight_ptr, out_ptr, gate_token_stride, gate_head_stride, row_count, eps,
    DIM: tl.constexpr, BLOCK: tl.constexpr, HEADS: tl.constexpr, ROWS: tl.constexpr, PDL: tl.constexpr,
):
    wait_for_previous(PDL)
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    squares = row_sums_of_squares(x_ptr, x_ptr, rows * DIM, rows, row_count, DIM, ROWS, False)
    inverse_rms = tl.rsqrt(tl.math.div_rn(squares, tl.full((ROWS,), DIM, tl.float32)) + eps)
    columns = tl.arange(0, BLOCK)[None, :]
    mask = (rows < row_count)[:, None] & (columns < DIM)
    offsets = rows[:, None] * DIM + columns
    gate_starts = rows // HEADS * gate_token_stride + rows % HEADS * gate_head_stride
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0)
    gate = tl.load(gate_ptr + gate_starts[:, None] + columns, mask=mask, other=0.0).to(tl.float32)
    weight = tl.load(weight_ptr + columns, mask=columns < DIM, other=0.0)
    normed = (inverse_rms[:, None] * x.to(tl.float32)).to(x.dtype)
    scaled = (weight.to(tl.float32) * normed.to(tl.float32)).to(x.dtype)
    silu = tl.math.div_rn(gate, 1.0 + libdevice.exp(-gate))
    out = scaled.to(tl.float32) * silu
    tl.store(out_ptr + offsets, out.to(out_ptr.dtype.element_ty), mask=mask)


def gated_rms_norm(x: torch.Tensor, gate: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """``rms_norm(x) * weight * silu(gate)`` row by row (the last dim), rounded as the module
    docstring says.

    ``x`` and ``gate`` (..., dim) of one shape, in the activations' dtype; ``gate`` read where it
    lies (a view of heads out of a wider product), ``x`` made contiguous where it is not;
    ``weight`` (dim,) in that dtype. Returns a new contiguous tensor of ``x``'s shape and dtype.
    """
    x = x.contiguous()
    out = torch.empty_like(x)
    gates = tokens_by_heads(gate)
    tokens, heads, dim = gates.shape
    rows = tokens * heads
    if rows == 0:
        return out
    block = triton.next_power_of_2(dim)
    rows_per_program, warps = launch_shape(rows, block)
    _gated_rms_norm_kernel[(triton.cdiv(rows, rows_per_program),)](
        x, gates, weight, out, gates.stride(0), gates.stride(1), rows, eps,
        DIM=dim, BLOCK=block, HEADS=heads, ROWS=rows_per_program, num_warps=warps, **launch_options(x.device),
    )
    return out
