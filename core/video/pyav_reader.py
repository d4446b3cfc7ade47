"""The PyAV reader: one demux pass measures the clip, a second decodes the frames it needs.

* **Duration and frame count** come from the packet pass (no decoding), so a missing or wrong
  header does not matter; the header is used only for streams whose packets carry no timestamps.
* **Timestamp resets.** In formats that allow discontinuities (MPEG-TS, MPEG-PS), decode
  timestamps that go back, or jump forward by more than :data:`DISCONTINUITY_GAP_S`, start a new
  segment (two recordings joined with ``cat``, say). Segments are laid end to end on the clip's
  timeline, so the duration covers all of them and frames after a reset are sampled too.
* **Skipping ahead.** The packet pass lists the keyframes. When the next frame needed lies beyond
  the current group of pictures, the reader seeks to the keyframe before it (containers with an
  index) or drops packets up to it (MPEG-TS and other files without one), so sparse sampling of a
  long clip decodes only the groups it takes frames from.
* **Rotation.** A display-matrix rotation (phones) is applied; flips in the matrix are ignored.
* **libav's messages** go to Python logging (loggers ``libav.*``, never the console) while a file
  is opened and its packets scanned, on the reading thread. Decoding runs with them off: PyAV
  documents lockups when FFmpeg's decoder threads call back into Python.
"""

from __future__ import annotations

import bisect
import errno
import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import numpy as np

from framewise.core.errors import EmptyClipError, NoVideoStreamError
from framewise.core.video.bounded import Guard, Stopped
from framewise.core.video.clip import (
    ReaderFailed,
    Reader,
    check_resolution,
    displayed_size,
    normalized_rotation,
    path_error,
    upright,
)
from framewise.core.video.sampling import NextTarget

DISCONTINUITY_GAP_S = 10.0  # as FFmpeg's own dts_delta_threshold
_TS_DISCONT = av.format.Flags.ts_discont.value

logging.getLogger("libav").addHandler(logging.NullHandler())  # no console fallback for libav's lines
_libav_log_users = 0
_libav_log_lock = threading.Lock()


@contextmanager
def _libav_messages_logged() -> Iterator[None]:
    """Route libav's messages to Python logging for the duration (nested and threaded uses count)."""
    global _libav_log_users
    with _libav_log_lock:
        _libav_log_users += 1
        if _libav_log_users == 1:
            av.logging.set_level(av.logging.WARNING)
    try:
        yield
    finally:
        with _libav_log_lock:
            _libav_log_users -= 1
            if _libav_log_users == 0:
                av.logging.set_level(None)


# --- the packet pass -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Segment:
    """A run of packets whose timestamps continue one another.

    ``start_pts`` and ``keyframes`` (ascending) are in the stream's time base; ``offset_s`` is
    where the segment starts on the clip's timeline, ``duration_s`` how long it lasts.
    """

    start_pts: int
    offset_s: float
    duration_s: float
    keyframes: tuple[int, ...] = ()


@dataclass(frozen=True)
class PacketScan:
    """What one demux pass over a video stream's packets found."""

    packets: int
    segments: tuple[Segment, ...]  # empty when no packet carried a timestamp

    @property
    def duration_s(self) -> float | None:
        return sum(segment.duration_s for segment in self.segments) if self.segments else None


class SegmentSplitter:
    """Tells, packet by packet in demux order, where a stream's timestamps restart.

    Fed the same packets in the same order, it splits the same way in every pass.
    """

    def __init__(self, container: Any, time_base: Fraction) -> None:
        self.enabled = bool(container.format.flags & _TS_DISCONT)
        self.time_base = time_base
        self._last_dts: int | None = None

    def starts_segment(self, packet: Any) -> bool:
        if not self.enabled or packet.size == 0 or packet.dts is None:
            return False
        previous, self._last_dts = self._last_dts, packet.dts
        if previous is None:
            return False
        step_s = float((packet.dts - previous) * self.time_base)
        return step_s < 0 or step_s > DISCONTINUITY_GAP_S


@dataclass
class _SegmentSpan:
    """Timestamps seen so far in one segment."""

    first_pts: int | None = None
    last_two: list[int] = field(default_factory=list)  # the two largest presentation timestamps
    last_duration: int = 0
    keyframes: list[int] = field(default_factory=list)

    def add(self, packet: Any) -> None:
        if packet.pts is None:
            return
        self.first_pts = packet.pts if self.first_pts is None else min(self.first_pts, packet.pts)
        if packet.is_keyframe:
            self.keyframes.append(packet.pts)
        self.last_two = sorted([*self.last_two, packet.pts])[-2:]
        self.last_duration = packet.duration or 0

    def duration_s(self, time_base: Fraction) -> float:
        """The last frame is taken to last as long as the one before it: packet durations cannot
        be trusted for this, as with B-frames they are gaps in decoding order."""
        if self.first_pts is None:
            return 0.0
        last_duration = self.last_two[1] - self.last_two[0] if len(self.last_two) == 2 else self.last_duration
        return float((self.last_two[-1] + last_duration - self.first_pts) * time_base)

    def segment(self, offset_s: float, time_base: Fraction) -> Segment:
        return Segment(self.first_pts or 0, offset_s, self.duration_s(time_base), tuple(sorted(self.keyframes)))


