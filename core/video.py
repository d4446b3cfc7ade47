"""Reading clips: probe a file and sample frames uniformly in time, ready for Qwen3-VL.

PyAV is the reader; OpenCV is the fallback for files PyAV cannot open or decode. How a clip is
sampled:

* **How many frames.** ``floor(duration x sampling.fps)``, clamped to ``[min_frames, max_frames]``
  and rounded up to an even count (Qwen3-VL encodes frames in pairs). A clip with fewer frames
  than that count keeps its own frame count (rounded up to even), but never fewer than
  ``min_frames``: a clip with too few frames has frames repeated, evenly spread, so a still or a
  two-frame clip becomes pairs of identical frames, the way Qwen3-VL encodes still images.
* **Which frames.** Target times are the middles of equal slices of the clip; each target takes
  the frame on screen at that time (the last frame whose presentation time is at or before it).
  Presentation timestamps are used throughout, so variable frame rate comes out right, and the
  returned timestamps are the chosen frames' own times in seconds from the stream's start.
* **Duration and frame count** come from one demux pass over the packets (no decoding), so a
  missing or wrong duration or frame count in the container header does not matter; the header
  is used only for streams whose packets carry no timestamps.
* **Long clips.** That pass also lists the keyframes. When the next frame needed lies beyond the
  current group of pictures, the reader seeks to the keyframe before it (containers with an
  index), so sparse sampling of a long clip decodes only the groups it takes frames from.
* **Rotation.** A display-matrix rotation (phones) is applied, so frames come out upright and
  :class:`ClipInfo`'s width and height are as displayed. Flips in the matrix are ignored.
* **Size.** Each chosen frame is scaled while decoding to ``core.processing.video_frame_size``, so
  a long clip is never held at full resolution: only the chosen frames, at the target size, are
  kept.
* **Bounded.** Reading runs on a daemon worker thread. The caller waits at most ``timeout_s``
  (:class:`DecodeTimeoutError`) and polls ``should_cancel`` (:class:`CancelledError`), so a stuck
  decoder cannot hang it; the worker checks the same deadline per packet and stops soon after.

Bad input raises the typed errors of :mod:`framewise.core.errors`, with a message that says what to do.
"""

from __future__ import annotations

import bisect
import math
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any, Literal

import numpy as np

from framewise.core.errors import (
    CancelledError,
    ClipNotFoundError,
    ClipTooLargeError,
    DecodeTimeoutError,
    EmptyClipError,
    NoVideoStreamError,
    UnreadableClipError,
)
from framewise.core.settings import SamplingSettings

MAX_SIDE = 8192
MAX_FRAME_PIXELS = 50_000_000
PROBE_TIMEOUT_S = 30.0
_POLL_S = 0.02

Reader = Literal["pyav", "opencv"]


@dataclass(frozen=True)
class ClipInfo:
    """What a clip is, as displayed.

    ``width``/``height`` are after rotation. ``rotation_degrees`` is the counter-clockwise rotation
    a player applies for display (0, 90, 180 or 270). ``fps`` is the average frame rate;
    ``frame_count`` is None when it cannot be known without decoding.
    """

    path: Path
    width: int
    height: int
    duration_s: float
    fps: float
    frame_count: int | None
    rotation_degrees: int
    codec: str


@dataclass(frozen=True)
class SampledClip:
    """Frames sampled from a clip: ``frames`` uint8 (T, H, W, 3) RGB at the Qwen3-VL target size,
    ``timestamps`` the frames' presentation times in seconds (T,), non-decreasing."""

    frames: np.ndarray
    timestamps: tuple[float, ...]
    info: ClipInfo
    reader: Reader


def probe_clip(path: str | Path, *, timeout_s: float = PROBE_TIMEOUT_S) -> ClipInfo:
    """Open ``path`` and describe its video stream (decodes only the first frame).

    Raises the :class:`~framewise.core.errors.ClipError` subclasses described in the module docstring.
    """
    clip_path = _existing_file(path)
    info, _, _ = _run_bounded(lambda guard: _read(clip_path, None, guard), clip_path, timeout_s, None)
    return info


