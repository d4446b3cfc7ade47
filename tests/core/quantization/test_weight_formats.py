"""Choosing a checkpoint's weight format once, from its config.json and the dtype setting; what each
format counts for the memory estimate; and which products a linear layer carries."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from framewise.core.errors import QuantizationFormatError
from framewise.core.quantization.float_weights import FLOAT_PRODUCTS, FLOAT_WEIGHTS
from framewise.core.quantization.fp8_formats import BlockFp8Checkpoint, ChannelFp8Checkpoint, Fp8QuantizedOnLoad
from framewise.core.quantization.fp8_products import FP8_PRODUCTS
from framewise.core.quantization.linear import Fp8Linear
from framewise.core.quantization.registry import choose_weight_format, declared_weight_format, format_settings, linear_products
from tests.core.quantization.fp8_checkpoints import BLOCK_CONFIG, CHANNEL_CONFIG

CPU = torch.device("cpu")
FLOAT_CONFIG = {"model_type": "qwen3_vl"}


@pytest.mark.parametrize("setting", ["auto", "float32", "bfloat16", "float16"])
def test_a_float_checkpoint_loads_as_float_weights_unless_the_setting_quantizes(setting: str) -> None:
    chosen = choose_weight_format(FLOAT_CONFIG, setting, CPU)
    assert chosen is FLOAT_WEIGHTS and not chosen.quantized and chosen.weight_dtype is None
    assert declared_weight_format(FLOAT_CONFIG) is None


def test_the_fp8_setting_quantizes_a_float_checkpoint_per_channel() -> None:
    chosen = choose_weight_format(FLOAT_CONFIG, "fp8", CPU)
    assert isinstance(chosen, Fp8QuantizedOnLoad) and chosen.weight_dtype == "fp8" and chosen.scheme == "channel"
    assert chosen.should_quantize("layers.0.q_proj", keep_float=lambda name: False)
    assert not chosen.should_quantize("visual.qkv", keep_float=lambda name: name.startswith("visual"))
    assert format_settings() == ("fp8",)


@pytest.mark.parametrize("setting", ["auto", "bfloat16", "fp8"])
@pytest.mark.parametrize(("quantization", "kind", "scheme"), [(BLOCK_CONFIG, BlockFp8Checkpoint, "block"),
                                                               (CHANNEL_CONFIG, ChannelFp8Checkpoint, "channel")])
def test_an_fp8_checkpoint_loads_as_stored_whatever_the_setting(quantization: dict, kind: type, scheme: str, setting: str) -> None:
    chosen = choose_weight_format({**FLOAT_CONFIG, "quantization_config": quantization}, setting, CPU)
    assert type(chosen) is kind and chosen.scheme == scheme and chosen.weight_dtype == "fp8"
    assert chosen.name == chosen.layout.description and chosen.layout.scheme == scheme
    assert not chosen.should_quantize("layers.0.q_proj", keep_float=lambda name: False)


def test_a_quantization_no_format_runs_is_refused_with_what_to_choose() -> None:
    with pytest.raises(QuantizationFormatError, match="quantized with awq.*--dtype fp8"):
        choose_weight_format({**FLOAT_CONFIG, "quantization_config": {"quant_method": "awq"}}, "auto", CPU)


@pytest.mark.parametrize(("chosen", "expected"), [
    (FLOAT_WEIGHTS, 300 * 200 * 2),
    (Fp8QuantizedOnLoad(), 300 * 200 + 300 * 4),
    (BlockFp8Checkpoint.declared({"quantization_config": BLOCK_CONFIG}), 300 * 200 + 3 * 2 * 4),
])
def test_each_format_counts_its_weight_and_scale_bytes(chosen, expected: int) -> None:
    assert chosen.linear_bytes((300, 200), torch.bfloat16) == expected


def test_a_linear_layer_carries_the_products_of_its_format() -> None:
    linear = nn.Linear(16, 32, bias=False)
    assert linear_products(linear) is FLOAT_PRODUCTS
    assert linear_products(Fp8Linear.from_linear(linear, "block")) is FP8_PRODUCTS["block"]
    assert linear_products(Fp8Linear.from_linear(linear, "channel")) is FP8_PRODUCTS["channel"]
    assert linear_products(nn.Embedding(4, 4)) is None


def test_block_scales_stack_only_over_whole_blocks() -> None:
    assert FP8_PRODUCTS["block"].stackable([256, 128, 100])
    assert not FP8_PRODUCTS["block"].stackable([100, 128])
    assert FP8_PRODUCTS["channel"].stackable([100, 128]) and FLOAT_PRODUCTS.stackable([100, 128])


def test_a_layer_stored_in_fp8_turns_back_into_an_equal_float_linear() -> None:
    source = nn.Linear(64, 48)
    stored = Fp8Linear.from_linear(source, "channel")
    linear = Fp8QuantizedOnLoad().float_linear(stored, torch.float32)
    assert type(linear) is nn.Linear and linear.weight.dtype == torch.float32
    x = torch.randn(3, 64)
    torch.testing.assert_close(linear(x), stored(x))