def scan_packets(container: Any, stream: Any, guard: Guard) -> PacketScan:
    """One pass over the stream's packets without decoding: count them, split them into segments
    at timestamp resets, and find each segment's time span and keyframes."""
    time_base = stream.time_base or Fraction(1, 1)
    splitter = SegmentSplitter(container, time_base)
    spans = [_SegmentSpan()]
    closed_s, packets = 0.0, 0
    try:
        for packet in container.demux(stream):
            guard.check(closed_s + spans[-1].duration_s(time_base))
            if packet.size == 0:
                continue
            packets += 1
            if splitter.starts_segment(packet):
                closed_s += spans[-1].duration_s(time_base)
                spans.append(_SegmentSpan())
            spans[-1].add(packet)
    except av.error.ExitError as error:  # a read that outlived the budget was interrupted
        raise Stopped from error
    except av.error.FFmpegError:
        pass  # a damaged tail: keep what was read; decoding reports it if nothing is usable
    if stream.time_base is None or all(span.first_pts is None for span in spans):
        return PacketScan(packets=packets, segments=())
    segments, offset_s = [], 0.0
    for span in spans:
        segments.append(span.segment(offset_s, time_base))
        offset_s += segments[-1].duration_s
    return PacketScan(packets=packets, segments=tuple(segments))


# --- opening ----------------------------------------------------------------------------------------


def open_container(path: Path, guard: Guard) -> Any:
    """``av.open`` with the budget as its open and read timeouts. A file the OS refuses (permission,
    name too long) raises its ClipError; one PyAV cannot parse raises :class:`ReaderFailed`."""
    try:
        with _libav_messages_logged():
            return av.open(str(path), timeout=(guard.seconds_left(), guard.budget.per_video_second_s))
    except av.error.ExitError as error:
        raise Stopped from error
    except (av.error.FFmpegError, OSError, UnicodeDecodeError) as error:
        if isinstance(error, OSError) and error.errno in (errno.EACCES, errno.EPERM, errno.ENAMETOOLONG, errno.ENOENT):
            raise path_error(path, error) from None
        raise ReaderFailed(f"PyAV: {_reason(error)}") from error


def _reason(error: BaseException) -> str:
    """The error's own words, without the errno and file name PyAV adds."""
    return getattr(error, "strerror", None) or str(error) or type(error).__name__


def video_stream(container: Any, path: Path) -> Any:
    """The first video stream that is not a cover picture (an attached picture in audio files)."""
    attached_pic = av.stream.Disposition.attached_pic
    streams = [stream for stream in container.streams.video if not stream.disposition & attached_pic]
    if streams:
        return streams[0]
    if container.streams.video:
        raise NoVideoStreamError(
            f"{path.name} holds only a cover picture (album art), no video"
            f"{' beside its audio' if container.streams.audio else ''}. Choose a file with moving pictures in it."
        )
    kinds = sorted({stream.type for stream in container.streams}) or ["nothing"]
    raise NoVideoStreamError(
        f"{path.name} has no video stream (it holds {', '.join(kinds)} only). Choose a file with video in it."
    )


def _header_duration_s(container: Any, stream: Any) -> float | None:
    if stream.duration and stream.time_base:
        return float(stream.duration * stream.time_base)
    if container.duration:
        return container.duration / 1_000_000
    return None


# --- the reader ---------------------------------------------------------------------------------------


