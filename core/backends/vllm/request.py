"""What a question to a vLLM server carries: each clip's frames as one data: URL (a picture as an
``image_url``), their times, and the conversation in the chat-completions form.

vLLM 0.32 takes a video made of images as ONE ``video_url`` item whose URL is
``data:video/jpeg;base64,<frame 1>,<frame 2>,...`` (each frame's base64 after a single prefix;
every frame is opened with Pillow, so lossless PNG frames go inside that ``video/jpeg`` URL). The
frames' times travel as ``media_io_kwargs`` (``fps`` and ``frames_indices``: here milliseconds),
so the server writes the same ``<t.t seconds>`` markers as Framewise; that needs the server's
``--trust-request-mm-kwargs``. Those kwargs are one set per request for every video in it: vLLM
0.32 reads no per-item times (its data: URL parser drops any parameter, and its Qwen3-VL
processor takes the times of every video from that one set), so the clips of one request must
share their frame times (:mod:`~framewise.core.backends.vllm.fit` refuses the others). vLLM keeps
at most ``num_frames`` of the frames sent, 32 unless told; a request that brings its own video
kwargs does not get the server's ``--media-io-kwargs`` ``num_frames`` (seen with vLLM 0.32: 64
frames sent, "frames_indices length (64) must match number of frames sent (32)"), so every request
says ``num_frames: -1`` (keep them all) itself.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

import cv2
import numpy as np

from framewise.core.errors import FramewiseError
from framewise.core.backends.vllm.family import served_family
from framewise.core.events import EncodeDone

_VIDEO_URL_PREFIX = "data:video/jpeg;base64,"
_PNG_URL_PREFIX = "data:image/png;base64,"
MS_PER_SECOND = 1000.0
# vLLM's num_frames for "keep every frame sent".
KEEP_EVERY_FRAME = -1


@dataclass(frozen=True)
class RemoteClip:
    """A clip sampled here and made ready to send: ``url`` is the frames' data: URL (a picture's,
    with ``kind`` ``"image"``), ``media_io_kwargs`` their times (empty for a picture); ``summary``
    what opening it cost."""

    path: Path | None
    url: str
    media_io_kwargs: dict[str, Any]
    summary: EncodeDone
    kind: str = "video"

    def content_part(self) -> dict[str, Any]:
        """The item as one part of a chat-completions message."""
        key = "image_url" if self.kind == "image" else "video_url"
        return {"type": key, key: {"url": self.url}}


def video_data_url(frames: np.ndarray) -> str:
    """Frames (T, H, W, 3) uint8 RGB as one ``data:video/jpeg;base64,...`` URL of lossless PNG frames."""
    encoded = []
    for frame in frames:
        ok, png = cv2.imencode(".png", np.ascontiguousarray(frame[..., ::-1]))
        if not ok:
            raise FramewiseError("A sampled frame could not be encoded as PNG for the server.")
        encoded.append(base64.b64encode(png.tobytes()).decode("ascii"))
    return _VIDEO_URL_PREFIX + ",".join(encoded)


def image_data_url(picture: np.ndarray) -> str:
    """A picture (H, W, 3) uint8 RGB as a ``data:image/png;base64,...`` URL."""
    ok, png = cv2.imencode(".png", np.ascontiguousarray(picture[..., ::-1]))
    if not ok:
        raise FramewiseError("The picture could not be encoded as PNG for the server.")
    return _PNG_URL_PREFIX + base64.b64encode(png.tobytes()).decode("ascii")


def request_media_io_kwargs(clips: Sequence[RemoteClip]) -> dict[str, Any] | None:
    """The frame times a request with ``clips`` carries, every clip's (``None`` with no clip): the
    first clip's, which :func:`~framewise.core.backends.vllm.fit.check_one_timeline` has found to be
    every other clip's too."""
    videos = [clip for clip in clips if clip.kind == "video"]
    return videos[0].media_io_kwargs if videos else None


def media_io_kwargs(timestamps: Sequence[float]) -> dict[str, Any]:
    """The frames' times for vLLM: a 1000 fps source whose frame indices are the milliseconds,
    every frame kept (``num_frames: -1``).

    vLLM computes each frame's time as ``frames_indices[i] / fps`` and marks each frame pair with
    the mean of its two times, as Framewise does.
    """
    indices = [round(float(t) * MS_PER_SECOND) for t in timestamps]
    return {
        "video": {
            "fps": MS_PER_SECOND,
            "frames_indices": indices,
            "total_num_frames": (max(indices) + 1) if indices else 0,
            "num_frames": KEEP_EVERY_FRAME,
        }
    }


def resize_with_opencv(frames: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """Frames (T, H, W, 3) uint8 resampled to (T, h, w, 3) for ``size = (h, w)`` without torch: area
    averaging to shrink, bicubic to enlarge. The server's processor finds them at its own size and
    resamples no further; the pixels are close to, not the same as, the local engine's antialiased
    bicubic."""
    height, width = size
    if frames.shape[1:3] == (height, width):
        return frames
    shrinking = height * width < frames.shape[1] * frames.shape[2]
    interpolation = cv2.INTER_AREA if shrinking else cv2.INTER_CUBIC
    return np.stack([cv2.resize(frame, (width, height), interpolation=interpolation) for frame in frames])


def openai_messages(
    question: str, clips: Sequence[RemoteClip], history: Sequence[tuple[str, str]]
) -> list[dict[str, Any]]:
    """The conversation in the chat-completions form: the clips and pictures open the first user
    turn (as the served family's chat layout puts them: clips first, then pictures, each in the
    order they were opened), then the earlier turns, then ``question``."""
    videos = iter([clip for clip in clips if clip.kind == "video"])
    images = iter([clip for clip in clips if clip.kind == "image"])
    messages = served_family().chat_messages(
        question,
        videos=sum(clip.kind == "video" for clip in clips),
        images=sum(clip.kind == "image" for clip in clips),
        history=history,
    )
    for message in messages:
        if isinstance(message["content"], list):
            message["content"] = [_part_for(part, videos, images) for part in message["content"]]
    return messages


def _part_for(part: dict[str, Any], videos: Iterator[RemoteClip], images: Iterator[RemoteClip]) -> dict[str, Any]:
    """The part sent for one part of the family's chat layout: the next clip or picture in place of
    its placeholder, any other part as it is."""
    if part["type"] == "image":
        return next(images).content_part()
    if part["type"] == "video":
        return next(videos).content_part()
    return part
