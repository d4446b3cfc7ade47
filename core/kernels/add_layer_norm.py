"""The residual add and the layer norm after it, in one Triton kernel.

Every vision block adds a product to its residual stream and normalises the sum: once after
attention, once (completing the previous block) before the next attention. Written out, that is
an add kernel and a layer-norm kernel, or one inductor kernel whose launch shape it chooses
without knowing the row count (dynamic shapes), which took more than twice as long as this one;
this one comes close to the time its memory traffic needs (docs/benchmarks.md). It reads each row's two inputs once
and writes the sum and its norm, one program per row. Needs Triton and a CUDA device (or
``TRITON_INTERPRET=1``).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _add_layer_norm_kernel(
    hidden_ptr, delta_ptr, weight_ptr, bias_ptr, total_ptr, normed_ptr, width, eps, BLOCK: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    columns = tl.arange(0, BLOCK)
    mask = columns < width
    offsets = row * width + columns
    hidden = tl.load(hidden_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    delta = tl.load(delta_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    # Rounded to the stream's dtype before the norm reads it, as the tower's own add does.
    total = (hidden + delta).to(total_ptr.dtype.element_ty)
    tl.store(total_ptr + offsets, total, mask=mask)
    x = total.to(tl.float32)
    mean = tl.sum(x, axis=0) / width
    centred = tl.where(mask, x - mean, 0.0)
    rstd = tl.rsqrt(tl.sum(centred * centred, axis=0) / width + eps)
    weight = tl.load(weight_ptr + columns, mask=mask, other=0.0).to(tl.float32)
    bias = tl.load(bias_ptr + columns, mask=mask, other=0.0).to(tl.float32)
    tl.store(normed_ptr + offsets, (centred * rstd * weight + bias).to(normed_ptr.dtype.element_ty), mask=mask)


def add_layer_norm(
    hidden: torch.Tensor, delta: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """``total = hidden + delta`` and ``layer_norm(total)`` over the last dim.

    ``hidden``/``delta`` (rows, width) of one dtype; ``weight``/``bias`` (width,). Returns total and
    normed, each (rows, width) contiguous in hidden's dtype; sums and statistics in float32.
    """
    hidden, delta = hidden.contiguous(), delta.contiguous()
    rows, width = hidden.shape
    total = torch.empty_like(hidden)
    normed = torch.empty_like(hidden)
    block = triton.next_power_of_2(width)
    if rows:
        _add_layer_norm_kernel[(rows,)](
            hidden, delta, weight, bias, total, normed, width, eps,
            BLOCK=block, num_warps=_warps(block),
        )
    return total, normed


def _warps(block: int) -> int:
    """Warps for one row of ``block`` columns: 16 columns a thread, the fastest of 2, 4 and 8 warps
    measured at 1152 columns (docs/benchmarks.md)."""
    return min(max(block // 512, 1), 8)


def register_op() -> None:
    """Register :func:`add_layer_norm` as ``torch.ops.framewise.add_layer_norm`` (idempotent): an
    operator ``torch.compile`` calls as it is rather than tracing into."""
    if hasattr(torch.ops.framewise, "add_layer_norm"):
        return

    @torch.library.custom_op("framewise::add_layer_norm", mutates_args=())
    def add_layer_norm_op(
        hidden: torch.Tensor, delta: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return add_layer_norm(hidden, delta, weight, bias, eps)

    @add_layer_norm_op.register_fake
    def _(hidden, delta, weight, bias, eps):
        rows, width = hidden.shape
        return hidden.new_empty(rows, width), hidden.new_empty(rows, width)
