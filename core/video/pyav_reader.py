"""The PyAV reader: the container's index or one demux pass measures the clip, a second pass
decodes the frames it needs.

* **Duration, frame count and keyframes** come from the container's index where it lists every
  frame (MP4, MOV: nothing is read but the header). Other files without timestamp resets
  (Matroska, WebM) are measured from the header's duration and frame rate, and their keyframes
  found by the packet pass (no decoding) only when frames are sampled; the packet pass measures
  files whose header lacks either, and formats with resets (MPEG-TS, MPEG-PS), whose header
  counts only part of a joined file.
* **Timestamp resets.** In formats that allow discontinuities (MPEG-TS, MPEG-PS), decode
  timestamps that go back, or jump forward by more than :data:`DISCONTINUITY_GAP_S`, start a new
  segment (two recordings joined with ``cat``, say). Segments are laid end to end on the clip's
  timeline, so the duration covers all of them and frames after a reset are sampled too.
* **Reading by plan.** The packet pass lists the keyframes; :mod:`.reads` turns the target times
  into reads that each start at a keyframe. A decoder reaches a read's keyframe by seeking
  (containers with an index) or by dropping packets (MPEG-TS and other files without one), or
  just goes on when the read before stopped there, so no group of pictures is decoded twice and
  sparse sampling of a long clip decodes only the groups it takes frames from. Files with an index
  are read by one decoder per core, each on its own share of the reads (PyAV lets go of the GIL
  while FFmpeg decodes).
* **Converting.** Only kept frames are converted: in exact mode to RGB at full size, then through
  the caller's resampler (the frames training and evaluation see); in fast mode by FFmpeg's
  scaler, to RGB at the target size in one step.
* **Rotation.** A display-matrix rotation (phones) is applied; flips in the matrix are ignored.
* **libav's messages** stay off, as PyAV leaves them: its route into Python logging calls back into
  Python from inside FFmpeg, and with one decoder per core opening files at once that locked up
  every reader on a 16-core machine (PyAV issue 751). A file PyAV cannot read is reported by the
  error PyAV raises.
"""

from __future__ import annotations

import errno
import functools
import os
import queue
import threading
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import numpy as np

from framewise.core.errors import EmptyClipError, NoVideoStreamError, UnreadableClipError
from framewise.core.video.bounded import POLL_S, Guard, Stopped
from framewise.core.video.clip import (
    ReaderFailed,
    Reader,
    check_resolution,
    displayed_size,
    normalized_rotation,
    path_error,
    upright,
)
from framewise.core.video.reads import Read, SamplingMode, plan_reads, split_reads
from framewise.core.video.sampling import FramePicker, Taken, TakeRequest

DISCONTINUITY_GAP_S = 10.0  # as FFmpeg's own dts_delta_threshold
# How much shorter than its header's duration a clip's packets may run before the file counts as cut
# short: a header's duration may cover an audio track that ends a little after the video.
HEADER_SLACK_S = 1.0
_TS_DISCONT = av.format.Flags.ts_discont.value

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
    keyframes_known: bool = True  # False: measured from the header, which lists no keyframes

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
        """The last frame is taken to last as long as the one before it, or as long as the last
        packet says when that is shorter (or the only length known). The packet alone is not
        trusted: with B-frames its duration is a gap in decoding order. The step alone is not
        either: a pause before the last frame (a camera that records on motion) would count twice."""
        if self.first_pts is None:
            return 0.0
        lengths = [self.last_two[1] - self.last_two[0]] if len(self.last_two) == 2 else []
        lengths += [self.last_duration] if self.last_duration > 0 else []
        return float((self.last_two[-1] + min(lengths, default=0) - self.first_pts) * time_base)

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


