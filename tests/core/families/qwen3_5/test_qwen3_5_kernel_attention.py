"""Qwen3.5's fused decode step with the step kernels' full attention (the split kernel, through
Triton's interpreter on the CPU, float32) against the same step as torch ops, over a cache in the
activations' dtype and an e4m3 cache: the same logits and states step by step (two full-attention
layers, each in its own slot of the cache), at the tiny model's attention shapes and at the 9B's
heads (16 over 4 of 256), the steps crossing a boundary between the attention's splits. The
step's products stay torch ops here (interpreted, they would take minutes a test; the GPU tests
hold the whole kernel step against the torch step). Run in a subprocess by
tests/core/kernels/test_interpreted_kernels.py."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from framewise.core.families.qwen3_5.language import Qwen35LanguageModel
from framewise.core.quantization.float_weights import FLOAT_PRODUCTS
from framewise.core.quantization.kv_formats import E4M3_KV_CACHE, FLOAT_KV_CACHE, KVCacheFormat
from tests.core.families.qwen3_5.checkpoint import tiny_config, tiny_model
from tests.core.families.qwen3_5.test_qwen3_5_language import (
    MAX_TOKENS,
    assert_relatively_close,
    build_prompt,
    items_for,
    vision_rows,
)
from tests.core.kernels.interpreted import only_interpreted

pytestmark = only_interpreted

# Two full-attention layers, so that each must find its own slot of the cache.
LAYER_TYPES = ("linear_attention", "full_attention", "linear_attention", "full_attention")
# Fed to both steps whatever their logits, so that the two compare step by step; the prompt is 54
# tokens long, so the steps cross position 64, where a split of 64 positions ends.
TOKENS = (42, 7, 250, 99, 5, 120, 3, 77, 11, 200, 64, 31)
# Programs per multiprocessor (the interpreter counts one) that split the 256 positions in 64s
# over 2 or 4 key/value heads.
PROGRAMS_PER_SM = 16
# float32 on both sides: the kernels' sums run in another order than torch's.
RELATIVE = 1e-5
# An e4m3 code's step relative to its value at most (3 mantissa bits), and its step below the
# normal range: a key or value that lands on a rounding boundary may round to the next code.
E4M3_STEP, E4M3_SUBNORMAL_STEP = 2**-3, 2**-9


def assert_states_close(ours: torch.Tensor, theirs: torch.Tensor) -> None:
    """Linear states, scales and cached entries in the activations' dtype relatively close; e4m3
    entries at most a code apart."""
    if ours.dtype != torch.float8_e4m3fn:
        assert_relatively_close(ours, theirs, RELATIVE)
        return
    ours, theirs = ours.float(), theirs.float()
    assert ((ours - theirs).abs() <= E4M3_STEP * theirs.abs() + E4M3_SUBNORMAL_STEP).all()


def fused_steps(
    model: torch.nn.Module, cache_format: KVCacheFormat, kernels, kernel_attention: bool = True
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """A video prompt prefilled as torch ops, then a fused step on each of TOKENS through
    ``kernels`` (None: as torch ops), its full attention through theirs unless ``kernel_attention``
    is False: the steps' logits (steps, vocab) and the states after them."""
    language = Qwen35LanguageModel(model, cache_format=cache_format, fused_steps=True, step_kernels=False)
    language._step.kernel_attention = kernel_attention
    case = build_prompt(model.config, items_for("video", torch.float32))
    state = language.new_state(MAX_TOKENS)
    positions = language.positions(case.input_ids, case.token_types, (("video", case.items[0].grid),))
    language.prefill(state, 0, case.input_ids, positions.rope, vision_rows(model, case))
    seen = []
    for offset, token in enumerate(TOKENS):
        state.kv.view_length = MAX_TOKENS
        at = torch.tensor([case.input_ids.shape[1] + offset])
        embeds = language.embed(torch.tensor([[token]]))
        seen.append(language._step(state, embeds, at, at + positions.rope_offset, kernels))
    kv = state.kv
    return torch.cat(seen), [*state.conv_states, *state.recurrent_states, *kv.keys, *kv.values, *kv.key_scales,
                             *kv.value_scales]


def kernels_with_torch_products(attended: list) -> SimpleNamespace:
    """The step kernels as the fused step calls them, the float products as torch ops (the
    arithmetic of the torch step's) and the attention the split kernel, each call's arguments
    kept in ``attended``."""
    from framewise.core.kernels import decode_step

    def rms_norm_linear(x: torch.Tensor, norm: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        return FLOAT_PRODUCTS.step(x, weight, None, norm=(norm, eps))

    def linear_residual(x: torch.Tensor, weight: torch.Tensor, residual: torch.Tensor, silu_mul: bool = False):
        return residual + FLOAT_PRODUCTS.step(x, weight, None, silu_mul=silu_mul)

    def attend_cached(*args) -> torch.Tensor:
        attended.append(args)
        return decode_step.attend_cached(*args)

    return SimpleNamespace(
        rms_norm_linear=rms_norm_linear, linear_residual=linear_residual, attend_cached=attend_cached
    )


@pytest.mark.parametrize("cache_format", [FLOAT_KV_CACHE, E4M3_KV_CACHE], ids=["cache-in-dtype", "e4m3-cache"])
@pytest.mark.parametrize("attention", [(4, 2, 64), (16, 4, 256)], ids=["tiny-heads", "9b-heads"])
def test_the_kernel_step_attends_as_the_torch_step(
    monkeypatch, cache_format: KVCacheFormat, attention: tuple[int, int, int]
) -> None:
    from framewise.core.kernels import decode_step

    monkeypatch.setattr(decode_step, "ATTENTION_PROGRAMS_PER_SM", PROGRAMS_PER_SM)
    assert decode_step._Splits.of(attention[0], attention[1], MAX_TOKENS, torch.device("cpu")).size == 64
    attended: list = []
    model = tiny_model(tiny_config(layer_types=LAYER_TYPES, attention=attention), seed=1)
    with torch.inference_mode():
        got, got_states = fused_steps(model, cache_format, kernels_with_torch_products(attended))
        want, want_states = fused_steps(model, cache_format, None)
    assert len(attended) == 2 * len(TOKENS)  # both full-attention layers attended through the kernel at every step
    assert (got.argmax(-1) == want.argmax(-1)).all()
    for ours, theirs in zip(got, want):
        assert_relatively_close(ours, theirs, RELATIVE)
    for ours, theirs in zip(got_states, want_states):
        assert_states_close(ours, theirs)
    assert not torch.equal(got[0], got[1])  # the steps moved on


def test_where_the_kernels_cannot_read_the_cache_the_kernel_step_attends_as_torch_ops() -> None:
    """An e4m3 cache on a card without hardware e4m3 conversion: the step's products through the
    kernels, its attention as the torch step's, under the mask."""
    attended: list = []
    model = tiny_model(tiny_config(), seed=1)
    with torch.inference_mode():
        got, _ = fused_steps(model, E4M3_KV_CACHE, kernels_with_torch_products(attended), kernel_attention=False)
        want, _ = fused_steps(model, E4M3_KV_CACHE, None)
    assert not attended
    for ours, theirs in zip(got, want):
        assert_relatively_close(ours, theirs, RELATIVE)
