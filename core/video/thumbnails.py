"""What a window shows of sampled frames: small copies of them, in the :class:`ClipSampled` event.

Both backends send the same event for the frames they sampled (the vLLM backend imports this
module, not the engine, so it needs neither torch nor transformers for it).
"""

from __future__ import annotations

import math

import cv2
import numpy as np

from framewise.core.events import ClipSampled, FramesRead
from framewise.core.video.clip import SampledFrames

THUMBNAIL_HEIGHT = 256
# The thumbnails of one clip together: a window holds them for its strip (twice while a clip's
# thumbnails replace those sent while it was read), so a clip of 2,048 frames gets smaller ones
# (95 rows for 16:9) instead of half a gigabyte of them.
CLIP_THUMBNAILS_BYTES = 96 * 2**20


def clip_sampled(sampled: SampledFrames, kind: str = "video") -> ClipSampled:
    """The :class:`ClipSampled` event of T sampled frames (T, H, W, 3) uint8, with their thumbnails
    (``kind`` ``"image"``: one still picture)."""
    width, height, duration_s = sampled.size_and_duration
    return ClipSampled(
        clip_name=sampled.name,
        path=str(sampled.path or ""),
        timestamps=tuple(sampled.timestamps),
        thumbnails=tuple(thumbnail(frame, len(sampled.frames)) for frame in sampled.frames),
        width=width,
        height=height,
        duration_s=duration_s,
        sampling_mode=sampled.mode,
        kind=kind,
    )


def frames_read(clip_name: str, total: int, arrived: list[tuple[int, np.ndarray, float]]) -> FramesRead:
    """The :class:`FramesRead` event of frames just read: (index, (H, W, 3) uint8, time) each, of
    ``total`` sampled frames."""
    return FramesRead(
        clip_name=clip_name,
        total=total,
        indices=tuple(index for index, _, _ in arrived),
        timestamps=tuple(time_s for _, _, time_s in arrived),
        thumbnails=tuple(thumbnail(frame, total) for _, frame, _ in arrived),
    )


def thumbnail(frame: np.ndarray, clip_frames: int = 1) -> np.ndarray:
    """A copy of ``frame`` (H, W, 3) uint8, one of ``clip_frames`` of a clip, at the size of
    :func:`thumbnail_size` (never enlarged), aspect kept.

    The frame is halved, averaging each square of four pixels, while it stays at least twice that size, then
    shrunk the rest of the way linearly: OpenCV's area resampling is 20 times as fast at exactly
    half as at other factors, and a clip of 2,048 frames makes its thumbnails twice."""
    height, width = thumbnail_size(clip_frames, *frame.shape[:2])
    while frame.shape[0] >= 2 * height and frame.shape[1] >= 2 * width:
        rows, cols = frame.shape[0] // 2, frame.shape[1] // 2
        frame = cv2.resize(frame[: 2 * rows, : 2 * cols], (cols, rows), interpolation=cv2.INTER_AREA)
    return np.ascontiguousarray(cv2.resize(frame, (width, height), interpolation=cv2.INTER_LINEAR))


def thumbnail_size(clip_frames: int, rows: int, cols: int) -> tuple[int, int]:
    """(height, width) of each thumbnail of a clip of ``clip_frames`` frames of ``rows`` x ``cols``:
    :data:`THUMBNAIL_HEIGHT` rows, or fewer so that the clip's thumbnails together stay within
    :data:`CLIP_THUMBNAILS_BYTES`; never more than the frame's own rows, never fewer than one."""
    share = CLIP_THUMBNAILS_BYTES // max(clip_frames, 1)  # bytes of each: height x width x 3
    height = max(1, min(THUMBNAIL_HEIGHT, rows, math.isqrt(share * rows // (3 * cols))))
    while height > 1 and height * _width(height, rows, cols) * 3 > share:  # the width's rounding
        height -= 1
    return height, _width(height, rows, cols)


def _width(height: int, rows: int, cols: int) -> int:
    return max(1, round(cols * height / rows))
