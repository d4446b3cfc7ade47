"""Sampling long clips: Framewise's open-to-ready time against a plain decode of every frame.

Writes its own clips (PyAV, libx264 preset ultrafast) under ``--clips`` (outside the repository),
reusing any already there: 1080p30 with a scrolling texture, a little per-frame grain and a
moving box, so every frame differs from the last. See benchmarks/README.md for the columns.
"""

from __future__ import annotations

import argparse
from fractions import Fraction
from pathlib import Path

import av
import numpy as np

FPS = 30
SCROLL_PX = 8  # per frame, so motion is visible from one sampled frame to the next
GRAIN_PLANES = 7


def clip_name(minutes: int, height: int, keyframe_interval: int) -> str:
    return f"{minutes}min-{height}p{FPS}-kf{keyframe_interval}.mp4"


def write_bench_clip(path: Path, minutes: int, height: int, keyframe_interval: int) -> Path:
    """Encode ``minutes`` of 16:9 video at ``height`` lines, a keyframe exactly every
    ``keyframe_interval`` frames; written to a temporary name and renamed when complete."""
    width = height * 16 // 9 // 2 * 2
    rows, cols = np.mgrid[0:height, 0 : width + SCROLL_PX * 64].astype(np.float32)
    texture = (np.sin(cols / 37.0) * np.cos(rows / 23.0) * 70 + 128).astype(np.uint8)
    grains = [np.random.default_rng(k).integers(0, 12, (height, width), dtype=np.uint8) for k in range(GRAIN_PLANES)]
    chroma_rows = height // 2  # yuv420p: U then V, each (height/2, width/2), stored as height/4 rows of width
    partial = path.with_suffix(".partial.mp4")
    with av.open(str(partial), "w") as container:
        stream = container.add_stream("libx264", rate=FPS)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        stream.options = {
            "preset": "ultrafast",
            "crf": "23",
            "x264-params": f"keyint={keyframe_interval}:min-keyint={keyframe_interval}:scenecut=0",
        }
        planes = np.full((height + chroma_rows, width), 128, np.uint8)
        box = height // 10
        for index in range(minutes * 60 * FPS):
            offset = (index * SCROLL_PX) % (SCROLL_PX * 64)
            np.add(texture[:, offset : offset + width], grains[index % GRAIN_PLANES], out=planes[:height])
            left = (index * 5) % (width - box)
            planes[box : 2 * box, left : left + box] = 255
            frame = av.VideoFrame.from_ndarray(planes, format="yuv420p")
            frame.pts, frame.time_base = index, Fraction(1, FPS)
            container.mux(stream.encode(frame))
        container.mux(stream.encode())
    partial.rename(path)
    return path


def ensure_clip(folder: Path, minutes: int, height: int, keyframe_interval: int) -> Path:
    path = folder / clip_name(minutes, height, keyframe_interval)
    if not path.exists():
        folder.mkdir(parents=True, exist_ok=True)
        print(f"writing {path} ...", flush=True)
        write_bench_clip(path, minutes, height, keyframe_interval)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--clips", type=Path, default=Path("/work/bench-clips"))
    parser.add_argument("--minutes", type=int, nargs="+", default=[20, 60])
    parser.add_argument("--keyframes", type=int, nargs="+", default=[250, 30])
    parser.add_argument("--height", type=int, default=1080)
    parser.add_argument("--make-clips", action="store_true", help="only write the clips, then stop")
    args = parser.parse_args()
    for minutes in args.minutes:
        for keyframe_interval in args.keyframes:
            ensure_clip(args.clips, minutes, args.height, keyframe_interval)


if __name__ == "__main__":
    main()
