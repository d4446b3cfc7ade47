"""Qwen3.5's fused decode step on CUDA: its kernels (the zero-centred normed products in bf16 and
FP8, the gated RMS norm) against the same arithmetic in torch ops, and the whole step at the
released 9B shapes (four layers: three Gated DeltaNet, one full attention, attending through the
split attention kernel over a bf16 or an e4m3 cache) through the kernels against the step as torch
ops, directly and replayed from a CUDA graph; and a prefill at those shapes with its norms through
the Triton kernel against the torch norms'."""

from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn.functional as F
from transformers import Qwen3_5Config

from framewise.core.decoding.linear_attention import fla_unavailable
from framewise.core.families.qwen3_5.language import Qwen35LanguageModel
from framewise.core.families.qwen3_5.mixers import TORCH_NORMS, gated_rms_norm, norms_for, zero_centred_rms_norm
from framewise.core.graph_capture import GraphCapture
from framewise.core.quantization.fp8 import dequantize, quantize
from framewise.core.quantization.fp8_products import Fp8Products
from framewise.core.quantization.kv_formats import E4M3_KV_CACHE, FLOAT_KV_CACHE
from framewise.core.quantization.weight_format import product_input
from tests.core.families.qwen3_5.checkpoint import tiny_model
from tests.core.families.qwen3_5.test_qwen3_5_step import quantized
from tests.core.families.released_configs import RELEASED

pytestmark = pytest.mark.gpu
pytest.importorskip("triton", reason="the decode step kernels need Triton")

DEVICE = torch.device("cuda")
# Relative error bounds (the norm of the difference over the reference's), as the step kernels'
# tests use them: float32 differs only by summation order; bf16 rounds to 8 bits of mantissa.
TOLERANCE = {torch.float32: 1e-5, torch.bfloat16: 2e-2}
LAYER_TYPES = ("linear_attention", "linear_attention", "linear_attention", "full_attention")
# The steps at positions 60-65 cross position 64, where a split of the attention ends (on an
# H100 the 9B's attention over 256 positions splits in 64s).
PROMPT_TOKENS = 60
STEP_TOKENS = (42, 7, 313, 99, 5, 600)


def relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got.double() - want.double()).norm() / want.double().norm())


def zero_centred_inputs(dtype: torch.dtype, rows: int, columns: int):
    """A random token ``x`` (columns,), a float32 norm scale around 1 and a (rows, columns) weight."""
    x = torch.randn(columns, device=DEVICE, dtype=dtype) * 3
    scale = torch.rand(columns, device=DEVICE) + 0.5
    weight = torch.randn(rows, columns, device=DEVICE) / math.sqrt(columns)
    return x, scale, weight


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize(("rows", "columns"), [(12352, 4096), (37, 768)])
def test_the_bf16_normed_product_takes_a_zero_centred_scale(dtype: torch.dtype, rows: int, columns: int) -> None:
    from framewise.core.kernels import decode_step

    x, scale, weight = zero_centred_inputs(dtype, rows, columns)
    weight = weight.to(dtype)
    expected = F.linear(zero_centred_rms_norm(x, scale, 1e-6), weight)
    assert relative_error(decode_step.rms_norm_linear(x, scale, weight, 1e-6), expected) < TOLERANCE[dtype]


@pytest.mark.parametrize("native", ["1", "0"], ids=["hardware-e4m3", "bit-decoded-e4m3"])
@pytest.mark.parametrize("gate_up", [False, True], ids=["linear", "gate_up"])
def test_the_fp8_normed_products_take_a_zero_centred_scale(native: str, gate_up: bool, monkeypatch) -> None:
    from framewise.core.kernels import fp8_gemv

    if native == "1" and torch.cuda.get_device_capability() < (8, 9):
        pytest.skip("hardware e4m3 conversion needs compute capability 8.9")
    monkeypatch.setenv("FRAMEWISE_FP8_NATIVE", native)
    x, scale, weight = zero_centred_inputs(torch.bfloat16, 24576 if gate_up else 12288, 4096)
    stored, scales = quantize(weight, "block")
    expected = F.linear(zero_centred_rms_norm(x, scale, 1e-6), dequantize(stored, scales, "block", torch.bfloat16))
    if gate_up:
        gate, up = expected.chunk(2)
        expected = F.silu(gate) * up
        got = fp8_gemv.fp8_rms_norm_silu_gate_up(x, scale, stored, scales, 1e-6)
    else:
        got = fp8_gemv.fp8_rms_norm_linear(x, scale, stored, scales, 1e-6)
    assert relative_error(got, expected) < TOLERANCE[torch.bfloat16]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize(("rows", "dim"), [(32, 128), (4, 16), (3, 100)])
