"""Reading a checkpoint's weight layout from config.json, and checking its FP8 weights' scales."""

from __future__ import annotations

import pytest

from framewise.core.errors import ModelLoadError, QuantizationFormatError, describe_error
from framewise.core.quantization.formats import (
    UNQUANTIZED,
    TensorHeader,
    CheckpointLayout,
    read_checkpoint_layout,
    quantized_weight_scales,
)

QWEN_FP8 = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [128, 128],
            "modules_to_not_convert": ["lm_head", "model.visual"]}


def compressed_tensors(weights: dict, activations: dict | None = None, fmt: str = "float-quantized") -> dict:
    group = {"targets": ["Linear"], "weights": weights, "input_activations": activations}
    return {"quant_method": "compressed-tensors", "format": fmt, "config_groups": {"group_0": group},
            "ignore": ["lm_head", "re:.*visual.*"], "quantization_status": "compressed"}


FP8_DYNAMIC = compressed_tensors(
    {"num_bits": 8, "type": "float", "strategy": "channel", "symmetric": True, "dynamic": False},
    {"num_bits": 8, "type": "float", "strategy": "token", "symmetric": True, "dynamic": True},
)


def test_unquantized_checkpoint() -> None:
    assert read_checkpoint_layout({"model_type": "qwen3_vl"}) is UNQUANTIZED


def test_qwen_block_fp8() -> None:
    fmt = read_checkpoint_layout({"quantization_config": QWEN_FP8})
    assert (fmt.scheme, fmt.scale_suffix) == ("block", "weight_scale_inv")
    assert fmt.scale_name("model.layers.0.q_proj.weight") == "model.layers.0.q_proj.weight_scale_inv"
    assert fmt.scale_shape((300, 128)) == (3, 1)
    assert fmt.excludes("lm_head") and fmt.excludes("model.visual.blocks.0.attn.qkv")
    assert not fmt.excludes("model.language_model.layers.0.mlp.up_proj")


def test_compressed_tensors_fp8_dynamic() -> None:
    fmt = read_checkpoint_layout({"quantization_config": FP8_DYNAMIC})
    assert (fmt.scheme, fmt.scale_suffix) == ("channel", "weight_scale")
    assert fmt.scale_shape((300, 128)) == (300, 1)
    assert fmt.excludes("model.visual.merger.linear_fc1")  # a re: pattern
    assert fmt.excludes("lm_head") and not fmt.excludes("model.language_model.layers.3.self_attn.o_proj")


def test_compressed_tensors_weight_only_fp8_and_block_strategy() -> None:
    weight_only = compressed_tensors({"num_bits": 8, "type": "float", "strategy": "channel"})
    assert read_checkpoint_layout({"quantization_config": weight_only}).scheme == "channel"
    block = compressed_tensors({"num_bits": 8, "type": "float", "strategy": "block", "block_structure": [128, 128]},
                               {"num_bits": 8, "type": "float", "strategy": "group", "group_size": 128, "dynamic": True})
    assert read_checkpoint_layout({"quantization_config": block}).scheme == "block"


@pytest.mark.parametrize(("quantization", "named"), [
    ({"quant_method": "awq", "bits": 4}, "awq"),
    ({"quant_method": "gptq", "bits": 4}, "gptq"),
    ({**QWEN_FP8, "weight_block_size": [64, 64]}, "64x64"),
    ({**QWEN_FP8, "weight_block_size": None}, "per-tensor"),
    ({**QWEN_FP8, "weight_block_size": "128"}, 'weight_block_size "128"'),
    ({**QWEN_FP8, "weight_block_size": [128]}, "weight_block_size [128]"),
    ({key: value for key, value in QWEN_FP8.items() if key != "quant_method"}, "names no quant_method"),
    (compressed_tensors({"num_bits": 8, "type": "float", "strategy": "block", "block_structure": [64, 64]}),
     "per block of [64, 64]"),
    ({**QWEN_FP8, "activation_scheme": "static"}, "static activation scales"),
    (compressed_tensors({"num_bits": 8, "type": "int", "strategy": "channel"}, fmt="int-quantized"), "int-quantized"),
    (compressed_tensors({"num_bits": 4, "type": "int", "strategy": "group"}, fmt="float-quantized"), "int 4-bit"),
    (compressed_tensors({"num_bits": 8, "type": "float", "strategy": "tensor"},
                        {"num_bits": 8, "type": "float", "strategy": "tensor", "dynamic": False}), "per tensor"),
    (compressed_tensors({"num_bits": 8, "type": "float", "strategy": "channel"},
                        {"num_bits": 8, "type": "float", "strategy": "token", "dynamic": False}), "static activation"),
])
def test_unsupported_formats_name_the_format_and_an_alternative(quantization: dict, named: str) -> None:
    with pytest.raises(QuantizationFormatError) as caught:
        read_checkpoint_layout({"quantization_config": quantization})
    message = str(caught.value)
    assert named in message and "--dtype fp8" in message and "-FP8" in message
    # a model-load error like any other: the window shows it next to the model setting
    assert isinstance(caught.value, ModelLoadError)
    assert describe_error(caught.value).field == "model.source"


