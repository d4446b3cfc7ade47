"""What a window shows of sampled frames: small copies of them, in the :class:`ClipSampled` event.

Both backends send the same event for the frames they sampled (the vLLM backend imports this
module, not the engine, so it needs neither torch nor transformers for it).
"""

from __future__ import annotations


import cv2
import numpy as np

from framewise.core.events import ClipSampled, FramesRead
from framewise.core.video.clip import SampledFrames

THUMBNAIL_HEIGHT = 256


def clip_sampled(sampled: SampledFrames, kind: str = "video") -> ClipSampled:
    """The :class:`ClipSampled` event of T sampled frames (T, H, W, 3) uint8, with their thumbnails
    (``kind`` ``"image"``: one still picture)."""
    width, height, duration_s = sampled.size_and_duration
    return ClipSampled(
        clip_name=sampled.name,
        path=str(sampled.path or ""),
        timestamps=tuple(sampled.timestamps),
        thumbnails=tuple(thumbnail(frame) for frame in sampled.frames),
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
        thumbnails=tuple(thumbnail(frame) for _, frame, _ in arrived),
    )


def thumbnail(frame: np.ndarray, height: int = THUMBNAIL_HEIGHT) -> np.ndarray:
    """A copy of ``frame`` (H, W, 3) uint8 with at most ``height`` rows (never enlarged), aspect kept."""
    rows, cols = frame.shape[:2]
    height = min(height, rows)
    width = max(1, round(cols * height / rows))
    return np.ascontiguousarray(cv2.resize(frame, (width, height), interpolation=cv2.INTER_AREA))
