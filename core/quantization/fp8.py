"""Quantize weights to FP8 (e4m3) with block-wise or per-channel scales, and back.

A quantized (N, K) weight is an e4m3 tensor of the same shape and a float32 scale that multiplies
it back: one scale per 128x128 block, (ceil(N/128), ceil(K/128)), where a weight whose sides are
not multiples of 128 has partial blocks at its edges; or one scale per output row, (N, 1). Each
scale maps the block's (or row's) largest magnitude to e4m3's largest finite value (448), so
nothing saturates. These are the layouts of Qwen's official FP8 checkpoints and of
compressed-tensors' FP8_DYNAMIC scheme, so a weight quantized on load and one read from such a
checkpoint run through the same code.

Quantize-on-load uses per-channel scales (:data:`QUANTIZE_ON_LOAD_SCHEME`). The measurement,
``python3 benchmarks/fp8_scheme_error.py`` on the CPU (relative error of the dequantized weight W
and of its product with random activations Wx; seed 0):

===================================  =======  ========  =======  ========
weights                              block W  block Wx  chan W   chan Wx
===================================  =======  ========  =======  ========
Gaussian 4096x4096                   0.0264   0.0264    0.0265   0.0264
Gaussian, 8 input columns x30        0.0262   0.0263    0.0224   0.0225
Gaussian, log-normal row scales      0.0262   0.0259    0.0265   0.0265
Student-t (3 dof), heavy tails       0.0258   0.0259    0.0253   0.0253
demo model language linear layers    0.0265   0.0264    0.0261   0.0260
===================================  =======  ========  =======  ========

e4m3 is a floating-point format: its error is set by its 3-bit mantissa (about 2.6 % here) far
more than by how finely the scales are placed, so neither layout is more accurate by more than
the spread between weight families. What decided is the hardware: row-wise scales run on FP8
tensor cores through ``torch._scaled_mm`` on compute capability 8.9 (the RTX 40 desktop cards
Framewise is for) and 9.0, while 128x128-block scales run there only on 9.0 with CUDA 12.9 or
newer; in the decode kernels a row's scale is one multiply after its sum instead of a scale
vector loaded with every chunk. Checkpoints already in the block format run as they are. The speed
side (decode tok/s and prefill time of each layout) is to be measured on the GPU.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
import torch.nn.functional as F

from framewise.core.kernels.e4m3 import BLOCK_SIZE, E4M3, E4M3_MAX, INVERSE_E4M3_MAX, MIN_SCALE
from framewise.core.quantization.formats import scale_shape

QUANTIZE_ON_LOAD_SCHEME: Literal["block", "channel"] = "channel"


def quantize_blockwise(weight: torch.Tensor, block: int = BLOCK_SIZE) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize a (N, K) weight to e4m3 with one float32 scale per ``block`` x ``block`` block.

    Returns the e4m3 weight (N, K) and the scales (ceil(N/block), ceil(K/block)), so that
    ``weight ≈ dequantize_blockwise(e4m3, scales)``. Edges short of a full block are padded with
    zeros for the maximum, which leaves each partial block's scale its own.
    """
    rows, columns = weight.shape
    row_blocks, column_blocks = math.ceil(rows / block), math.ceil(columns / block)
    padded = F.pad(weight.float(), (0, column_blocks * block - columns, 0, row_blocks * block - rows))
    blocks = padded.view(row_blocks, block, column_blocks, block)
    scales = (blocks.abs().amax(dim=(1, 3)) / E4M3_MAX).clamp(min=MIN_SCALE)
    quantized = (blocks / scales[:, None, :, None]).clamp_(-E4M3_MAX, E4M3_MAX).to(E4M3)
    return quantized.view(row_blocks * block, column_blocks * block)[:rows, :columns].contiguous(), scales