BLOCK = CheckpointLayout("block", "block FP8", "weight_scale_inv", ("lm_head",))
CHANNEL = CheckpointLayout("channel", "channel FP8", "weight_scale", ())


def headers(**tensors: tuple[str, tuple[int, ...]]) -> dict[str, TensorHeader]:
    return {name.replace("__", "."): TensorHeader(dtype, shape) for name, (dtype, shape) in tensors.items()}


def test_matching_scales_are_paired_with_their_weights() -> None:
    stored = headers(
        a__q__weight=("F8_E4M3", (300, 200)), a__q__weight_scale_inv=("F32", (3, 2)),
        a__norm__weight=("BF16", (200,)), lm_head__weight=("BF16", (10, 200)),
    )
    assert quantized_weight_scales(stored, BLOCK) == {"a.q.weight": "a.q.weight_scale_inv"}
    channel = headers(a__q__weight=("F8_E4M3", (300, 200)), a__q__weight_scale=("BF16", (300, 1)),
                      b__q__weight=("F8_E4M3", (4, 8)), b__q__weight_scale=("F32", (4,)))
    assert quantized_weight_scales(channel, CHANNEL) == {"a.q.weight": "a.q.weight_scale", "b.q.weight": "b.q.weight_scale"}


@pytest.mark.parametrize(("stored", "fmt", "complaint"), [
    (headers(a__q__weight=("F8_E4M3", (300, 200))), BLOCK, "a.q.weight has no weight_scale_inv"),
    (headers(a__q__weight=("F8_E4M3", (300, 200)), a__q__weight_scale_inv=("F32", (2, 2))), BLOCK,
     "a.q.weight_scale_inv has shape [2, 2], [3, 2] expected"),
    (headers(a__q__weight=("F8_E4M3", (30, 20)), a__q__weight_scale=("F32", (1, 30))), CHANNEL, "[30, 1] expected"),
    (headers(lm_head__weight=("F8_E4M3", (128, 128)), lm_head__weight_scale_inv=("F32", (1, 1))), BLOCK,
     "lm_head.weight is FP8 although config.json keeps its module unquantized"),
    (headers(a__q__weight=("BF16", (128, 128)), a__q__weight_scale_inv=("F32", (1, 1))), BLOCK,
     "a.q.weight_scale_inv belongs to no FP8 weight"),
    (headers(a__q__weight=("BF16", (128, 128))), BLOCK, "no tensor is stored in FP8"),
    (headers(a__q__weight=("F8_E4M3", (128, 128))), UNQUANTIZED, "config.json has no quantization_config"),
    (headers(a__q__weight=("I8", (128, 128))), UNQUANTIZED, "neither floating point nor FP8"),
    (headers(a__q__bias=("F8_E4M3", (128,))), CHANNEL, "a.q.bias is FP8 but not a 2-D weight"),
])
def test_mismatched_scales_are_refused_with_names(stored: dict, fmt: CheckpointLayout, complaint: str) -> None:
    with pytest.raises(QuantizationFormatError, match="do not match its quantization") as caught:
        quantized_weight_scales(stored, fmt)
    assert complaint in str(caught.value)


def test_many_problems_of_a_kind_are_counted_with_the_first_few_named() -> None:
    stored = headers(**{f"a{index}__weight": ("F8_E4M3", (128, 128)) for index in range(5)})
    with pytest.raises(QuantizationFormatError) as caught:
        quantized_weight_scales(stored, BLOCK)
    assert "5 FP8 weights have no weight_scale_inv (a0.weight, a1.weight, a2.weight, and 2 more)" in str(caught.value)


def test_scales_of_the_other_format_are_named_as_the_likely_cause() -> None:
    stored = headers(a__weight=("F8_E4M3", (128, 128)), a__weight_scale=("F32", (128, 1)))
    with pytest.raises(QuantizationFormatError) as caught:
        quantized_weight_scales(stored, BLOCK)
    assert "a.weight has no weight_scale_inv; its scales are named weight_scale, as compressed-tensors FP8" in str(caught.value)
    with pytest.raises(QuantizationFormatError) as caught:
        quantized_weight_scales(headers(a__weight=("F8_E4M3", (128, 128))), BLOCK)
    assert "named" not in str(caught.value)


def test_an_e5m2_weight_is_named_as_e5m2() -> None:
    stored = headers(a__weight=("F8_E4M3", (128, 128)), a__weight_scale_inv=("F32", (1, 1)),
                     b__weight=("F8_E5M2", (128, 128)), b__weight_scale_inv=("F32", (1, 1)))
    with pytest.raises(QuantizationFormatError) as caught:
        quantized_weight_scales(stored, BLOCK)
    message = str(caught.value)
    assert "b.weight is stored in FP8 e5m2; Framewise runs e4m3" in message
    assert "neither floating point" not in message and "belongs to no FP8 weight" not in message


def test_unquantized_headers_pass() -> None:
    assert quantized_weight_scales(headers(a__weight=("BF16", (4, 4)), b__weight=("F32", (4,))), UNQUANTIZED) == {}
