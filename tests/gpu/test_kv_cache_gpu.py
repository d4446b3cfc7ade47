"""The 8-bit KV cache on CUDA: the Triton attention step stores the step's key and value as the
cache's quantizer does and reads e4m3 entries times their scales; the Triton step over an 8-bit
cache equals the torch step over the same cache, both replayed from captured graphs (the demo
model in bf16, and random weights at the 8B text shapes with FP8 weights); passes that read the
cache back a segment at a time give the logits of reading it whole, graphs included."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from framewise.core.decoding import Decoder
from framewise.core.families.qwen3_vl.language import Qwen3VLLanguageModel
from framewise.core.loading import load_model
from framewise.core.quantization.kv_formats import E4M3_KV_CACHE, dequantize_heads, quantize_heads
from framewise.core.quantization.linear import Fp8Linear
from framewise.core.settings import ModelSettings
from tests.gpu.test_step_kernels import TOLERANCE, relative_error, rms_norm_reference, rotary_reference
from training.demo_model import build_demo_config, build_demo_tokenizer, special_token_ids

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not torch.cuda.is_available() or torch.cuda.get_device_capability() < (8, 9),
        reason="needs a CUDA device of compute capability 8.9 or newer: the step kernels convert e4m3 in hardware",
    ),
]
kernels = pytest.importorskip("framewise.core.kernels.decode_step", reason="needs Triton")

DEVICE = "cuda"
# The Triton and torch steps over the same 8-bit cache: the same e4m3 entries and roundings,
# sums in another order; a value that lands on an e4m3 rounding boundary may round the other way.
STEP_LOGITS = 2e-2
# The spacing of e4m3's values relative to their size at its coarsest (3 mantissa bits).
E4M3_RESOLUTION = 2**-3


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize(("heads", "kv_heads", "head_dim"), [(32, 8, 128), (4, 2, 64)])
@pytest.mark.parametrize(("view_length", "position"), [(256, 0), (2368, 1700), (100, 64)])
def test_attend_step_over_an_e4m3_cache(
    dtype: torch.dtype, heads: int, kv_heads: int, head_dim: int, view_length: int, position: int
) -> None:
    max_tokens, rope_position, eps, scale = view_length + 64, 5000, 1e-6, head_dim**-0.5
    qkv = torch.randn((heads + 2 * kv_heads) * head_dim, device=DEVICE, dtype=dtype)
    qk_norms = torch.rand(2, head_dim, device=DEVICE, dtype=dtype) + 0.5
    inv_freq = 1.0 / (5e6 ** (torch.arange(0, head_dim, 2, device=DEVICE).float() / head_dim))
    keys, key_scales = quantize_heads(torch.randn(1, kv_heads, max_tokens, head_dim, device=DEVICE) * 3)
    values, value_scales = quantize_heads(torch.randn(1, kv_heads, max_tokens, head_dim, device=DEVICE))
    before = [tensor.clone() for tensor in (keys, values, key_scales, value_scales)]
    out = kernels.attend_step(
        qkv, qk_norms, inv_freq, 1.0, torch.tensor([rope_position], device=DEVICE),
        torch.tensor([position], device=DEVICE), keys, values, heads, eps, view_length, scale, key_scales, value_scales,
    )
    q, k, v = qkv.split((heads * head_dim, kv_heads * head_dim, kv_heads * head_dim))
    # the value is stored exactly as the cache's quantizer stores it: the same codes, the same scale
    value_codes, value_scale = quantize_heads(v.view(1, kv_heads, 1, head_dim))
    assert torch.equal(values[:, :, position : position + 1].view(torch.uint8), value_codes.view(torch.uint8))
    assert torch.equal(value_scales[:, :, position], value_scale[:, :, 0])
    key = rotary_reference(rms_norm_reference(k.view(kv_heads, head_dim), qk_norms[1], eps), rope_position, inv_freq, 1.0)
    stored_key = dequantize_heads(keys[:, :, position : position + 1], key_scales[:, :, position : position + 1], dtype)
    assert relative_error(stored_key[0, :, 0], key) < 2**-4 + TOLERANCE[dtype]
    untouched = torch.arange(max_tokens, device=DEVICE) != position
    for now, then in zip((keys, values, key_scales, value_scales), before):  # bit for bit
        assert torch.equal(now[:, :, untouched].view(torch.uint8), then[:, :, untouched].view(torch.uint8))

    query = rotary_reference(rms_norm_reference(q.view(heads, head_dim), qk_norms[0], eps), rope_position, inv_freq, 1.0)
    group = heads // kv_heads
    filled_keys = dequantize_heads(keys[:, :, : position + 1], key_scales[:, :, : position + 1], dtype)[0]
    filled_values = dequantize_heads(values[:, :, : position + 1], value_scales[:, :, : position + 1], dtype)[0]
    filled_keys = filled_keys.repeat_interleave(group, dim=0).float()
    filled_values = filled_values.repeat_interleave(group, dim=0).float()
    weights = torch.softmax((query.float()[:, None, :] @ filled_keys.transpose(1, 2)) * scale, dim=-1)
    expected = (weights @ filled_values).reshape(-1)
    assert not out.isnan().any()
    assert relative_error(out, expected) < TOLERANCE[dtype]


def graph_steps(language: Qwen3VLLanguageModel, prompt: torch.Tensor, tokens: list[int]) -> tuple[torch.Tensor, Decoder]:
    """Logits (1 + len(tokens), vocab) of a prefill of ``prompt`` (1, n) and of decode steps on the
    fixed ``tokens``, every step replayed from its captured graph, over an 8-bit cache."""
    decoder = Decoder(language, 1024, 64, use_graphs=True)
    assert decoder.graphs_enabled, decoder.graphs_reason
    count = prompt.shape[1]
    with torch.inference_mode():
        logits = [language.prefill(decoder.state, 0, prompt, torch.arange(count).expand(3, count), None).clone()]
        for position, token in enumerate(tokens, start=count):
            step, graph_ran = decoder.steps.run(torch.tensor([token], device=DEVICE), position, position)
            assert graph_ran
            logits.append(step.clone())
    return torch.cat(logits), decoder


def assert_the_kernel_step_equals_the_torch_step(model: torch.nn.Module, prompt: torch.Tensor, tokens: list[int]) -> None:
    kernel_language = Qwen3VLLanguageModel(model, cache_format=E4M3_KV_CACHE)
    torch_language = Qwen3VLLanguageModel(model, step_kernels=False, cache_format=E4M3_KV_CACHE)
    got, kernel_decoder = graph_steps(kernel_language, prompt, tokens)
    want, torch_decoder = graph_steps(torch_language, prompt, tokens)
    # still the kernels: the decoder falls back to torch ops when they fail to compile or capture
    assert kernel_language.step_kernels and not torch_language.step_kernels, kernel_decoder.graphs_reason
    assert kernel_decoder.cache.keys[0].dtype == torch.float8_e4m3fn
    error = relative_error(got[1:], want[1:])
    assert error < STEP_LOGITS, f"step logits differ by {error:.4f}"
    prompt_end, filled = prompt.shape[1], prompt.shape[1] + len(tokens)
    for layer in range(kernel_language.layers):
        for ours, theirs in zip(
            (kernel_decoder.cache.keys[layer], kernel_decoder.cache.values[layer]),
            (torch_decoder.cache.keys[layer], torch_decoder.cache.values[layer]),
        ):
            # the prompt's entries come from one prefill, the same ops in both: bit for bit
            assert torch.equal(ours[:, :, :prompt_end].view(torch.uint8), theirs[:, :, :prompt_end].view(torch.uint8))
        our_scales, their_scales = kernel_decoder.cache.scales(layer), torch_decoder.cache.scales(layer)
        steps = slice(prompt_end, filled)
        for ours, theirs in zip(our_scales, their_scales):
            assert torch.equal(ours[:, :, :prompt_end], theirs[:, :, :prompt_end])
            # a step's scale is its largest entry's, which may part as the entries do (below)
            torch.testing.assert_close(ours[:, :, steps], theirs[:, :, steps], rtol=E4M3_RESOLUTION, atol=0)
        for ours, theirs, our_scale, their_scale in zip(
            (kernel_decoder.cache.keys[layer], kernel_decoder.cache.values[layer]),
            (torch_decoder.cache.keys[layer], torch_decoder.cache.values[layer]),
            our_scales,
            their_scales,
        ):
            # a step's entries come from its own sums (the kernel's fused norm and product, torch's
            # ops), rounded differently: an entry small beside its row's largest may then part from
            # the other by many e4m3 codes (up to 92 in the first layer on an H100) while the row
            # agrees. Each copy rounds every entry within half a spacing, so the rows agree within
            # e4m3's coarsest spacing plus what their inputs already differed by.
            error = relative_error(
                dequantize_heads(ours[:, :, steps], our_scale[:, :, steps], torch.float32),
                dequantize_heads(theirs[:, :, steps], their_scale[:, :, steps], torch.float32),
            )
            assert error < E4M3_RESOLUTION, f"layer {layer}: the step entries differ by {error:.4f}"


def test_the_demo_models_kernel_steps_over_an_e4m3_cache_equal_its_torch_steps() -> None:
    model = load_model(ModelSettings(source="demo", device="cuda", dtype="bfloat16")).model
    prompt = torch.tensor([[5, 17, 99, 3, 250, 61, 7, 401] * 8], device=DEVICE)
    assert_the_kernel_step_equals_the_torch_step(model, prompt, [42, 7, 313, 99, 5, 600, 18, 77, 9, 120])


def test_8b_shapes_with_fp8_weights_and_an_e4m3_cache_decode_as_the_torch_path() -> None:
    """Random weights at Qwen3-VL-8B's text shapes, four layers, linear layers in FP8 (one scale per
    row): the Triton FP8 gemv and attention kernels against the torch step, both over the 8-bit
    cache, which takes 2 x 4 layers x 8 heads x (128 + 4) bytes a token."""
    tokenizer = build_demo_tokenizer()
    config = build_demo_config(
        len(tokenizer), special_token_ids(tokenizer), depth=1, deepstack_visual_indexes=(0,),
        text_hidden=4096, text_intermediate=12288, text_layers=4, text_heads=32, text_kv_heads=8, head_dim=128,
    )
    from transformers import Qwen3VLForConditionalGeneration

    torch.manual_seed(0)
    with torch.device(DEVICE):
        model = Qwen3VLForConditionalGeneration._from_config(config, dtype=torch.bfloat16).eval()
    layers = model.model.language_model.layers
    for name, module in list(layers.named_modules()):
        if isinstance(module, torch.nn.Linear):
            parent, _, child = name.rpartition(".")
            setattr(layers.get_submodule(parent), child, Fp8Linear.from_linear(module, "channel"))
    language = Qwen3VLLanguageModel(model, cache_format=E4M3_KV_CACHE)
    assert language._dense[0].qkv.dtype == torch.float8_e4m3fn
    assert language.new_state(1024).nbytes == 1024 * 2 * 4 * 8 * (128 + 4) == language.state_bytes(1024)
    generator = torch.Generator().manual_seed(1)
    prompt = torch.randint(0, len(tokenizer), (1, 300), generator=generator).to(DEVICE)
    tokens = torch.randint(0, len(tokenizer), (16,), generator=generator).tolist()
    assert_the_kernel_step_equals_the_torch_step(model, prompt, tokens)


def passes_over(language: Qwen3VLLanguageModel, prompt: torch.Tensor, tail: torch.Tensor, tokens: list[int]) -> torch.Tensor:
    """Logits (chunks + 1 + len(tokens), vocab) of ``prompt`` (1, n) prefilled in chunks of 100
    tokens, then of ``tail`` (1, m) through a follow-up prefill graph and of decode steps on the
    fixed ``tokens`` replayed from their graphs."""
    decoder = Decoder(language, 1024, 64, use_graphs=True)
    assert decoder.graphs_enabled, decoder.graphs_reason
    count, added = prompt.shape[1], tail.shape[1]
    logits = []
    with torch.inference_mode():
        for start in range(0, count, 100):
            stop = min(start + 100, count)
            rope = torch.arange(start, stop).expand(3, -1)
            logits.append(language.prefill(decoder.state, start, prompt[:, start:stop], rope, None).clone())
        follow_up, graph_ran = decoder.prefills.run(count, tail, torch.arange(count, count + added).expand(3, -1))
        assert graph_ran
        logits.append(follow_up.clone())
        for position, token in enumerate(tokens, start=count + added):
            step, graph_ran = decoder.steps.run(torch.tensor([token], device=DEVICE), position, position)
            assert graph_ran
            logits.append(step.clone())
    return torch.cat(logits)


def test_passes_reading_an_e4m3_cache_in_segments_give_the_logits_of_one_read_and_replay_from_graphs() -> None:
    """The demo model in bf16 over an 8-bit cache read back 64 positions at a time: prefill chunks
    after cached positions (flash attention on each segment), a follow-up prefill and torch decode
    steps captured in graphs over their buckets (the masked kernel on each segment, the segments
    fixed by the bucket): the logits of reading each layer's context at once, within the tolerance
    the kernel and torch steps over one cache are held to."""
    model = load_model(ModelSettings(source="demo", device="cuda", dtype="bfloat16")).model
    prompt = torch.tensor([[5, 17, 99, 3, 250, 61, 7, 401] * 40], device=DEVICE)
    tail = torch.tensor([[42, 7, 313, 99, 5, 600, 18, 77, 9, 120, 11]], device=DEVICE)
    tokens = [42, 7, 313, 99, 5, 600]
    segmented = dataclasses.replace(E4M3_KV_CACHE, read_segment=64)
    assert E4M3_KV_CACHE.read_segment >= 1024
    want = passes_over(Qwen3VLLanguageModel(model, step_kernels=False, cache_format=E4M3_KV_CACHE), prompt, tail, tokens)
    got = passes_over(Qwen3VLLanguageModel(model, step_kernels=False, cache_format=segmented), prompt, tail, tokens)
    assert not got.isnan().any()
    error = relative_error(got, want)
    assert error < STEP_LOGITS, f"logits differ by {error:.4f}"
