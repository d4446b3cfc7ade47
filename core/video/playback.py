"""Decoding a clip's pictures for display: seek to a time, then frames in presentation order.

The window's preview plays the clip itself (not only the sampled frames) through this module, on a
thread of its own. It uses PyAV, which Framewise already reads clips with, rather than QtMultimedia:
QtMultimedia ships in PySide6-Addons (a far larger download than the Essentials Framewise needs) and
plays through a platform backend (FFmpeg, GStreamer or the OS's) that varies by machine, so a clip
that samples fine could fail to play. Here the same decoder serves both.

Pictures only: audio is not decoded. Frames are scaled to fit ``max_side`` as they are converted and
turned upright when the file carries a display rotation. Times are seconds from the clip's start,
the same clock as :attr:`ClipSampled.timestamps <framewise.core.events.ClipSampled.timestamps>`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import av
import numpy as np

from framewise.core.errors import EmptyClipError, UnreadableClipError
from framewise.core.video.clip import existing_file, normalized_rotation, upright
from framewise.core.video.pyav_reader import video_stream

DEFAULT_MAX_SIDE = 960


@dataclass(frozen=True)
class DisplayFrame:
    """One picture to show: ``image`` is uint8 RGB of shape (h, w, 3), upright; ``time_s`` from the clip's start."""

    time_s: float
    image: np.ndarray


class ClipPlayback:
    """One open clip for display. Not thread-safe: one thread drives it (the preview's decode thread)."""

    def __init__(self, path: str | Path, max_side: int = DEFAULT_MAX_SIDE) -> None:
        self.path = existing_file(path)
        self.max_side = max_side
        try:
            self._container: Any = av.open(str(self.path))
        except (av.error.FFmpegError, OSError, UnicodeDecodeError) as error:
            raise UnreadableClipError(
                f"{self.path.name} cannot be played ({getattr(error, 'strerror', None) or error})."
            ) from error
        try:
            self._stream = video_stream(self._container, self.path)
        except Exception:
            self._container.close()
            raise
        self._stream.thread_type = "AUTO"
        self._time_base = self._stream.time_base
        self._start_s = float(self._stream.start_time * self._time_base) if self._stream.start_time is not None else 0.0
        self.duration_s = self._duration_s()

    def close(self) -> None:
        self._container.close()

    def __enter__(self) -> ClipPlayback:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def frames_from(self, seconds: float) -> Iterator[DisplayFrame]:
        """The frame on screen at ``seconds`` (the last one at or before it), then every later frame in order."""
        self._seek(seconds)
        previous: Any = None
        for frame in self._decoded():
            if frame.pts is None:
                continue
            time_s = self._time_of(frame)
            if time_s <= seconds:
                previous = frame
                continue
            if previous is not None:
                yield self._display(previous)
                previous = None
            yield self._display(frame, time_s)
        if previous is not None:
            yield self._display(previous)

    def frame_at(self, seconds: float) -> DisplayFrame:
        """The frame on screen at ``seconds``; :class:`EmptyClipError` when the clip has none."""
        for frame in self.frames_from(seconds):
            return frame
        raise EmptyClipError(f"{self.path.name} has no picture to show at {seconds:.2f} s.")

    # -- internals --------------------------------------------------------------------------

    def _duration_s(self) -> float:
        if self._stream.duration:
            return float(self._stream.duration * self._time_base)
        if self._container.duration:
            return self._container.duration / av.time_base
        return 0.0

    def _seek(self, seconds: float) -> None:
        """Go to the keyframe at or before ``seconds``; decoding then runs forward from it."""
        target = int((max(0.0, seconds) + self._start_s) / self._time_base)
        try:
            self._container.seek(target, stream=self._stream, backward=True, any_frame=False)
        except av.error.FFmpegError:  # a file without an index: decode from the start
            self._container.seek(0, stream=self._stream)

    def _decoded(self) -> Iterator[Any]:
        try:
            yield from self._container.decode(self._stream)
        except av.error.EOFError:
            return
        except av.error.InvalidDataError:  # a damaged tail: show what decoded
            return

    def _time_of(self, frame: Any) -> float:
        return float(frame.pts * self._time_base) - self._start_s

    def _display(self, frame: Any, time_s: float | None = None) -> DisplayFrame:
        width, height = fit_within(frame.width, frame.height, self.max_side)
        rgb = frame.to_ndarray(format="rgb24", width=width, height=height)
        return DisplayFrame(self._time_of(frame) if time_s is None else time_s, upright(rgb, normalized_rotation(frame.rotation)))


def fit_within(width: int, height: int, max_side: int) -> tuple[int, int]:
    """(width, height) scaled down to fit ``max_side`` on the longer side, keeping the aspect; even sizes."""
    scale = min(1.0, max_side / max(width, height))
    return max(2, round(width * scale / 2) * 2), max(2, round(height * scale / 2) * 2)