def dequantize_blockwise(
    quantized: torch.Tensor, scales: torch.Tensor, dtype: torch.dtype = torch.bfloat16, block: int = BLOCK_SIZE
) -> torch.Tensor:
    """The (N, K) weight in ``dtype`` from its e4m3 values (N, K) and block scales
    (ceil(N/block), ceil(K/block))."""
    rows, columns = quantized.shape
    expanded = scales.float().repeat_interleave(block, dim=0)[:rows].repeat_interleave(block, dim=1)[:, :columns]
    return (quantized.float() * expanded).to(dtype)


def quantize_per_channel(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize a (N, K) weight to e4m3 with one float32 scale per output row.

    Returns the e4m3 weight (N, K) and the scales (N, 1).
    """
    weight32 = weight.float()
    scales = (weight32.abs().amax(dim=1, keepdim=True) * INVERSE_E4M3_MAX).clamp(min=MIN_SCALE)
    return (weight32 / scales).clamp_(-E4M3_MAX, E4M3_MAX).to(E4M3), scales


def dequantize_per_channel(quantized: torch.Tensor, scales: torch.Tensor, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """The (N, K) weight in ``dtype`` from its e4m3 values (N, K) and row scales (N, 1) or (N,)."""
    return (quantized.float() * scales.float().reshape(-1, 1)).to(dtype)


def quantize(weight: torch.Tensor, scheme: Literal["block", "channel"]) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`quantize_blockwise` or :func:`quantize_per_channel`, by ``scheme``."""
    return quantize_blockwise(weight) if scheme == "block" else quantize_per_channel(weight)


def quantize_onto(
    weight: torch.Tensor,
    scheme: Literal["block", "channel"],
    device: torch.device,
    chunk_elements: int = 1 << 22,
    out: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`quantize` of a (N, K) ``weight`` held anywhere (a memory-mapped checkpoint tensor),
    with the result on ``device``: the same e4m3 weight (N, K) and scales, computed a band of rows
    at a time (whole 128-row blocks for ``"block"``). ``out`` (an e4m3 (N, K) tensor and a float32
    one of :func:`~framewise.core.quantization.formats.scale_shape`, on ``device``; views are fine)
    receives them instead of new tensors.

    Only a band of about ``chunk_elements`` weights and its float32 temporaries are on the device
    at once. Loading a model quantizes hundreds of weights; with temporaries of one size the
    caching allocator keeps reusing the same few blocks, and the long-lived e4m3 weights are not
    carved out of segments that a whole weight's temporaries left behind (which would stay
    reserved, partly used, after loading).
    """
    rows, columns = weight.shape
    band = max(1, chunk_elements // columns)
    if scheme == "block":
        band = max(BLOCK_SIZE, band // BLOCK_SIZE * BLOCK_SIZE)
    if out is None:
        quantized = torch.empty((rows, columns), dtype=E4M3, device=device)
        scales = torch.empty(scale_shape(scheme, (rows, columns)), dtype=torch.float32, device=device)
    else:
        quantized, scales = out
        if quantized.shape != weight.shape or scales.shape != scale_shape(scheme, (rows, columns)):
            raise ValueError(f"quantize_onto: out has shapes {tuple(quantized.shape)} and {tuple(scales.shape)} "
                             f"for a {rows}x{columns} weight")
    for start in range(0, rows, band):
        part_quantized, part_scales = quantize(weight[start : start + band].to(device), scheme)
        quantized[start : start + band] = part_quantized
        scale_start = start // BLOCK_SIZE if scheme == "block" else start
        scales[scale_start : scale_start + part_scales.shape[0]] = part_scales
    return quantized, scales


def dequantize(
    quantized: torch.Tensor, scales: torch.Tensor, scheme: Literal["block", "channel"], dtype: torch.dtype = torch.bfloat16
) -> torch.Tensor:
    """:func:`dequantize_blockwise` or :func:`dequantize_per_channel`, by ``scheme``."""
    if scheme == "block":
        return dequantize_blockwise(quantized, scales, dtype)
    return dequantize_per_channel(quantized, scales, dtype)
