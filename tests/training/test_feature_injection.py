"""Precomputed features into transformers' own generate() (training/feature_injection.py, which the
demo model's training and the decode benchmark use): the same answer as the model's own vision pass.

Run against both ends of the transformers range the pyproject admits (``make test-newest``): the
layout ``get_*_features`` returns changed between them, and the injector reads it when it is built.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from framewise.core.encoding.defs import EncodedItem
from framewise.core.encoding.eager import EagerVisionEncoder
from framewise.core.families.qwen3_vl.adapter import Qwen3VLAdapter
from framewise.core.families.qwen3_vl.geometry import VisionGeometry
from framewise.core.families.qwen3_vl.processor import preprocess_video
from framewise.core.families.qwen3_vl.prompt import build_chat_inputs
from training.demo_model import (
    build_demo_config,
    build_demo_tokenizer,
    init_demo_model,
    special_token_ids,
)
from training.feature_injection import FeatureInjectionError, FeatureInjector

NEW_TOKENS = 6


@pytest.fixture(scope="module")
def tokenizer():
    return build_demo_tokenizer()


@pytest.fixture(scope="module")
def model(tokenizer):
    """An untrained demo-architecture model with two deepstack layers (their order matters)."""
    config = build_demo_config(len(tokenizer), special_token_ids(tokenizer), depth=2, deepstack_visual_indexes=(0, 1))
    return init_demo_model(config, seed=5).eval()


@pytest.fixture(scope="module")
def prompt(model, tokenizer):
    geometry = VisionGeometry.from_vision_config(model.config.vision_config)
    frames = np.random.default_rng(0).integers(0, 256, (4, 64, 96, 3), dtype=np.uint8)
    video = preprocess_video(frames, [0.0, 0.5, 1.0, 1.5], geometry)
    inputs = build_chat_inputs(tokenizer, "What moves?", videos=[video], geometry=geometry)
    return inputs, video.item


def generate(model, inputs, item, pixels: torch.Tensor):
    """Greedy generate(); returns (new token ids, logits of every step)."""
    with torch.inference_mode():
        output = model.generate(
            input_ids=inputs.input_ids,
            attention_mask=inputs.attention_mask,
            mm_token_type_ids=inputs.mm_token_type_ids,
            pixel_values_videos=pixels,
            video_grid_thw=torch.tensor([item.grid_thw]),
            max_new_tokens=NEW_TOKENS,
            min_new_tokens=NEW_TOKENS,
            do_sample=False,
            return_dict_in_generate=True,
            output_logits=True,
        )
    return output.sequences[0, inputs.input_ids.shape[1]:].tolist(), torch.stack(output.logits)


def features_of(adapter: Qwen3VLAdapter, item) -> EncodedItem:
    return EagerVisionEncoder(adapter).encode([item]).items[0]


def test_injected_features_answer_as_the_models_own_vision_pass(model, prompt):
    inputs, item = prompt
    adapter = Qwen3VLAdapter.for_model(model)
    stock_tokens, stock_logits = generate(model, inputs, item, item.pixel_values)
    with FeatureInjector(model).serving(video=[features_of(adapter, item)]):
        tokens, logits = generate(model, inputs, item, torch.empty(0))
    assert tokens == stock_tokens
    torch.testing.assert_close(logits, stock_logits, rtol=1e-4, atol=1e-4)
    assert "get_video_features" not in vars(model.model)  # the model is the stock one again


def test_the_injected_features_are_the_ones_used(model, prompt):
    """Features that differ (zeroed deepstack layers) change the logits: the injection is not bypassed."""
    inputs, item = prompt
    adapter = Qwen3VLAdapter.for_model(model)
    features = features_of(adapter, item)
    _, stock_logits = generate(model, inputs, item, item.pixel_values)
    wrong = EncodedItem(embeds=features.embeds, deepstack=tuple(torch.zeros_like(layer) for layer in features.deepstack))
    with FeatureInjector(model).serving(video=[wrong]):
        _, logits = generate(model, inputs, item, torch.empty(0))
    assert not torch.allclose(logits, stock_logits, rtol=1e-3, atol=1e-3)


def test_features_the_model_never_asks_for_are_an_error(model):
    dummy = EncodedItem(embeds=torch.zeros(1, 4), deepstack=())
    with pytest.raises(FeatureInjectionError, match="never asked"):
        with FeatureInjector(model).serving(video=[dummy]):
            pass
    assert "get_video_features" not in vars(model.model)


def test_a_call_that_asks_for_features_none_were_given_is_an_error(model, prompt):
    inputs, item = prompt
    with pytest.raises(FeatureInjectionError, match="none were encoded"):
        with FeatureInjector(model).serving(video=[]):
            generate(model, inputs, item, torch.empty(0))


@pytest.mark.parametrize(
    "changed",
    [
        lambda self, pixel_values, image_grid_thw=None, **kwargs: {"pooled": pixel_values},  # another output type
        lambda self, pixels_only: None,  # another signature
    ],
    ids=["output", "signature"],
)
def test_a_changed_get_image_features_is_refused_when_the_injector_is_built(model, monkeypatch, changed):
    monkeypatch.setattr(type(model.model), "get_image_features", changed)
    with pytest.raises(FeatureInjectionError, match="transformers .* is not supported") as refused:
        FeatureInjector(model)
    assert "constraints.txt" in str(refused.value)
