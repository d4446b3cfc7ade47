"""Products with FP8 weights for many tokens at once (prefill): FP8 tensor cores where the card
has them, the weights dequantized to the activations' dtype elsewhere.

On the tensor-core path the activations are quantized to e4m3 as they come (per token for
per-channel weights, per token and 128 columns for 128x128-block weights) and multiplied with
the e4m3 weights by ``torch._scaled_mm`` / ``torch.nn.functional.scaled_mm``, which apply both
scales to the float32 sums. It needs compute capability 8.9 or newer for row-wise scales, and 9.0
with CUDA 12.9 or newer for block scales (what cuBLAS supports), bfloat16 activations, and sides
that are multiples of 16 (of 128 for block scales, whose scale matrix also needs a multiple of 4
column blocks). Anything else (the CPU, Ampere, odd shapes) takes the dequantize path: one
(N, K) weight in the activations' dtype at a time, the weight-only path.

The environment variable ``FRAMEWISE_FP8_PREFILL`` (``tensor_cores`` or ``dequantize``) forces
one path for every product that does not name its own, so that each can be run on one card.
"""

from __future__ import annotations

import os
from typing import Literal, get_args

import torch
import torch.nn.functional as F

from framewise.core.quantization.fp8 import dequantize, quantize_per_channel
from framewise.core.quantization.formats import BLOCK_SIZE

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
    if device.type != "cuda" or dtype != torch.bfloat16 or rows % 16 or columns % 16:
        return "dequantize"
    capability = torch.cuda.get_device_capability(device)
    if capability < (8, 9):
        return "dequantize"
    if scheme == "block" and not (capability[0] == 9 and _cuda_version() >= (12, 9) and _block_shapes_fit(rows, columns)):
        return "dequantize"
    return "tensor_cores"


def _cuda_version() -> tuple[int, ...]:
    return tuple(int(part) for part in (torch.version.cuda or "0.0").split(".")[:2])


def _block_shapes_fit(rows: int, columns: int) -> bool:
    return rows % BLOCK_SIZE == 0 and columns % BLOCK_SIZE == 0 and (columns // BLOCK_SIZE) % 4 == 0


def fp8_linear(
    x: torch.Tensor,
    weight: torch.Tensor,
    scales: torch.Tensor,
    scheme: Literal["block", "channel"],
    bias: torch.Tensor | None = None,
    path: MatmulPath | None = None,
) -> torch.Tensor:
    """``linear(x, real weight, bias)`` for e4m3 ``weight`` (N, K) and its ``scales`` ((N, 1) per
    channel, (ceil(N/128), ceil(K/128)) per block).

    ``x`` (..., K) in bf16, fp16 or fp32; returns (..., N) in ``x``'s dtype. ``path`` forces a path
    (tests do), else ``FRAMEWISE_FP8_PREFILL`` (:func:`forced_path`); by default
    :func:`prefill_path` picks it.
    """
    rows, columns = weight.shape
    path = path or forced_path() or prefill_path(x.device, scheme, (rows, columns), x.dtype)
    if path == "dequantize":
        return F.linear(x, dequantize(weight, scales, scheme, x.dtype), bias)
    tokens = x.reshape(-1, columns)
    if scheme == "channel":
        out = _rowwise_scaled_mm(tokens, weight, scales)
    else:
        out = _blockwise_scaled_mm(tokens, weight, scales)
    if bias is not None:
        out = out + bias
    return out.reshape(*x.shape[:-1], rows)


def _rowwise_scaled_mm(tokens: torch.Tensor, weight: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """(M, K) activations times a per-channel e4m3 (N, K) weight -> (M, N), the activations
    quantized per token."""
    quantized, token_scales = quantize_per_channel(tokens)
    return torch._scaled_mm(
        quantized, weight.t(), scale_a=token_scales, scale_b=scales.float().reshape(1, -1).contiguous(),
        out_dtype=tokens.dtype,
    )


def _blockwise_scaled_mm(tokens: torch.Tensor, weight: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """(M, K) activations times a 128x128-block e4m3 (N, K) weight -> (M, N), the activations
    quantized per token and 128 columns."""
    count, columns = tokens.shape
    groups = columns // BLOCK_SIZE
    quantized, group_scales = quantize_per_channel(tokens.reshape(count * groups, BLOCK_SIZE))
    # cuBLAS reads both scale matrices column-major: (M, K/128) and (K/128, N/128)
    token_scales = group_scales.reshape(count, groups).t().contiguous().t()
    return F.scaled_mm(
        quantized.reshape(count, columns), weight.t(),
        token_scales, F.ScalingType.BlockWise1x128,
        scales.float().contiguous().t(), F.ScalingType.BlockWise128x128,
        output_dtype=tokens.dtype,
    )
