"""The 8-bit KV cache (``decoding.kv_cache_dtype = "fp8"``) on the CPU: e4m3 entries with a scale per
token and head, read back within e4m3's rounding; the demo model's logits within a stated
tolerance of the float cache (the per-layer errors said on failure) and its greedy answers the
same; prefills in chunks and follow-ups behaving as with the float cache; the cache, the memory
estimate and what the engine holds about half the float cache's bytes at bf16, so about twice the
context fits in the same memory."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import pytest
import torch

from framewise.core.backends.local.engine import Engine
from framewise.core.decoding import Decoder, Prompt, SamplingRule, context_for
from framewise.core.decoding import attention as attention_module
from framewise.core.decoding import decoder as decoder_module
from framewise.core.decoding.decoder import prefill_chunks
from framewise.core.decoding.hybrid_state import FULL_ATTENTION, LINEAR_ATTENTION, HybridState, LinearLayerShape
from framewise.core.decoding.kv_cache import StaticKVCache
from framewise.core.encoding.eager import EagerVisionEncoder
from framewise.core.errors import SettingsError
from framewise.core.families import family_for
from framewise.core.families.qwen3_vl.adapter import Qwen3VLAdapter
from framewise.core.families.qwen3_vl.language import Qwen3VLLanguageModel
from framewise.core.families.qwen3_vl.processor import fit_video_frames, preprocess_video
from framewise.core.families.qwen3_vl.prompt import build_chat_inputs
from framewise.core.loading import LoadedModel, load_model
from framewise.core.quantization.kv_formats import (
    E4M3_KV_CACHE,
    FLOAT_KV_CACHE,
    ScaledEntries,
    dequantize_heads,
    kv_cache_format,
    quantize_heads,
)
from framewise.core.quantization.registry import choose_weight_format
from framewise.core.settings import AppSettings, DecodingSettings, ModelSettings, SamplingSettings
from tests.core.families.qwen3_vl.test_memory_estimate import EIGHT_B
from tests.core.test_decoder_attention import kernels_as_on_cuda
from training.synthetic import HELD_OUT_SEEDS, make_scene, sample_scene

CPU = torch.device("cpu")
# e4m3 keeps 3 bits of mantissa: a value rounds to within 2**-4 of itself, or, below the smallest
# normal (2**-6 of the scale's 448), to within half the subnormal step (2**-10 of the scale).
E4M3_RELATIVE = 2**-4
E4M3_SUBNORMAL_STEP = 2**-9
# The demo model's logits with the 8-bit cache against the float32 cache, relative to their norm.
# benchmarks/kv_cache_error.py measured 0.0045 (the prefill's) and 0.0027 (16 steps') on the first
# held-out clip (docs/benchmarks.md, "FP8 KV cache"); four times the larger leaves room for other
# clips and questions, and stays far below what moves an answer.
LOGITS_TOLERANCE = 0.02
STEPS = 8


# ---------------------------------------------------------------------------- the layout


def test_each_head_of_each_token_is_scaled_to_e4m3s_range_and_read_back_within_its_rounding() -> None:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(1, 4, 9, 64, generator=generator) * torch.logspace(-3, 3, 9)[None, None, :, None]
    x[0, 1, 2] = 0.0  # a head of zeros stays zeros, not 0/0
    quantized, scales = quantize_heads(x)
    assert quantized.dtype == torch.float8_e4m3fn and scales.shape == (1, 4, 9)
    largest = quantized.float().abs().amax(dim=-1)
    assert torch.equal(largest[0, 1, 2], torch.tensor(0.0)) and not quantized.float().isnan().any()
    largest[0, 1, 2] = 448.0
    assert torch.equal(largest, torch.full_like(largest, 448.0))  # every head uses the whole range
    cache = StaticKVCache(1, 4, 64, 16, torch.float32, CPU, E4M3_KV_CACHE)
    cache.write_positions, cache.view_length = torch.arange(3, 12), 12
    entries, _ = cache.update(x, x, 0)
    assert isinstance(entries, ScaledEntries) and entries.length == 12  # handed to attention unread
    keys = entries.read()
    back = keys[:, :, 3:]
    bound = E4M3_RELATIVE * x.abs() + E4M3_SUBNORMAL_STEP * scales[..., None] / 2
    assert keys.dtype == torch.float32 and ((back - x).abs() <= bound).all()
    assert torch.equal(keys[:, :, :3], torch.zeros(1, 4, 3, 64))  # positions not written read as zeros
    assert (back - x).abs().max() > 0  # it is rounded: the float cache would give x itself


def test_the_setting_chooses_the_layout_and_refuses_another() -> None:
    assert kv_cache_format("auto") is FLOAT_KV_CACHE and kv_cache_format("fp8") is E4M3_KV_CACHE
    with pytest.raises(ValueError, match="auto, fp8"):
        kv_cache_format("int8")
    with pytest.raises(SettingsError) as raised:
        AppSettings().replace("decoding", kv_cache_dtype="int8").validate(None)
    assert raised.value.field == "decoding.kv_cache_dtype" and "auto, fp8" in raised.value.message
    saved = AppSettings().replace("decoding", kv_cache_dtype="fp8").to_dict()
    assert AppSettings.from_dict(saved).decoding.kv_cache_dtype == "fp8"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_a_token_takes_its_bytes_in_e4m3_with_two_scales_a_head(dtype: torch.dtype) -> None:
    cache = StaticKVCache(3, 2, 64, 100, dtype, CPU, E4M3_KV_CACHE)
    float_cache = StaticKVCache(3, 2, 64, 100, dtype, CPU)
    assert cache.nbytes == StaticKVCache.bytes_needed(3, 2, 64, 100, dtype, E4M3_KV_CACHE) == 100 * cache.bytes_per_token
    assert cache.bytes_per_token == 2 * 3 * 2 * (64 + 4)
    assert float_cache.bytes_per_token == 2 * 3 * 2 * 64 * dtype.itemsize


def test_at_the_8b_shapes_the_cache_and_its_estimate_take_about_half() -> None:
    """Qwen3-VL-8B in bf16: 147,456 bytes of keys and values a token; in e4m3 73,728 and 2,304 of scales."""
    layers, kv_heads, head_dim = 36, 8, 128
    assert StaticKVCache.bytes_needed(layers, kv_heads, head_dim, 1, torch.bfloat16) == 147_456
    assert StaticKVCache.bytes_needed(layers, kv_heads, head_dim, 1, torch.bfloat16, E4M3_KV_CACHE) == 76_032
    # a cache read back 8,192 positions at a time (the default reads the context whole for now)
    segmented = dataclasses.replace(E4M3_KV_CACHE, read_segment=8192)
    weight_format = choose_weight_format(EIGHT_B, "fp8", CPU)
    estimates = {
        layout: family_for("qwen3_vl").estimate_memory(
            EIGHT_B, weight_format, torch.bfloat16, 65536, [256, 16384], "cuda", cache_format=layout
        )
        for layout in (FLOAT_KV_CACHE, segmented)
    }
    auto, scaled = estimates[FLOAT_KV_CACHE], estimates[segmented]
    assert auto.kv_cache == 65536 * 147_456 and scaled.kv_cache == 65536 * 76_032
    # The prefill graphs' pool (256 tokens over the context, 32 query heads over 8 key/value heads)
    # also holds one layer's keys and values over a segment read back, and one float32 product; the
    # mask's copy for the 4 query heads of a key/value head is a segment's, not the context's; and
    # the segments' merge holds the float32 output and a segment's output with its regrouped copy.
    segment = segmented.read_segment
    read_back = kv_heads * segment * head_dim * (2 * 2 + 4)
    smaller_mask_copy = 4 * 256 * (65536 - segment) * 2
    merge = 256 * 32 * head_dim * (4 + 2 * 2)
    assert scaled.decode_graphs - auto.decode_graphs == read_back - smaller_mask_copy + merge
    assert scaled.total < auto.total - 4 * 2**30


def test_a_hybrid_states_full_attention_layers_keep_the_layout() -> None:
    linear = LinearLayerShape(conv_channels=24, conv_kernel=4, heads=2, key_dim=4, value_dim=4)
    kinds = (LINEAR_ATTENTION, LINEAR_ATTENTION, FULL_ATTENTION) * 2
    state = HybridState(kinds, 2, 8, linear, 32, torch.float32, CPU, E4M3_KV_CACHE)
    assert state.kv.keys[1].dtype == torch.float8_e4m3fn and len(state.kv.key_scales) == 2
    assert state.nbytes == HybridState.bytes_needed(kinds, 2, 8, linear, 32, torch.float32, E4M3_KV_CACHE)
    key = torch.randn(1, 2, 3, 8)
    state.kv.write_positions, state.kv.view_length = torch.arange(3), 3
    keys, _ = state.update(key, key, 5)  # the model's layer 5, the cache's second
    assert torch.allclose(keys.read(), key, rtol=E4M3_RELATIVE, atol=1e-6)
    assert state.kv.key_scales[1].abs().sum() > 0 and state.kv.key_scales[0].abs().sum() == 0


# ---------------------------------------------------------------------------- the demo model


@dataclass
class DemoClip:
    loaded: LoadedModel
    prompt: Prompt
    question: str


@pytest.fixture(scope="module")
def demo() -> DemoClip:
    """The shipped demo model (float32) and its prompt about the first held-out clip."""
    loaded = load_model(ModelSettings(source="demo", device="cpu"))
    adapter = Qwen3VLAdapter.for_model(loaded.model)
    sampling = SamplingSettings()
    sampled = sample_scene(make_scene(HELD_OUT_SEEDS[0]), sampling)
    video = preprocess_video(fit_video_frames(sampled.frames, sampling, geometry=adapter.geometry),
                             sampled.timestamps, adapter.geometry)
    with torch.inference_mode():
        features = EagerVisionEncoder(adapter).encode([video.item]).items[0]
    question = "What color is the first shape?"
    inputs = build_chat_inputs(loaded.tokenizer, question, videos=[video], geometry=adapter.geometry)
    prompt = Prompt(inputs.input_ids, inputs.token_types, inputs.spans, inputs.grids, (features,), owner=video)
    return DemoClip(loaded, prompt, question)


def teacher_forced(language: Qwen3VLLanguageModel, prompt: Prompt, tokens: list[int]) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Logits (1 + len(tokens), vocab) of a one-pass prefill of ``prompt`` and of steps on ``tokens``,
    and the hidden state entering each layer after the first (the per-layer record)."""
    cache = language.new_state(512)
    hidden: list[torch.Tensor] = []
    handles = [layer.register_forward_pre_hook(lambda module, args: hidden.append(args[0].clone()))
               for layer in language.text.layers[1:]]
    count = prompt.input_ids.shape[1]
    with torch.inference_mode():
        rope = language.positions(prompt.input_ids, prompt.token_types, prompt.grids).rope
        logits = [language.prefill(cache, 0, prompt.input_ids, rope, prompt.vision_rows(0))]
        for handle in handles:
            handle.remove()
        for position, token in enumerate(tokens, start=count):
            cache.view_length = position + 1
            at = torch.tensor([position])
            logits.append(language.step(cache, language.embed(torch.tensor([[token]])), at, at))
    return torch.cat(logits), hidden


