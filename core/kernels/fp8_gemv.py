"""Triton matrix-vector products with FP8 weights, for one decode step (one token).

The same fused products as the bf16 step kernels of the model family, with the weight read as
e4m3 (half the bytes, which is the decode step's time) and dequantized in registers:

- :func:`fp8_rms_norm_linear`: ``linear(rms_norm(x) * norm_weight, W)``;
- :func:`fp8_rms_norm_silu_gate_up`: ``silu(gate) * up`` from ``linear(rms_norm(x) * norm_weight, W)``
  with a stacked gate/up ``W``, so the down projection reads its input ready;
- :func:`fp8_linear_residual`: ``residual + linear(x, W)``;
- :func:`fp8_gemv`: ``linear(x, W)``.

``W`` is an e4m3 (N, K) weight and ``scale`` its float32 scales: (N, 1) per output row, applied
once to each row's sum; or (ceil(N/128), ceil(K/128)) per 128x128 block (a program's rows lie in
one block row, or its gate rows in one and its up rows in another, so each column has one scale
per row). The two shapes coincide only for a one-row weight of at most 128 columns, where both
readings give the same product.

Each weight is converted to float32 in registers and multiplied in. The large products come
close to their read floor and the small ones stay well above it: each launch has a cost of its
own that does not shrink with the weight (docs/benchmarks.md has the measurements, and those of a
float16 variant and of a tensor-core kernel, both slower and removed).

Rounding follows the bf16 kernels: the values the model rounds to its dtype (normed input, the
product with the norm weight, ``silu(gate)``, the projection, the residual sum) are rounded
here too; sums run in float32. Cards of compute capability 8.9 and newer convert e4m3 in
hardware; older ones (Ampere) decode its bits with integer operations (``native_fp8=False``, or
for every call that does not choose, ``FRAMEWISE_FP8_NATIVE=0`` in the environment, so that a
test can run the Ampere path on a newer card). This module needs Triton and a CUDA device.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from framewise.core.kernels.dependent_launch import launch_options, wait_for_previous
from framewise.core.kernels.e4m3 import BLOCK_SIZE
from framewise.core.kernels.gemv_loads import load_chunk, load_inverse_rms, load_rows, normed_chunk


# (rows, columns) -> (BLOCK_N, BLOCK_K, num_warps) where benchmarks/gemv_sweep.py found a launch
# shape better than the rule below, swept on an H100 (docs/benchmarks.md).
SWEPT_FP8_GEMV_CONFIGS: dict[tuple[int, int], tuple[int, int, int]] = {
    (4096, 2048): (4, 2048, 8),  # 2B q/k/v
    (2048, 2048): (4, 512, 4),  # 2B o
    (12288, 2048): (4, 2048, 4),  # 2B gate/up
    (2048, 6144): (2, 2048, 4),  # 2B down
    (6144, 4096): (8, 512, 4),  # 8B q/k/v
    (4096, 12288): (2, 2048, 4),  # 8B down
}


def _fp8_gemv_config(rows: int, columns: int) -> tuple[int, int, int]:
    """(BLOCK_N, BLOCK_K, num_warps) of the CUDA-core kernel for a (rows, columns) e4m3 weight: the
    swept shape where there is one; otherwise four rows a program (a divisor of 128, so a program's
    rows share one row of block scales), 1024 columns a load, 2048 from 8192 columns on, the best
    shapes at the 8B text shapes on an H100 (docs/benchmarks.md)."""
    if (rows, columns) in SWEPT_FP8_GEMV_CONFIGS:
        return SWEPT_FP8_GEMV_CONFIGS[(rows, columns)]
    block_k = 2048 if columns >= 8192 else 1024
    block_k = block_k if columns % block_k == 0 else triton.next_power_of_2(min(columns, block_k))
    return 4, block_k, 4


@triton.jit
def _e4m3_bits_to_float(bits):
    """e4m3fn bytes (uint8) to float32 with integer and full-rate float operations, for cards
    without FP8 hardware (no float16 step, whose conversion to float32 runs at a quarter of the
    multiply rate). Sign, exponent and mantissa move into float32's fields, the exponent rebased
    from bias 7 to 127 by an integer add. A subnormal (exponent 0, mantissa m) comes out of that
    as 2**-7 * (1 + m/8), so twice its distance from 2**-7 is its value, 2**-9 * m, exactly.
    Quantizers never store the one NaN code."""
    wide = bits.to(tl.uint32)
    normal = (((wide & 0x80) << 24) | (((wide & 0x7F) << 20) + (120 << 23))).to(tl.float32, bitcast=True)
    subnormal = 2.0 * (normal - tl.where(wide >= 0x80, -0.0078125, 0.0078125))
    return tl.where((wide & 0x78) == 0, subnormal, normal)


@triton.jit
def _input_chunk(
    x_ptr, norm_ptr, start, columns, inverse_rms, K: tl.constexpr, EVEN_K: tl.constexpr, NORM: tl.constexpr,
    FLOAT_SCALE: tl.constexpr,
):
    """Elements ``start + columns`` of the product's input in the model's dtype: ``x``, or ``x``
    normed by ``inverse_rms`` and scaled by the norm weight (``NORM``), rounded as the model rounds
    them (:func:`~framewise.core.kernels.gemv_loads.normed_chunk`)."""
    x = load_chunk(x_ptr, start, columns, K, EVEN_K)
    if NORM:
        x = normed_chunk(x, norm_ptr, start, columns, inverse_rms, K, EVEN_K, FLOAT_SCALE)
    return x


@triton.jit
def _block_scaled(x32, scale_ptr, block_row, start, columns, K: tl.constexpr, SCALE_COLUMNS: tl.constexpr,
                  SCALE_BLOCK: tl.constexpr):
    """``x32`` (BLOCK_K,) times the scales that block row ``block_row`` gives its columns."""
    column_scale = tl.load(scale_ptr + block_row * SCALE_COLUMNS + (start + columns) // SCALE_BLOCK,
                           mask=start + columns < K, other=0.0)
    return x32 * column_scale


@triton.jit
def _silu_gate_times_up(y, lanes, OUTPUTS: tl.constexpr):
    """``silu(gate) * up`` (OUTPUTS,) from a program's rounded products ``y`` (2 * OUTPUTS,), its
    gate rows' first; ``silu(gate)`` and the product rounded to ``y``'s dtype as the model rounds
    them."""
    outputs = tl.arange(0, OUTPUTS)
    y32 = y.to(tl.float32)[None, :]
    gate = tl.sum(tl.where(lanes[None, :] == outputs[:, None], y32, 0.0), axis=1)
    up = tl.sum(tl.where(lanes[None, :] == outputs[:, None] + OUTPUTS, y32, 0.0), axis=1)
    return (gate * tl.sigmoid(gate)).to(y.dtype) * up.to(y.dtype)


@triton.jit
def _fp8_gemv_kernel(
    x_ptr, norm_ptr, w_ptr, scale_ptr, residual_ptr, out_ptr, N, eps,
    K: tl.constexpr, SCALE_COLUMNS: tl.constexpr, BLOCK_SCALES: tl.constexpr, NORM: tl.constexpr,
    FLOAT_SCALE: tl.constexpr, GATE_UP: tl.constexpr, RESIDUAL: tl.constexpr, NATIVE_FP8: tl.constexpr,
    BLOCK_N: tl.constexpr, OUTPUTS: tl.constexpr, BLOCK_K: tl.constexpr, SCALE_BLOCK: tl.constexpr,
    EVEN_K: tl.constexpr, EVEN_N: tl.constexpr, PDL: tl.constexpr,
):
    # A program reads BLOCK_N weight rows for OUTPUTS of the N outputs: as many rows, or with
    # GATE_UP half as many outputs, each output o from gate row o and up row N + o of a (2N, K) weight.
    wait_for_previous(PDL)
    first = tl.program_id(0) * OUTPUTS
    lanes = tl.arange(0, BLOCK_N)
    if GATE_UP:
        up_lane = lanes >= OUTPUTS
        rows = first + lanes % OUTPUTS + tl.where(up_lane, N, 0)
        row_mask = first + lanes % OUTPUTS < N
    else:
        rows = first + lanes
        row_mask = rows < N
    columns = tl.arange(0, BLOCK_K)
    inverse_rms = 0.0
    if NORM:
        inverse_rms = load_inverse_rms(x_ptr, columns, eps, K, BLOCK_K, EVEN_K)
    acc = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)
    for start in range(0, K, BLOCK_K):
        x32 = _input_chunk(x_ptr, norm_ptr, start, columns, inverse_rms, K, EVEN_K, NORM, FLOAT_SCALE)
        x32 = x32.to(tl.float32)
        if BLOCK_SCALES:
            scaled = _block_scaled(x32, scale_ptr, first // SCALE_BLOCK, start, columns, K, SCALE_COLUMNS, SCALE_BLOCK)
            if GATE_UP:
                up_scaled = _block_scaled(x32, scale_ptr, (first + N) // SCALE_BLOCK, start, columns, K,
                                          SCALE_COLUMNS, SCALE_BLOCK)
                inputs = tl.where(up_lane[:, None], up_scaled[None, :], scaled[None, :])
            else:
                inputs = scaled[None, :]
        else:
            inputs = x32[None, :]
        w = load_rows(w_ptr, rows, row_mask, start, columns, K, EVEN_K, EVEN_N)
        if NATIVE_FP8:
            w = w.to(tl.float32)
        else:
            w = _e4m3_bits_to_float(w)
        acc += w * inputs
    y = tl.sum(acc, axis=1)
    if not BLOCK_SCALES:
        y = y * tl.load(scale_ptr + rows, mask=row_mask, other=0.0)
    y = y.to(x_ptr.dtype.element_ty)
    outputs = first + tl.arange(0, OUTPUTS)
    if GATE_UP:
        y = _silu_gate_times_up(y, lanes, OUTPUTS)
    if RESIDUAL:
        residual = tl.load(residual_ptr + outputs, mask=outputs < N, other=0.0)
        y = residual + y
    tl.store(out_ptr + outputs, y.to(out_ptr.dtype.element_ty), mask=outputs < N)


def _launch(
    x: torch.Tensor,
    weight: torch.Tensor,
    scale: torch.Tensor,
    out: torch.Tensor,
    *,
    norm_weight: torch.Tensor | None = None,
    eps: float = 0.0,
    residual: torch.Tensor | None = None,
    gate_up: bool = False,
    native_fp8: bool | None,
    config: tuple[int, int, int] | None = None,
) -> torch.Tensor:
    """Run the kernel on one token. ``config`` (BLOCK_N, BLOCK_K, num_warps) replaces its own
    choice (the benchmark's sweep sets it)."""
    rows, columns = weight.shape
    block_scales = scale.shape != (rows, 1)
    if native_fp8 is None:
        native_fp8 = os.environ.get("FRAMEWISE_FP8_NATIVE") != "0" and torch.cuda.get_device_capability(weight.device) >= (8, 9)
    block_n, block_k, warps = config or _fp8_gemv_config(rows, columns)
    outputs = rows // 2 if gate_up else rows
    per_program = block_n // 2 if gate_up else block_n
    if gate_up and block_scales and outputs % per_program:
        block_n, per_program = 2, 1  # a program's up rows must lie in one row of block scales
    _fp8_gemv_kernel[(triton.cdiv(outputs, per_program),)](
        x, x if norm_weight is None else norm_weight, weight if native_fp8 else weight.view(torch.uint8), scale,
        out if residual is None else residual, out, outputs, eps,
        K=columns, SCALE_COLUMNS=scale.shape[1], BLOCK_SCALES=block_scales, NORM=norm_weight is not None,
        FLOAT_SCALE=norm_weight is not None and norm_weight.dtype == torch.float32,
        GATE_UP=gate_up, RESIDUAL=residual is not None, NATIVE_FP8=native_fp8,
        BLOCK_N=block_n, OUTPUTS=per_program, BLOCK_K=block_k, SCALE_BLOCK=BLOCK_SIZE,
        EVEN_K=columns % block_k == 0, EVEN_N=outputs % per_program == 0, num_warps=warps,
        **launch_options(x.device),
    )
    return out


def fp8_rms_norm_linear(
    x: torch.Tensor,
    norm_weight: torch.Tensor,
    weight: torch.Tensor,
    scale: torch.Tensor,
    eps: float,
    out_dtype: torch.dtype | None = None,
    *,
    native_fp8: bool | None = None,
) -> torch.Tensor:
    """``linear(rms_norm(x) * norm_weight, W)`` for one token, ``W`` = e4m3 ``weight`` (N, K) with
    ``scale`` ((N, 1) or (ceil(N/128), ceil(K/128)), float32).

    ``x`` (K,) in the model's dtype, ``norm_weight`` (K,) in it or float32 (a zero-centred norm's
    scale, rounded as :func:`~framewise.core.kernels.decode_step.rms_norm_linear` says); returns
    (N,) in ``out_dtype`` (default the model's; the product is rounded to the model's dtype first).
    """
    out = torch.empty(weight.shape[0], dtype=out_dtype or x.dtype, device=x.device)
    return _launch(x, weight, scale, out, norm_weight=norm_weight, eps=eps, native_fp8=native_fp8)


def fp8_rms_norm_silu_gate_up(
    x: torch.Tensor,
    norm_weight: torch.Tensor,
    weight: torch.Tensor,
    scale: torch.Tensor,
    eps: float,
    *,
    native_fp8: bool | None = None,
) -> torch.Tensor:
    """``silu(gate) * up`` for one token, where ``[gate; up] = linear(rms_norm(x) * norm_weight, W)``:
    the MLP's input to its down projection, formed where the gate/up product is made.

    ``x`` (K,) in the model's dtype, ``norm_weight`` (K,) as in :func:`fp8_rms_norm_linear`;
    ``weight`` the stacked e4m3 gate/up
    weight (2I, K), gate rows first, with ``scale`` as in :func:`fp8_rms_norm_linear`. Returns (I,)
    in ``x``'s dtype; gate, up, ``silu(gate)`` and the product are each rounded to it.
    """
    if weight.shape[0] % 2:
        raise ValueError(f"A stacked gate/up weight has an even number of rows, not {weight.shape[0]}.")
    out = torch.empty(weight.shape[0] // 2, dtype=x.dtype, device=x.device)
    return _launch(x, weight, scale, out, norm_weight=norm_weight, eps=eps, gate_up=True, native_fp8=native_fp8)


def fp8_linear_residual(
    x: torch.Tensor,
    weight: torch.Tensor,
    scale: torch.Tensor,
    residual: torch.Tensor,
    *,
    native_fp8: bool | None = None,
) -> torch.Tensor:
    """``residual + linear(x, W)`` for one token: ``x`` (K,), ``weight`` e4m3 (N, K) with ``scale``
    as in :func:`fp8_rms_norm_linear`, ``residual`` (N,); returns a new (N,) tensor."""
    return _launch(x, weight, scale, torch.empty_like(residual), residual=residual, native_fp8=native_fp8)


def fp8_gemv(
    x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor, *, native_fp8: bool | None = None
) -> torch.Tensor:
    """``linear(x, W)`` for one token: ``x`` (K,), ``weight`` e4m3 (N, K) with ``scale`` as in
    :func:`fp8_rms_norm_linear`; returns (N,) in ``x``'s dtype."""
    out = torch.empty(weight.shape[0], dtype=x.dtype, device=x.device)
    return _launch(x, weight, scale, out, native_fp8=native_fp8)