class PyAVClip:
    """An opened clip as PyAV reads it (see :class:`framewise.core.video.sampling.OpenedClip`).

    Construction opens the file, checks the header's resolution before any decoding, and runs the
    packet pass.
    """

    reader: Reader = "pyav"

    def __init__(self, path: Path, guard: Guard) -> None:
        self.path, self.guard = path, guard
        with open_container(path, guard) as container:
            stream = video_stream(container, path)
            check_resolution(path, stream.codec_context.width, stream.codec_context.height)
            self.stream_index = stream.index
            self.time_base = stream.time_base or Fraction(1, 1)
            self.codec = stream.codec_context.name
            rate = stream.average_rate or stream.guessed_rate
            guard.begin("scan")
            with _libav_messages_logged():
                scan = scan_packets(container, stream, guard)
            header = Segment(stream.start_time or 0, 0.0, _header_duration_s(container, stream) or 0.0)
        if scan.packets == 0:
            raise EmptyClipError(
                f"{path.name} has a video stream but no frames in it; the recording may have stopped "
                "before the first frame. Choose another clip."
            )
        self.segments = scan.segments or (header,)
        self.duration_s = sum(segment.duration_s for segment in self.segments)
        self.frame_count: int | None = scan.packets
        if self.duration_s > 0:
            self.fps = scan.packets / self.duration_s
        else:
            self.fps = float(rate) if rate else 0.0

    def orientation(self, frame: Any) -> tuple[int, int, int]:
        rotation = normalized_rotation(frame.rotation)
        return (*displayed_size(frame.width, frame.height, rotation), rotation)

    def upright_rgb(self, frame: Any) -> np.ndarray:
        return upright(frame.to_ndarray(format="rgb24"), normalized_rotation(frame.rotation))

    def frames(self, next_target: NextTarget) -> Iterator[tuple[float, Any]]:
        self.guard.begin("decode", self.duration_s)
        with open_container(self.path, self.guard) as container:
            stream = container.streams[self.stream_index]
            stream.thread_type = "AUTO"
            yield from self._decoded(container, stream, next_target)

    def _time_s(self, segment: int, pts: int) -> float:
        start = self.segments[min(segment, len(self.segments) - 1)]
        return start.offset_s + float((pts - start.start_pts) * self.time_base)

    def _keyframe_before(self, target_s: float | None) -> tuple[int, int] | None:
        """(segment, keyframe pts) of the group of pictures that holds the frame on screen at ``target_s``."""
        if target_s is None:
            return None
        index = max(bisect.bisect_right([s.offset_s for s in self.segments], target_s) - 1, 0)
        segment = self.segments[index]
        if not segment.keyframes:
            return None
        target_pts = segment.start_pts + (target_s - segment.offset_s) / self.time_base
        return index, segment.keyframes[max(bisect.bisect_right(segment.keyframes, target_pts) - 1, 0)]

    def _decoded(self, container: Any, stream: Any, next_target: NextTarget) -> Iterator[tuple[float, Any]]:
        """Decoded frames with their times, in presentation order; packets that fail to decode are
        skipped. Raises :class:`ReaderFailed` when not one frame decoded."""
        splitter = SegmentSplitter(container, self.time_base)
        can_seek = not splitter.enabled and len(stream.index_entries) > 0 and bool(self.segments[0].keyframes)
        segment, skip_to, last_sought = 0, None, (-1, 0)
        state = _DecodeState()
        try:
            for packet in container.demux(stream):
                self.guard.check(self._time_s(segment, packet.pts) if packet.pts is not None else None)
                if splitter.starts_segment(packet):
                    yield from state.decode(stream, None, segment, self._time_s)  # drain the old segment
                    stream.codec_context.flush_buffers()
                    segment += 1
                if skip_to is not None:
                    if not (packet.is_keyframe and packet.pts is not None and (segment, packet.pts) >= skip_to):
                        continue
                    skip_to = None
                elif packet.is_keyframe and packet.pts is not None:
                    # Never the same keyframe twice, so a seek that lands short cannot loop.
                    wanted = self._keyframe_before(next_target())
                    if wanted is not None and wanted > max((segment, packet.pts), last_sought):
                        last_sought = wanted
                        if can_seek:
                            container.seek(wanted[1], stream=stream, backward=True)
                        else:
                            skip_to = wanted
                        continue
                yield from state.decode(stream, packet, segment, self._time_s)
        except av.error.ExitError as error:
            raise Stopped from error
        except av.error.FFmpegError as error:  # the demuxer hit damaged data: keep what was decoded
            state.failure = error
        if state.decoded == 0:
            reason = f": {_reason(state.failure)}" if state.failure is not None else ""
            raise ReaderFailed(f"PyAV could not decode a frame{reason}")


@dataclass
class _DecodeState:
    """Frames decoded so far, the last time given, and the last decoding error."""

    decoded: int = 0
    last_time_s: float = 0.0
    failure: BaseException | None = None

    def decode(
        self, stream: Any, packet: Any, segment: int, time_s: Callable[[int, int], float]
    ) -> Iterator[tuple[float, Any]]:
        """Decode one packet (None drains the decoder); a frame without a timestamp keeps the last time."""
        try:
            frames = stream.decode(packet)
        except av.error.FFmpegError as error:
            if isinstance(error, av.error.ExitError):
                raise
            self.failure = error
            return
        for frame in frames:
            if frame.pts is not None:
                self.last_time_s = time_s(segment, frame.pts)
            self.decoded += 1
            yield self.last_time_s, frame
