"""Qwen3.5 as a model family (a tiny random-weight checkpoint on the CPU): the registry line, limits,
loading in float and in each FP8 format with the layers that stay float, cancel points, the layer
layout, and the tower through the encoder's graph path with no deepstack outputs."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from framewise.core.encoding.eager import EagerVisionEncoder
from framewise.core.encoding.manager import GraphVisionEncoder
from framewise.core.families import family_for, supported_model_types
from framewise.core.families.qwen3_5.language import Qwen35LanguageModel
from framewise.core.families.qwen3_5.weights import QUANTIZED_LINEAR
from framewise.core.families.qwen3_vl.limits import QWEN3_VL_LIMITS
from framewise.core.loading import load_model
from framewise.core.quantization.fp8 import dequantize
from framewise.core.quantization.linear import Fp8Linear
from framewise.core.settings import EncoderSettings, ModelSettings
from tests.core.families.qwen3_5.checkpoint import write_tiny_checkpoint
from tests.core.families.qwen3_vl.test_adapter import vision_item
from tests.core.quantization.fp8_checkpoints import BLOCK_CONFIG, block_fp8

QWEN3_5 = family_for("qwen3_5")
# Every linear layer of the tiny model's language layers (two Gated DeltaNet layers, one full-attention layer).
LINEAR_LAYER_NAMES = {
    "linear_attention": ("linear_attn.in_proj_qkv", "linear_attn.in_proj_z", "linear_attn.in_proj_b",
                         "linear_attn.in_proj_a", "linear_attn.out_proj"),
    "full_attention": ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj"),
}
MLP = ("mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")
LAYER_KINDS = ("linear_attention", "linear_attention", "full_attention")
KEPT_FLOAT_IN_LAYERS = ("linear_attn.in_proj_b", "linear_attn.in_proj_a")


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    return write_tiny_checkpoint(tmp_path_factory.mktemp("qwen3_5") / "tiny", seed=1)


def loaded(checkpoint: Path, dtype: str = "float32"):
    return load_model(ModelSettings(source=str(checkpoint), device="cpu", dtype=dtype))


def language_linears() -> list[str]:
    """Module names of every linear layer of the tiny model's language layers."""
    return [
        f"model.language_model.layers.{index}.{name}"
        for index, kind in enumerate(LAYER_KINDS)
        for name in (*LINEAR_LAYER_NAMES[kind], *MLP)
    ]


def fp8_names(model: torch.nn.Module) -> set[str]:
    return {name for name, module in model.named_modules() if isinstance(module, Fp8Linear)}


def first_logits(loaded_model) -> torch.Tensor:
    """The hybrid language model's logits (1, vocab) after a text prompt of 12 tokens."""
    language = Qwen35LanguageModel(loaded_model.model)
    ids = torch.arange(3, 15)[None]
    positions = language.positions(ids, torch.zeros_like(ids), ())
    with torch.inference_mode():
        return language.prefill(language.new_state(64), 0, ids, positions.rope, None)


def test_one_registry_line_loads_qwen3_5_with_qwen3_vls_vision_bounds() -> None:
    assert "qwen3_5" in supported_model_types() and QWEN3_5.model_types == ("qwen3_5",)
    assert QWEN3_5.name == QWEN3_5.limits.name == "Qwen3.5" and QWEN3_5 is not family_for("qwen3_vl")
    assert dataclasses.replace(QWEN3_5.limits, name=QWEN3_VL_LIMITS.name) == QWEN3_VL_LIMITS
    assert QWEN3_5.chat_template_options == {"enable_thinking": False}


def test_a_float_checkpoint_loads_with_its_family_adapter_and_limits(checkpoint: Path) -> None:
    model = loaded(checkpoint)
    assert model.family is QWEN3_5 and model.limits == QWEN3_5.limits
    assert isinstance(model.adapter.language_model(), Qwen35LanguageModel)
    stored = load_file(checkpoint / "model.safetensors")
    held = model.model.state_dict()
    assert all(torch.equal(held[name], tensor) for name, tensor in stored.items())
    assert not fp8_names(model.model)


