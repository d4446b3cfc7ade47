"""Block-wise and per-channel e4m3 quantization: shapes, round-trip error, padding at the edges."""

from __future__ import annotations

import math

import pytest
import torch

from framewise.core.quantization import fp8

# e4m3 keeps 3 mantissa bits: a value rounds to within 2**-4 of itself, and a Gaussian weight's
# relative Frobenius error comes to about 2.6 %.
ROUND_TRIP_BOUND = 0.03


def relative_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    return float((actual.double() - expected.double()).norm() / expected.double().norm())


@pytest.mark.parametrize(("rows", "columns"), [(256, 384), (200, 300), (1, 129), (130, 5)])
def test_block_round_trip_and_edge_blocks(rows: int, columns: int) -> None:
    weight = torch.randn(rows, columns, dtype=torch.bfloat16)
    quantized, scales = fp8.quantize_blockwise(weight)
    assert quantized.dtype == fp8.E4M3 and quantized.shape == (rows, columns) and quantized.is_contiguous()
    assert scales.dtype == torch.float32 and scales.shape == (math.ceil(rows / 128), math.ceil(columns / 128))
    restored = fp8.dequantize_blockwise(quantized, scales, torch.float32)
    assert restored.shape == weight.shape
    assert relative_error(restored, weight) < ROUND_TRIP_BOUND


def test_each_block_has_its_own_scale() -> None:
    """A block of large values next to one of small values: each block's maximum maps to 448, so
    the small block keeps its precision (one scale for both would flush it towards zero)."""
    weight = torch.full((128, 256), 1e-3)
    weight[:, 128:] = 1e3
    quantized, scales = fp8.quantize_blockwise(weight)
    assert scales.shape == (1, 2)
    assert torch.allclose(scales[0], torch.tensor([1e-3, 1e3]) / fp8.E4M3_MAX)
    assert torch.allclose(fp8.dequantize_blockwise(quantized, scales, torch.float32), weight, rtol=2**-4)


def test_partial_edge_block_scale_ignores_padding() -> None:
    """The padding of a 130-row weight's second block row is zeros, so its scale is its two real rows'."""
    weight = torch.ones(130, 128)
    weight[128:] = 0.5
    _, scales = fp8.quantize_blockwise(weight)
    assert scales.shape == (2, 1)
    assert scales[1, 0] == pytest.approx(0.5 / fp8.E4M3_MAX)


@pytest.mark.parametrize(("rows", "columns"), [(64, 256), (3, 1000)])
def test_channel_round_trip(rows: int, columns: int) -> None:
    generator = torch.Generator().manual_seed(rows * columns)
    weight = torch.randn(rows, columns, generator=generator) * torch.logspace(-3, 3, rows)[:, None]
    quantized, scales = fp8.quantize_per_channel(weight)
    assert quantized.dtype == fp8.E4M3 and quantized.shape == (rows, columns)
    assert scales.shape == (rows, 1) and scales.dtype == torch.float32
    # Every row keeps its own precision, however small its magnitude: a value in e4m3's normal
    # range rounds to within 2**-4 of itself, so a row's error stays under that (a row of a few
    # hundred values can pass the whole weight's 3 %), where one scale shared by rows of 1e-3 to
    # 1e3 would flush the small ones (an error near 1).
    for row in range(rows):
        restored = fp8.dequantize_per_channel(quantized[row : row + 1], scales[row], torch.float32)
        assert relative_error(restored[0], weight[row]) < 2**-4
    assert torch.equal(fp8.dequantize_per_channel(quantized, scales.flatten()), fp8.dequantize_per_channel(quantized, scales))


@pytest.mark.parametrize("scheme", ["block", "channel"])
def test_no_saturation_and_zero_weights(scheme: str) -> None:
    weight = torch.randn(128, 256) * 1e4
    weight[:, :128] = 0.0
    weight[5] = 0.0
    quantized, scales = fp8.quantize(weight, scheme)
    assert torch.isfinite(quantized.float()).all() and torch.isfinite(scales).all()
    assert quantized.float().abs().max() == fp8.E4M3_MAX  # the largest magnitude maps to e4m3's largest value
    restored = fp8.dequantize(quantized, scales, scheme, torch.float32)
    assert torch.equal(restored[:, :128], torch.zeros(128, 128)) and torch.equal(restored[5], torch.zeros(256))
    assert relative_error(restored, weight) < ROUND_TRIP_BOUND


def test_dequantize_gives_the_asked_dtype() -> None:
    quantized, scales = fp8.quantize_per_channel(torch.randn(8, 16))
    assert fp8.dequantize(quantized, scales, "channel", torch.float16).dtype == torch.float16
    assert fp8.dequantize(*fp8.quantize_blockwise(torch.randn(8, 16)), "block").dtype == torch.bfloat16


@pytest.mark.parametrize("scheme", ["block", "channel"])
@pytest.mark.parametrize(("rows", "columns", "chunk_elements"), [(300, 200, 128 * 200), (300, 200, 5000), (130, 5, 1), (64, 64, 1 << 20)])
def test_quantize_onto_in_bands_equals_quantizing_whole(
    scheme: str, rows: int, columns: int, chunk_elements: int
) -> None:
    """Bands of rows (several, one partial, or one for the whole weight) give the same e4m3 values
    and scales as quantizing the weight at once: the block scheme's bands keep whole 128-row blocks."""
    weight = torch.randn(rows, columns, dtype=torch.bfloat16) * torch.logspace(-2, 2, rows)[:, None].bfloat16()
    expected_weight, expected_scales = fp8.quantize(weight, scheme)
    quantized, scales = fp8.quantize_onto(weight, scheme, torch.device("cpu"), chunk_elements)
    assert quantized.dtype == fp8.E4M3 and scales.shape == expected_scales.shape
    assert torch.equal(quantized.view(torch.uint8), expected_weight.view(torch.uint8))
    assert torch.equal(scales, expected_scales)
