"""Still pictures: a file whose only video stream holds exactly one frame is an image, not a clip.

PNG, JPEG, WebP, a one-frame GIF or video file, and a picture renamed ``.mp4`` all qualify: the
content decides, not the file name. A file with two frames or more stays a video.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import av
import numpy as np

from framewise.core.errors import ClipError
from framewise.core.video.bounded import Guard, ReadBudget, run_bounded
from framewise.core.video.clip import (
    ClipInfo,
    ReaderFailed,
    check_resolution,
    existing_file,
    normalized_rotation,
    upright,
)
from framewise.core.video.pyav_reader import open_container, video_stream

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
    """The file's only frame, reading at most two packets (a long clip is not scanned), or ``None``."""
    try:
        with open_container(path, guard) as container:
            stream = video_stream(container, path)
            packets = []
            for packet in container.demux(stream):
                if packet.size:
                    packets.append(packet)
                if len(packets) > 1:
                    return None
            frames = [frame for packet in packets for frame in packet.decode()]
            frames += stream.codec_context.decode(None)  # a decoder that holds its frame back until flushed
    except (ReaderFailed, ClipError, av.error.FFmpegError):
        return None  # the clip reader explains a refusal when it samples the file
    if len(frames) != 1:
        return None
    rotation = normalized_rotation(frames[0].rotation)
    pixels = upright(frames[0].to_ndarray(format="rgb24"), rotation)
    height, width = pixels.shape[:2]
    check_resolution(path, width, height)
    info = ClipInfo(
        path=path, width=width, height=height, duration_s=0.0, fps=0.0, frame_count=1,
        rotation_degrees=rotation, codec=stream.codec_context.name,
    )
    return StillImage(pixels=pixels, info=info)
