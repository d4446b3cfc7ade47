"""Still pictures: a file whose only video stream holds exactly one frame is an image, not a clip.

PNG, JPEG, WebP, a one-frame GIF or video file, and a picture renamed ``.mp4`` all qualify: the
content decides, not the file name. A file with two frames or more stays a video.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
    """A decoded picture: ``pixels`` uint8 (H, W, 3) RGB, upright as a viewer shows it. ``damage``
    says, for a person, that part of it could not be decoded (``None``: it was whole)."""

    pixels: np.ndarray
    info: ClipInfo
    damage: str | None = None


def read_still(path: str | Path, *, budget: ReadBudget = ReadBudget()) -> StillImage | None:
    """The picture in ``path`` when it holds exactly one frame, else ``None`` (a clip, or a file
    PyAV cannot read: sampling it as a clip then reports what is wrong).

    Raises the path's ClipError when the file is missing or unreadable.
    """
    file = existing_file(path)
    return run_bounded(lambda guard: _read_one_frame(file, guard), file, budget)


def _read_one_frame(path: Path, guard: Guard) -> StillImage | None:
    """The file's only frame, or ``None``. A JPEG is decoded strictly first (FFmpeg's ``err_detect``
    ``explode``: damaged data is an error), as its decoder fills in what a cut-short file lacks; one
    only the lenient decoder gets is damaged. Other picture decoders refuse a cut-short file, and
    their strict mode refuses harmless oddities too (a TIFF tag FFmpeg does not know)."""
    try:
        try:
            frames, codec = _decoded_frames(path, guard, strict=True)
            damage = None
        except av.error.InvalidDataError:
            frames, codec = _decoded_frames(path, guard, strict=False)
            damage = (
                f"{path.name} is damaged or cut short: part of the picture could not be decoded and was filled in "
                "(grey, or repeated from above), so the answers see a picture that is partly made up. Copy the file "
                "again from where it came from, or save the picture anew."
            )
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
        rotation_degrees=rotation, codec=codec,
    )
    return StillImage(pixels=pixels, info=info, damage=damage)


def _decoded_frames(path: Path, guard: Guard, *, strict: bool) -> tuple[list[Any], str]:
    """The frames of the file's first packet, and the codec's name; none when it holds more than
    one packet (a long clip is not scanned)."""
    with open_container(path, guard) as container:
        stream = video_stream(container, path)
        if strict and stream.codec_context.name == "mjpeg":
            stream.codec_context.options = {"err_detect": "explode"}
        packets = []
        for packet in container.demux(stream):
            if packet.size:
                packets.append(packet)
            if len(packets) > 1:
                return [], stream.codec_context.name
        frames = [frame for packet in packets for frame in packet.decode()]
        frames += stream.codec_context.decode(None)  # a decoder that holds its frame back until flushed
        return frames, stream.codec_context.name
