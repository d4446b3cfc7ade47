"""The sampling rules (how many frames, which ones, exact or fast) and what every reader is asked
for. :func:`read_clip` builds the :class:`ClipInfo` and a :class:`TakeRequest`; each reader takes
the frames its own way (the PyAV reader by the plan of :mod:`.reads`, OpenCV straight through
with a :class:`FramePicker`)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from framewise.core.errors import SpanError
from framewise.core.settings import FAST_MODE_AUTO_ABOVE_S, SamplingSettings
from framewise.core.video.bounded import Guard
from framewise.core.video.clip import ClipInfo, FrameSizing, Reader, check_resolution
from framewise.core.video.reads import SamplingMode


def sample_count(
    duration_s: float, sampling: SamplingSettings, frame_count: int | None = None, *, multiple: int
) -> int:
    """How many frames to sample from a clip: a multiple of ``multiple`` (the model family's frames
    per slice), within ``[min_frames, max_frames]``, and no more than the ``frame_count`` the clip
    holds (rounded up to the multiple) when that is known.

    >>> sample_count(4.0, SamplingSettings(fps=2.0, min_frames=4, max_frames=32), multiple=2)
    8
    >>> sample_count(4.0, SamplingSettings(fps=2.0, min_frames=4, max_frames=32), frame_count=5, multiple=2)
    6
    """
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


def in_turn(frames: int, count: int) -> tuple[int, ...]:
    """Which frame (by its place in presentation order) each of ``count`` targets takes from a clip
    of ``frames`` frames, ``frames <= count``: every frame in turn, repeats spread evenly. On a
    constant frame rate this is the frame on screen at each of :func:`sample_times`.

    >>> in_turn(3, 4)
    (0, 1, 1, 2)
    """
    return tuple(math.floor((index + 0.5) * frames / count) for index in range(count))


def span_count(span_s: float, clip_fps: float, sampling: SamplingSettings, *, multiple: int) -> int:
    """How many frames a closer look at ``span_s`` seconds samples: the whole frame budget
    (``max_frames``), but no more than the span holds at the clip's ``clip_fps`` (0: unknown), and
    never fewer than ``min_frames``; a multiple of ``multiple`` as :func:`sample_count`'s.

    >>> span_count(2.0, 30.0, SamplingSettings(fps=2.0, min_frames=4, max_frames=32), multiple=2)
    32
    >>> span_count(0.5, 10.0, SamplingSettings(fps=2.0, min_frames=4, max_frames=32), multiple=2)
    6
    """
    held = math.ceil(span_s * clip_fps - 1e-6) if clip_fps > 0 else sampling.max_frames
    return _round_up(min(max(held, sampling.min_frames), sampling.max_frames), multiple)


def _within(path: Path, span: tuple[float, float], duration_s: float) -> tuple[float, float]:
    """``span`` cut to the clip's ``[0, duration_s]``; SpanError when nothing of it is left (or
    either end is not a number)."""
    start, end = max(span[0], 0.0), min(span[1], duration_s)
    if not end > start:  # also true when either end is NaN
        raise SpanError(
            f"{span[0]:.1f}–{span[1]:.1f} s holds nothing of {path.name}, which runs 0.0–{duration_s:.1f} s. "
            "Select a span inside the clip, its start before its end."
        )
    return start, end


def _round_up(count: int, multiple: int) -> int:
    return count + -count % multiple


@dataclass(frozen=True)
class TakeRequest:
    """What to take from an opened clip: for each of ``targets`` (seconds on the clip's timeline,
    ascending, ``interval_s`` apart) a frame, by the rule of ``mode``, as (h, w, 3) RGB at
    ``size`` = (h, w) as displayed. ``resize`` is the caller's resampler (see :class:`FrameSizing`).
    ``in_turn``, for a clip with no more frames than targets, replaces the time rule: target ``i``
    takes the frame at place ``in_turn[i]`` in presentation order (see :func:`in_turn`)."""

    targets: tuple[float, ...]
    interval_s: float
    mode: SamplingMode
    size: tuple[int, int]
    resize: Callable[[np.ndarray, tuple[int, int]], np.ndarray]
    sink: FrameSink | None = None
    in_turn: tuple[int, ...] | None = None

    def hand_on(self, first: int, kept: Sequence[tuple[np.ndarray, float] | None]) -> None:
        """Put frames ``first ..`` into the sink as soon as they are kept (None: not found yet)."""
        if self.sink is not None:
            for index, frame in enumerate(kept, start=first):
                if frame is not None:
                    self.sink.put(index, *frame)


class FrameSink(Protocol):
    """Takes sampled frames while the clip is read (see :class:`framewise.core.video.feed.ChunkFeed`)."""

    def start(self, count: int, size: tuple[int, int]) -> None:
        """``count`` frames of ``size`` = (h, w) are coming."""

    def put(self, index: int, rgb: np.ndarray, time_s: float) -> None:
        """Frame ``index`` (h, w, 3) uint8, shown at ``time_s``; frames may come out of order."""


class GuardedSink:
    """``sink`` for a read bounded by ``guard``: a put that waits for the sink's consumer (the
    encoder, behind the reading) does not spend the read's budget (:meth:`Guard.handing_on`)."""

    def __init__(self, sink: FrameSink, guard: Guard) -> None:
        self.sink, self.guard = sink, guard

    def start(self, count: int, size: tuple[int, int]) -> None:
        self.sink.start(count, size)

    def put(self, index: int, rgb: np.ndarray, time_s: float) -> None:
        with self.guard.handing_on():
            self.sink.put(index, rgb, time_s)