def relative(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got - want).norm() / want.norm())


def test_the_demo_models_logits_stay_within_the_tolerance_of_the_float_cache(demo: DemoClip) -> None:
    model = demo.loaded.model
    probe, _ = teacher_forced(Qwen3VLLanguageModel(model), demo.prompt, [])
    tokens = [int(probe[0].argmax())] * STEPS  # fixed inputs, the same for both caches
    want, want_hidden = teacher_forced(Qwen3VLLanguageModel(model), demo.prompt, tokens)
    got, got_hidden = teacher_forced(Qwen3VLLanguageModel(model, cache_format=E4M3_KV_CACHE), demo.prompt, tokens)
    per_layer = ", ".join(f"after layer {index}: {relative(g, w):.4f}"
                          for index, (g, w) in enumerate(zip(got_hidden, want_hidden)))
    error = relative(got, want)
    assert 0 < error < LOGITS_TOLERANCE, f"logits {error:.4f}; hidden states {per_layer}"
    assert torch.equal(got.argmax(-1), want.argmax(-1)), per_layer


def answer_ids(decoder: Decoder, prompt: Prompt, eos: frozenset[int]) -> list[int]:
    return decoder.answer(prompt, SamplingRule(16, 0.0, eos), lambda token: None, lambda: False).token_ids


