"""FP8 weights on the GPU: the decode step's matrix-vector kernels (hardware e4m3 conversion and
the bit-decoding path Ampere takes), the prefill's FP8 tensor-core and dequantize paths, each
against the product with the dequantized weight; a kernel inside a CUDA graph; and
quantize-on-load's peak memory on the device."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from torch import nn

from framewise.core.quantization import loading
from framewise.core.quantization.fp8 import dequantize, quantize, quantize_per_channel
from framewise.core.quantization.fp8_formats import Fp8QuantizedOnLoad
from framewise.core.quantization.matmul import fp8_linear, prefill_path
from framewise.core.quantization.weight_format import product_input

pytestmark = pytest.mark.gpu
kernels = pytest.importorskip("framewise.core.kernels.fp8_gemv", reason="needs Triton")

DEVICE = "cuda"
# bf16 results are rounded to 8 bits of mantissa; float32 ones differ by summation order only
BF16_TOLERANCE = 2e-2
TOLERANCE = {torch.float32: 1e-5, torch.bfloat16: BF16_TOLERANCE}
SHAPES = [(40, 256), (300, 200), (37, 1024), (1000, 4096), (4096, 12288), (12288, 4096)]
# the weights that run at a launch shape of their own
SWEPT_SHAPES = list(kernels.SWEPT_FP8_GEMV_CONFIGS)


def relative_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    actual, expected = actual.double(), expected.double()
    return float((actual - expected).norm() / expected.norm())


def fp8_weight(rows: int, columns: int, scheme: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(e4m3 weight, scales, the dequantized bf16 weight the kernels must match)."""
    weight = torch.randn(rows, columns, device=DEVICE) / math.sqrt(columns)
    quantized, scales = quantize(weight, scheme)
    return quantized, scales, dequantize(quantized, scales, scheme, torch.bfloat16)


