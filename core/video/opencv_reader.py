"""The OpenCV reader, for files PyAV cannot open or decode.

OpenCV applies rotation itself, gives timestamps through ``CAP_PROP_POS_MSEC``, and cannot count
frames without decoding, so the duration comes from the header's frame count and rate. Its open
and its reads are bounded by the budget (FFmpeg backend timeouts), and neither OpenCV nor its own
FFmpeg prints to the console: Framewise reports what failed in its own words.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from framewise.core.video.bounded import Guard
from framewise.core.video.clip import Reader, ReaderFailed, check_resolution, normalized_rotation
from framewise.core.video.sampling import FramePicker, Taken, TakeRequest

OPENCV_LOG_LEVEL_ERROR = 2  # cv::utils::logging::LOG_LEVEL_ERROR


@functools.cache
def _quiet_cv2() -> Any:
    """cv2, imported on first use with its console logging off (unless the user asked for it)."""
    os.environ.setdefault("OPENCV_FFMPEG_LOGLEVEL", "-8")  # AV_LOG_QUIET; read when FFmpeg is first used
    import cv2  # only clips PyAV cannot read need it

    if "OPENCV_LOG_LEVEL" not in os.environ:
        _log_errors_only(cv2)
    return cv2


def _log_errors_only(cv2: Any) -> None:
    """Turn OpenCV's console logging down to errors; OpenCV 4.13 moved the setter into ``cv2.utils.logging``."""
    logging = getattr(cv2.utils, "logging", None)
    if logging is not None:
        logging.setLogLevel(logging.LOG_LEVEL_ERROR)
    else:
        cv2.setLogLevel(OPENCV_LOG_LEVEL_ERROR)


def open_capture(path: Path, guard: Guard) -> Any:
    """``cv2.VideoCapture`` on the FFmpeg backend, with the budget as its open and read timeouts."""
    cv2 = _quiet_cv2()
    guard.check()
    timeouts = [
        cv2.CAP_PROP_OPEN_TIMEOUT_MSEC, int(guard.seconds_left() * 1000),
        cv2.CAP_PROP_READ_TIMEOUT_MSEC, int(guard.budget.per_video_second_s * 1000),
    ]
    capture = cv2.VideoCapture(str(path), cv2.CAP_FFMPEG, timeouts)
    guard.check()
    if not capture.isOpened():
        capture.release()
        raise ReaderFailed("OpenCV could not open it either")
    return capture


class OpenCVClip:
    """An opened clip as OpenCV reads it (see :class:`framewise.core.video.sampling.OpenedClip`)."""

    reader: Reader = "opencv"

    def __init__(self, path: Path, guard: Guard) -> None:
        self.cv2 = _quiet_cv2()
        self.guard = guard
        self.capture = open_capture(path, guard)
        try:
            cv2, capture = self.cv2, self.capture
            capture.set(cv2.CAP_PROP_ORIENTATION_AUTO, 1)
            check_resolution(path, int(capture.get(cv2.CAP_PROP_FRAME_WIDTH)), int(capture.get(cv2.CAP_PROP_FRAME_HEIGHT)))
            self.fps = capture.get(cv2.CAP_PROP_FPS) or 0.0
            self.frame_count = int(capture.get(cv2.CAP_PROP_FRAME_COUNT)) or None
            self.duration_s = self.frame_count / self.fps if self.frame_count and self.fps > 0 else 0.0
            self.rotation = normalized_rotation(-capture.get(cv2.CAP_PROP_ORIENTATION_META))
            self.codec = _fourcc(capture.get(cv2.CAP_PROP_FOURCC))
        except BaseException:
            self.capture.release()
            raise

    def close(self) -> None:
        self.capture.release()

    def orientation(self, frame: np.ndarray) -> tuple[int, int, int]:
        height, width = frame.shape[:2]  # as displayed: OpenCV has rotated it already
        return width, height, self.rotation

    def upright_rgb(self, frame: np.ndarray) -> np.ndarray:
        return self.cv2.cvtColor(frame, self.cv2.COLOR_BGR2RGB)

    def first_frame(self) -> tuple[float, np.ndarray]:
        self.guard.begin("decode", self.duration_s)
        if not self.capture.grab():
            raise ReaderFailed("OpenCV could not decode a frame either")
        self._start_ms = self.capture.get(self.cv2.CAP_PROP_POS_MSEC)
        self._first = (0.0, _retrieve(self.capture))
        return self._first

    def take(self, request: TakeRequest) -> Taken:
        """Every frame in order until the last target is passed; OpenCV cannot tell keyframes,
        so a ``"fast"`` request is read exactly too."""
        picker = FramePicker(
            request.targets if request.in_turn is None else request.in_turn,
            lambda frame: request.resize(self.upright_rgb(frame)[None], request.size)[0],
            on_keep=lambda index, rgb, time_s: request.hand_on(index, [(rgb, time_s)]),
            by_place=request.in_turn is not None,
        )
        decoded = 0
        for time_s, frame in self.frames():
            decoded += 1
            picker.offer(time_s, frame)
            if picker.done:
                break
        frames, times = picker.finish()
        return Taken(frames=np.stack(frames), times=tuple(times), mode="exact", decoded=decoded)

    def frames(self) -> Iterator[tuple[float, np.ndarray]]:
        """The first frame, then every later one, timed from the first."""
        yield self._first
        capture = self.capture
        while capture.grab():
            time_s = (capture.get(self.cv2.CAP_PROP_POS_MSEC) - self._start_ms) / 1000.0
            self.guard.check(time_s)
            yield time_s, _retrieve(capture)


def _retrieve(capture: Any) -> np.ndarray:
    ok, bgr = capture.retrieve()
    if not ok or bgr is None:
        raise ReaderFailed("OpenCV could not decode a frame")
    return bgr


def _fourcc(code: float) -> str:
    value = int(code)
    return "".join(chr((value >> shift) & 0xFF) for shift in (0, 8, 16, 24)).strip("\x00 ").lower() or "unknown"
