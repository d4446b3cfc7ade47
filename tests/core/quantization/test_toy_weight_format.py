"""A weight format written and registered by the tests alone: int8 weights with one float32 scale
per output channel, quantized while a float checkpoint loads, multiplied by dequantizing. One class,
its linear layer and its products, and one registry call: the demo model then loads through the
real engine in it (``--dtype int8``), answers the demo clips as in float32, and the memory
estimate counts its bytes."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from framewise.core import settings as settings_module
from framewise.core.decoding.dense_layers import step_kernels_unavailable
from framewise.core.held_memory import LANGUAGE_PART
from framewise.core.loading import estimate_memory
from framewise.core.quantization.registry import (
    choose_weight_format,
    format_settings,
    register_weight_format,
    unregister_weight_format,
)
from framewise.core.quantization.float_weights import FloatProducts
from framewise.core.quantization.weight_format import Norm, WeightFormat, linear_bias, product_input
from framewise.core.settings import EncoderSettings, ModelSettings, SamplingSettings
from training.evaluate import HELD_OUT_SEEDS, Answerer, normalize

INT8_MAX = 127
CLIPS = 2


def dequantized(weight: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The (N, K) weight in ``dtype`` from its int8 values and (N, 1) scales."""
    return (weight.float() * scale.float()).to(dtype)


class Int8Products(FloatProducts):
    """Products with int8 weights: the weight dequantized to the input's dtype, then ``F.linear``;
    no Triton step kernels (a step runs in torch ops)."""

    weight_dtype = "int8"
    has_step_kernels = False

    def prefill(
        self, x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor | None, *,
        norm: Norm | None = None, silu_mul: bool = False,
    ) -> torch.Tensor:
        assert scale is not None
        return F.linear(product_input(x, norm, silu_mul), dequantized(weight, scale, x.dtype))

    step = prefill


INT8_PRODUCTS = Int8Products()