def sample_clip(
    path: str | Path,
    sampling: SamplingSettings,
    *,
    timeout_s: float = 60.0,
    should_cancel: Callable[[], bool] | None = None,
) -> SampledClip:
    """Sample frames uniformly in time from ``path`` (see the module docstring for the rules).

    ``should_cancel`` is polled on the calling thread every few milliseconds; when it returns
    True, :class:`~framewise.core.errors.CancelledError` is raised. Reading longer than ``timeout_s``
    raises :class:`~framewise.core.errors.DecodeTimeoutError`.
    """
    clip_path = _existing_file(path)
    info, sampled, reader = _run_bounded(
        lambda guard: _read(clip_path, sampling, guard), clip_path, timeout_s, should_cancel
    )
    frames, timestamps = sampled
    return SampledClip(frames=frames, timestamps=timestamps, info=info, reader=reader)


def sample_count(duration_s: float, sampling: SamplingSettings, frame_count: int | None = None) -> int:
    """How many frames to sample from a clip: even, within ``[min_frames, max_frames]``.

    >>> sample_count(4.0, SamplingSettings(fps=2.0, min_frames=4, max_frames=32))
    8
    >>> sample_count(4.0, SamplingSettings(fps=2.0, min_frames=4, max_frames=32), frame_count=5)
    6
    """
    count = math.floor(max(duration_s, 0.0) * sampling.fps + 1e-6)
    count = _even_up(min(max(count, sampling.min_frames), sampling.max_frames))
    if frame_count:
        count = min(count, max(sampling.min_frames, _even_up(frame_count)))
    return count


def sample_times(duration_s: float, count: int) -> tuple[float, ...]:
    """Target times in seconds: the middles of ``count`` equal slices of ``[0, duration_s]``.

    >>> sample_times(4.0, 4)
    (0.5, 1.5, 2.5, 3.5)
    """
    duration_s = max(duration_s, 0.0)
    return tuple((index + 0.5) * duration_s / count for index in range(count))


def _even_up(count: int) -> int:
    return count + count % 2


# --- bounding: deadline, cancellation, worker thread -------------------------------------------


class _Stopped(Exception):
    """The caller gave up on the worker (timeout or cancel); the worker just ends."""


class _ReaderFailed(Exception):
    """One reader could not open or decode the file; the next reader may."""


@dataclass
class _Guard:
    """Shared between the caller and the worker: checked by the worker once per packet."""

    deadline: float
    stop: threading.Event

    def check(self) -> None:
        if self.stop.is_set() or time.monotonic() > self.deadline:
            raise _Stopped

    def seconds_left(self) -> float:
        return max(self.deadline - time.monotonic(), 0.001)


def _run_bounded(
    work: Callable[[_Guard], Any],
    path: Path,
    timeout_s: float,
    should_cancel: Callable[[], bool] | None,
) -> Any:
    """Run ``work`` on a daemon thread; return its result or raise its error, a timeout or a cancel.

    The caller's thread only waits and polls, so it returns on time even when the worker is stuck
    inside a decoder call; the worker sees ``guard.stop`` at its next packet and ends.
    """
    cancelled = should_cancel or (lambda: False)
    if cancelled():
        raise CancelledError(f"Reading {path.name} was cancelled.")
    guard = _Guard(deadline=time.monotonic() + timeout_s, stop=threading.Event())
    outcome: dict[str, Any] = {}

    def worker() -> None:
        try:
            outcome["result"] = work(guard)
        except _Stopped:
            pass
        except BaseException as error:  # handed to the caller's thread as is
            outcome["error"] = error

    thread = threading.Thread(target=worker, name=f"framewise-decode {path.name}", daemon=True)
    thread.start()
    while thread.is_alive():
        thread.join(_POLL_S)
        if not thread.is_alive():
            break
        if cancelled():
            guard.stop.set()
            raise CancelledError(f"Reading {path.name} was cancelled.")
        if time.monotonic() > guard.deadline:
            guard.stop.set()
            break
    if "error" in outcome:
        raise outcome["error"]
    if "result" not in outcome:
        raise DecodeTimeoutError(
            f"Reading {path.name} took longer than {timeout_s:g} s and was stopped. "
            "The file may be very long or damaged: trim it or re-encode it (MP4, H.264) and try again."
        )
    return outcome["result"]


# --- reading: PyAV first, OpenCV as fallback ---------------------------------------------------


def _existing_file(path: str | Path) -> Path:
    clip_path = Path(path).expanduser()
    if clip_path.is_dir():
        raise ClipNotFoundError(f"{clip_path} is a folder, not a video file. Choose a clip (an .mp4, say) inside it.")
    if not clip_path.exists():
        raise ClipNotFoundError(f"No file at {clip_path}. Check the path, or choose the clip again.")
    if not clip_path.is_file():
        raise ClipNotFoundError(f"{clip_path} is not a regular file (a pipe or device, say). Choose a video file.")
    return clip_path