def demo_decoder(demo: DemoClip, layout=E4M3_KV_CACHE, chunk: int = 1024) -> Decoder:
    language = Qwen3VLLanguageModel(demo.loaded.model, cache_format=layout)
    return Decoder(language, 512, 16, use_graphs=True, prefill_chunk_tokens=chunk)


def eos_of(demo: DemoClip) -> frozenset[int]:
    return frozenset(demo.loaded.model.generation_config.eos_token_id)


def test_the_demo_model_answers_a_question_and_a_follow_up_as_with_the_float_cache(demo: DemoClip) -> None:
    """The first question prefills the clip, the follow-up only its new tokens through the padded
    follow-up prefill (as the graphs run it): with the 8-bit cache as with the float one."""
    eos = eos_of(demo)
    answers = {}
    for layout in (FLOAT_KV_CACHE, E4M3_KV_CACHE):
        decoder = demo_decoder(demo, layout)
        first = answer_ids(decoder, demo.prompt, eos)
        adapter = Qwen3VLAdapter.for_model(demo.loaded.model)
        text = demo.loaded.tokenizer.decode(first, skip_special_tokens=True)
        video = demo.prompt.owner
        inputs = build_chat_inputs(demo.loaded.tokenizer, "Which way does it move?", videos=[video],
                                   history=[(demo.question, text)], geometry=adapter.geometry)
        follow_up = Prompt(inputs.input_ids, inputs.token_types, inputs.spans, inputs.grids, demo.prompt.items,
                           owner=video)
        result = decoder.answer(follow_up, SamplingRule(16, 0.0, eos), lambda token: None, lambda: False)
        assert result.prefix_tokens_reused > demo.prompt.clip_end
        fresh = answer_ids(demo_decoder(demo, layout), follow_up, eos)  # the whole conversation in one prefill
        assert result.token_ids == fresh
        answers[layout.setting] = (first, result.token_ids)
    assert answers["fp8"] == answers["auto"] and len(answers["fp8"][0]) > 1


