"""Still pictures: a file whose only video stream holds exactly one frame is an image, not a clip.

PNG, JPEG, WebP, a one-frame GIF or video file, and a picture renamed ``.mp4`` all qualify: the
content decides, not the file name. A file with two frames or more stays a video.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from framewise.core.errors import ClipError
from framewise.core.video.bounded import Guard, ReadBudget, run_bounded
from framewise.core.video.clip import ClipInfo, ReaderFailed, existing_file
from framewise.core.video.pyav_reader import PyAVClip, open_container

# The picture types the Open dialog offers beside videos (the decoder reads more).
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".bmp", ".gif", ".tif", ".tiff")


@dataclass(frozen=True)
class StillImage:
    """A decoded picture: ``pixels`` uint8 (H, W, 3) RGB, upright as a viewer shows it."""

    pixels: np.ndarray
    info: ClipInfo


def read_still(path: str | Path, *, budget: ReadBudget = ReadBudget()) -> StillImage | None:
    """The picture in ``path`` when it holds exactly one frame, else ``None`` (a clip, or a file
    PyAV cannot read: sampling it as a clip then reports what is wrong).

    Raises the path's ClipError when the file is missing or unreadable.
    """
    file = existing_file(path)
    return run_bounded(lambda guard: _read_one_frame(file, guard), file, budget)


def _read_one_frame(path: Path, guard: Guard) -> StillImage | None:
    try:
        clip = PyAVClip(path, guard)
    except (ReaderFailed, ClipError):  # the clip reader explains a refusal when it samples the file
        return None
    if clip.frame_count != 1:
        return None
    with open_container(path, guard) as container:
        frame = next(container.decode(container.streams[clip.stream_index]), None)
    if frame is None:
        return None
    pixels = clip.upright_rgb(frame)
    height, width = pixels.shape[:2]
    info = ClipInfo(
        path=path, width=width, height=height, duration_s=0.0, fps=0.0, frame_count=1,
        rotation_degrees=clip.orientation(frame)[2], codec=clip.codec,
    )
    return StillImage(pixels=pixels, info=info)