def _read(
    path: Path, sampling: SamplingSettings | None, guard: _Guard
) -> tuple[ClipInfo, tuple[np.ndarray, tuple[float, ...]] | None, Reader]:
    """Probe (``sampling`` None) or sample ``path``: PyAV, then OpenCV if PyAV cannot read it."""
    try:
        info, sampled = _read_with_pyav(path, sampling, guard)
        return info, sampled, "pyav"
    except _ReaderFailed as pyav_failure:
        try:
            info, sampled = _read_with_opencv(path, sampling, guard)
            return info, sampled, "opencv"
        except _ReaderFailed as opencv_failure:
            raise UnreadableClipError(
                f"{path.name} is not a video Framewise can read ({pyav_failure}; {opencv_failure}). "
                "Check that it plays in a media player; if it is truncated or damaged, export or "
                "re-encode it (MP4 with H.264 works everywhere)."
            ) from pyav_failure


def _check_resolution(path: Path, width: int, height: int) -> None:
    if width > MAX_SIDE or height > MAX_SIDE or width * height > MAX_FRAME_PIXELS:
        raise ClipTooLargeError(
            f"{path.name} is {width}x{height} pixels; Framewise reads at most {MAX_SIDE} pixels on a side "
            f"and {MAX_FRAME_PIXELS // 1_000_000} megapixels per frame. Scale it down (to 1920x1080, say) "
            "and try again."
        )


def _normalized_rotation(degrees: float) -> int:
    """Counter-clockwise degrees snapped to 0, 90, 180 or 270."""
    return int(round(degrees / 90.0)) * 90 % 360