def recorded_logits(language: Qwen3VLLanguageModel, monkeypatch: pytest.MonkeyPatch) -> list[torch.Tensor]:
    """The logits of every pass ``language`` runs from now on that makes them: plain prefills, the
    output head after a padded prefill, steps."""
    seen: list[torch.Tensor] = []
    for name in ("prefill", "head", "step"):

        def recording(*args, run=getattr(language, name), **kwargs):
            out = run(*args, **kwargs)
            if out is not None:
                seen.append(out.clone())
            return out

        monkeypatch.setattr(language, name, recording)
    return seen


@pytest.mark.parametrize("segment", [16, 40])
@pytest.mark.parametrize("kernel", ["cpu", "cuda"], ids=["the CPU's kernel", "CUDA's memory-efficient kernel"])
def test_passes_reading_the_cache_back_a_segment_at_a_time_give_the_logits_of_one_read(
    demo: DemoClip, monkeypatch: pytest.MonkeyPatch, segment: int, kernel: str
) -> None:
    """The clip's prefill in chunks after cached positions (under the causal bias), the question's
    padded prefill and the answer's steps (under a mask over their bucket, whose last segments no
    step sees), over the 8-bit cache read back ``segment`` positions at a time and merged: every
    pass's logits are those of reading each layer's whole context at once (a segment longer than
    the context: the path without segments), within float32 rounding; also where the masked
    segments go through a stand-in for CUDA's kernel, which gives a row that sees no key a
    log-sum-exp of 0. Before such rows were handled, the demo model's bf16 passes through this
    stand-in were 0.114 off one read's, the figure an H100 gave."""
    if kernel == "cuda":
        kernels_as_on_cuda(monkeypatch)
    assert E4M3_KV_CACHE.read_segment >= 512  # the default reads this context whole
    segments: list[int] = []
    partial = attention_module.partial_attention
    monkeypatch.setattr(attention_module, "partial_attention", lambda *args: segments.append(1) or partial(*args))
    runs = {}
    for layout in (E4M3_KV_CACHE, dataclasses.replace(E4M3_KV_CACHE, read_segment=segment)):
        decoder = demo_decoder(demo, layout, chunk=64)
        logits = recorded_logits(decoder.language, monkeypatch)
        tokens = answer_ids(decoder, demo.prompt, eos_of(demo))
        runs[layout.read_segment] = (tokens, logits, len(segments))
    (whole_tokens, whole, whole_segments), (tokens, ours, all_segments) = runs.values()
    assert whole_segments == 0 < all_segments
    assert tokens == whole_tokens and len(ours) == len(whole) > 3
    for got, want in zip(ours, whole):
        assert (got - want).abs().max() <= 1e-5 * want.abs().max()


