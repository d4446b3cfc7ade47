"""A gated RMS norm in one Triton launch, for a decode step: each row of ``x`` RMS-normed, times
the norm's weight, times ``silu(gate)`` (the norm that closes a Gated DeltaNet layer's token mixing,
Qwen3.5's ``Qwen3_5RMSNormGated``), where torch ops take about seven launches.

Rounding follows that module: the normed row is rounded to the activations' dtype, its product
with the weight rounded again, then multiplied by ``silu(gate)`` in float32 and rounded once more;
sums run in float32. This module needs Triton and a CUDA device.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from framewise.core.kernels.dependent_launch import launch_options, wait_for_previous


@triton.jit
def _gated_rms_norm_kernel(
    x_ptr, gate_ptr, weight_ptr, out_ptr, eps, DIM: tl.constexpr, BLOCK: tl.constexpr, PDL: tl.constexpr,
):
    wait_for_previous(PDL)
    row = tl.program_id(0)
    dims = tl.arange(0, BLOCK)
    inside = dims < DIM
    x = tl.load(x_ptr + row * DIM + dims, mask=inside, other=0.0)
    gate = tl.load(gate_ptr + row * DIM + dims, mask=inside, other=0.0).to(tl.float32)
    weight = tl.load(weight_ptr + dims, mask=inside, other=0.0)
    x32 = x.to(tl.float32)
    inverse_rms = tl.rsqrt(tl.sum(x32 * x32, axis=0) / DIM + eps)
    normed = (x32 * inverse_rms).to(x.dtype)
    scaled = (weight.to(tl.float32) * normed.to(tl.float32)).to(x.dtype)
    out = scaled.to(tl.float32) * (gate * tl.sigmoid(gate))
    tl.store(out_ptr + row * DIM + dims, out.to(out_ptr.dtype.element_ty), mask=inside)


def gated_rms_norm(x: torch.Tensor, gate: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """``rms_norm(x) * weight * silu(gate)`` row by row, rounded as the module docstring says.

    ``x`` and ``gate`` (rows, dim) contiguous, in the activations' dtype; ``weight`` (dim,) in that
    dtype. Returns a new (rows, dim) tensor in ``x``'s dtype.
    """
    rows, dim = x.shape
    out = torch.empty_like(x)
    _gated_rms_norm_kernel[(rows,)](
        x, gate, weight, out, eps, DIM=dim, BLOCK=triton.next_power_of_2(dim), num_warps=1 if dim <= 256 else 4,
        **launch_options(x.device),
    )
    return out
