"""What both clip readers share: the description of a clip, the sampled result, how frames are
sized, the path checks, and the orientation and resolution rules."""

from __future__ import annotations

import errno
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

import numpy as np

from framewise.core.errors import ClipAccessError, ClipNotFoundError, ClipTooLargeError
from framewise.core.video.reads import SamplingMode

MAX_SIDE = 8192
MAX_FRAME_PIXELS = 50_000_000
MAX_NAME_BYTES = 255  # one path component, on the file systems Framewise runs on
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")  # a scheme, then "//": http://, https://, rtsp://, file://

Reader = Literal["pyav", "opencv"]


@dataclass(frozen=True)
class ClipInfo:
    """What a clip is, as displayed.

    ``width``/``height`` are after rotation. ``rotation_degrees`` is the counter-clockwise rotation
    a player applies for display (0, 90, 180 or 270). ``duration_s`` covers the whole content,
    parts after a timestamp reset included. ``fps`` is the average frame rate; ``frame_count`` is
    None when it cannot be known without decoding.
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
    """Frames sampled from a clip: ``frames`` uint8 (T, H, W, 3) RGB at the size ``FrameSizing``
    chose, ``timestamps`` the frames' times in seconds on the clip's timeline (T,), non-decreasing.

    ``mode`` is how they were taken (``"exact"`` or ``"fast"``, see
    :class:`~framewise.core.settings.SamplingSettings`); ``frames_decoded`` counts the frames the
    reader decoded to take them, the first frame that describes the clip included. ``damage`` says
    what of the file could not be read, for a person (``None``: all of it).
    """

    frames: np.ndarray
    timestamps: tuple[float, ...]
    info: ClipInfo
    reader: Reader
    mode: SamplingMode = "exact"
    frames_decoded: int = 0
    damage: str | None = None


# Resamples (T, H, W, 3) uint8 frames to (T, h, w, 3) uint8 for ``(h, w)``.
Resize = Callable[[np.ndarray, tuple[int, int]], np.ndarray]


@dataclass(frozen=True)
class FrameSizing:
    """How sampled frames are sized, given by the caller (the model decides, not the reader).

    ``size(count, height, width)`` is the (h, w) of each of ``count`` frames sampled from a clip
    displayed at ``height`` x ``width``; ``resize(frames, (h, w))`` turns (T, H, W, 3) uint8 frames
    into (T, h, w, 3). Readers call ``resize`` on each frame they keep, so a long clip is never
    held at full resolution. The number of frames sampled is a multiple of ``frames_per_slice``.
    """

    size: Callable[[int, int, int], tuple[int, int]]
    resize: Resize
    frames_per_slice: int


@dataclass(frozen=True)
class SampledFrames:
    """Frames a backend makes its open clip: sampled from the file ``path``, or given directly
    (``path`` ``None``).

    ``frames`` (T, H, W, 3) uint8 RGB at the model family's frame size; ``timestamps`` their T times
    in seconds; ``name`` the clip as shown; ``decode_ms`` how long reading them took;
    ``size_and_duration`` the clip's (width, height, seconds); ``mode`` how the frames were taken
    (``"exact"`` or ``"fast"``, see :func:`~framewise.core.video.sampling.sampling_mode`);
    ``damage`` what of the file could not be read, for a person (``None``: all of it).
    """

    frames: np.ndarray
    timestamps: Sequence[float]
    name: str
    path: Path | None
    decode_ms: float
    size_and_duration: tuple[int, int, float]
    mode: str = "exact"
    damage: str | None = None

    @classmethod
    def read(cls, sampled: SampledClip, path: Path, decode_ms: float) -> SampledFrames:
        """What :func:`~framewise.core.video.sample_clip` read from ``path`` in ``decode_ms``."""
        info = sampled.info
        return cls(
            sampled.frames, sampled.timestamps, path.name, path, decode_ms,
            (info.width, info.height, info.duration_s), sampled.mode, sampled.damage,
        )

    @classmethod
    def given(cls, frames: np.ndarray, timestamps: Sequence[float], name: str) -> SampledFrames:
        """Frames sampled elsewhere; the last one's time stands for the clip's duration."""
        return cls(frames, timestamps, name, None, 0.0, frames_size_and_duration(frames, timestamps))


def frames_size_and_duration(frames: np.ndarray, timestamps: Sequence[float]) -> tuple[int, int, float]:
    """(width, height, duration in seconds) of frames (T, H, W, 3) given directly, the last one's time
    standing for the duration."""
    rows, cols = frames.shape[1:3]
    return int(cols), int(rows), float(timestamps[-1])


class ReaderFailed(Exception):
    """One reader could not open or decode the file; the next reader may."""


def existing_file(path: str | Path) -> Path:
    """``path`` as a readable regular file, or a ClipError that says what is wrong with it."""
    clip_path = Path(path).expanduser()
    if isinstance(path, str) and _URL.match(path) and not clip_path.exists():
        raise ClipNotFoundError(_url_refusal(path))
    try:
        if clip_path.is_dir():
            raise ClipNotFoundError(f"{clip_path} is a folder, not a video file. Choose a clip (an .mp4, say) inside it.")
        if not clip_path.exists():
            if _is_link_loop(clip_path):
                raise ClipNotFoundError(
                    f"{clip_path} is a symbolic link that leads back to itself (through other links, perhaps), so it "
                    "names no file. Point the link at the clip, or choose the clip itself."
                )
            raise ClipNotFoundError(f"No file at {clip_path}. Check the path, or choose the clip again.")
        if not clip_path.is_file():
            raise ClipNotFoundError(
                f"{clip_path} is not a regular file (a pipe or device, say). Choose a video file."
            )
        with open(clip_path, "rb"):
            pass
    except OSError as error:
        raise path_error(clip_path, error) from None
    return clip_path


def _url_refusal(url: str) -> str:
    """Why ``url`` is not opened, and what to give instead."""
    from urllib.request import url2pathname  # imported here: only a refusal needs it

    parts = urlsplit(url)
    if parts.scheme.lower() == "file":
        return f"{url} is a file URL; give the file's path instead: {url2pathname(parts.path)}"
    return f"{url} is a web address; Framewise reads files on this machine only. Download the clip, then open the file."


def _is_link_loop(path: Path) -> bool:
    """Whether resolving ``path`` goes round a loop of symbolic links (``Path.exists`` says False for one)."""
    try:
        path.stat()
    except OSError as error:
        return error.errno == errno.ELOOP
    return False


def path_error(path: Path, error: OSError) -> ClipNotFoundError | ClipAccessError:
    """The ClipError for an OS error met while finding or opening ``path``."""
    if error.errno == errno.ENAMETOOLONG:
        longest = max(path.parts, key=lambda part: len(part.encode()))
        too_long = (
            f"The name {_shortened(longest)} is {len(longest.encode())} bytes long"
            if len(longest.encode()) > MAX_NAME_BYTES
            else f"The path {_shortened(str(path))} is {len(str(path).encode())} bytes long"
        )
        return ClipNotFoundError(
            f"{too_long}; file systems allow at most {MAX_NAME_BYTES} bytes per name (and about 4096 per path), "
            "so there is no such file. Check the path, or rename the file to a shorter name."
        )
    if error.errno in (errno.EACCES, errno.EPERM):
        if _folder_blocks(path):
            return ClipAccessError(
                f"Framewise may not look inside the folder {path.parent} (permission denied), so it cannot open "
                f"{path.name}. Give your user access to that folder, or move the clip somewhere you can read, "
                "and try again."
            )
        return ClipAccessError(
            f"Framewise may not read {path.name} (permission denied). Make the file readable for your user "
            "(chmod u+r, say), or copy it somewhere you can read, and try again."
        )
    return ClipNotFoundError(f"Cannot open {path}: {error.strerror or error}. Check the path, or choose the clip again.")


def _folder_blocks(path: Path) -> bool:
    """Whether a folder on the path, not the file itself, denies access (the file cannot be stat'ed)."""
    try:
        path.stat()
    except PermissionError:
        return True
    except OSError:
        return False
    return False


def _shortened(name: str, keep: int = 40) -> str:
    return repr(name if len(name) <= keep else name[:keep] + "…")


def check_resolution(path: Path, width: int, height: int) -> None:
    if width > MAX_SIDE or height > MAX_SIDE or width * height > MAX_FRAME_PIXELS:
        raise ClipTooLargeError(
            f"{path.name} is {width}x{height} pixels; Framewise reads at most {MAX_SIDE} pixels on a side "
            f"and {MAX_FRAME_PIXELS // 1_000_000} megapixels per frame. Scale it down (to 1920x1080, say) "
            "and try again."
        )


def normalized_rotation(degrees: float) -> int:
    """Counter-clockwise degrees snapped to 0, 90, 180 or 270."""
    return int(round(degrees / 90.0)) * 90 % 360


def displayed_size(coded_width: int, coded_height: int, rotation_degrees: int) -> tuple[int, int]:
    """(width, height) as a player shows a picture coded at this size and rotated this much."""
    if rotation_degrees in (90, 270):
        return coded_height, coded_width
    return coded_width, coded_height


def upright(rgb: np.ndarray, rotation_degrees: int) -> np.ndarray:
    """Rotate a coded (H, W, 3) image counter-clockwise for display; a contiguous array."""
    return np.ascontiguousarray(np.rot90(rgb, k=rotation_degrees // 90)) if rotation_degrees else rgb