def test_the_gated_rms_norm_kernel_is_the_module_arithmetic(dtype: torch.dtype, rows: int, dim: int) -> None:
    from framewise.core.kernels.gated_rms_norm import gated_rms_norm as kernel

    x = torch.randn(rows, dim, device=DEVICE, dtype=dtype) * 2
    gate = torch.randn(rows, dim, device=DEVICE, dtype=dtype) * 2
    norm = torch.nn.Module()
    norm.weight = torch.nn.Parameter(torch.rand(dim, device=DEVICE, dtype=dtype) + 0.5)
    norm.variance_epsilon = 1e-6
    expected = gated_rms_norm(x, gate, norm)
    assert relative_error(kernel(x, gate, norm.weight, 1e-6), expected) < TOLERANCE[dtype] / 4


@pytest.fixture(scope="module")
def nine_b_layers() -> torch.nn.Module:
    """Four layers of the released 9B's language model (its vocabulary and output head included)
    and a one-block vision tower, random bf16 weights on the GPU."""
    released = RELEASED["Qwen3.5-9B"]
    text = dict(released["text_config"], num_hidden_layers=len(LAYER_TYPES), layer_types=list(LAYER_TYPES))
    config = Qwen3_5Config(text_config=text, vision_config=dict(released["vision_config"], depth=1),
                           tie_word_embeddings=released["tie_word_embeddings"])
    with DEVICE:
        return tiny_model(config, seed=3, dtype=torch.bfloat16)


def run_steps(language: Qwen35LanguageModel, replay: bool = False) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """A random prompt prefilled through the modules, then a step for each of STEP_TOKENS (the same
    inputs whatever the logits, so that two step paths compare step by step), directly or replayed
    from one captured graph: the steps' logits (steps, vocab) float32 and the states after them."""
    state = language.new_state(256)
    prompt = torch.randint(0, 1000, (1, PROMPT_TOKENS), generator=torch.Generator().manual_seed(0))
    embeds = torch.zeros(1, 1, language.text.config.hidden_size, device=DEVICE, dtype=language.dtype)
    position = torch.zeros(1, dtype=torch.long, device=DEVICE)
    logits = torch.zeros(1, language.vocab_size, device=DEVICE)
    seen = []
    with torch.inference_mode():
        language.prefill(state, 0, prompt, torch.arange(PROMPT_TOKENS).expand(3, PROMPT_TOKENS), None)
        state.kv.view_length = 256
        snapshot = state.snapshot()

        def forward() -> None:
            logits.copy_(language.step(state, embeds, position, position))

        # A first step compiles and tunes the kernels, as the decoder's capture does before any answer.
        forward()
        graph = GraphCapture(DEVICE).capture(forward) if replay else None
        state.restore(snapshot)  # the warm-up (and the capture's) ran a step
        for offset, token in enumerate(STEP_TOKENS):
            embeds.copy_(language.embed(torch.tensor([[token]])))
            position.fill_(PROMPT_TOKENS + offset)
            if graph is not None:
                graph.replay()
            else:
                forward()
            seen.append(logits.clone())
    kv = state.kv
    return torch.cat(seen), [*state.conv_states, *state.recurrent_states, *kv.keys, *kv.values, *kv.key_scales,
                             *kv.value_scales]


def float32_weight_step(
    self: Fp8Products, x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor, *, norm=None, silu_mul: bool = False
) -> torch.Tensor:
    """An FP8 product of one token as the step kernels compute it, in torch ops: the input formed
    and rounded as the model rounds it, times the weights dequantized in float32 (the kernels
    multiply each e4m3 value by its float32 scale; torch's own step rounds the dequantized weight
    to the activations' dtype first), summed in float32 and rounded once."""
    inputs = product_input(x, norm, silu_mul)
    return F.linear(inputs.float(), dequantize(weight, scale, self.scheme, torch.float32)).to(x.dtype)


