"""Qwen3.5's fused decode step as torch ops (the arithmetic its Triton kernels follow) against the
model's own layers on a tiny random model: float32 and bf16, float and block-FP8 weights; the
layout's weights are views of the stacks, and the zero-centred norm of the step products rounds
as Qwen3.5's norm does."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from framewise.core.families.qwen3_5.language import Qwen35LanguageModel
from framewise.core.families.qwen3_5.mixers import norm_scale, zero_centred_rms_norm
from framewise.core.quantization.float_weights import FLOAT_PRODUCTS
from framewise.core.quantization.fp8_products import FP8_PRODUCTS
from framewise.core.quantization.linear import Fp8Linear
from framewise.core.quantization.weight_format import product_input, torch_step_products
from tests.core.families.qwen3_5.checkpoint import tiny_config, tiny_model
from tests.core.families.qwen3_5.test_qwen3_5_language import (
    MAX_TOKENS,
    assert_relatively_close,
    build_prompt,
    items_for,
    vision_rows,
)

STEPS = 6
# The largest logit difference allowed between the fused step and the model's layers, relative to
# the largest logit: float32 differs only in the order of sums; in bf16 a product summed in
# another order may round its last bit the other way (as the language tests allow against transformers).
RELATIVE = {torch.float32: 1e-5, torch.bfloat16: 2**-6}


def quantized(model: torch.nn.Module, scheme: str = "block") -> torch.nn.Module:
    """``model`` with its decoder layers' linear layers in FP8 of ``scheme``, in place, as a
    quantized format holds Qwen3.5 (in_proj_b and in_proj_a stay float)."""
    layers = model.model.language_model.layers
    for name, module in list(layers.named_modules()):
        if isinstance(module, torch.nn.Linear) and name.rpartition(".")[2] not in ("in_proj_a", "in_proj_b"):
            parent, _, child = name.rpartition(".")
            setattr(layers.get_submodule(parent), child, Fp8Linear.from_linear(module, scheme))
    return model


def greedy_steps(model: torch.nn.Module, fused: bool, steps: int = STEPS) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """A clip's prompt prefilled, then ``steps`` greedy decode steps, through the fused layout's
    stacked products and step as torch ops (``fused``) or the model's own layers: each step's
    logits, and the linear and KV states after the last."""
    language = Qwen35LanguageModel(model, fused_steps=fused, step_kernels=False)
    assert language.fused_steps == fused and not language.step_kernels
    dtype = model.model.language_model.norm.weight.dtype
    case = build_prompt(model.config, items_for("video", dtype))
    state = language.new_state(MAX_TOKENS)
    positions = language.positions(case.input_ids, case.token_types, (("video", case.items[0].grid),))
    logits = language.prefill(state, 0, case.input_ids, positions.rope, vision_rows(model, case))
    seen, length = [], case.input_ids.shape[1]
    for offset in range(steps):
        state.kv.view_length = MAX_TOKENS
        at = length + offset
        token = logits.argmax(dim=-1).view(1, 1)
        logits = language.step(state, language.embed(token), torch.tensor([at]), torch.tensor([at + positions.rope_offset]))
        seen.append(logits.clone())
    return seen, [*state.conv_states, *state.recurrent_states, *state.kv.keys, *state.kv.values]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("weights", ["float", "fp8"])
def test_the_fused_layout_as_torch_ops_prefills_and_steps_as_the_model_layers_do(dtype: torch.dtype, weights: str) -> None:
    """The prompt prefilled through the stacked projections, then the fused steps, against the modules'."""
    model = tiny_model(tiny_config(), seed=1, dtype=dtype)
    if weights == "fp8":
        quantized(model)
    with torch.inference_mode():
        layers_logits, layers_states = greedy_steps(model, fused=False)
        fused_logits, fused_states = greedy_steps(model, fused=True)
    assert [int(logits.argmax()) for logits in fused_logits] == [int(logits.argmax()) for logits in layers_logits]
    for ours, theirs in zip(fused_logits, layers_logits):
        assert_relatively_close(ours, theirs, RELATIVE[dtype])
    for ours, theirs in zip(fused_states, layers_states):
        assert_relatively_close(ours, theirs, RELATIVE[dtype])
    assert not torch.equal(fused_logits[0], fused_logits[1])  # the steps moved on


