"""Products with FP8 weights for many tokens at once (prefill): FP8 tensor cores where the card
has them, the weights dequantized to the activations' dtype elsewhere.

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

MatmulPath = Literal["tensor_cores", "dequantize"]
FORCE_PATH_VARIABLE = "FRAMEWISE_FP8_PREFILL"


def forced_path() -> MatmulPath | None:
    """The path ``FRAMEWISE_FP8_PREFILL`` forces, or None when it is unset or empty."""
    value = os.environ.get(FORCE_PATH_VARIABLE, "").strip()
    if not value:
        return None
    if value not in get_args(MatmulPath):
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
    forces a path (tests do), else ``FRAMEWISE_FP8_PREFILL`` (:func:`forced_path`); by default
    :func:`prefill_path` picks it. Block-scaled weights always dequantize (see the module's docstring).
    """
    rows, columns = weight.shape
    path = path or forced_path() or prefill_path(x.device, scheme, (rows, columns), x.dtype)
    if path == "dequantize" or scheme == "block":
        return F.linear(product_input(x, norm, silu_mul), dequantize(weight, scales, scheme, x.dtype), bias)
    out = _rowwise_scaled_mm(x.reshape(-1, x.shape[-1]), weight, scales, norm, silu_mul)
    if bias is not None:
        out = out + bias
    return out.reshape(*x.shape[:-1], rows)


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