def index_scan(container: Any, stream: Any) -> PacketScan | None:
    """What :func:`scan_packets` finds, read from the container's index instead of every packet,
    when that index lists every frame of the stream (MP4 and MOV sample tables); ``None`` when it
    does not, or when its times cannot be trusted to be the packets'.

    The index's timestamps are decode times; B-frames put presentation a fixed number of frames
    later, so a keyframe's presentation time is its decode time plus the first packet's offset
    between the two. That holds when the last keyframe's packet agrees; the last group's packets
    (read, not decoded) give the clip's end.
    """
    entries = [entry for entry in stream.index_entries if entry.size > 0]
    if stream.time_base is None or not stream.frames or len(entries) < stream.frames:
        return None
    if SegmentSplitter(container, stream.time_base).enabled:
        return None  # timestamps may restart: only the packets tell where
    keyframes = [entry.timestamp for entry in entries if entry.is_keyframe]
    head = _packets_from(container, stream, keyframes[0] if keyframes else None)[:1]
    if not head:
        return None
    shift = head[0].pts - head[0].dts
    tail = _packets_from(container, stream, keyframes[-1] + shift)
    if not tail or not tail[0].is_keyframe or (tail[0].dts, tail[0].pts) != (keyframes[-1], keyframes[-1] + shift):
        return None
    span = _SegmentSpan(first_pts=head[0].pts)
    for packet in tail:
        span.add(packet)
    span.keyframes = [dts + shift for dts in keyframes]
    return PacketScan(packets=len(entries), segments=(span.segment(0.0, stream.time_base),))


def header_scan(container: Any, stream: Any) -> PacketScan | None:
    """The clip measured from its header alone (Matroska, WebM, AVI and other files whose index,
    if any, does not list every frame): one segment of the header's duration and the frames its
    frame rate gives, keyframes not known. ``None`` when the header lacks the duration or the rate,
    or when the format allows timestamp resets (MPEG-TS, MPEG-PS): there the header counts only
    part of a joined file, so only the packets tell."""
    if stream.time_base is None or SegmentSplitter(container, stream.time_base).enabled:
        return None
    duration_s = _header_duration_s(container, stream)
    rate = stream.average_rate or stream.guessed_rate
    if not duration_s or not rate:
        return None
    start = Segment(stream.start_time or 0, 0.0, duration_s)
    return PacketScan(packets=max(round(duration_s * float(rate)), 1), segments=(start,), keyframes_known=False)


def measure(container: Any, stream: Any, guard: Guard, cut_short: bool = False) -> PacketScan:
    """The stream's packets, segments and keyframes: from its index where that lists every frame,
    else from its header where that gives the duration and frame rate (keyframes are then
    scanned for only when frames are sampled), else from a pass over its packets. Of a file
    ``cut_short`` (its index lists frames past its end: :func:`indexed_past_end`) neither is
    trusted: the packets tell how much is there."""
    scan = None if cut_short else index_scan(container, stream) or header_scan(container, stream)
    if scan is None:
        guard.begin("scan")
        scan = scan_packets(container, stream, guard)
    return scan


def indexed_past_end(container: Any, stream: Any) -> tuple[int, int] | None:
    """(frames wholly in the file, frames listed) when the stream's index places frames past the
    end of the file (an MP4 or MOV whose index comes first, cut short by a copy or download that
    did not finish), else ``None``."""
    entries = [entry for entry in stream.index_entries if entry.size > 0]
    whole = sum(1 for entry in entries if entry.pos + entry.size <= container.size)
    return (whole, len(entries)) if container.size > 0 and whole < len(entries) else None


def cut_short_message(name: str, read_s: float, whole_s: float, frames: str = "") -> str:
    """What a person is told when only the first ``read_s`` seconds of a clip of ``whole_s`` could be read."""
    return (
        f"Only the first {read_s:.1f} s of {name}'s {whole_s:.1f} s could be read{frames}: the file is cut short or "
        "damaged past that point (a copy or download that did not finish, say), so the answers see that part only."
    )


def _packets_from(container: Any, stream: Any, keyframe_pts: int | None) -> list[Any]:
    """The packets with timestamps from the keyframe shown at ``keyframe_pts`` (or the last one
    before) to the next keyframe or the end (read, not decoded); none when the index has no
    keyframe or the read fails."""
    if keyframe_pts is None:
        return []
    packets = []
    try:
        container.seek(keyframe_pts, stream=stream, backward=True)
        for packet in container.demux(stream):
            if packet.size == 0 or packet.pts is None or packet.dts is None:
                continue
            if packets and packet.is_keyframe:
                break
            packets.append(packet)
    except av.error.FFmpegError:
        return []
    return packets


