"""The dense prefill (stacked q/k/v and gate/up products, torch ops) against the model's own decoder
layers, on the demo model on the CPU: in float32 and with its decoder layers quantized to FP8 on
load (the CPU multiplies them dequantized, in both paths).

Bound: the two paths do the same float32 arithmetic in another order (one stacked product for q, k
and v instead of three, ``F.rms_norm`` instead of the model's norm ops, rotary as one ``addcmul``),
so they agree to a few float32 roundings of the demo model's logits (about 4e-6 of values up to 14
seen); 1e-5, the bound the dense decode step is held to (tests/core/test_decoding.py), leaves room
for other CPUs' kernels and still fails on any real change (a dropped deepstack feature, a wrong
key/value head for a query head, a missed mask).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import pytest
import torch

from framewise.core.decoding import Prompt
from framewise.core.decoding.kv_cache import StaticKVCache
from framewise.core.encoding.defs import EncodedItem
from framewise.core.encoding.eager import EagerVisionEncoder
from framewise.core.families.qwen3_vl.adapter import Qwen3VLAdapter
from framewise.core.families.qwen3_vl.geometry import VisionGeometry
from framewise.core.families.qwen3_vl.language import Qwen3VLLanguageModel
from framewise.core.families.qwen3_vl.processor import VideoInputs, preprocess_video
from framewise.core.families.qwen3_vl.prompt import build_chat_inputs
from framewise.core.loading import load_model
from framewise.core.settings import ModelSettings

TOLERANCE = {"rtol": 1e-5, "atol": 1e-5}
CACHE_TOKENS = 128


@dataclass
class Demo:
    """The demo model in one dtype, its two language models (dense and the model's own layers), a
    clip and its features."""

    dense: Qwen3VLLanguageModel
    own: Qwen3VLLanguageModel
    tokenizer: object
    geometry: VisionGeometry
    clip: VideoInputs
    features: EncodedItem


@pytest.fixture(scope="module", params=["float32", "fp8"])
def demo(request: pytest.FixtureRequest) -> Demo:
    loaded = load_model(ModelSettings(source="demo", device="cpu", dtype=request.param))
    model = loaded.model
    geometry = VisionGeometry.from_vision_config(model.config.vision_config)
    frames = np.random.default_rng(0).integers(0, 256, (4, 64, 96, 3), dtype=np.uint8)
    clip = preprocess_video(frames, [0.0, 0.5, 1.0, 1.5], geometry)
    with torch.inference_mode():
        features = EagerVisionEncoder(Qwen3VLAdapter(model.model.visual)).encode([clip.item]).items[0]
    dense, own = Qwen3VLLanguageModel(model), Qwen3VLLanguageModel(model, fused_steps=False)
    assert dense.fused_steps and not own.fused_steps
    return Demo(dense, own, loaded.tokenizer, geometry, clip, features)


def prompt_for(demo: Demo, with_clip: bool) -> Prompt:
    videos = [demo.clip] if with_clip else []
    inputs = build_chat_inputs(demo.tokenizer, "What color is the square?", videos=videos, geometry=demo.geometry)
    items = (demo.features,) if with_clip else ()
    return Prompt(inputs.input_ids, inputs.token_types, inputs.spans, inputs.grids, items)


def head_of(prompt: Prompt, end: int) -> Prompt:
    """The prompt's first ``end`` tokens, with the spans that end there."""
    spans = tuple(span for span in prompt.spans if span.end <= end)
    return Prompt(prompt.input_ids[:, :end], prompt.token_types[:, :end], spans, prompt.grids, prompt.items)


Passes = Callable[[Qwen3VLLanguageModel, StaticKVCache], list[torch.Tensor]]


def on_both_paths(demo: Demo, passes: Passes) -> tuple[tuple[list[torch.Tensor], StaticKVCache], ...]:
    """``passes`` run by the dense language model and by the model's own layers, each on a new
    cache: their logits and caches. The dense run is checked not to call the model's attention."""
    attention = demo.own.text.layers[0].self_attn
    results = []
    for language in (demo.dense, demo.own):
        calls: list[int] = []
        handle = attention.register_forward_hook(lambda *args: calls.append(1))
        cache = StaticKVCache(language.layers, language.kv_heads, language.head_dim, CACHE_TOKENS, language.dtype,
                              language.device)
        try:
            with torch.inference_mode():
                logits = passes(language, cache)
        finally:
            handle.remove()
        assert bool(calls) == (language is demo.own)  # each path is the one meant
        results.append((logits, cache))
    return tuple(results)


def assert_same_passes(demo: Demo, passes: Passes, written: int) -> None:
    """Both paths give the same logits, and the same keys and values at the first ``written`` positions."""
    (ours, our_cache), (theirs, their_cache) = on_both_paths(demo, passes)
    for dense_logits, own_logits in zip(ours, theirs, strict=True):
        torch.testing.assert_close(dense_logits, own_logits, **TOLERANCE)
    for layer in range(demo.dense.layers):
        for mine, other in ((our_cache.keys, their_cache.keys), (our_cache.values, their_cache.values)):
            torch.testing.assert_close(mine[layer][:, :, :written], other[layer][:, :, :written], **TOLERANCE)
            assert not mine[layer][:, :, written:].any()  # nothing written past the prompt


@pytest.mark.parametrize("with_clip", [False, True], ids=["text", "clip"])
def test_a_first_question_prefill_matches_the_models_own_layers(demo: Demo, with_clip: bool) -> None:
    prompt = prompt_for(demo, with_clip)
    assert bool(prompt.spans) == with_clip and (not with_clip or demo.features.deepstack)

    def first_question(language: Qwen3VLLanguageModel, cache: StaticKVCache) -> list[torch.Tensor]:
        rope = language.positions(prompt.input_ids, prompt.token_types, prompt.grids).rope
        return [language.prefill(cache, 0, prompt.input_ids, rope, prompt.vision_rows(0))]

    assert_same_passes(demo, first_question, prompt.input_ids.shape[1])


@pytest.mark.parametrize("with_clip", [False, True], ids=["text", "clip"])
def test_a_prefill_after_cached_positions_matches_the_models_own_layers(demo: Demo, with_clip: bool) -> None:
    """The prompt prefilled in two parts, the second at start > 0 under the prefill mask: with the
    clip the second part begins between its two spans, so it carries vision rows and deepstack
    features after cached ones."""
    prompt = prompt_for(demo, with_clip)
    length = prompt.input_ids.shape[1]
    split = prompt.spans[-1].start - 3 if with_clip else length - 6
    head = head_of(prompt, split)
    assert 0 < split < length and (prompt.vision_rows(split) is not None) == with_clip

    def follow_up(language: Qwen3VLLanguageModel, cache: StaticKVCache) -> list[torch.Tensor]:
        rope = language.positions(prompt.input_ids, prompt.token_types, prompt.grids).rope
        first = language.prefill(cache, 0, head.input_ids, rope[:, :split], head.vision_rows(0))
        second = language.prefill(cache, split, prompt.input_ids[:, split:], rope[:, split:], prompt.vision_rows(split))
        return [first, second]

    assert_same_passes(demo, follow_up, length)


def test_the_graph_safe_text_prefill_matches_the_models_own_layers(demo: Demo) -> None:
    """``text_prefill`` (the prefill graphs' pass) on a text tail after a cached clip prompt, over a
    view longer than the prompt (a bucket, as the graphs read it), the logits read at a token inside
    the tail."""
    prompt = prompt_for(demo, with_clip=True)
    length = prompt.input_ids.shape[1]
    split = length - 8
    head = head_of(prompt, split)

    def padded_tail(language: Qwen3VLLanguageModel, cache: StaticKVCache) -> list[torch.Tensor]:
        rope = language.positions(prompt.input_ids, prompt.token_types, prompt.grids).rope
        language.prefill(cache, 0, head.input_ids, rope[:, :split], head.vision_rows(0))
        cache.view_length = length + 8
        positions = torch.arange(split, length)
        last = torch.tensor([5])
        hidden = language.text_prefill(cache, language.embed(prompt.input_ids[:, split:]), positions, rope[:, split:], last)
        return [language.head(hidden)]

    assert_same_passes(demo, padded_tail, length)


def test_a_dense_prefill_runs_each_layers_pre_hooks_before_it(demo: Demo) -> None:
    """The engine's cancel points are forward pre-hooks on the language layers, which a dense
    prefill does not call: it runs their hooks itself, in order, and a hook that raises stops it."""
    language, layers = demo.dense, demo.dense.text.layers
    reached: list[int] = []

    def record(index: int):
        def hook(module: torch.nn.Module, args: tuple) -> None:
            reached.append(index)
            if index == 2:
                raise InterruptedError

        return hook

    handles = [layer.register_forward_pre_hook(record(index)) for index, layer in enumerate(layers)]
    cache = StaticKVCache(language.layers, language.kv_heads, language.head_dim, CACHE_TOKENS, language.dtype,
                          language.device)
    tokens = torch.tensor([[5, 17, 99, 42]])
    try:
        with torch.inference_mode(), pytest.raises(InterruptedError):
            language.prefill(cache, 0, tokens, torch.arange(4).expand(3, 4), None)
    finally:
        for handle in handles:
            handle.remove()
    assert reached == [0, 1, 2]
    assert cache.keys[1][:, :, :4].any() and not cache.keys[2].any()  # stopped before layer 2 wrote
