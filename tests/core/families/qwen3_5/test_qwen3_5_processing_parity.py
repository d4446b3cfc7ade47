"""Qwen3.5's preprocessing and prompt through its family against transformers' own processor for
``qwen3_5`` (``Qwen3VLProcessor``, the same video and image processors as Qwen3-VL's), with a chat
template that asks without thinking as Qwen3.5's does.

That transformers maps ``qwen3_5`` to Qwen3-VL's processor is checked everywhere; the parity
itself needs transformers' processors, which need torchvision and Pillow: where either is missing
those tests are skipped, saying so (the Qwen3-VL parity file, whose helpers they reuse, is skipped
there for the same reason)."""

from __future__ import annotations

import pytest
import torch
from transformers.models.auto.processing_auto import PROCESSOR_MAPPING_NAMES

from framewise.core.families import family_for
from tests.core.families.qwen3_5.checkpoint import CHAT_TEMPLATE

QWEN3_5 = family_for("qwen3_5")


def test_transformers_maps_qwen3_5_to_qwen3_vls_processor() -> None:
    assert PROCESSOR_MAPPING_NAMES["qwen3_5"] == PROCESSOR_MAPPING_NAMES["qwen3_vl"] == "Qwen3VLProcessor"


@pytest.mark.parametrize("case", ["downscaled clip", "clip, two images, history"])
def test_the_family_matches_transformers_processor_asked_without_thinking(case: str) -> None:
    pytest.importorskip("torchvision", reason="transformers' Qwen3-VL processors need torchvision, not installed here")
    pytest.importorskip("PIL", reason="transformers' Qwen3-VL processors need Pillow, not installed here")
    from framewise.core.families.qwen3_vl.geometry import VisionGeometry
    from framewise.core.families.qwen3_vl.processor import fit_video_frames, preprocess_image
    from framewise.core.settings import SamplingSettings
    from tests.core.families.qwen3_vl.test_processing import make_tokenizer
    from tests.core.families.qwen3_vl.test_processing_parity import CASES, IMAGE_BOUNDS, hf_processor, natural_frames

    count, height, width, fps, step, image_shapes, history = CASES[case]
    tokenizer = make_tokenizer(chat_template=CHAT_TEMPLATE)
    sampling = SamplingSettings(max_pixels=8 * 96 * 160, min_pixels_per_frame=64 * 64, min_frames=2, max_frames=32)
    frames = natural_frames(count, height, width, seed=count)
    indices = [index * step + (index % 3) for index in range(count)]
    images = [natural_frames(1, h, w, seed=h)[0] for h, w in image_shapes]
    limits = QWEN3_5.limits
    video = QWEN3_5.preprocess_video(fit_video_frames(frames, sampling), [index / fps for index in indices], limits)
    items = [preprocess_image(image, VisionGeometry(), **IMAGE_BOUNDS) for image in images]
    ours = QWEN3_5.build_prompt(tokenizer, "Was passiert?", videos=[video], images=items, history=history, limits=limits)

    messages = QWEN3_5.chat_messages("Was passiert?", videos=1, images=len(images), history=history)
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, enable_thinking=False)
    theirs = hf_processor(tokenizer, count, sampling)(
        text=[text], videos=[frames], images=images or None, return_tensors="pt",
        video_metadata=[{"total_num_frames": indices[-1] + 1, "fps": fps, "frames_indices": indices}],
    )
    assert torch.equal(ours.input_ids, theirs["input_ids"])
    assert torch.equal(ours.token_types, theirs["mm_token_type_ids"])
    assert [list(video.item.grid_thw)] == theirs["video_grid_thw"].tolist()
    torch.testing.assert_close(video.item.pixel_values, theirs["pixel_values_videos"], atol=1e-2, rtol=0)
    if images:
        torch.testing.assert_close(torch.cat([item.pixel_values for item in items]), theirs["pixel_values"],
                                   atol=1e-2, rtol=0)
