"""The sampling rules (how many frames, which ones) and the one loop that applies them to the
frames a reader decodes. Readers only open, decode and convert; :func:`read_clip` builds the
:class:`ClipInfo`, picks the frames and sizes them, whichever reader decoded them."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from framewise.core.errors import SpanError
from framewise.core.families import default_limits
from framewise.core.settings import SamplingSettings
from framewise.core.video.clip import ClipInfo, FrameSizing, Reader, check_resolution

NextTarget = Callable[[], "float | None"]


def sample_count(
    duration_s: float, sampling: SamplingSettings, frame_count: int | None = None, multiple: int | None = None
) -> int:
    """How many frames to sample from a clip: a multiple of ``multiple`` (the model family's frames
    per slice, by default :func:`~framewise.core.families.default_limits`'s: even), within
    ``[min_frames, max_frames]``.

    >>> sample_count(4.0, SamplingSettings(fps=2.0, min_frames=4, max_frames=32))
    8
    >>> sample_count(4.0, SamplingSettings(fps=2.0, min_frames=4, max_frames=32), frame_count=5)
    6
    """
    multiple = multiple or default_limits().frames_per_slice
    count = math.floor(max(duration_s, 0.0) * sampling.fps + 1e-6)
    count = _round_up(min(max(count, sampling.min_frames), sampling.max_frames), multiple)
    if frame_count:
        count = min(count, max(sampling.min_frames, _round_up(frame_count, multiple)))
    return count


def sample_times(duration_s: float, count: int) -> tuple[float, ...]:
    """Target times in seconds: the middles of ``count`` equal slices of ``[0, duration_s]``.

    >>> sample_times(4.0, 4)
    (0.5, 1.5, 2.5, 3.5)
    """
    duration_s = max(duration_s, 0.0)
    return tuple((index + 0.5) * duration_s / count for index in range(count))


def span_count(span_s: float, clip_fps: float, sampling: SamplingSettings, multiple: int | None = None) -> int:
    """How many frames a closer look at ``span_s`` seconds samples: the whole frame budget
    (``max_frames``), but no more than the span holds at the clip's ``clip_fps`` (0: unknown), and
    never fewer than ``min_frames``; a multiple of ``multiple`` as :func:`sample_count`'s.

    >>> span_count(2.0, 30.0, SamplingSettings(fps=2.0, min_frames=4, max_frames=32))
    32
    >>> span_count(0.5, 10.0, SamplingSettings(fps=2.0, min_frames=4, max_frames=32))
    6
    """
    multiple = multiple or default_limits().frames_per_slice
    held = math.ceil(span_s * clip_fps - 1e-6) if clip_fps > 0 else sampling.max_frames
    return _round_up(min(max(held, sampling.min_frames), sampling.max_frames), multiple)


def _within(path: Path, span: tuple[float, float], duration_s: float) -> tuple[float, float]:
    """``span`` cut to the clip's ``[0, duration_s]``; SpanError when nothing of it is left."""
    start, end = max(span[0], 0.0), min(span[1], duration_s)
    if end <= start:
        raise SpanError(
            f"{span[0]:.1f}–{span[1]:.1f} s holds nothing of {path.name}, which runs 0.0–{duration_s:.1f} s. "
            "Select a span inside the clip, its start before its end."
        )
    return start, end


def _round_up(count: int, multiple: int) -> int:
    return count + -count % multiple


class OpenedClip(Protocol):
    """One reader's view of an opened clip: what it knows before decoding, and its frames.

    Frames are the reader's own objects; ``orientation`` and ``upright_rgb`` look at one.
    """

    reader: Reader
    codec: str
    duration_s: float
    fps: float
    frame_count: int | None

    def frames(self, next_target: NextTarget) -> Iterator[tuple[float, Any]]:
        """(time in seconds on the clip's timeline, frame) in presentation order. ``next_target()``
        is the next time a frame is needed for (None when done): a reader may skip ahead to it."""

    def orientation(self, frame: Any) -> tuple[int, int, int]:
        """(width, height) as displayed, and the rotation in degrees counter-clockwise."""

    def upright_rgb(self, frame: Any) -> np.ndarray:
        """The frame as (H, W, 3) uint8 RGB, rotated for display, at its full size."""


class FramePicker:
    """Takes decoded frames in presentation order and keeps, for each target time, the frame on
    screen at that time (the last one at or before it), converted by ``convert`` to (H, W, 3)."""

    def __init__(self, targets: tuple[float, ...], convert: Callable[[Any], np.ndarray]) -> None:
        self.targets = targets
        self.convert = convert
        self.frames: list[np.ndarray] = []
        self.times: list[float] = []
        self._previous: tuple[float, Any] | None = None
        self._previous_rgb: np.ndarray | None = None

    @property
    def done(self) -> bool:
        return len(self.frames) == len(self.targets)

    @property
    def next_target(self) -> float | None:
        return None if self.done else self.targets[len(self.frames)]

    def offer(self, time_s: float, frame: Any) -> None:
        """Take the next decoded frame. Targets before the first frame get the first frame."""
        if self._previous is not None:
            while not self.done and self.targets[len(self.frames)] < time_s:
                self._keep_previous()
        self._previous, self._previous_rgb = (time_s, frame), None

    def finish(self) -> tuple[np.ndarray, tuple[float, ...]]:
        """Give the remaining targets the last frame; return frames (T, H, W, 3) and times (T,)."""
        while not self.done:
            self._keep_previous()
        return np.stack(self.frames), tuple(self.times)

    def _keep_previous(self) -> None:
        assert self._previous is not None, "offer() at least one frame before finish()"
        time_s, frame = self._previous
        if self._previous_rgb is None:
            self._previous_rgb = self.convert(frame)
        self.frames.append(self._previous_rgb)
        self.times.append(time_s)


def read_clip(
    path: Path,
    clip: OpenedClip,
    sampling: SamplingSettings | None,
    sizing: FrameSizing | None,
    span: tuple[float, float] | None = None,
) -> tuple[ClipInfo, tuple[np.ndarray, tuple[float, ...]] | None]:
    """Describe ``clip`` from its first frame; with ``sampling``, also sample it (only the
    ``span`` (start, end) in seconds, densely, when one is given: see :func:`span_count`).

    Returns the :class:`ClipInfo` and, when sampling, frames (T, h, w, 3) uint8 at
    ``sizing.size(T, H, W)`` with their times (T,).
    """
    picker: FramePicker | None = None

    def next_target() -> float | None:
        return picker.next_target if picker is not None else None

    with closing(clip.frames(next_target)) as frames:
        first_time, first = next(frames)
        width, height, rotation = clip.orientation(first)
        check_resolution(path, width, height)
        info = ClipInfo(
            path=path,
            width=width,
            height=height,
            duration_s=clip.duration_s,
            fps=clip.fps,
            frame_count=clip.frame_count,
            rotation_degrees=rotation,
            codec=clip.codec,
        )
        if sampling is None:
            return info, None
        assert sizing is not None, "sampling needs a FrameSizing"
        if span is None:
            count = sample_count(info.duration_s, sampling, info.frame_count, sizing.frames_per_slice)
            targets = sample_times(info.duration_s, count)
        else:
            start, end = _within(path, span, info.duration_s)
            count = span_count(end - start, info.fps, sampling, sizing.frames_per_slice)
            targets = tuple(start + t for t in sample_times(end - start, count))
        size = sizing.size(count, height, width)
        picker = FramePicker(targets, lambda frame: sizing.resize(clip.upright_rgb(frame)[None], size)[0])
        picker.offer(first_time, first)
        while not picker.done and (decoded := next(frames, None)) is not None:
            picker.offer(*decoded)
        return info, picker.finish()