def rms_norm_reference(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    x32 = x.float()
    return weight * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


native_paths = pytest.mark.parametrize("native", [
    pytest.param(True, id="hardware-e4m3"), pytest.param(False, id="bit-decoded-e4m3"),
])


@native_paths
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("scheme", ["block", "channel"])
@pytest.mark.parametrize(("rows", "columns"), SHAPES + SWEPT_SHAPES)
def test_fp8_gemv_and_rms_norm_linear(native: bool, dtype: torch.dtype, scheme: str, rows: int, columns: int) -> None:
    if native and torch.cuda.get_device_capability() < (8, 9):
        pytest.skip("hardware e4m3 conversion needs compute capability 8.9")
    weight, scales, reference = fp8_weight(rows, columns, scheme)
    reference = reference.to(dtype) if dtype == torch.bfloat16 else dequantize(weight, scales, scheme, dtype)
    tolerance = TOLERANCE[dtype]
    x = torch.randn(columns, device=DEVICE, dtype=dtype) * 3
    assert relative_error(kernels.fp8_gemv(x, weight, scales, native_fp8=native), F.linear(x, reference)) < tolerance
    norm = torch.rand(columns, device=DEVICE, dtype=dtype) + 0.5
    expected = F.linear(rms_norm_reference(x, norm, 1e-6), reference)
    actual = kernels.fp8_rms_norm_linear(x, norm, weight, scales, 1e-6, native_fp8=native)
    assert actual.dtype == dtype and relative_error(actual, expected) < tolerance
    logits = kernels.fp8_rms_norm_linear(x, norm, weight, scales, 1e-6, out_dtype=torch.float32, native_fp8=native)
    assert logits.dtype == torch.float32 and relative_error(logits, expected.float()) < tolerance


@native_paths
@pytest.mark.parametrize("scheme", ["block", "channel"])
@pytest.mark.parametrize(("rows", "columns"), [(64, 512), (33, 768), (4096, 12288), *SWEPT_SHAPES])
def test_fp8_linear_residual(native: bool, scheme: str, rows: int, columns: int) -> None:
    if native and torch.cuda.get_device_capability() < (8, 9):
        pytest.skip("hardware e4m3 conversion needs compute capability 8.9")
    weight, scales, reference = fp8_weight(rows, columns, scheme)
    x = torch.randn(columns, device=DEVICE, dtype=torch.bfloat16)
    residual = torch.randn(rows, device=DEVICE, dtype=torch.bfloat16)
    actual = kernels.fp8_linear_residual(x, weight, scales, residual, native_fp8=native)
    assert relative_error(actual, residual + F.linear(x, reference)) < BF16_TOLERANCE


@native_paths
@pytest.mark.parametrize("scheme", ["block", "channel"])
# (intermediate, columns): odd counts that leave a program part empty, the 8B and 2B gate/up
@pytest.mark.parametrize(("intermediate", "columns"), [(64, 512), (33, 768), (98, 256), (12288, 4096), (6144, 2048)])
def test_fp8_rms_norm_silu_gate_up(native: bool, scheme: str, intermediate: int, columns: int) -> None:
    if native and torch.cuda.get_device_capability() < (8, 9):
        pytest.skip("hardware e4m3 conversion needs compute capability 8.9")
    weight, scales, reference = fp8_weight(2 * intermediate, columns, scheme)
    x = torch.randn(columns, device=DEVICE, dtype=torch.bfloat16) * 3
    norm = torch.rand(columns, device=DEVICE, dtype=torch.bfloat16) + 0.5
    gate, up = F.linear(rms_norm_reference(x, norm, 1e-6), reference).split(intermediate)
    actual = kernels.fp8_rms_norm_silu_gate_up(x, norm, weight, scales, 1e-6, native_fp8=native)
    assert actual.shape == (intermediate,) and actual.dtype == torch.bfloat16
    assert relative_error(actual, F.silu(gate) * up) < BF16_TOLERANCE


def test_bit_decoding_matches_every_e4m3_code() -> None:
    """All 254 finite e4m3 codes (subnormals, both signs) through the bit-decoding path: an
    identity weight row per code and a per-channel scale of one give each code back exactly."""
    codes = torch.tensor([c for c in range(256) if c & 0x7F != 0x7F], dtype=torch.uint8, device=DEVICE)
    weight = torch.diag(codes.view(torch.float8_e4m3fn).float()).to(torch.float8_e4m3fn)
    ones = torch.ones(len(codes), 1, device=DEVICE)
    x = torch.ones(len(codes), device=DEVICE, dtype=torch.float32)
    decoded = kernels.fp8_gemv(x, weight, ones, native_fp8=False)
    assert torch.equal(decoded, codes.view(torch.float8_e4m3fn).float())


@pytest.mark.parametrize("scheme", ["block", "channel"])
def test_fp8_kernel_in_a_cuda_graph(scheme: str) -> None:
    weight, scales, reference = fp8_weight(4096, 4096, scheme)
    x = torch.randn(4096, device=DEVICE, dtype=torch.bfloat16)
    residual = torch.randn(4096, device=DEVICE, dtype=torch.bfloat16)
    kernels.fp8_linear_residual(x, weight, scales, residual)  # compile before capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = kernels.fp8_linear_residual(x, weight, scales, residual)
    x.copy_(torch.randn_like(x))
    graph.replay()
    assert relative_error(out, residual + F.linear(x, reference)) < BF16_TOLERANCE


def forced_paths(scheme: str) -> list:
    """Both prefill paths of per-channel weights, the tensor-core one skipped (with why) where this
    card lacks it; block-scaled weights have the dequantize path alone."""
    if scheme == "block":
        return ["dequantize"]
    fits = torch.cuda.is_available() and (
        prefill_path(torch.device(DEVICE), scheme, (4096, 4096), torch.bfloat16) == "tensor_cores"
    )
    reason = "FP8 tensor cores need compute capability 8.9"
    return ["dequantize", pytest.param("tensor_cores", marks=pytest.mark.skipif(not fits, reason=reason))]


@pytest.mark.parametrize(("scheme", "path"), [(s, p) for s in ("block", "channel") for p in forced_paths(s)])
@pytest.mark.parametrize("tokens", [1, 37, 1116])
def test_prefill_paths(scheme: str, path: str, tokens: int) -> None:
    weight, scales, reference = fp8_weight(4096, 4096, scheme)
    bias = torch.randn(4096, device=DEVICE, dtype=torch.bfloat16)
    x = torch.randn(tokens, 4096, device=DEVICE, dtype=torch.bfloat16) * torch.logspace(-1, 1, tokens, device=DEVICE)[:, None].to(torch.bfloat16)
    out = fp8_linear(x, weight, scales, scheme, bias, path=path)
    expected = F.linear(x, reference, bias)
    assert out.dtype == torch.bfloat16 and out.shape == (tokens, 4096)
    # the tensor-core path also rounds the activations to e4m3 (about 2.6 %, per token or 128 columns)
    bound = BF16_TOLERANCE if path == "dequantize" else 0.05
    for token in range(0, tokens, max(1, tokens // 8)):
        assert relative_error(out[token], expected[token]) < bound


@pytest.mark.parametrize("scheme", ["block", "channel"])
@pytest.mark.parametrize("fold", ["none", "norm"])
def test_one_token_takes_the_matrix_vector_kernel(scheme: str, fold: str) -> None:
    """A model's own FP8 layer given one token (a Qwen3.5 decode step) reads the weight through the
    gemv kernel, not a tensor-core tile: the same numbers as the kernel called directly."""
    weight, scales, reference = fp8_weight(8192, 4096, scheme)
    bias = torch.randn(8192, device=DEVICE, dtype=torch.bfloat16)
    x = torch.randn(1, 1, 4096, device=DEVICE, dtype=torch.bfloat16)
    norm = (torch.rand(4096, device=DEVICE, dtype=torch.bfloat16) + 0.5, 1e-6) if fold == "norm" else None
    out = fp8_linear(x, weight, scales, scheme, bias, norm=norm)
    direct = (kernels.fp8_gemv(x[0, 0], weight, scales) if norm is None
              else kernels.fp8_rms_norm_linear(x[0, 0], norm[0], weight, scales, norm[1]))
    assert out.shape == (1, 1, 8192) and torch.equal(out[0, 0], direct + bias)
    assert relative_error(out[0, 0], F.linear(product_input(x[0, 0], norm), reference, bias)) < BF16_TOLERANCE


@pytest.mark.parametrize(("tokens", "columns"), [(1, 4096), (37, 200), (1116, 4096), (1677, 12288)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_activation_kernel_quantizes_like_the_torch_ops(tokens: int, columns: int, dtype: torch.dtype) -> None:
    from framewise.core.kernels.fp8_row_quant import quantize_rows

    x = (torch.randn(tokens, columns, device=DEVICE) * torch.logspace(-3, 2, tokens, device=DEVICE)[:, None]).to(dtype)
    x[0, : columns // 2] = 0  # a row's zeros stay zeros; an all-zero row would too (smallest scale)
    quantized, scales = quantize_rows(x)
    expected, expected_scales = quantize_per_channel(x)
    assert scales.shape == (tokens, 1) and quantized.dtype == expected.dtype
    # torch divides by 448 as a multiply by its reciprocal on CUDA, the kernel exactly: one ulp apart at most
    torch.testing.assert_close(scales, expected_scales, rtol=1.2e-7, atol=0)
    rounded_with_its_scales = (x.float() / scales).clamp(-448, 448).to(expected.dtype)
    assert torch.equal(quantized.view(torch.uint8), rounded_with_its_scales.view(torch.uint8))
    # so a value on a rounding boundary may round the other way: to the neighbouring code, never further
    codes, expected_codes = quantized.view(torch.uint8).int(), expected.view(torch.uint8).int()
    assert ((codes - expected_codes).abs() <= 1).all()


@pytest.mark.parametrize("fold", ["norm", "silu_mul"])
@pytest.mark.parametrize(("tokens", "columns"), [(37, 200), (1116, 4096), (1116, 12288)])
def test_activation_kernel_forms_the_input_like_the_torch_ops(fold: str, tokens: int, columns: int) -> None:
    """The kernel's RMS norm and ``silu(gate) * up`` give the products' inputs the torch ops give
    (``product_input``), to within one bf16 rounding of the input where the two sum the squares
    in another order, and so codes at most one apart."""
    from framewise.core.kernels.fp8_row_quant import quantize_rows

    width = 2 * columns if fold == "silu_mul" else columns
    magnitudes = torch.logspace(-3, 2, tokens, device=DEVICE)[:, None]
    x = (torch.randn(tokens, width, device=DEVICE) * magnitudes).to(torch.bfloat16)
    norm = (torch.rand(columns, device=DEVICE, dtype=torch.bfloat16) + 0.5, 1e-6) if fold == "norm" else None
    quantized, scales = quantize_rows(x, norm, silu_mul=fold == "silu_mul")
    formed = product_input(x, norm, fold == "silu_mul")
    expected, expected_scales = quantize_per_channel(formed)
    assert quantized.shape == (tokens, columns) and scales.shape == (tokens, 1)
    torch.testing.assert_close(scales, expected_scales, rtol=2 ** -7, atol=0)
    codes, expected_codes = quantized.view(torch.uint8).int(), expected.view(torch.uint8).int()
    assert ((codes - expected_codes).abs() <= 1).all()
    assert (codes == expected_codes).float().mean() > 0.99


@pytest.mark.parametrize("fold", ["norm", "silu_mul"])
def test_the_tensor_core_path_forms_the_input_it_is_given(fold: str) -> None:
    weight, scales, reference = fp8_weight(4096, 4096, "channel")
    width = 8192 if fold == "silu_mul" else 4096
    x = torch.randn(1116, width, device=DEVICE, dtype=torch.bfloat16)
    norm = (torch.rand(4096, device=DEVICE, dtype=torch.bfloat16) + 0.5, 1e-6) if fold == "norm" else None
    out = fp8_linear(x, weight, scales, "channel", path="tensor_cores", norm=norm, silu_mul=fold == "silu_mul")
    expected = F.linear(product_input(x, norm, fold == "silu_mul"), reference)
    for token in range(0, 1116, 139):
        assert relative_error(out[token], expected[token]) < 0.05


def test_activation_kernel_leaves_an_all_zero_row_zero() -> None:
    from framewise.core.kernels.fp8_row_quant import quantize_rows

    quantized, scales = quantize_rows(torch.zeros(3, 256, device=DEVICE, dtype=torch.bfloat16))
    assert torch.equal(quantized.float(), torch.zeros(3, 256, device=DEVICE)) and (scales > 0).all()


def test_prefill_picks_tensor_cores_where_the_card_has_them() -> None:
    capability = torch.cuda.get_device_capability()
    expected = "tensor_cores" if capability >= (8, 9) else "dequantize"
    assert prefill_path(torch.device(DEVICE), "channel", (4096, 4096), torch.bfloat16) == expected
    assert prefill_path(torch.device(DEVICE), "channel", (4096, 4096), torch.float16) == "dequantize"
    assert prefill_path(torch.device(DEVICE), "block", (4096, 4096), torch.bfloat16) == "dequantize"


def test_quantize_on_load_never_holds_the_bf16_model_on_the_device(tmp_path: Path) -> None:
    """16 linear layers of 1024x1024 (32 MiB in bf16, 16 MiB in FP8) quantized while loading: the
    device's peak stays within one layer's temporaries of the FP8 steady state."""
    names = [f"model.language_model.layers.{i}.mlp.up_proj" for i in range(16)]
    save_file({f"{name}.weight": torch.randn(1024, 1024, dtype=torch.bfloat16) for name in names},
              tmp_path / "model.safetensors")
    with torch.device("meta"):
        model = nn.Module()
        for name in names:
            parent = model
            for part in name.split(".")[:-1]:
                if not hasattr(parent, part):
                    parent.add_module(part, nn.Module())
                parent = getattr(parent, part)
            parent.add_module("up_proj", nn.Linear(1024, 1024, bias=False))
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    report = loading.load_checkpoint(model, [tmp_path / "model.safetensors"], Fp8QuantizedOnLoad(), torch.device(DEVICE),
                                     torch.bfloat16)
    torch.cuda.synchronize()
    steady = torch.cuda.memory_allocated() - before
    peak = torch.cuda.max_memory_allocated() - before
    assert len(report.quantized_on_load) == 16 and report.missing == []
    assert steady == pytest.approx(16 * (1024 * 1024 + 1024 * 4), rel=0.01)
    # one layer's bf16 source, its float32 copy, the scaled copy, the e4m3 result, and its rows'
    # float32 scales (the H100 measured exactly these bytes above the bound without the scales)
    one_layer_temporaries = 1024 * 1024 * (2 + 4 + 4 + 1) + 1024 * 4
    assert peak <= steady + one_layer_temporaries < 32 * 2**20