# --- opening ----------------------------------------------------------------------------------------


def open_container(path: Path, guard: Guard) -> Any:
    """``av.open`` with the budget as its open and read timeouts. A file the OS refuses (permission,
    name too long) raises its ClipError; one PyAV cannot parse raises :class:`ReaderFailed`."""
    try:
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
    """The first video stream that is not a cover picture (an attached picture in audio files).
    Raises a typed error for a picture neither reader decodes (:func:`_check_decodable`), and
    :class:`ReaderFailed` for a stream PyAV has no decoder for (OpenCV's FFmpeg may have one)."""
    attached_pic = av.stream.Disposition.attached_pic
    streams = [stream for stream in container.streams.video if not stream.disposition & attached_pic]
    if streams:
        _check_decodable(container, streams[0], path)
        return streams[0]
    if container.streams.video:
        raise NoVideoStreamError(
            f"{path.name} holds only a cover picture (album art), no video"
            f"{' beside its audio' if container.streams.audio else ''}. Choose a file with moving pictures in it."
        )
    if not container.streams:
        raise UnreadableClipError(_no_streams_message(container, path))
    kinds = sorted({stream.type for stream in container.streams})
    raise NoVideoStreamError(
        f"{path.name} has no video stream (it holds {', '.join(kinds)} only). Choose a file with video in it."
    )


def _check_decodable(container: Any, stream: Any, path: Path) -> None:
    """Refuse by name what this FFmpeg cannot decode and OpenCV would misread: an SVG drawing, and
    an animated WebP (FFmpeg decodes still WebP pictures only; OpenCV gives its first frame over
    and over, at no time). Another stream without a decoder is left to OpenCV."""
    if container.format.name == "webp_pipe" and _animated_webp(path):
        raise UnreadableClipError(
            f"{path.name} is an animated WebP; Framewise reads still WebP pictures, but its decoder (FFmpeg's) "
            "cannot read an animation. Convert it to an MP4 or a GIF and open that."
        )
    if stream.codec_context is None:
        if container.format.name == "svg_pipe":
            raise UnreadableClipError(
                f"{path.name} is an SVG drawing; Framewise reads pictures made of pixels (PNG, JPEG, WebP, GIF, BMP), "
                "not vector drawings. Export it as a PNG (a web browser or any vector editor can) and open that."
            )
        raise ReaderFailed("PyAV has no decoder for its video")


def _animated_webp(path: Path) -> bool:
    """Whether ``path`` is a WebP file whose extended header (its VP8X chunk) sets the animation flag."""
    with open(path, "rb") as file:
        head = file.read(21)
    return len(head) == 21 and head[8:16] == b"WEBPVP8X" and bool(head[20] & 0x02)


def _no_streams_message(container: Any, path: Path) -> str:
    """Why a file that opened lists no stream at all: an MP4 or MOV whose index was cut off, or another damaged file."""
    if "mov" in container.format.name.split(","):
        return (
            f"{path.name} has lost its index (the 'moov' box that an MP4 or MOV file writes last, when "
            "recording stops, is missing or cut off), so none of its pictures can be found. The recording was "
            "probably interrupted, or the file not copied whole: copy it again from where it came from, or "
            "rebuild its index with a repair tool that uses a good recording from the same camera."
        )
    return (
        f"{path.name} opens but lists no streams at all, so it is truncated or damaged. Copy it again from "
        "where it came from, or re-encode it (MP4 with H.264 works everywhere)."
    )


def _header_duration_s(container: Any, stream: Any) -> float | None:
    if stream.duration and stream.time_base:
        return float(stream.duration * stream.time_base)
    if container.duration:
        return container.duration / 1_000_000
    return None


# --- the reader ---------------------------------------------------------------------------------------


def default_workers() -> int:
    """Decoders to run at once: one per core this process may use."""
    return max(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1, 1)


