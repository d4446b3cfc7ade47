"""Qwen3-VL's size rules, without torch: the frame size of a sampled clip (:func:`smart_resize`,
:func:`video_frame_size`), the size of a still image (:func:`image_size`) and the time of each
frame pair (:func:`pair_timestamps`).

:mod:`~framewise.core.families.qwen3_vl.processor` resamples and patchifies at these sizes; the
vLLM backend reads them alone, as it sends frames to a server instead of a tower. They follow
transformers' Qwen3-VL video and Qwen2-VL image ``smart_resize``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from framewise.core.errors import ClipTooLargeError
from framewise.core.families.qwen3_vl.geometry import VisionGeometry
from framewise.core.settings import SamplingSettings
from framewise.core.video import FrameSizing, Resize

MAX_ASPECT_RATIO = 200
# Image bounds of the released Qwen3-VL checkpoints' image processor (256x256 to 4096x4096 pixels).
IMAGE_MIN_PIXELS = 64 * 32 * 32
IMAGE_MAX_PIXELS = 16384 * 32 * 32


def smart_resize(
    num_frames: int,
    height: int,
    width: int,
    *,
    factor: int = 32,
    min_pixels: int,
    max_pixels: int,
    temporal_factor: int = 2,
) -> tuple[int, int]:
    """Frame size (h, w) for a clip of ``num_frames`` frames of ``height`` x ``width``.

    Both sides are multiples of ``factor``, the aspect ratio is kept as closely as that allows,
    and the whole clip -- the frame count rounded to a multiple of ``temporal_factor``, times
    h x w -- stays within [min_pixels, max_pixels]. Sides shorter than ``factor`` are first
    scaled up to it. This is transformers' Qwen3-VL video ``smart_resize`` (odd counts included:
    the count is rounded half to even), except that a clip of fewer frames than
    ``temporal_factor`` counts as that many, as it is padded to (transformers refuses it).

    Raises ClipTooLargeError when one side is more than 200 times the other.
    """
    _require_positive(num_frames=num_frames, height=height, width=width)
    _check_aspect_ratio(height, width)  # on the file's own size, which the message names
    if height < factor or width < factor:
        scale = max(factor / height, factor / width)
        height, width = int(height * scale), int(width * scale)
    num_frames = max(num_frames, temporal_factor)  # a lone frame is padded to a pair
    budget_frames = round(num_frames / temporal_factor) * temporal_factor
    return _fit_to_budget(
        height, width, factor=factor, frames=num_frames, budget_frames=budget_frames,
        min_pixels=min_pixels, max_pixels=max_pixels,
    )


def image_size(
    height: int,
    width: int,
    geometry: VisionGeometry,
    *,
    min_pixels: int = IMAGE_MIN_PIXELS,
    max_pixels: int = IMAGE_MAX_PIXELS,
) -> tuple[int, int]:
    """Size (h, w) a still image is resized to: transformers' Qwen2-VL image ``smart_resize``.

    Raises ClipTooLargeError when one side is more than 200 times the other.
    """
    _require_positive(height=height, width=width)
    _check_aspect_ratio(height, width)
    return _fit_to_budget(
        height, width, factor=geometry.factor, frames=1, budget_frames=1,
        min_pixels=min_pixels, max_pixels=max_pixels,
    )


def video_frame_size(
    num_frames: int,
    height: int,
    width: int,
    sampling: SamplingSettings,
    *,
    geometry: VisionGeometry = VisionGeometry(),
) -> tuple[int, int]:
    """Frame size (h, w) for ``num_frames`` sampled frames of a ``height`` x ``width`` clip.

    ``sampling.max_pixels`` bounds the whole clip (frames x h x w), so more frames get smaller
    frames; ``sampling.min_pixels_per_frame * num_frames`` is the lower bound, so a clip of small
    frames is scaled up to at least that many pixels per frame.
    """
    return smart_resize(
        num_frames,
        height,
        width,
        factor=geometry.factor,
        min_pixels=sampling.min_pixels_per_frame * num_frames,
        max_pixels=sampling.max_pixels,
        temporal_factor=geometry.temporal_patch_size,
    )


def frame_sizing(sampling: SamplingSettings, geometry: VisionGeometry, resize: Resize) -> FrameSizing:
    """How clip readers size sampled frames for Qwen3-VL: :func:`video_frame_size` under
    ``sampling``'s pixel bounds, resampled by ``resize``."""

    def size(count: int, height: int, width: int) -> tuple[int, int]:
        return video_frame_size(count, height, width, sampling, geometry=geometry)

    return FrameSizing(size=size, resize=resize, frames_per_slice=geometry.temporal_patch_size)


def _fit_to_budget(
    height: int, width: int, *, factor: int, frames: int, budget_frames: int, min_pixels: int, max_pixels: int
) -> tuple[int, int]:
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    if budget_frames * h_bar * w_bar > max_pixels:
        beta = math.sqrt(frames * height * width / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif budget_frames * h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (frames * height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def _check_aspect_ratio(height: int, width: int) -> None:
    ratio = max(height, width) / min(height, width)
    if ratio > MAX_ASPECT_RATIO:
        shape = "wider than it is tall" if width > height else "taller than it is wide"
        raise ClipTooLargeError(
            f"The picture is {width}x{height} pixels, {ratio:.0f} times {shape}; "
            f"Qwen3-VL accepts at most {MAX_ASPECT_RATIO}:1. Crop it to a less extreme shape."
        )


def _require_positive(**sizes: int) -> None:
    for name, value in sizes.items():
        if value < 1:
            raise ValueError(f"{name} must be at least 1, got {value}")



def pair_timestamps(timestamps: Sequence[float], temporal_patch_size: int) -> tuple[float, ...]:
    """One time per frame pair: the mean of its first and last frame's ``timestamps`` (seconds);
    an odd last frame is paired with itself."""
    times = [float(t) for t in timestamps]
    times += times[-1:] * (-len(times) % temporal_patch_size)
    return tuple(
        (times[i] + times[i + temporal_patch_size - 1]) / 2 for i in range(0, len(times), temporal_patch_size)
    )
