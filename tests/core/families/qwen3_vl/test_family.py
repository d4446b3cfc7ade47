"""Qwen3-VL as a model family: what the generic code asks of it agrees with the family's own modules."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from framewise.core.families import ModelFamily, family_for
from framewise.core.families.qwen3_vl.limits import QWEN3_VL_LIMITS
from framewise.core.families.qwen3_vl.geometry import VisionGeometry
from framewise.core.families.qwen3_vl.processor import preprocess_video, video_frame_sizing
from framewise.core.settings import SamplingSettings
from training.demo_model import (
    build_demo_config,
    build_demo_tokenizer,
    init_demo_model,
    special_token_ids,
)


@pytest.fixture(scope="module")
def model():
    tokenizer = build_demo_tokenizer()
    config = build_demo_config(len(tokenizer), special_token_ids(tokenizer), depth=3, text_layers=2)
    return init_demo_model(config, seed=2).eval()


def test_both_model_types_load_through_the_one_family() -> None:
    family: ModelFamily = family_for("qwen3_vl")
    assert family_for("qwen3_vl_moe") is family and family.model_types == ("qwen3_vl", "qwen3_vl_moe")
    assert family.limits == QWEN3_VL_LIMITS
    assert (family.limits.patch_size, family.limits.merge_size, family.limits.frames_per_slice) == (16, 2, 2)


def test_a_loaded_models_limits_come_from_its_config(model) -> None:
    family = family_for("qwen3_vl")
    config = model.config.vision_config
    config.patch_size, config.spatial_merge_size = 14, 3  # what another checkpoint might declare
    try:
        limits = family.limits_of(model)
    finally:
        config.patch_size, config.spatial_merge_size = 16, 2
    assert (limits.patch_size, limits.merge_size, limits.block_side) == (14, 3, 42)
    assert limits.max_frames == QWEN3_VL_LIMITS.max_frames


def test_cancel_points_are_the_towers_blocks_and_the_language_layers(model) -> None:
    points = family_for("qwen3_vl").cancel_points(model)
    assert len(points.vision) == 3 and len(points.language) == 2
    assert all(isinstance(module, torch.nn.Module) for module in (*points.vision, *points.language))


def test_preprocessing_and_sizing_through_the_family_match_the_processor() -> None:
    family = family_for("qwen3_vl")
    limits = family.limits
    frames = np.random.default_rng(0).integers(0, 256, (4, 64, 96, 3), dtype=np.uint8)
    ours = family.preprocess_video(frames, [0.0, 0.5, 1.0, 1.5], limits)
    theirs = preprocess_video(frames, [0.0, 0.5, 1.0, 1.5], VisionGeometry())
    assert torch.equal(ours.item.pixel_values, theirs.item.pixel_values) and ours.pair_timestamps == (0.25, 1.25)
    sampling = SamplingSettings()
    sizing = family.frame_sizing(sampling, limits)
    assert sizing.size(8, 720, 1280) == video_frame_sizing(sampling).size(8, 720, 1280)
    assert sizing.frames_per_slice == 2


def test_the_adapter_of_a_loaded_model_runs_nothing_of_transformers_feature_seam(model, monkeypatch) -> None:
    """The product places vision features itself: building the adapter at load calls no
    ``get_image_features`` (only training and the tests inject features through it)."""

    def refuse(*args, **kwargs):
        raise AssertionError("get_image_features was called")

    monkeypatch.setattr(type(model.model), "get_image_features", refuse)
    adapter = family_for("qwen3_vl").adapter(model)
    assert adapter.language_model().layers == 2
