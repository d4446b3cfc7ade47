"""Parity of the Qwen3-VL family's processor and prompt with transformers' own Qwen3-VL processors
on the same frames, and of the application's own path (a file read by core.video, resized by its resampler) with them.

transformers' ``Qwen3VLVideoProcessor`` and ``Qwen2VLImageProcessor`` need torchvision and
Pillow; where either is missing the whole file is skipped, saying so. The processors are built
offline from the test tokenizer of ``test_processing.py`` and the sizes Framewise uses.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip(
    "torchvision", reason="transformers' Qwen3-VL video and image processors need torchvision, not installed here"
)
pytest.importorskip("PIL", reason="transformers' Qwen3-VL video and image processors need Pillow, not installed here")

from torchvision.transforms.v2 import InterpolationMode  # noqa: E402
from torchvision.transforms.v2 import functional as tvF  # noqa: E402
from transformers.models.qwen2_vl.image_processing_qwen2_vl import (  # noqa: E402
    Qwen2VLImageProcessor,
)
from transformers.models.qwen2_vl.image_processing_qwen2_vl import smart_resize as hf_image_smart_resize  # noqa: E402
from transformers.models.qwen3_vl.processing_qwen3_vl import Qwen3VLProcessor  # noqa: E402
from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor  # noqa: E402
from transformers.models.qwen3_vl.video_processing_qwen3_vl import smart_resize as hf_video_smart_resize  # noqa: E402

from framewise.core.families.qwen3_vl.geometry import VisionGeometry  # noqa: E402
from framewise.core.families.qwen3_vl.processor import (
    # noqa: E402     IMAGE_MAX_PIXELS,
    fit_video_frames,
    preprocess_image,
    preprocess_video,
    resize_frames,
    video_frame_sizing,
)
from framewise.core.families.qwen3_vl.sizing import IMAGE_MIN_PIXELS, image_size, smart_resize
from framewise.core.families.qwen3_vl.prompt import build_chat_inputs  # noqa: E402
from framewise.core.settings import SamplingSettings  # noqa: E402
from framewise.core.video import sample_clip  # noqa: E402

if __package__:
    from .test_processing import CHAT_TEMPLATE, make_tokenizer
    from .test_video import write_lossless_clip
else:
    from test_processing import CHAT_TEMPLATE, make_tokenizer
    from test_video import write_lossless_clip

GEOMETRY = VisionGeometry()
PROCESSOR_SIZES = dict(patch_size=16, temporal_patch_size=2, merge_size=2, image_mean=[0.5] * 3, image_std=[0.5] * 3)
IMAGE_BOUNDS = dict(min_pixels=32 * 32, max_pixels=320 * 320)


def natural_frames(count: int, height: int, width: int, seed: int) -> np.ndarray:
    """Smooth moving patterns with mild noise, like decoded video."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    frames = []
    for index in range(count):
        phase = index * 0.7
        channels = [
            127 + 90 * np.sin(x / (7 + 3 * c) + phase) * np.cos(y / (11 + 2 * c) - phase) for c in range(3)
        ]
        frame = np.stack(channels, axis=-1) + rng.normal(0, 6, size=(height, width, 3))
        frames.append(np.clip(frame, 0, 255).astype(np.uint8))
    return np.stack(frames)


def hf_processor(tokenizer, num_frames: int, sampling: SamplingSettings) -> Qwen3VLProcessor:
    video_processor = Qwen3VLVideoProcessor(
        size={"shortest_edge": sampling.min_pixels_per_frame * num_frames, "longest_edge": sampling.max_pixels},
        do_sample_frames=False,
        cap_pixels_per_frame=False,
        **PROCESSOR_SIZES,
    )
    image_processor = Qwen2VLImageProcessor(
        size={"shortest_edge": IMAGE_BOUNDS["min_pixels"], "longest_edge": IMAGE_BOUNDS["max_pixels"]},
        **PROCESSOR_SIZES,
    )
    return Qwen3VLProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        video_processor=video_processor,
        chat_template=CHAT_TEMPLATE,
    )


