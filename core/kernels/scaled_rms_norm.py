"""An RMS norm times a float32 scale in one Triton launch, summed as torch sums it: each row of
``x`` normed in float32, times the scale, rounded once to ``x``'s dtype; optionally a residual add
before it, whose rounded sum is what is normed. Written out in torch (``F.rms_norm(x.float(), ...)``
then a cast back: Qwen3.5's zero-centred norm, its scale 1 + weight) that is a float32 copy, the
norm and a cast: three launches and two float32 round trips through memory.

The arithmetic is that of torch's vectorized CUDA norm kernel (``vectorized_layer_norm_kernel``
with ``rms_norm`` in ``aten/src/ATen/native/cuda/layer_norm_kernel.cu``), which ``F.rms_norm``
runs on rows whose width is a multiple of 4 in 16-byte aligned tensors (as the float32 copy of a
half-precision ``x`` always is): a row's squares are summed by 128 threads (4 warps of 32), each
over its own groups of 4 consecutive columns (group ``t``, ``t + 128``, ...) one fused
multiply-add at a time, then the threads' sums pairwise: lane ``l`` plus lane ``l + offset`` for
offsets 16 to 1 within each warp, then warp ``w`` plus warp ``w + offset`` for offsets 2 and 1.
The mean of the squares is a rounded division, ``rsqrt(mean + eps)`` the hardware's approximate
root, and each column ``scale * (inverse_rms * x)``. The same operations in the same order give
the same bits, however many warps run them here; rows torch norms in its other kernel (widths
that are no multiple of 4) are normed as well, not to its bit.

Needs Triton and a CUDA device (or ``TRITON_INTERPRET=1`` on float32 or float16 CPU tensors).
"""

from __future__ import annotations

from typing import Sequence

import torch
import triton
import triton.language as tl

# torch's vectorized norm kernel: 4 warps of 32 threads a row, each reading 4 columns at a time.
THREADS = tl.constexpr(128)
VECTOR = tl.constexpr(4)
# Columns a program of a long pass holds at once: several narrow rows (the per-head norms) share one.
TILE = 2048
# Elements from which a launch is a pass's (many programs of several rows each), not a step's.
PASS_ELEMENTS = 1 << 16


@triton.jit
def _fold_halves(sums, LEAD: tl.constexpr, HALF: tl.constexpr):
    """(LEAD, 2 * HALF) sums -> (LEAD, HALF): column ``i`` plus column ``i + HALF``, one addition each."""
    return tl.sum(tl.reshape(sums, (LEAD, 2, HALF)), axis=1)


@triton.jit
def row_sums_of_squares(
    x_ptr, delta_ptr, starts, rows, row_count, WIDTH: tl.constexpr, ROWS: tl.constexpr, ADD: tl.constexpr,
):
    """The sums of squares (ROWS,) float32 of rows ``rows`` (ROWS,) of ``x``, which start at
    ``starts`` (ROWS,), in torch's order (module docstring); with ``ADD``, of ``x + delta`` rounded
    to ``x``'s dtype (``delta``'s rows contiguous)."""
    threads = tl.arange(0, THREADS)
    inside_rows = (rows < row_count)[:, None]
    partial = tl.zeros((ROWS, THREADS), tl.float32)
    for group in tl.static_range(0, WIDTH, THREADS * VECTOR):
        for lane_column in tl.static_range(VECTOR):
            columns = (group + threads * VECTOR + lane_column)[None, :]
            mask = inside_rows & (columns < WIDTH)
            value = tl.load(x_ptr + starts[:, None] + columns, mask=mask, other=0.0)
            if ADD:
                delta = tl.load(delta_ptr + rows[:, None] * WIDTH + columns, mask=mask, other=0.0)
                value = (value.to(tl.float32) + delta.to(tl.float32)).to(x_ptr.dtype.element_ty)
            value = value.to(tl.float32)
            partial = tl.fma(value, value, partial)
    sums = tl.reshape(partial, (ROWS * 4, 32))  # (row and warp, lane)
    sums = _fold_halves(sums, ROWS * 4, 16)
    sums = _fold_halves(sums, ROWS * 4, 8)
    sums = _fold_halves(sums, ROWS * 4, 4)
    sums = _fold_halves(sums, ROWS * 4, 2)
    sums = _fold_halves(sums, ROWS * 4, 1)
    sums = _fold_halves(tl.reshape(sums, (ROWS, 4)), ROWS, 2)  # (row, warp)
    sums = _fold_halves(sums, ROWS, 1)
    return tl.reshape(sums, (ROWS,))


