"""``Fp8Linear`` and the prefill products: each path against the dequantized weight's product."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from framewise.core.quantization.fp8 import dequantize
from framewise.core.quantization.linear import Fp8Linear
from framewise.core.quantization.matmul import fp8_linear, prefill_path
from framewise.core.quantization.weight_format import product_input


def relative_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    actual, expected = actual.detach().double(), expected.detach().double()
    return float((actual - expected).norm() / expected.norm())


@pytest.mark.parametrize("scheme", ["block", "channel"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fp8_linear_matches_its_dequantized_weight(scheme: str, dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    linear = nn.Linear(200, 300, bias=True, dtype=dtype)
    layer = Fp8Linear.from_linear(linear, scheme)
    assert (layer.in_features, layer.out_features) == (200, 300)
    assert layer.weight.dtype == torch.float8_e4m3fn and layer.weight_scale.dtype == torch.float32
    assert [name for name, _ in layer.named_parameters()] == ["bias"]  # the FP8 weight is a buffer
    x = torch.randn(2, 7, 200, dtype=dtype)
    out = layer(x)
    assert out.shape == (2, 7, 300) and out.dtype == dtype
    expected = F.linear(x, dequantize(layer.weight, layer.weight_scale, scheme, dtype), linear.bias)
    assert relative_error(out, expected) < (1e-6 if dtype == torch.float32 else 1e-2)
    # and near the unquantized layer: e4m3 rounds each weight to within about 2.6 %
    assert relative_error(out, linear(x)) < 0.03


def test_fp8_linear_moves_with_the_model() -> None:
    layer = Fp8Linear.from_linear(nn.Linear(16, 32, bias=False), "channel")
    state = layer.state_dict()
    assert set(state) == {"weight", "weight_scale"} and state["weight_scale"].shape == (32, 1)
    weight = layer.weight.clone()
    layer.to(torch.bfloat16)  # a dtype cast leaves the FP8 weight and its float32 scales alone
    assert layer.weight.dtype == torch.float8_e4m3fn and layer.weight_scale.dtype == torch.float32
    assert torch.equal(layer.weight.view(torch.uint8), weight.view(torch.uint8))
    assert layer.to("meta").weight.is_meta  # while a move still moves them


def test_row_wise_tensor_core_arithmetic_on_the_cpu() -> None:
    """The tensor-core path's own arithmetic (activations quantized per token, both scales applied
    to float32 sums), forced on the CPU, where torch runs row-wise scaled products too."""
    torch.manual_seed(1)
    weight = torch.randn(384, 256) / 16
    layer = Fp8Linear.from_linear(_linear(weight), "channel")
    x = torch.randn(33, 256, dtype=torch.bfloat16) * torch.logspace(-2, 2, 33)[:, None].to(torch.bfloat16)
    fast = fp8_linear(x, layer.weight, layer.weight_scale, "channel", path="tensor_cores")
    reference = F.linear(x.float(), weight)
    assert fast.dtype == torch.bfloat16 and fast.shape == (33, 384)
    # every token keeps its own precision: activations are scaled per token
    for token in range(33):
        assert relative_error(fast[token], reference[token]) < 0.05


@pytest.mark.parametrize("path", ["tensor_cores", "dequantize"])
@pytest.mark.parametrize("fold", ["norm", "silu_mul"])
def test_a_product_forms_its_input_from_the_norm_or_the_gate_and_up(path: str, fold: str) -> None:
    """With ``norm`` or ``silu_mul`` each path multiplies what ``product_input`` forms, as if it had
    been given that input (on the CPU the tensor-core path quantizes with torch ops)."""
    torch.manual_seed(2)
    layer = Fp8Linear.from_linear(_linear(torch.randn(96, 64) / 8), "channel")
    x = torch.randn(5, 128 if fold == "silu_mul" else 64, dtype=torch.bfloat16)
    norm = (torch.rand(64, dtype=torch.bfloat16) + 0.5, 1e-6) if fold == "norm" else None
    weight, scales = layer.weight, layer.weight_scale
    folded = fp8_linear(x, weight, scales, "channel", path=path, norm=norm, silu_mul=fold == "silu_mul")
    formed = product_input(x, norm, fold == "silu_mul")
    assert formed.shape == (5, 64) and not torch.equal(formed, x[:, :64])
    assert torch.equal(folded, fp8_linear(formed, weight, scales, "channel", path=path))


def _linear(weight: torch.Tensor) -> nn.Linear:
    linear = nn.Linear(weight.shape[1], weight.shape[0], bias=False)
    linear.weight.data = weight
    return linear


@pytest.mark.parametrize("scheme", ["block", "channel"])
def test_the_cpu_dequantizes(scheme: str) -> None:
    assert prefill_path(torch.device("cpu"), scheme, (256, 256), torch.bfloat16) == "dequantize"


def test_the_environment_forces_a_prefill_path(monkeypatch: pytest.MonkeyPatch) -> None:
    from framewise.core.quantization import matmul

    layer = Fp8Linear.from_linear(nn.Linear(32, 16, bias=False), "channel")
    monkeypatch.setenv(matmul.FORCE_PATH_VARIABLE, "tensor_cores")
    chosen = []
    monkeypatch.setattr(matmul, "_rowwise_scaled_mm", lambda tokens, weight, scales, *fold: chosen.append("tc") or
                        torch.zeros(tokens.shape[0], weight.shape[0]))
    layer(torch.randn(3, 32))
    assert chosen == ["tc"]  # even on the CPU, where the default is to dequantize
    monkeypatch.setenv(matmul.FORCE_PATH_VARIABLE, "dequantize")
    layer(torch.randn(3, 32))
    assert chosen == ["tc"]
    monkeypatch.setenv(matmul.FORCE_PATH_VARIABLE, "fast")
    with pytest.raises(ValueError, match="tensor_cores or dequantize"):
        layer(torch.randn(3, 32))
