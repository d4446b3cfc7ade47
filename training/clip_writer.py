"""Write video clips with PyAV: constant or variable frame rate, optional rotation metadata.

Used to make the sample clips, test clips and synthetic training data. Frames are RGB uint8
(H, W, 3). Encoding is single-threaded so the same frames give the same file on any machine.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from fractions import Fraction
from pathlib import Path

import numpy as np

VARIABLE_RATE_TIME_BASE = Fraction(1, 90_000)


def write_clip(
    path: str | Path,
    frames: Iterable[np.ndarray],
    fps: float,
    *,
    rotation_degrees: int = 0,
    timestamps: Sequence[float] | None = None,
    codec: str = "libx264",
    crf: int = 23,
    preset: str = "medium",
    keyframe_interval: int | None = None,
) -> Path:
    """Encode ``frames`` (each uint8 (H, W, 3) RGB, H and W even) into a video file at ``path``.

    The container follows the file extension (.mp4, .mkv, ...). ``fps`` is the nominal rate;
    with ``timestamps`` (seconds, strictly increasing, one per frame) the clip has a variable
    frame rate and each frame is shown from its own timestamp. ``rotation_degrees`` is stored as
    display-matrix metadata: players rotate the picture that many degrees counter-clockwise.
    ``crf`` is the quality for libx264 (lower is better and larger), ``preset`` its speed
    ("veryfast" encodes several times faster than "medium"); ``keyframe_interval`` the
    largest number of frames between keyframes (the encoder's default when None). Returns the path.
    """
    path = Path(path)
    if rotation_degrees % 90:
        raise ValueError(f"rotation_degrees must be a multiple of 90, not {rotation_degrees}")
    if fps <= 0:
        raise ValueError(f"fps must be positive, not {fps}")
    import av

    rate = Fraction(fps).limit_denominator(1001)
    time_base = VARIABLE_RATE_TIME_BASE if timestamps is not None else 1 / rate
    written = 0
    with av.open(str(path), "w") as container:
        stream = container.add_stream(codec, rate=rate)
        stream.codec_context.thread_count = 1
        if keyframe_interval is not None:
            stream.codec_context.gop_size = keyframe_interval
        if codec == "libx264":
            stream.options = {"crf": str(crf), "preset": preset}
        for index, image in enumerate(frames):
            if written == 0:
                _start_stream(stream, image, rotation_degrees, time_base)
            _check_frame(image, index, (stream.height, stream.width))
            frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(image), format="rgb24")
            frame.pts = _frame_pts(index, timestamps, time_base)
            frame.time_base = time_base
            container.mux(stream.encode(frame))
            written += 1
        if written == 0:
            raise ValueError("no frames to write")
        if timestamps is not None and written != len(timestamps):
            raise ValueError(f"{len(timestamps)} timestamps for {written} frames; give one per frame")
        container.mux(stream.encode())
    return path


def write_audio_only(path: str | Path, seconds: float, *, sample_rate: int = 16_000) -> Path:
    """Write an AAC file (e.g. .m4a or .mp4) holding only a quiet 440 Hz tone and no video."""
    import av

    path = Path(path)
    samples_per_frame = 1024
    total = int(seconds * sample_rate)
    with av.open(str(path), "w") as container:
        stream = container.add_stream("aac", rate=sample_rate, layout="mono")
        for start in range(0, total, samples_per_frame):
            times = np.arange(start, min(start + samples_per_frame, total)) / sample_rate
            tone = (0.1 * np.sin(2 * np.pi * 440.0 * times)).astype(np.float32)[None, :]
            frame = av.AudioFrame.from_ndarray(tone, format="fltp", layout="mono")
            frame.sample_rate = sample_rate
            frame.pts = start
            container.mux(stream.encode(frame))
        container.mux(stream.encode())
    return path


def _start_stream(stream, image: np.ndarray, rotation_degrees: int, time_base: Fraction) -> None:
    """Size the stream from the first frame and set what must be set before encoding starts."""
    if image.ndim != 3:
        raise ValueError(f"frames must be (H, W, 3) arrays, got shape {image.shape}")
    height, width = image.shape[:2]
    if height % 2 or width % 2:
        raise ValueError(f"frame size {width}x{height} must be even on both sides (4:2:0 video)")
    stream.width, stream.height = width, height
    stream.pix_fmt = "yuv420p"
    stream.codec_context.time_base = time_base
    if rotation_degrees % 360:
        stream.set_display_rotation(rotation_degrees % 360)


def _check_frame(image: np.ndarray, index: int, size_hw: tuple[int, int]) -> None:
    if image.dtype != np.uint8 or image.shape != (*size_hw, 3):
        raise ValueError(
            f"frame {index} is {image.dtype} {image.shape}; every frame must be uint8 {(*size_hw, 3)} like the first"
        )


def _frame_pts(index: int, timestamps: Sequence[float] | None, time_base: Fraction) -> int:
    if timestamps is None:
        return index
    if index >= len(timestamps):
        raise ValueError(f"more frames than timestamps ({len(timestamps)}); give one timestamp per frame")
    pts = round(timestamps[index] / time_base)
    if index and pts <= round(timestamps[index - 1] / time_base):
        raise ValueError(f"timestamps must increase: {timestamps[index - 1]} then {timestamps[index]}")
    return pts