# Not specialized on the row count: one compiled kernel for every pass's length.
@triton.jit(do_not_specialize=["row_count"])
def _scaled_rms_norm_kernel(
    x_ptr, delta_ptr, total_ptr, scale_ptr, out_ptr, token_stride, head_stride, row_count, eps,
    WIDTH: tl.constexpr, BLOCK: tl.constexpr, HEADS: tl.constexpr, ROWS: tl.constexpr, ADD: tl.constexpr,
):
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    starts = rows // HEADS * token_stride + rows % HEADS * head_stride
    squares = row_sums_of_squares(x_ptr, delta_ptr, starts, rows, row_count, WIDTH, ROWS, ADD)
    inverse_rms = tl.rsqrt(tl.math.div_rn(squares, tl.full((ROWS,), WIDTH, tl.float32)) + eps)
    columns = tl.arange(0, BLOCK)[None, :]
    mask = (rows < row_count)[:, None] & (columns < WIDTH)
    x = tl.load(x_ptr + starts[:, None] + columns, mask=mask, other=0.0)
    if ADD:
        delta = tl.load(delta_ptr + rows[:, None] * WIDTH + columns, mask=mask, other=0.0)
        x = (x.to(tl.float32) + delta.to(tl.float32)).to(x_ptr.dtype.element_ty)
        tl.store(total_ptr + rows[:, None] * WIDTH + columns, x, mask=mask)
    scale = tl.load(scale_ptr + columns, mask=columns < WIDTH, other=0.0)
    out = scale * (inverse_rms[:, None] * x.to(tl.float32))
    tl.store(out_ptr + rows[:, None] * WIDTH + columns, out.to(out_ptr.dtype.element_ty), mask=mask)


def scaled_rms_norm(x: torch.Tensor, scale: torch.Tensor, eps: float) -> torch.Tensor:
    """``F.rms_norm(x.float(), scale.shape, scale, eps).type_as(x)`` in one launch, summed as the
    module docstring says.

    ``x`` (..., width) in any float dtype, its rows (the last dim) contiguous, any layout above (a
    view of heads out of a wider product is read where it lies); ``scale`` (width,) float32
    contiguous. Returns a new contiguous tensor of ``x``'s shape and dtype.
    """
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    _launch(tokens_by_heads(x), None, None, scale, out, eps)
    return out


def add_scaled_rms_norm(
    hidden: torch.Tensor, delta: torch.Tensor, scale: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """``total = hidden + delta`` (rounded to their dtype, as torch's add rounds it) and
    :func:`scaled_rms_norm` of ``total``, in one launch.

    ``hidden``/``delta`` (..., width) of one shape and dtype; ``scale`` (width,) float32. Returns total
    and normed, new contiguous tensors of that shape and dtype."""
    total = torch.empty(hidden.shape, dtype=hidden.dtype, device=hidden.device)
    out = torch.empty_like(total)
    _launch(hidden.contiguous().view(-1, 1, hidden.shape[-1]), delta.contiguous(), total, scale, out, eps)
    return total, out


def tokens_by_heads(x: torch.Tensor) -> torch.Tensor:
    """``x`` (..., width) as (tokens, heads, width) with contiguous rows, without a copy where it
    can: (rows, 1, width) where its rows lie a fixed stride apart; (tokens, heads, width) where
    its tokens do (heads: the second-last dim, as a view of heads out of a wider product lays
    them); else a contiguous copy's (rows, 1, width)."""
    sizes, strides = x.shape, x.stride()
    if strides[-1] == 1:
        if _evenly_spaced(sizes[:-1], strides[:-1]):
            return x.reshape(-1, 1, sizes[-1])
        if _evenly_spaced(sizes[:-2], strides[:-2]):
            return x.reshape(-1, *sizes[-2:])
    return x.contiguous().view(-1, 1, sizes[-1])


def _evenly_spaced(sizes: Sequence[int], strides: Sequence[int]) -> bool:
    """Whether the elements indexed by dims of ``sizes`` and ``strides`` lie a fixed stride apart
    in order (dims of size 1 aside), so that the dims merge into one."""
    spacing = None
    for size, stride in reversed(list(zip(sizes, strides))):
        if size == 1:
            continue
        if spacing is not None and stride != spacing:
            return False
        spacing = stride * size
    return True


def _launch(
    x: torch.Tensor, delta: torch.Tensor | None, total: torch.Tensor | None, scale: torch.Tensor,
    out: torch.Tensor, eps: float,
) -> None:
    """One program for every ``ROWS`` rows of ``x`` (tokens, heads, width), writing ``out`` (and
    ``total``, with ``delta``) row by row, contiguous."""
    tokens, heads, width = x.shape
    row_count = tokens * heads
    if row_count == 0:
        return
    block = triton.next_power_of_2(width)
    rows, warps = launch_shape(row_count, block)
    add = delta is not None
    _scaled_rms_norm_kernel[(triton.cdiv(row_count, rows),)](
        x, delta if add else x, total if add else out, scale, out, x.stride(0), x.stride(1), row_count, eps,
        WIDTH=width, BLOCK=block, HEADS=heads, ROWS=rows, ADD=add, num_warps=warps,
    )


def launch_shape(row_count: int, block: int) -> tuple[int, int]:
    """Rows a program norms and its warps, for ``row_count`` rows of ``block`` columns (a power of
    two): a pass's many rows several to a program of 4 warps, a step's few one to a program, of
    one warp where the row is narrow."""
    if row_count * block >= PASS_ELEMENTS:
        return max(1, TILE // block), 4
    return 1, 1 if block <= 256 else 4