def test_the_layout_stacks_by_format_and_the_modules_weights_become_views_of_it() -> None:
    model = quantized(tiny_model(tiny_config(), seed=1, dtype=torch.bfloat16))
    language = Qwen35LanguageModel(model, fused_steps=True, step_kernels=False)
    layers = language._step.layers
    mixer = model.model.language_model.layers[0].linear_attn
    qkv_z, beta_decay = layers[0].inputs  # FP8 [qkv | z] and bf16 [b | a]
    assert qkv_z.rows == (mixer.in_proj_qkv.out_features, mixer.in_proj_z.out_features)
    assert qkv_z.weight.dtype == torch.float8_e4m3fn and beta_decay.weight.dtype == torch.bfloat16
    assert mixer.in_proj_z.weight.data_ptr() == qkv_z.weight[mixer.in_proj_qkv.out_features :].data_ptr()
    assert mixer.in_proj_a.weight.data_ptr() == beta_decay.weight[mixer.in_proj_b.out_features :].data_ptr()
    (qkv,) = layers[2].inputs  # the full-attention layer's q (with its gate), k and v
    attention = model.model.language_model.layers[2].self_attn
    assert qkv.rows == tuple(linear.out_features for linear in (attention.q_proj, attention.k_proj, attention.v_proj))
    assert attention.v_proj.weight_scale.data_ptr() == qkv.scale[-1:].data_ptr()
    bf16 = tiny_model(tiny_config(), seed=1, dtype=torch.bfloat16)
    (stacked,) = Qwen35LanguageModel(bf16, fused_steps=True, step_kernels=False)._step.layers[0].inputs
    assert stacked.weight.shape[0] == sum(stacked.rows) and len(stacked.rows) == 4  # [qkv | z | b | a]


def test_without_the_kernels_steps_run_the_model_layers_unless_asked() -> None:
    model = tiny_model(tiny_config(), seed=1)
    assert not Qwen35LanguageModel(model).fused_steps  # the CPU: no step kernels
    with pytest.raises(ValueError, match="CUDA"):
        Qwen35LanguageModel(model, step_kernels=True)
    with pytest.raises(ValueError, match="fused_steps=False"):
        Qwen35LanguageModel(model, fused_steps=False, step_kernels=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_a_float32_norm_weight_is_a_zero_centred_norm_and_one_in_the_activations_dtype_is_as_before(
    dtype: torch.dtype,
) -> None:
    generator = torch.Generator().manual_seed(0)
    x = (torch.randn(3, 256, generator=generator) * 4).to(dtype)
    norm = torch.nn.Module()
    norm.weight = torch.nn.Parameter((torch.rand(256, generator=generator) - 0.5).to(dtype))
    scale = norm_scale(norm)
    assert torch.equal(product_input(x, (scale, 1e-6)), zero_centred_rms_norm(x, scale, 1e-6))
    in_dtype = product_input(x, (scale.to(dtype), 1e-6))
    assert torch.equal(in_dtype, F.rms_norm(x, (256,), scale.to(dtype), 1e-6))
    if dtype == torch.bfloat16:  # rounded once at the end or not: somewhere the two differ
        assert not torch.equal(in_dtype, zero_centred_rms_norm(x, scale, 1e-6))


@pytest.mark.parametrize("products", [FLOAT_PRODUCTS, FP8_PRODUCTS["block"]], ids=["float", "fp8"])
def test_the_torch_step_products_norm_by_a_zero_centred_scale(products) -> None:
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(256, generator=generator).to(torch.bfloat16)
    scale = torch.rand(256, generator=generator) + 0.5
    linear = torch.nn.Linear(256, 128, bias=False).to(torch.bfloat16)
    layer = linear if products is FLOAT_PRODUCTS else Fp8Linear.from_linear(linear, "block")
    scales = getattr(layer, "weight_scale", None)
    got = torch_step_products(products).norm_linear(x, scale, layer.weight, scales, 1e-6)
    torch.testing.assert_close(got, layer(zero_centred_rms_norm(x, scale, 1e-6)), rtol=0, atol=0)
    assert not torch.equal(got, F.linear(x, linear.weight))