# What one decoder holds, counted in decoded pictures (YUV 4:2:0, 1.5 bytes a pixel): those waiting
# for its converter and FFmpeg's own. Measured on this project's 1080p and 4K test clips: about
# 15-20 MiB and 47 MiB of resident memory a decoder (docs/long-clips.md, "Host memory").
DECODER_PICTURES = 5
# About what the decoders of one read may hold together: a 4K clip gets 4 of them, 1080p 16.
DECODERS_BYTES = 256 * 2**20


def decoders_for(workers: int, width: int, height: int) -> int:
    """Decoders to run at once on a clip of ``width`` x ``height``: one per core (``workers``), fewer
    where their pictures together would pass :data:`DECODERS_BYTES`."""
    picture_bytes = width * height * 3 // 2
    return max(1, min(workers, DECODERS_BYTES // (DECODER_PICTURES * max(picture_bytes, 1))))


class PyAVClip:
    """An opened clip as PyAV reads it (see :class:`framewise.core.video.sampling.OpenedClip`).

    Construction opens the file, checks the header's resolution before any decoding, and measures
    the clip (:func:`measure`). :meth:`take` follows the plan of :mod:`.reads`, split between up to ``workers``
    decoders (one per core) where the file can be sought.
    """

    reader: Reader = "pyav"

    def __init__(self, path: Path, guard: Guard) -> None:
        self.path, self.guard = path, guard
        self.workers = default_workers()
        with open_container(path, guard) as container:
            stream = video_stream(container, path)
            check_resolution(path, stream.codec_context.width, stream.codec_context.height)
            self.coded_size = (stream.codec_context.width, stream.codec_context.height)
            self.stream_index = stream.index
            self.time_base = stream.time_base or Fraction(1, 1)
            self.codec = stream.codec_context.name
            rate = stream.average_rate or stream.guessed_rate
            past_end = indexed_past_end(container, stream)
            scan = measure(container, stream, guard, past_end is not None)
            header = Segment(stream.start_time or 0, 0.0, _header_duration_s(container, stream) or 0.0)
            has_index = len(stream.index_entries) > 0
            discontinuous = SegmentSplitter(container, self.time_base).enabled
        if scan.packets == 0:
            raise EmptyClipError(
                f"{path.name} has a video stream but no frames in it; the recording may have stopped "
                "before the first frame. Choose another clip."
            )
        self._has_index, self._discontinuous = has_index, discontinuous
        self.keyframes_known = scan.keyframes_known
        self._set_segments(scan.segments or (header,))
        self.duration_s = sum(segment.duration_s for segment in self.segments)
        self.frame_count: int | None = scan.packets
        if self.duration_s > 0:
            self.fps = scan.packets / self.duration_s
        else:
            self.fps = float(rate) if rate else 0.0
        self._first: _Decoder | None = None
        self.damage: str | None = None  # what of the file could not be read, for a person
        if past_end is not None and header.duration_s > self.duration_s:
            frames = " ({} of {} frames)".format(*past_end)
            self.damage = cut_short_message(path.name, self.duration_s, header.duration_s, frames)

    def _set_segments(self, segments: tuple[Segment, ...]) -> None:
        """Take ``segments`` as the clip's timeline, with their keyframes."""
        self.segments = segments
        self.keyframes = tuple((index, pts) for index, segment in enumerate(self.segments) for pts in segment.keyframes)
        self.keyframe_times = tuple(self._time_s(segment, pts) for segment, pts in self.keyframes)
        self.can_seek = self._has_index and not self._discontinuous and bool(self.keyframes)

    def _scan_keyframes(self) -> None:
        """A clip measured from its header: one pass over its packets finds the keyframes the
        plan needs (the duration and frame count already reported stay)."""
        self.guard.begin("scan")
        with open_container(self.path, self.guard) as container:
            scan = scan_packets(container, container.streams[self.stream_index], self.guard)
        if scan.segments:
            self._set_segments(scan.segments)
        if scan.duration_s is not None and scan.duration_s < self.duration_s - HEADER_SLACK_S:
            self.damage = cut_short_message(self.path.name, scan.duration_s, self.duration_s)
        self.keyframes_known = True
        self.guard.begin("decode", self.duration_s)

    def close(self) -> None:
        if self._first is not None:
            self._first.close()

    def orientation(self, frame: Any) -> tuple[int, int, int]:
        rotation = normalized_rotation(frame.rotation)
        return (*displayed_size(frame.width, frame.height, rotation), rotation)

    def upright_rgb(self, frame: Any) -> np.ndarray:
        return upright(frame.to_ndarray(format="rgb24"), normalized_rotation(frame.rotation))

    def scaled_rgb(self, frame: Any, size: tuple[int, int]) -> np.ndarray:
        """The frame as (h, w, 3) uint8 RGB upright at ``size`` = (h, w) as displayed, scaled and
        converted by the decoder's scaler in one step."""
        rotation = normalized_rotation(frame.rotation)
        height, width = size if rotation in (0, 180) else size[::-1]
        rgb = frame.to_ndarray(width=width, height=height, format="rgb24", interpolation=FAST_MODE_SCALING)
        return upright(rgb, rotation)

    def first_frame(self) -> tuple[float, Any]:
        self.guard.begin("decode", self.duration_s)
        self._first = _Decoder(self, threading.Event())
        return self._first.peek()

    def take(self, request: TakeRequest) -> Taken:
        """Carry out the plan of :func:`plan_reads` for ``request``: runs of reads on parallel
        decoders, each starting at a keyframe, so the frames are those one decoder would take. A
        request for every frame in turn is one read from the first frame."""
        assert self._first is not None, "first_frame() before take()"
        if request.in_turn is not None:
            mode: SamplingMode = "exact"
            runs = [[Read(None, None, request.in_turn, by_place=True)]]
        else:
            mode, runs = self._plan(request)
        convert = self._converter(request.size, request.resize if mode == "exact" else None)
        firsts = [0]
        for run in runs:
            firsts.append(firsts[-1] + sum(len(read.targets) for read in run))
        # Each frame is written to its place as it is converted: a long clip's frames are never
        # held as separate pictures and then copied together (2,048 frames at 64k video tokens
        # are 377 MB, and the copies' freed pictures stayed in the allocator's arenas).
        frames = np.empty((firsts[-1], *request.size, 3), np.uint8)
        taken = _in_parallel(
            [
                functools.partial(
                    self._take_run, run, convert, len(runs), index == 0,
                    _offset(request.hand_on, first), frames[first:end],
                )
                for index, (run, first, end) in enumerate(zip(runs, firsts, firsts[1:]))
            ],
            self._first.abandon,
            self.path.name,
        )
        decoded = sum(decoded for _, decoded in taken)
        times = _fill_gaps(frames, [time_s for run_times, _ in taken for time_s in run_times])
        return Taken(frames=frames, times=times, mode=mode, decoded=decoded, damage=self.damage)

    def _plan(self, request: TakeRequest) -> tuple[SamplingMode, list[list[Read]]]:
        """The mode the clip allows and the runs of reads that take ``request``'s targets by time."""
        if not self.keyframes_known:
            self._scan_keyframes()
        mode: SamplingMode = request.mode if self.keyframes else "exact"
        frame_s = 1.0 / self.fps if self.fps > 0 else 0.0
        reads = plan_reads(self.keyframe_times, request.targets, mode, request.interval_s, frame_s)
        workers = decoders_for(self.workers, *self.coded_size) if self.can_seek else 1
        return mode, split_reads(reads, self.keyframe_times, self.duration_s, frame_s, workers)

    def _converter(
        self, size: tuple[int, int], resize: Callable[[np.ndarray, tuple[int, int]], np.ndarray] | None
    ) -> Callable[[Any], np.ndarray]:
        """Frame -> (h, w, 3) RGB at ``size``: through ``resize`` from full size, or, without one,
        by FFmpeg's scaler in one step."""
        if resize is None:
            return lambda frame: self.scaled_rgb(frame, size)
        return lambda frame: resize(self.upright_rgb(frame)[None], size)[0]

    def _take_run(
        self,
        run: list[Read],
        convert: Callable[[Any], np.ndarray],
        runs: int,
        first_run: bool,
        hand_on: Callable[[int, list[_Kept | None]], None],
        out: np.ndarray,
    ) -> tuple[list[float | None], int]:
        """Take one of ``runs`` runs into ``out`` (its targets' places, (n, h, w, 3) uint8): each
        target's time (None where its read found no frame) and the frames its decoder decoded;
        ``hand_on(offset in the run, frames)`` gets each frame as soon as it is in place.
        The first run goes on with the decoder that read the first frame; the others open their
        own, sharing the cores between them."""
        assert self._first is not None
        decoder = self._first if first_run else _Decoder(self, self._first.abandon, max(self.workers // runs, 1))
        converter = _Converter(convert, hand_on, self._first.abandon, out)
        try:
            offset = 0
            for read in run:
                self._take_read(decoder, read, functools.partial(converter.put, offset))
                offset += len(read.targets)
            return converter.finish(), decoder.state.decoded
        finally:
            converter.close()
            if decoder is not self._first:
                decoder.close()

    def _take_read(self, decoder: _Decoder, read: Read, keep: Callable[[int, Any, float], None]) -> None:
        """Find the frame of each target of ``read`` and ``keep(target's offset in the read,
        frame, time)`` it as soon as it is known; a read that found no frame keeps none."""
        frames = self._decoded(decoder, read)
        if read.first_frame_only:
            first = next(frames, None)
            frames.close()
            for index in range(len(read.targets) if first is not None else 0):
                keep(index, first[1], first[0])
            return
        picker = FramePicker(read.targets, lambda frame: frame, on_keep=keep, by_place=read.by_place)  # converted later
        for time_s, frame in frames:
            picker.offer(time_s, frame)
            if picker.done:
                break
        frames.close()
        if picker.offered:
            picker.finish()

    def _decoded(self, decoder: _Decoder, read: Read) -> Iterator[tuple[float, Any]]:
        """The frames ``read`` decodes, with their times, in presentation order."""
        yield from decoder.frames(read)

    def _time_s(self, segment: int, pts: int) -> float:
        start = self.segments[min(segment, len(self.segments) - 1)]
        return start.offset_s + float((pts - start.start_pts) * self.time_base)


def _offset(hand_on: Callable[[int, list[_Kept | None]], None], first: int) -> Callable[[int, list[_Kept | None]], None]:
    """``hand_on`` for a run whose first target is target ``first`` of the clip."""
    return lambda offset, kept: hand_on(first + offset, kept)


_Kept = tuple[np.ndarray, float]  # a converted frame (h, w, 3) and its time in seconds
CONVERSIONS_WAITING = 4  # decoded frames a converter holds at most (each a full-size picture)


class _Converter:
    """Converts the frames one decoder keeps on a thread of its own into their places in ``out``
    ((n, h, w, 3) uint8, the run's targets) and hands each on, so the decoder goes on feeding
    FFmpeg meanwhile (converting and resizing a 1080p frame costs as much as decoding a few). At
    most :data:`CONVERSIONS_WAITING` frames wait; a decoder ahead of that waits too. A frame kept
    for several targets in a row is converted once."""

    def __init__(
        self,
        convert: Callable[[Any], np.ndarray],
        hand_on: Callable[[int, list[_Kept | None]], None],
        abandon: threading.Event,
        out: np.ndarray,
    ) -> None:
        self.convert, self.hand_on, self.abandon, self.out = convert, hand_on, abandon, out
        self.times: list[float | None] = [None] * len(out)
        self.error: BaseException | None = None
        self._jobs: queue.Queue[tuple[int, Any, float] | None] = queue.Queue(maxsize=CONVERSIONS_WAITING)
        self._thread = threading.Thread(target=self._work, name="framewise-convert", daemon=True)
        self._thread.start()

    def put(self, offset: int, index: int, frame: Any, time_s: float) -> None:
        """Target ``offset + index`` of the run takes ``frame``, shown at ``time_s``."""
        self._raise_if_failed()
        while True:
            try:
                self._jobs.put((offset + index, frame, time_s), timeout=POLL_S)
                return
            except queue.Full:
                self._raise_if_failed()
                if self.abandon.is_set():
                    raise Stopped from None

    def finish(self) -> list[float | None]:
        """Wait for every frame put to be in place; each target's time (None: no frame came)."""
        self._jobs.put(None)
        self._thread.join()
        self._raise_if_failed()
        return self.times

    def close(self) -> None:
        """Stop the thread (after :meth:`finish`, or when the run failed)."""
        if self._thread.is_alive():
            self.error = self.error or Stopped()
            while self._thread.is_alive():
                try:
                    self._jobs.put_nowait(None)
                except queue.Full:
                    pass
                self._thread.join(POLL_S)

    def _raise_if_failed(self) -> None:
        if self.error is not None:
            raise self.error

    def _work(self) -> None:
        last: tuple[Any, np.ndarray] | None = None
        while (job := self._jobs.get()) is not None:
            if self.error is not None:
                continue  # the run failed or stopped: drain, so a decoder waiting to put is let go
            index, frame, time_s = job
            try:
                rgb = self.out[index]
                rgb[...] = last[1] if last is not None and last[0] is frame else self.convert(frame)
                last = (frame, rgb)
                self.times[index] = time_s
                self.hand_on(index, [(rgb, time_s)])
            except BaseException as error:  # raised on the decoder's thread
                self.error = error
FAST_MODE_SCALING = "AREA"  # averages every source pixel, so no aliasing, at about half bicubic's cost


def _in_parallel(works: list[Callable[[], Any]], abandon: threading.Event, name: str) -> list[Any]:
    """Run ``works[0]`` here and the others on threads of their own; their results in order. The
    first error is raised once every thread has ended; ``abandon`` tells the others to stop."""
    results: list[Any] = [None] * len(works)
    errors: list[BaseException] = []

    def run(index: int) -> None:
        try:
            results[index] = works[index]()
        except BaseException as error:  # handed to the calling thread
            errors.append(error)
            abandon.set()

    threads = [
        threading.Thread(target=run, args=(index,), name=f"framewise-decode {name} part {index}", daemon=True)
        for index in range(1, len(works))
    ]
    for thread in threads:
        thread.start()
    run(0)
    for thread in threads:
        thread.join()
    if errors:
        raise next((error for error in errors if not isinstance(error, Stopped)), errors[0])
    return results


def _fill_gaps(frames: np.ndarray, times: list[float | None]) -> tuple[float, ...]:
    """Give a target whose read found no frame (a damaged group, a seek past the end; its time
    None) the frame before it in ``frames`` (T, h, w, 3), or the first one found when none came
    before; every target's time."""
    found = [index for index, time_s in enumerate(times) if time_s is not None]
    if not found:
        raise ReaderFailed("PyAV could not decode a frame")
    last = found[0]
    filled: list[float] = []
    for index, time_s in enumerate(times):
        if time_s is None:
            frames[index] = frames[last]
        else:
            last = index
        filled.append(times[last])  # type: ignore[arg-type]
    return tuple(filled)


class _Decoder:
    """One opened container read forward by one decoder, reads after one another.

    It reaches a read's first keyframe by seeking (files with an index) or by dropping packets,
    and continues without either when the previous read stopped right there, so a group of
    pictures is never decoded twice. ``abandon`` stops it (another decoder of the same take failed).
    """

    def __init__(self, clip: PyAVClip, abandon: threading.Event, threads: int = 0) -> None:
        self.clip, self.abandon = clip, abandon
        self.container = open_container(clip.path, clip.guard)
        self.stream = self.container.streams[clip.stream_index]
        self.stream.thread_type = "AUTO"
        self.stream.thread_count = threads  # 0: FFmpeg picks
        self.packets = self.container.demux(self.stream)
        self.splitter = SegmentSplitter(self.container, clip.time_base)
        self.state = _DecodeState()
        self.segment = 0
        self.group: int | None = 0  # the keyframe index of the group being fed; None: not known
        self.held: Any = None  # a keyframe packet read but not fed: where the last read stopped
        self.pending: deque[tuple[float, Any]] = deque()
        self.ended = False

    def close(self) -> None:
        self.container.close()

    def peek(self) -> tuple[float, Any]:
        """The first frame of the file, left pending for the first read. Raises
        :class:`ReaderFailed` when not one frame decodes."""
        while not self.pending and not self.ended:
            packet = self._next_packet()
            if packet is None:
                self._drain()
            else:
                self._feed(packet)
        if not self.pending:
            reason = f": {_reason(self.state.failure)}" if self.state.failure is not None else ""
            raise ReaderFailed(f"PyAV could not decode a frame{reason}")
        return self.pending[0]

    def frames(self, read: Read) -> Iterator[tuple[float, Any]]:
        """Frames from ``read.start``'s keyframe up to ``read.stop``'s (or the end), in
        presentation order; only the first when ``read.first_frame_only``."""
        if read.start is not None:
            self._move_to(read.start)
        stop = self.clip.keyframes[read.stop] if read.stop is not None else None
        while True:
            while self.pending:
                yield self.pending.popleft()
                if read.first_frame_only:
                    self._forget_position()
                    return
            if self.ended:
                return
            packet = self._next_packet()
            if packet is None:
                self._drain()
            elif stop is not None and (key := self._keyframe_key(packet)) is not None and key >= stop:
                self.held, self.group = packet, read.stop  # the next read may start right here
                self._drain()
                while self.pending:
                    yield self.pending.popleft()
                return
            else:
                self._feed(packet)
                if read.first_frame_only and not self.pending:
                    self._drain()  # the decoder holds frames back for its threads; the first is wanted now

    def _move_to(self, group: int) -> None:
        """Make the next packet fed the keyframe of ``group``."""
        want = self.clip.keyframes[group]
        if self.held is not None and self._keyframe_key(self.held) == want:
            self.pending.clear()  # the end of the group before, left by a read that had what it needed
            return
        if self.held is None and self.group == group and not self.ended:
            return  # decoding it already (the first read, after peek)
        self.pending.clear()
        self._forget_position()
        if self.clip.can_seek:
            self.container.seek(want[1], stream=self.stream, backward=True)
            if self.ended:
                self.packets, self.ended = self.container.demux(self.stream), False
        while (packet := self._next_packet()) is not None:
            key = self._keyframe_key(packet)
            if key is not None and key >= want:
                self.held = packet
                break
        self.group = group

    def _forget_position(self) -> None:
        """Drop what the decoder holds: the next packet fed will be a keyframe reached anew."""
        self.stream.codec_context.flush_buffers()
        self.held, self.group = None, None

    def _keyframe_key(self, packet: Any) -> tuple[int, int] | None:
        """(segment, pts) of a keyframe packet, None for other packets."""
        return (self.segment, packet.pts) if packet.is_keyframe and packet.pts is not None else None

    def _next_packet(self) -> Any:
        """The held packet, or the next one demuxed (None at the end); starts a new segment at a
        timestamp reset, draining the old one first."""
        if self.held is not None:
            packet, self.held = self.held, None
            return packet
        if self.abandon.is_set():
            raise Stopped
        try:
            for packet in self.packets:
                self.clip.guard.check(self.clip._time_s(self.segment, packet.pts) if packet.pts is not None else None)
                if self.splitter.starts_segment(packet):
                    self._drain()
                    self.segment += 1
                if packet.size:
                    return packet
        except av.error.ExitError as error:
            raise Stopped from error
        except av.error.FFmpegError as error:  # the demuxer hit damaged data: keep what was decoded
            self.state.failure = error
        self.ended = True
        return None

    def _feed(self, packet: Any) -> None:
        self.pending.extend(self.state.decode(self.stream, packet, self.segment, self.clip._time_s))

    def _drain(self) -> None:
        """Take every frame the decoder still holds, then make it ready for more packets."""
        self.pending.extend(self.state.decode(self.stream, None, self.segment, self.clip._time_s))
        self.stream.codec_context.flush_buffers()


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