CASES = {
    # name: (frames, height, width, fps, frame indices step, images, history)
    "downscaled clip": (8, 180, 320, 29.97, 15, [], []),
    "odd frame count, scaled up": (5, 24, 40, 25.0, 12, [], []),
    "clip, two images, history": (
        6, 120, 90, 30.0, 20, [(70, 50), (300, 500)], [("What is it?", "A wave."), ("Colour?", "Blue.")]
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_matches_qwen3vl_processor(case):
    count, height, width, fps, step, image_shapes, history = CASES[case]
    tokenizer = make_tokenizer()
    sampling = SamplingSettings(max_pixels=8 * 96 * 160, min_pixels_per_frame=64 * 64, min_frames=2, max_frames=32)
    frames = natural_frames(count, height, width, seed=count)
    indices = [index * step + (index % 3) for index in range(count)]  # uneven spacing, as decoded clips have
    timestamps = [index / fps for index in indices]
    images = [natural_frames(1, h, w, seed=h)[0] for h, w in image_shapes]
    question = "Was passiert hier? 🎬"

    video = preprocess_video(fit_video_frames(frames, sampling), timestamps, GEOMETRY)
    items = [preprocess_image(image, GEOMETRY, **IMAGE_BOUNDS) for image in images]
    ours = build_chat_inputs(tokenizer, question, videos=[video], images=items, history=history)

    first_turn = [{"type": "video"}, *({"type": "image"} for _ in images)]
    turns = [*history, (question, None)]
    messages = []
    for index, (asked, answer) in enumerate(turns):
        content = [*first_turn, {"type": "text", "text": asked}] if index == 0 else asked
        messages.append({"role": "user", "content": content})
        if answer is not None:
            messages.append({"role": "assistant", "content": answer})
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    theirs = hf_processor(tokenizer, count, sampling)(
        text=[text],
        videos=[frames],
        images=images or None,
        video_metadata=[{"total_num_frames": indices[-1] + 1, "fps": fps, "frames_indices": indices}],
        return_tensors="pt",
    )

    assert torch.equal(ours.input_ids, theirs["input_ids"])
    assert torch.equal(ours.mm_token_type_ids, theirs["mm_token_type_ids"])
    assert torch.equal(ours.attention_mask, theirs["attention_mask"])
    assert [list(video.item.grid_thw)] == theirs["video_grid_thw"].tolist()
    torch.testing.assert_close(video.item.pixel_values, theirs["pixel_values_videos"], atol=1e-2, rtol=0)
    if images:
        assert [list(item.grid_thw) for item in items] == theirs["image_grid_thw"].tolist()
        ours_pixels = torch.cat([item.pixel_values for item in items])
        torch.testing.assert_close(ours_pixels, theirs["pixel_values"], atol=1e-2, rtol=0)


def test_the_applications_own_path_matches_qwen3vl_processor(tmp_path):
    """A file through the application's reader and resampler (sample_clip with
    video_frame_sizing), then patches and prompt, against transformers' processor on the frames
    the file holds (stored losslessly, so both sides start from the same pixels)."""
    tokenizer = make_tokenizer()
    sampling = SamplingSettings(fps=2.0, max_pixels=8 * 96 * 160, min_pixels_per_frame=64 * 64, min_frames=2, max_frames=32)
    frames = natural_frames(8, 180, 320, seed=8)
    path = write_lossless_clip(tmp_path / "natural.mkv", frames, fps=2)

    sampled = sample_clip(path, sampling, video_frame_sizing(sampling))
    indices = [round(t * 2) for t in sampled.timestamps]
    assert indices == list(range(8))  # each frame once, so both sides see the same frames
    video = preprocess_video(sampled.frames, sampled.timestamps, GEOMETRY)
    question = "What moves, and where to?"
    ours = build_chat_inputs(tokenizer, question, videos=[video])

    messages = [{"role": "user", "content": [{"type": "video"}, {"type": "text", "text": question}]}]
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    theirs = hf_processor(tokenizer, len(indices), sampling)(
        text=[text],
        videos=[frames[indices]],
        video_metadata=[{"total_num_frames": len(frames), "fps": 2.0, "frames_indices": indices}],
        return_tensors="pt",
    )

    assert torch.equal(ours.input_ids, theirs["input_ids"])
    assert torch.equal(ours.mm_token_type_ids, theirs["mm_token_type_ids"])
    assert [list(video.item.grid_thw)] == theirs["video_grid_thw"].tolist()
    torch.testing.assert_close(video.item.pixel_values, theirs["pixel_values_videos"], atol=1e-2, rtol=0)


SIDES = [5, 31, 32, 33, 90, 240, 479, 720, 1081, 1920, 3000]


@pytest.mark.parametrize("num_frames", [2, 3, 4, 5, 8, 17, 32, 64])
def test_video_sizes_match_transformers(num_frames):
    for height in SIDES:
        for width in SIDES:
            if max(height, width) / min(height, width) > 200:
                continue
            for per_frame_min, max_pixels in [(64 * 64, 32 * 256 * 256), (128 * 32 * 32, 24576 * 32 * 32)]:
                bounds = dict(min_pixels=per_frame_min * num_frames, max_pixels=max_pixels)
                expected = hf_video_smart_resize(num_frames, height, width, factor=32, temporal_factor=2, **bounds)
                assert smart_resize(num_frames, height, width, **bounds) == expected, (height, width, bounds)


def test_image_sizes_match_transformers():
    for height in SIDES:
        for width in SIDES:
            if max(height, width) / min(height, width) > 200:
                continue
            for bounds in [IMAGE_BOUNDS, dict(min_pixels=IMAGE_MIN_PIXELS, max_pixels=IMAGE_MAX_PIXELS)]:
                expected = hf_image_smart_resize(height, width, factor=32, **bounds)
                assert image_size(height, width, GEOMETRY, **bounds) == expected, (height, width, bounds)


@pytest.mark.parametrize("size", [(64, 96), (256, 320), (50, 70)])
def test_resize_matches_torchvision(size):
    frames = np.random.default_rng(1).integers(0, 256, size=(3, 120, 150, 3), dtype=np.uint8)
    channels_first = torch.from_numpy(frames).permute(0, 3, 1, 2)
    expected = tvF.resize(channels_first, list(size), interpolation=InterpolationMode.BICUBIC, antialias=True)
    expected = expected.permute(0, 2, 3, 1)
    assert torch.equal(torch.from_numpy(resize_frames(frames, size)), expected)