@dataclass(frozen=True)
class Taken:
    """What a reader took: ``frames`` (T, h, w, 3) uint8, their own ``times`` (T,) in seconds, the
    ``mode`` it used (a reader without keyframe positions reads ``"fast"`` requests exactly),
    how many frames it ``decoded`` to take them, and what of the file it could not read
    (``damage``, for a person; ``None``: all of it)."""

    frames: np.ndarray
    times: tuple[float, ...]
    mode: SamplingMode
    decoded: int
    damage: str | None = None


class OpenedClip(Protocol):
    """One reader's view of an opened clip: what it knows before decoding, and its frames."""

    reader: Reader
    codec: str
    duration_s: float
    fps: float
    frame_count: int | None

    def first_frame(self) -> tuple[float, Any]:
        """The first frame decoded (the reader's own object) with its time, without consuming it:
        :meth:`take` starts from it when its first target needs it."""

    def orientation(self, frame: Any) -> tuple[int, int, int]:
        """(width, height) as displayed, and the rotation in degrees counter-clockwise."""

    def take(self, request: TakeRequest) -> Taken:
        """The frames ``request`` asks for."""


class FramePicker:
    """Takes decoded frames in presentation order and keeps, for each target time, the frame on
    screen at that time (the last one at or before it), converted by ``convert`` to (H, W, 3).
    ``on_keep(target index, frame, time)`` is told of each as it is kept. With ``by_place`` the
    targets are places in presentation order (0: the first frame), not times."""

    def __init__(
        self,
        targets: tuple[float, ...],
        convert: Callable[[Any], np.ndarray],
        on_keep: Callable[[int, np.ndarray, float], None] = lambda index, rgb, time_s: None,
        by_place: bool = False,
    ) -> None:
        self.targets = targets
        self.convert = convert
        self.on_keep = on_keep
        self.by_place = by_place
        self._place = -1
        self.frames: list[np.ndarray] = []
        self.times: list[float] = []
        self._previous: tuple[float, Any] | None = None
        self._previous_rgb: np.ndarray | None = None

    @property
    def done(self) -> bool:
        return len(self.frames) == len(self.targets)

    @property
    def offered(self) -> bool:
        return self._previous is not None

    def offer(self, time_s: float, frame: Any) -> None:
        """Take the next decoded frame. Targets before the first frame get the first frame."""
        self._place += 1
        position = self._place if self.by_place else time_s
        if self._previous is not None:
            while not self.done and self.targets[len(self.frames)] < position:
                self._keep_previous()
        self._previous, self._previous_rgb = (time_s, frame), None

    def finish(self) -> tuple[list[np.ndarray], list[float]]:
        """Give the remaining targets the last frame; return the kept frames (H, W, 3) and times."""
        while not self.done:
            self._keep_previous()
        return self.frames, self.times

    def _keep_previous(self) -> None:
        assert self._previous is not None, "offer() at least one frame before finish()"
        time_s, frame = self._previous
        if self._previous_rgb is None:
            self._previous_rgb = self.convert(frame)
        self.frames.append(self._previous_rgb)
        self.times.append(time_s)
        self.on_keep(len(self.frames) - 1, self._previous_rgb, time_s)


def sampling_mode(sampling: SamplingSettings, duration_s: float) -> SamplingMode:
    """The mode ``sampling.fast_mode`` asks for on a clip of ``duration_s`` seconds."""
    if sampling.fast_mode == "auto":
        return "fast" if duration_s > FAST_MODE_AUTO_ABOVE_S else "exact"
    return "fast" if sampling.fast_mode == "on" else "exact"


def read_clip(
    path: Path,
    clip: OpenedClip,
    sampling: SamplingSettings | None,
    sizing: FrameSizing | None,
    sink: FrameSink | None = None,
    span: tuple[float, float] | None = None,
) -> tuple[ClipInfo, Taken | None]:
    """Describe ``clip`` from its first frame; with ``sampling``, also sample it (only the
    ``span`` (start, end) in seconds, densely, when one is given: see :func:`span_count`).

    Returns the :class:`ClipInfo` and, when sampling, what the reader took: frames (T, h, w, 3)
    uint8 at ``sizing.size(T, H, W)`` with their times (T,). ``sink`` gets every frame as soon as
    it is kept.
    """
    _, first = clip.first_frame()
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
        start, length = 0.0, info.duration_s
        count = sample_count(length, sampling, info.frame_count, multiple=sizing.frames_per_slice)
        every_frame = in_turn(info.frame_count, count) if info.frame_count and info.frame_count <= count else None
    else:
        start, end = _within(path, span, info.duration_s)
        length = end - start
        count = span_count(length, info.fps, sampling, multiple=sizing.frames_per_slice)
        every_frame = None
    request = TakeRequest(
        targets=tuple(start + t for t in sample_times(length, count)),
        interval_s=length / count,
        mode=sampling_mode(sampling, length),
        size=sizing.size(count, height, width),
        resize=sizing.resize,
        sink=sink,
        in_turn=every_frame,
    )
    if sink is not None:
        sink.start(count, request.size)
    taken = clip.take(request)
    request.hand_on(0, list(zip(taken.frames, taken.times, strict=True)))  # filled gaps; a reader that kept none early
    return info, taken
