"""Products with FP8 weights: for many tokens at once (prefill), FP8 tensor cores where the card
has them, the weights dequantized to the activations' dtype elsewhere; for one token on a CUDA
device with Triton, the FP8 matrix-vector kernel (:mod:`framewise.core.kernels.fp8_gemv`), which
reads each weight once as e4m3 where a tensor-core product would spend a 128-row tile on one row.
A model's own layers run this way in a decode step (Qwen3.5's do: they are not laid out as the
dense step's stacks).

On the tensor-core path the activations are quantized to e4m3 per token as they come (one Triton
kernel, :mod:`framewise.core.kernels.fp8_row_quant`, where Triton is installed) and multiplied with per-channel e4m3 weights by ``torch._scaled_mm``, which applies both scales to the
float32 sums. It needs compute capability 8.9 or newer, bfloat16 activations and sides that are
multiples of 16. Anything else (the CPU, Ampere, odd shapes, and 128x128-block weights) takes the
dequantize path: one (N, K) weight in the activations' dtype at a time, the weight-only path.
Block-scaled weights stay off the tensor cores because torch 2.11's block-scaled ``scaled_mm``
refused a 1-token and a 37-token product on an H100 (docs/benchmarks.md, 2026-12-05).

The environment variable ``FRAMEWISE_FP8_PREFILL`` (``tensor_cores`` or ``dequantize``) forces
one path for every per-channel product that does not name its own, so that each can be run on one card.
"""

from __future__ import annotations

import functools
import os
from typing import Callable, Literal, get_args

import torch
import torch.nn.functional as F

from framewise.core.quantization.fp8 import dequantize, quantize_per_channel
from framewise.core.quantization.weight_format import Norm, product_input

MatmulPath = Literal["tensor_cores", "dequantize", "gemv"]
FORCE_PATH_VARIABLE = "FRAMEWISE_FP8_PREFILL"


def forced_path() -> MatmulPath | None:
    """The path ``FRAMEWISE_FP8_PREFILL`` forces, or None when it is unset or empty."""
    value = os.environ.get(FORCE_PATH_VARIABLE, "").strip()
    if not value:
        return None
    if value not in get_args(MatmulPath) or value == "gemv":
        raise ValueError(f"{FORCE_PATH_VARIABLE}={value!r}; choose tensor_cores or dequantize, or unset it")
    return value  # type: ignore[return-value]


def prefill_path(
    device: torch.device, scheme: Literal["block", "channel"], weight_shape: tuple[int, int], dtype: torch.dtype
) -> MatmulPath:
    """The path :func:`fp8_linear` takes for a (N, K) weight with ``dtype`` activations on ``device``."""
    rows, columns = weight_shape
    if scheme == "block" or device.type != "cuda" or dtype != torch.bfloat16 or rows % 16 or columns % 16:
        return "dequantize"
    return "tensor_cores" if _has_fp8_tensor_cores(device.index) else "dequantize"


@functools.cache
def _has_fp8_tensor_cores(device_index: int | None) -> bool:
    """Whether CUDA device ``device_index`` (None: the current one) has FP8 tensor cores
    (compute capability 8.9 or newer); asked once per device, not once per product."""
    return torch.cuda.get_device_capability(device_index) >= (8, 9)


def fp8_linear(
    x: torch.Tensor,
    weight: torch.Tensor,
    scales: torch.Tensor,
    scheme: Literal["block", "channel"],
    bias: torch.Tensor | None = None,
    path: MatmulPath | None = None,
    *,
    norm: Norm | None = None,
    silu_mul: bool = False,
) -> torch.Tensor:
    """``linear(product_input(x, norm, silu_mul), real weight, bias)`` for e4m3 ``weight`` (N, K) and
    its ``scales`` ((N, 1) per channel, (ceil(N/128), ceil(K/128)) per block).

    ``x`` (..., K), or (..., 2K) with ``silu_mul``, in bf16, fp16 or fp32; returns (..., N) in
    ``x``'s dtype. On the tensor-core path the quantizing kernel forms the input itself. ``path``
    forces a path (tests do), else ``FRAMEWISE_FP8_PREFILL`` (:func:`forced_path`); by default one
    token on a CUDA device takes the matrix-vector kernel and :func:`prefill_path` picks the path
    of more. Block-scaled weights never take the tensor cores (see the module's docstring).
    """
    rows, columns = weight.shape
    path = path or forced_path() or _one_row_path(x, silu_mul) or prefill_path(x.device, scheme, (rows, columns), x.dtype)
    if path == "gemv":
        out = _gemv(x.reshape(x.shape[-1]), weight, scales, norm)
        return (out if bias is None else out + bias).reshape(*x.shape[:-1], rows)
    if path == "dequantize" or scheme == "block":
        return F.linear(product_input(x, norm, silu_mul), dequantize(weight, scales, scheme, x.dtype), bias)
    out = _rowwise_scaled_mm(x.reshape(-1, x.shape[-1]), weight, scales, norm, silu_mul)
    if bias is not None:
        out = out + bias
    return out.reshape(*x.shape[:-1], rows)


def _one_row_path(x: torch.Tensor, silu_mul: bool) -> MatmulPath | None:
    """"gemv" for one token's ``x`` (..., K) on a CUDA device where the kernel can run (it forms a
    normed input itself, not ``silu(gate) * up``); None leaves the choice to :func:`prefill_path`."""
    if silu_mul or x.device.type != "cuda" or x.numel() != x.shape[-1] or _gemv_kernels() is None:
        return None
    return "gemv"


@functools.cache
def _gemv_kernels():  # type: ignore[no-untyped-def]
    """The FP8 matrix-vector kernel module, or None where Triton is not installed."""
    try:
        from framewise.core.kernels import fp8_gemv
    except ImportError:
        return None
    return fp8_gemv


def _gemv(x: torch.Tensor, weight: torch.Tensor, scales: torch.Tensor, norm: Norm | None) -> torch.Tensor:
    """One token's ``x`` (K,) (normed by ``norm`` first, where given) times the e4m3 ``weight``
    (N, K) with its ``scales``, through the matrix-vector kernel; returns (N,) in ``x``'s dtype."""
    kernels = _gemv_kernels()
    if norm is None:
        return kernels.fp8_gemv(x, weight, scales)
    norm_weight, eps = norm
    return kernels.fp8_rms_norm_linear(x, norm_weight, weight, scales, eps)


def _rowwise_scaled_mm(
    tokens: torch.Tensor, weight: torch.Tensor, scales: torch.Tensor, norm: Norm | None, silu_mul: bool
) -> torch.Tensor:
    """(M, K) activations, or (M, 2K) with ``silu_mul``, times a per-channel e4m3 (N, K) weight ->
    (M, N), the input (``product_input``) quantized per token."""
    quantized, token_scales = _token_quantizer()(tokens, norm, silu_mul)
    return torch._scaled_mm(
        quantized, weight.t(), scale_a=token_scales, scale_b=scales.float().reshape(1, -1).contiguous(),
        out_dtype=tokens.dtype,
    )


@functools.cache
def _token_quantizer() -> Callable[[torch.Tensor, Norm | None, bool], tuple[torch.Tensor, torch.Tensor]]:
    """The one-pass Triton kernel where Triton is installed, else the same arithmetic in torch ops."""
    try:
        from framewise.core.kernels.fp8_row_quant import quantize_rows
    except ImportError:
        return lambda tokens, norm, silu_mul: quantize_per_channel(product_input(tokens, norm, silu_mul))
    return quantize_rows