def test_fp8_quantizes_the_large_projections_and_keeps_the_rest_float(checkpoint: Path) -> None:
    model = loaded(checkpoint, "fp8")
    expected = {name for name in language_linears() if not name.endswith(KEPT_FLOAT_IN_LAYERS)}
    assert fp8_names(model.model) == expected == {name for name in language_linears() if QUANTIZED_LINEAR.fullmatch(name)}
    layers = model.model.model.language_model.layers
    assert all(isinstance(getattr(layers[0].linear_attn, name), torch.nn.Linear) for name in ("in_proj_a", "in_proj_b"))
    assert isinstance(layers[0].linear_attn.conv1d, torch.nn.Conv1d)
    assert model.model.lm_head.weight.dtype == torch.float32 and not fp8_names(model.model.model.visual)


@pytest.mark.parametrize("dtype", ["fp8", "auto"], ids=["quantized on load", "block checkpoint"])
def test_fp8_loads_the_fused_steps_stacks_whole_and_laying_them_out_copies_nothing(
    checkpoint: Path, tmp_path: Path, dtype: str
) -> None:
    model = loaded(checkpoint if dtype == "fp8" else block_fp8_checkpoint(checkpoint, tmp_path / "block"), dtype)
    layers = model.model.model.language_model.layers
    stacks = {0: ("linear_attn", ("in_proj_qkv", "in_proj_z")), 2: ("self_attn", ("q_proj", "k_proj", "v_proj"))}
    before = {}
    for index, (mixer, names) in stacks.items():
        modules = [getattr(getattr(layers[index], mixer), name) for name in (*names,)] + [layers[index].mlp.up_proj]
        before[index] = [module.weight.data_ptr() for module in modules]
        for first, second in zip(modules[:-2], modules[1:-1]):  # consecutive rows of one storage
            assert second.weight.data_ptr() == first.weight.data_ptr() + first.weight.numel()
    language = Qwen35LanguageModel(model.model, fused_steps=True, step_kernels=False)
    for index, (mixer, names) in stacks.items():
        modules = [getattr(getattr(layers[index], mixer), name) for name in names] + [layers[index].mlp.up_proj]
        assert [module.weight.data_ptr() for module in modules] == before[index]
        assert language._step.layers[index].inputs[0].weight.data_ptr() == before[index][0]


def assert_answers_as_its_rounded_weights(quantized, checkpoint: Path, kept: tuple[str, ...] = ()) -> None:
    """``quantized`` (a loaded model) gives the logits of the float checkpoint whose quantized layers'
    weights are rounded as ``quantized`` holds them, and whose layers ``kept`` take ``quantized``'s
    float weights: only the weights differ, not the arithmetic."""
    reference = loaded(checkpoint)
    with torch.no_grad():
        for name in fp8_names(quantized.model):
            layer = quantized.model.get_submodule(name)
            rounded = dequantize(layer.weight, layer.weight_scale, layer.scheme, torch.float32)
            reference.model.get_submodule(name).weight.copy_(rounded)
        for name in kept:
            reference.model.get_submodule(name).weight.copy_(quantized.model.get_submodule(name).weight)
    expected = first_logits(reference)
    assert (first_logits(quantized) - expected).abs().max() <= 1e-5 * expected.abs().max()


def test_quantized_on_load_answers_as_the_float_model_with_rounded_weights(checkpoint: Path) -> None:
    assert_answers_as_its_rounded_weights(loaded(checkpoint, "fp8"), checkpoint)