def _oriented_rgb(rgb: np.ndarray, rotation_degrees: int) -> np.ndarray:
    """Rotate a coded (H, W, 3) image counter-clockwise for display."""
    return np.rot90(rgb, k=rotation_degrees // 90) if rotation_degrees else rgb


def _target_size(count: int, height: int, width: int, sampling: SamplingSettings) -> tuple[int, int]:
    # Imported here: core.processing needs torch, and probing a clip must not.
    from framewise.core.processing import video_frame_size

    return video_frame_size(count, height, width, sampling)


class _FramePicker:
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


# --- PyAV ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _PacketScan:
    """What one demux pass over a video stream's packets found (times in seconds from start)."""

    packets: int
    start_pts: int | None
    duration_s: float | None
    keyframes: tuple[int, ...] = ()  # presentation timestamps of the keyframes, ascending


def _open_pyav(path: Path, guard: _Guard) -> Any:
    import av

    try:
        return av.open(str(path), timeout=guard.seconds_left())
    except av.error.ExitError as error:
        raise _Stopped from error
    except (av.error.FFmpegError, OSError, UnicodeDecodeError) as error:
        raise _ReaderFailed(f"PyAV: {_reason(error)}") from error


def _reason(error: BaseException) -> str:
    """The error's own words, without the errno and file name PyAV adds."""
    return getattr(error, "strerror", None) or str(error) or type(error).__name__


def _video_stream(container: Any, path: Path) -> Any:
    import av

    streams = [
        stream
        for stream in container.streams.video
        if not stream.disposition & av.stream.Disposition.attached_pic
    ]
    if not streams:
        kinds = sorted({stream.type for stream in container.streams}) or ["nothing"]
        raise NoVideoStreamError(
            f"{path.name} has no video stream (it holds {', '.join(kinds)} only). Choose a file with video in it."
        )
    return streams[0]


def _scan_packets(container: Any, stream: Any, guard: _Guard) -> _PacketScan:
    """One pass over the stream's packets without decoding: count them and find the time span.

    The last frame is taken to last as long as the one before it: packet durations cannot be
    trusted for this, as with B-frames they are gaps in decoding order.
    """
    import av

    packets, first_pts, last_duration = 0, None, 0
    last_two: list[int] = []  # the two largest presentation timestamps
    keyframes = []
    try:
        for packet in container.demux(stream):
            guard.check()
            if packet.size == 0:
                continue
            packets += 1
            if packet.pts is None:
                continue
            first_pts = packet.pts if first_pts is None else min(first_pts, packet.pts)
            if packet.is_keyframe:
                keyframes.append(packet.pts)
            last_two = sorted([*last_two, packet.pts])[-2:]
            last_duration = packet.duration or 0
    except av.error.FFmpegError:
        pass  # a damaged tail: keep what was read; decoding reports it if nothing is usable
    if first_pts is None or stream.time_base is None:
        return _PacketScan(packets=packets, start_pts=None, duration_s=None)
    if len(last_two) == 2:
        last_duration = last_two[1] - last_two[0]
    duration = (last_two[-1] + last_duration - first_pts) * stream.time_base
    return _PacketScan(
        packets=packets, start_pts=first_pts, duration_s=float(duration), keyframes=tuple(sorted(keyframes))
    )


def _header_duration_s(container: Any, stream: Any) -> float | None:
    if stream.duration and stream.time_base:
        return float(stream.duration * stream.time_base)
    if container.duration:
        return container.duration / 1_000_000
    return None


def _average_fps(stream: Any, frame_count: int | None, duration_s: float) -> float:
    if frame_count and duration_s > 0:
        return frame_count / duration_s
    rate = stream.average_rate or stream.guessed_rate
    return float(rate) if rate else 0.0


def _pyav_frames(
    container: Any, stream: Any, guard: _Guard, seek_from: Callable[[int], int | None] = lambda pts: None
) -> Iterator[Any]:
    """Decoded frames in presentation order; packets that fail to decode are skipped.

    At each keyframe packet, ``seek_from(its pts)`` may return the pts of a later keyframe:
    the demuxer jumps there, skipping groups of pictures that hold no frame the caller needs.
    Raises :class:`_ReaderFailed` when not one frame decoded (the caller knows there are packets).
    """
    import av

    failure: BaseException | None = None
    decoded = 0
    try:
        for packet in container.demux(stream):
            guard.check()
            if packet.is_keyframe and packet.pts is not None:
                position = seek_from(packet.pts)
                if position is not None:
                    container.seek(position, stream=stream, backward=True)
                    continue
            try:
                frames = stream.decode(packet)
            except av.error.FFmpegError as error:
                failure = error
                continue
            for frame in frames:
                decoded += 1
                yield frame
    except av.error.FFmpegError as error:  # the demuxer hit damaged data: keep what was decoded
        failure = error
    if decoded == 0:
        reason = f": {_reason(failure)}" if failure is not None else ""
        raise _ReaderFailed(f"PyAV could not decode a frame{reason}")


def _read_with_pyav(
    path: Path, sampling: SamplingSettings | None, guard: _Guard
) -> tuple[ClipInfo, tuple[np.ndarray, tuple[float, ...]] | None]:
    with _open_pyav(path, guard) as container:
        stream = _video_stream(container, path)
        _check_resolution(path, stream.codec_context.width, stream.codec_context.height)
        stream_index, header_start = stream.index, stream.start_time
        scan = _scan_packets(container, stream, guard)
        header_duration = _header_duration_s(container, stream)
    if scan.packets == 0:
        raise EmptyClipError(
            f"{path.name} has a video stream but no frames in it; the recording may have stopped "
            "before the first frame. Choose another clip."
        )
    duration_s = scan.duration_s if scan.duration_s is not None else (header_duration or 0.0)
    start_pts = scan.start_pts if scan.start_pts is not None else (header_start or 0)

    with _open_pyav(path, guard) as container:
        stream = container.streams[stream_index]
        stream.thread_type = "AUTO"
        time_base = stream.time_base or Fraction(1, 1)
        can_seek = len(stream.index_entries) > 0 and bool(scan.keyframes)
        picker: _FramePicker | None = None
        last_sought = -math.inf

        def seek_from(keyframe_pts: int) -> int | None:
            """The keyframe to jump to when the next target's frame lies beyond this keyframe's
            group of pictures; never the same one twice, so a seek that lands short cannot loop."""
            nonlocal last_sought
            if not can_seek or picker is None or picker.next_target is None:
                return None
            target_pts = start_pts + picker.next_target / time_base
            wanted = scan.keyframes[max(bisect.bisect_right(scan.keyframes, target_pts) - 1, 0)]
            if wanted <= max(keyframe_pts, last_sought):
                return None
            last_sought = wanted
            return wanted

        frames = _pyav_frames(container, stream, guard, seek_from)
        first = next(frames)
        _check_resolution(path, first.width, first.height)
        rotation = _normalized_rotation(first.rotation)
        width, height = (first.height, first.width) if rotation in (90, 270) else (first.width, first.height)
        info = ClipInfo(
            path=path,
            width=width,
            height=height,
            duration_s=duration_s,
            fps=_average_fps(stream, scan.packets, duration_s),
            frame_count=scan.packets,
            rotation_degrees=rotation,
            codec=stream.codec_context.name,
        )
        if sampling is None:
            return info, None

        count = sample_count(duration_s, sampling, scan.packets)
        target_h, target_w = _target_size(count, height, width, sampling)
        coded_h, coded_w = (target_w, target_h) if rotation in (90, 270) else (target_h, target_w)

        def convert(frame: Any) -> np.ndarray:
            rgb = frame.reformat(width=coded_w, height=coded_h, format="rgb24", interpolation="BICUBIC")
            return _oriented_rgb(rgb.to_ndarray(), rotation)

        picker = _FramePicker(sample_times(duration_s, count), convert)
        last_time = 0.0
        for frame in _chain_first(first, frames):
            if frame.pts is not None:
                last_time = float((frame.pts - start_pts) * time_base)
            picker.offer(last_time, frame)
            if picker.done:
                break
        return info, picker.finish()


def _chain_first(first: Any, rest: Iterator[Any]) -> Iterator[Any]:
    yield first
    yield from rest


# --- OpenCV fallback -----------------------------------------------------------------------------


def _read_with_opencv(
    path: Path, sampling: SamplingSettings | None, guard: _Guard
) -> tuple[ClipInfo, tuple[np.ndarray, tuple[float, ...]] | None]:
    """Read with OpenCV, which applies rotation itself; timestamps from ``CAP_PROP_POS_MSEC``.

    OpenCV cannot count frames without decoding, so the duration comes from the header's frame
    count and rate.
    """
    import cv2

    capture = cv2.VideoCapture(str(path))
    try:
        if not capture.isOpened():
            raise _ReaderFailed("OpenCV could not open it either")
        capture.set(cv2.CAP_PROP_ORIENTATION_AUTO, 1)
        width = int(capture.get(cv2.CAP_PROP_FRAME_WIDTH))
        height = int(capture.get(cv2.CAP_PROP_FRAME_HEIGHT))
        _check_resolution(path, width, height)
        fps = capture.get(cv2.CAP_PROP_FPS) or 0.0
        frame_count = int(capture.get(cv2.CAP_PROP_FRAME_COUNT)) or None
        duration_s = frame_count / fps if frame_count and fps > 0 else 0.0
        rotation = _normalized_rotation(-capture.get(cv2.CAP_PROP_ORIENTATION_META))

        guard.check()
        if not capture.grab():
            raise _ReaderFailed("OpenCV could not decode a frame either")
        first_bgr = _retrieve(capture)
        height, width = first_bgr.shape[:2]  # as displayed: OpenCV has rotated it already
        info = ClipInfo(
            path=path,
            width=width,
            height=height,
            duration_s=duration_s,
            fps=fps,
            frame_count=frame_count,
            rotation_degrees=rotation,
            codec=_fourcc(capture.get(cv2.CAP_PROP_FOURCC)),
        )
        if sampling is None:
            return info, None

        count = sample_count(duration_s, sampling, frame_count)
        target_h, target_w = _target_size(count, height, width, sampling)
        shrink = target_h * target_w < height * width

        def convert(bgr: np.ndarray) -> np.ndarray:
            interpolation = cv2.INTER_AREA if shrink else cv2.INTER_CUBIC
            return cv2.cvtColor(cv2.resize(bgr, (target_w, target_h), interpolation=interpolation), cv2.COLOR_BGR2RGB)

        picker = _FramePicker(sample_times(duration_s, count), convert)
        start_ms = capture.get(cv2.CAP_PROP_POS_MSEC)
        picker.offer(0.0, first_bgr)
        while not picker.done and capture.grab():
            guard.check()
            picker.offer((capture.get(cv2.CAP_PROP_POS_MSEC) - start_ms) / 1000.0, _retrieve(capture))
        return info, picker.finish()
    finally:
        capture.release()


def _retrieve(capture: Any) -> np.ndarray:
    ok, bgr = capture.retrieve()
    if not ok or bgr is None:
        raise _ReaderFailed("OpenCV could not decode a frame")
    return bgr


def _fourcc(code: float) -> str:
    value = int(code)
    return "".join(chr((value >> shift) & 0xFF) for shift in (0, 8, 16, 24)).strip("\x00 ").lower() or "unknown"