class Int8Linear(nn.Module):
    """``weight`` int8 (out, in), ``weight_scale`` float32 (out, 1), the bias in the activations' dtype."""

    products = INT8_PRODUCTS

    def __init__(self, weight: torch.Tensor, weight_scale: torch.Tensor, bias: torch.Tensor | None) -> None:
        super().__init__()
        self.out_features, self.in_features = weight.shape
        self.register_buffer("weight", weight)
        self.register_buffer("weight_scale", weight_scale)
        self.bias = None if bias is None else nn.Parameter(bias, requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = INT8_PRODUCTS.prefill(x, self.weight, self.weight_scale)
        return out if self.bias is None else out + self.bias


class Int8OnLoad(WeightFormat):
    name = "int8 weight-only (per channel, quantized on load)"
    weight_dtype = "int8"
    setting = "int8"
    products = INT8_PRODUCTS

    def should_quantize(self, module_name: str, keep_float: Callable[[str], bool]) -> bool:
        return not keep_float(module_name)

    def quantized_linear(self, module: nn.Linear, weight: torch.Tensor, device: torch.device, out) -> Int8Linear:
        rows = weight.to(device, torch.float32)
        scale = (rows.abs().amax(dim=1, keepdim=True) / INT8_MAX).clamp(min=1e-12)
        quantized = (rows / scale).round().clamp(-INT8_MAX, INT8_MAX).to(torch.int8)
        return Int8Linear(quantized, scale, linear_bias(module))

    def linear_bytes(self, weight_shape: tuple[int, int], activations: torch.dtype) -> int:
        rows, columns = weight_shape
        return rows * columns + rows * 4


@pytest.fixture(scope="module")
def int8_format() -> Iterator[type[Int8OnLoad]]:
    """The toy format registered, and ``int8`` among the dtype choices, for this module's tests."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(settings_module, "DTYPES", (*settings_module.DTYPES, Int8OnLoad.setting))
        register_weight_format(Int8OnLoad)
        try:
            yield Int8OnLoad
        finally:
            unregister_weight_format(Int8OnLoad)


@pytest.fixture(scope="module")
def answered(int8_format: type[Int8OnLoad]) -> dict[str, tuple[Answerer, list[str]]]:
    """The engine of each dtype (float32, int8) on the CPU, and its answers to the canonical
    questions about the first held-out clips."""
    encoder = EncoderSettings(use_graphs=False)
    answered = {}
    for dtype in ("float32", "int8"):
        answerer = Answerer(ModelSettings(source="demo", device="cpu", dtype=dtype), encoder)
        answered[dtype] = answerer, [normalize(a.answer) for seed in HELD_OUT_SEEDS[:CLIPS]
                                     for a in answerer.answer_all(seed, SamplingSettings()) if a.wording == 0]
    return answered


def test_registering_a_format_makes_its_setting_choose_it(int8_format: type[Int8OnLoad]) -> None:
    cpu = torch.device("cpu")
    assert format_settings()[-1] == "int8"
    assert isinstance(choose_weight_format({"model_type": "qwen3_vl"}, "int8", cpu), Int8OnLoad)
    unregister_weight_format(Int8OnLoad)
    try:
        assert "int8" not in format_settings()
        assert not choose_weight_format({"model_type": "qwen3_vl"}, "int8", cpu).quantized
    finally:
        register_weight_format(Int8OnLoad)


@pytest.mark.timeout(600)
def test_the_demo_model_loads_and_answers_in_a_format_the_tests_registered(answered) -> None:
    answerer, answers = answered["int8"]
    engine = answerer.engine
    layers = [module for module in engine.loaded.model.modules() if isinstance(module, Int8Linear)]
    assert len(layers) == 7 * engine.loaded.model.config.text_config.num_hidden_layers
    assert engine.parts.decoder.language.fused_steps  # the dense passes ran the format's products
    info = engine.info()
    assert (info.weight_dtype, info.dtype) == ("int8", "float32")
    # Every answer the float32 model gives, word for word: int8 with a scale per row rounds each
    # weight by at most half a step of 1/127 of its row's largest, finer than the FP8 format's
    # 3-bit mantissa, whose answers agree on 90 % of these questions.
    assert len(answers) >= 5 and answers == answered["float32"][1]


def test_the_memory_estimate_counts_the_formats_bytes(answered) -> None:
    engine = answered["int8"][0].engine
    estimate = estimate_memory(engine.settings)
    held = engine.info().held_memory
    assert estimate.weights == held.weight_total
    layers = [module for module in engine.loaded.model.modules() if isinstance(module, Int8Linear)]
    shares = {(share.part, share.dtype): share.size for share in held.weights}
    assert shares[(LANGUAGE_PART, "int8")] == sum(layer.weight.numel() for layer in layers)
    float32 = estimate_memory(engine.settings.replace("model", dtype="float32"))
    float_bytes = sum(4 * layer.weight.numel() for layer in layers)
    int8_bytes = sum(layer.weight.numel() + 4 * layer.out_features for layer in layers)
    # float32 keeps the tower in float32; a format, like auto, in bfloat16 on a CPU that multiplies it natively
    tower = engine.loaded.family.vision_tower(engine.loaded.model)
    tower_bytes = sum((4 - parameter.element_size()) * parameter.numel() for parameter in tower.parameters())
    assert float32.weights - estimate.weights == float_bytes - int8_bytes + tower_bytes


def test_a_format_without_step_kernels_keeps_the_step_in_torch_ops() -> None:
    """On a GPU the decode step would run through Triton kernels; a format with none says so."""
    layer = type("Layer", (), {"products": INT8_PRODUCTS})()
    config = type("Config", (), {"rope_parameters": None})()
    reason = step_kernels_unavailable(torch.device("cuda"), config, [layer])  # type: ignore[list-item]
    assert reason == "the weight format of its linear layers has no step kernels"