def block_fp8_checkpoint(source: Path, folder: Path) -> Path:
    """``source`` stored as Qwen's block FP8: every linear layer of the language layers, the beta and
    decay projections included (a checkpoint may store them so), with its ``weight_scale_inv``."""
    shutil.copytree(source, folder)
    stored = {}
    for name, tensor in load_file(source / "model.safetensors").items():
        module = name.removesuffix(".weight")
        if module in language_linears() and name.endswith(".weight"):
            stored[name], stored[f"{module}.weight_scale_inv"] = block_fp8(tensor)
        else:
            stored[name] = tensor
    save_file(stored, folder / "model.safetensors")
    config = json.loads((folder / "config.json").read_text())
    config["quantization_config"] = BLOCK_CONFIG
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_a_block_fp8_checkpoint_loads_its_projections_and_turns_the_kept_ones_back_into_floats(
    checkpoint: Path, tmp_path: Path
) -> None:
    folder = block_fp8_checkpoint(checkpoint, tmp_path / "block")
    model = loaded(folder, "auto")
    assert model.weight_format.weight_dtype == "fp8"
    assert fp8_names(model.model) == {name for name in language_linears() if QUANTIZED_LINEAR.fullmatch(name)}
    decay = model.model.model.language_model.layers[1].linear_attn.in_proj_a
    stored = load_file(folder / "model.safetensors")
    prefix = "model.language_model.layers.1.linear_attn.in_proj_a"
    scales = stored[f"{prefix}.weight_scale_inv"]  # one block: the layer is smaller than 128 x 128
    assert type(decay) is torch.nn.Linear
    torch.testing.assert_close(decay.weight, stored[f"{prefix}.weight"].float() * scales)
    kept = tuple(name for name in language_linears() if name.endswith(KEPT_FLOAT_IN_LAYERS))
    assert_answers_as_its_rounded_weights(model, checkpoint, kept)


def test_a_cancel_is_checked_before_every_layers_mlp(checkpoint: Path) -> None:
    """Linear-attention layers are not called as modules, their MLPs are: a hook on each fires once
    per pass, in layer order."""
    model = loaded(checkpoint)
    points = QWEN3_5.cancel_points(model.model)
    assert list(points.vision) == list(model.model.model.visual.blocks)
    fired: list[int] = []
    handles = [module.register_forward_pre_hook(lambda module, args, index=index: fired.append(index))
               for index, module in enumerate(points.language)]
    try:
        first_logits(model)
    finally:
        for handle in handles:
            handle.remove()
    assert fired == [0, 1, 2]


def test_the_layer_layout_names_each_kind_and_counts_keys_and_values_of_the_full_layers(checkpoint: Path) -> None:
    config = json.loads((checkpoint / "config.json").read_text())
    layout = QWEN3_5.language_layout(config)
    assert layout.describe() == "2 linear-attention + 1 full-attention layers"
    language = loaded(checkpoint).adapter.language_model()
    assert (layout.kv_layers, layout.kv_heads, layout.head_dim) == (1, 2, 64)
    assert language.state_bytes(1) - language.state_bytes(0) == 2 * 2 * 64 * 4  # float32 keys and values


def test_the_tower_through_the_graph_path_equals_eager_with_no_deepstack_outputs(checkpoint: Path) -> None:
    adapter = loaded(checkpoint).adapter
    assert len(adapter.graph_buffers(64, 4).outputs) == 1
    items = [vision_item((1, 4, 6), "image", 1), vision_item((3, 4, 4), "video", 2)]
    with torch.inference_mode():
        expected = EagerVisionEncoder(adapter).encode(items)
    for fused in (False, True):
        settings = EncoderSettings(budgets=(64, 128), max_items_per_batch=4, max_frame_pairs_per_batch=8, fuse_kernels=fused)
        encoder = GraphVisionEncoder(adapter, settings, direct=True, limits=QWEN3_5.limits)
        try:
            got = encoder.encode(items)
        finally:
            encoder.clear()
        for mine, theirs in zip(got.items, expected.items, strict=True):
            assert mine.deepstack == theirs.deepstack == ()
            torch.testing.assert_close(mine.embeds, theirs.embeds, rtol=1e-5, atol=1e-5)


def test_the_quantized_layers_pattern_names_no_layer_outside_the_language_layers() -> None:
    for name in ("model.visual.blocks.0.attn.qkv", "lm_head", "model.language_model.layers.0.linear_attn.in_proj_b",
                 "mtp.layers.0.mlp.gate_proj"):
        assert not QUANTIZED_LINEAR.fullmatch(name), name
    assert re.fullmatch(QUANTIZED_LINEAR, "model.language_model.layers.31.linear_attn.in_proj_qkv")