@pytest.mark.parametrize("chunk", [7, 64])
def test_a_prefill_in_chunks_stores_what_one_pass_stores(demo: DemoClip, chunk: int) -> None:
    """Each token is quantized with its own scales, whichever chunk writes it: the chunked cache
    reads back what one pass's does (within one e4m3 step where float rounding moved a value
    across a boundary) and the first token's logits agree."""
    prompt = demo.prompt
    length = prompt.input_ids.shape[1]
    chunked, one_pass = demo_decoder(demo, chunk=chunk), demo_decoder(demo, chunk=4096)
    eos = eos_of(demo)
    got, want = answer_ids(chunked, prompt, eos), answer_ids(one_pass, prompt, eos)
    assert got == want
    assert len(prefill_chunks(0, length, 0, chunk)) > 2
    for layer in range(chunked.language.layers):
        for entries in ("keys", "values"):
            ours = getattr(chunked.cache, entries)[layer][:, :, :length]
            theirs = getattr(one_pass.cache, entries)[layer][:, :, :length]
            same = (ours.view(torch.uint8) == theirs.view(torch.uint8)).float().mean()
            assert same > 0.99, f"layer {layer} {entries}: {same:.2%} of the e4m3 codes the same"


def test_the_engine_holds_the_estimated_8bit_cache_and_fits_about_twice_the_context(
    demo: DemoClip, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = AppSettings().replace("model", device="cpu").replace("decoding", max_context_tokens=4096)
    engines = {setting: Engine(settings.replace("decoding", kv_cache_dtype=setting)) for setting in ("auto", "fp8")}
    held = {setting: engine.load().held_memory.kv_cache for setting, engine in engines.items()}
    decoders = {setting: engine.parts.decoder for setting, engine in engines.items()}
    assert decoders["fp8"].cache.keys[0].dtype == torch.float8_e4m3fn
    assert held["fp8"] == decoders["fp8"].cache.nbytes == StaticKVCache.bytes_needed(6, 2, 64, 4096, torch.float32, E4M3_KV_CACHE)
    info = engines["fp8"].info().decoder
    assert info.kv_cache_dtype == "fp8 e4m3, a scale per token and head" and info.kv_bytes_per_token == 6 * 2 * 2 * 68
    assert engines["auto"].info().decoder.kv_cache_dtype == "float32"
    # float32 activations here: e4m3 and its scales take (64 + 4) / (64 * 4) of the float cache
    assert held["fp8"] / held["auto"] == pytest.approx(68 / 256)
    # a memory where the float cache holds about 1,500 positions, short of the automatic context
    language = {setting: decoders[setting].language for setting in held}
    monkeypatch.setattr(decoder_module, "free_memory_bytes",
                        lambda device: language["auto"].state_bytes(1500) / decoder_module.CACHE_MEMORY_SHARE)
    automatic = settings.replace("decoding", max_context_tokens=0)
    requested = automatic.context_tokens(demo.loaded.limits)
    fits = {setting: context_for(automatic.replace("decoding", kv_cache_dtype=setting), language[setting],
                                 demo.loaded.limits) for setting in held}
    assert fits["auto"] < 1500 < requested == fits["fp8"]
    assert fits["fp8"] > 1.8 * fits["auto"]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_entries_read_back_are_the_float32_product_rounded_once(dtype: torch.dtype) -> None:
    """Reading back multiplies in place in the activations' dtype: each element must still be the
    float32 product of the entry and its scale, rounded once, not the scale rounded first."""
    generator = torch.Generator().manual_seed(5)
    x = torch.randn(1, 4, 257, 64, generator=generator) * torch.rand(1, 4, 257, 1, generator=generator) * 30
    quantized, scales = quantize_heads(x)
    expected = (quantized.to(torch.float32) * scales[..., None]).to(dtype)
    read = dequantize_heads(quantized, scales, dtype)
    assert read.dtype == dtype
    assert torch.equal(read, expected)
    rounded_scale_first = quantized.to(dtype) * scales[..., None].to(dtype)
    assert not torch.equal(read, rounded_scale_first)  # the check above can tell the two apart