def test_at_the_9b_shapes_a_prefill_through_the_norm_kernels_is_the_torch_norms_prefill_to_the_bit(
    nine_b_layers, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A first question's two passes (a clip-sized pass of 1,133 tokens, then text padded to 32)
    with the norms (the zero-centred ones with the residual adds before them, the gated ones)
    through the Triton kernels and as torch ops: the same logits and states, bit for bit."""
    from framewise.core.families.qwen3_5 import language as language_module

    assert norms_for(DEVICE) != TORCH_NORMS
    generator = torch.Generator().manual_seed(4)
    clip, text, real = 1133, 32, 21
    prompt, question = (torch.randint(0, 1000, (1, count), generator=generator) for count in (clip, text))
    runs = []
    for norms in ("kernels", "torch ops"):
        if norms == "torch ops":
            monkeypatch.setattr(language_module, "norms_for", lambda device: TORCH_NORMS)
        language = Qwen35LanguageModel(nine_b_layers)
        state = language.new_state(1280)
        with torch.inference_mode():
            first = language.prefill(state, 0, prompt, torch.arange(clip).expand(3, clip), None)
            state.kv.view_length = 1280
            positions = torch.arange(clip, clip + text, device=DEVICE)
            hidden = language.text_prefill(state, language.embed(question), positions, positions.expand(3, text),
                                           torch.tensor([real - 1], device=DEVICE))
            second = language.head(hidden)
        runs.append([first, second, *state.conv_states, *state.recurrent_states, *state.kv.keys, *state.kv.values])
    for through_kernels, as_torch_ops in zip(*runs, strict=True):
        assert torch.equal(through_kernels, as_torch_ops)


@pytest.mark.parametrize("weights", ["bf16", "fp8"])
@pytest.mark.parametrize("cache", ["bf16", "e4m3"])
def test_at_the_9b_shapes_the_kernel_step_equals_the_torch_step(
    nine_b_layers, weights: str, cache: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    unavailable = fla_unavailable(DEVICE)
    if unavailable:
        pytest.skip(f"the kernel step mixes tokens through fla-core's kernels, which cannot run here: {unavailable}")
    if cache == "e4m3" and torch.cuda.get_device_capability() < (8, 9):
        pytest.skip("the step kernels read an e4m3 cache only with hardware e4m3 conversion (8.9)")
    cache_format = E4M3_KV_CACHE if cache == "e4m3" else FLOAT_KV_CACHE
    # quantized in place: a copy, so that the bf16 cases see bf16 weights whatever the order
    model = quantized(copy.deepcopy(nine_b_layers)) if weights == "fp8" else nine_b_layers
    kernels = Qwen35LanguageModel(model, step_kernels=True, cache_format=cache_format)
    torch_ops = Qwen35LanguageModel(model, fused_steps=True, step_kernels=False, cache_format=cache_format)
    assert kernels.step_kernels and "Triton kernels" in kernels.step_description
    assert kernels._step.kernel_attention and "full attention through a Triton split kernel" in kernels.step_description
    first = kernels._step.layers[0].inputs[0]
    assert first.weight.dtype == (torch.float8_e4m3fn if weights == "fp8" else torch.bfloat16)
    got, got_states = run_steps(kernels)
    if weights == "fp8":
        monkeypatch.setattr(Fp8Products, "step", float32_weight_step)
    want, want_states = run_steps(torch_ops)
    monkeypatch.undo()
    # the same weights and bf16 activations: the two differ by summation order and roundings
    assert relative_error(got, want) < TOLERANCE[torch.bfloat16]
    assert (got.argmax(-1) == want.argmax(-1)).float().mean() >= 5 / 6
    for ours, theirs in zip(got_states, want_states):
        assert relative_error(ours, theirs) < TOLERANCE[torch.bfloat16]
    replayed, replayed_states = run_steps(kernels, replay=True)
    torch.testing.assert_close(replayed, got, rtol=0, atol=0)
    for ours, theirs in zip(replayed_states, got_states):
        torch.testing.assert_close(ours, theirs, rtol=0, atol=0)
