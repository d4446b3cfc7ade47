"""Make the sample clips in assets/clips: short scenes of solid shapes on a light background.

Run from the repository root: ``python scripts/make_sample_clips.py`` (``--out DIR`` to write
elsewhere). The scenes are fully determined by the definitions below (no randomness), and the
encoder runs single-threaded, so the clips come out the same on every run. The script also writes
``README.md`` next to the clips, describing what is in each one.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from training.clip_writer import write_clip  # noqa: E402

BACKGROUND = (236, 236, 230)
COLORS = {
    "red": (220, 30, 30),
    "green": (30, 170, 60),
    "blue": (30, 80, 220),
    "yellow": (240, 195, 0),
}


@dataclass(frozen=True)
class Shape:
    """A solid shape moving in a straight line: centre ``start`` at t=0 to ``end`` at the last frame.

    ``size`` is the side of a square, the diameter of a circle, the base and height of a triangle
    (pointing up), in pixels; positions are (x, y) pixels of the upright picture.
    """

    kind: str
    color: str
    size: int
    start: tuple[float, float]
    end: tuple[float, float]


@dataclass(frozen=True)
class SampleClip:
    """One sample clip: an upright ``width`` x ``height`` scene, stored rotated when
    ``rotation_degrees`` is set, with display metadata that turns it upright again."""

    name: str
    width: int
    height: int
    seconds: float
    fps: float
    shapes: tuple[Shape, ...]
    description: str
    rotation_degrees: int = 0


SAMPLE_CLIPS = (
    SampleClip(
        name="red_square_moves_right.mp4",
        width=320,
        height=240,
        seconds=4.0,
        fps=12.0,
        shapes=(Shape("square", "red", 48, start=(40, 120), end=(280, 120)),),
        description="A red square moves from the left edge to the right edge, at mid height.",
    ),
    SampleClip(
        name="two_shapes_wide.mp4",
        width=480,
        height=200,
        seconds=4.0,
        fps=12.0,
        shapes=(
            Shape("circle", "blue", 56, start=(50, 70), end=(430, 70)),
            Shape("triangle", "green", 60, start=(360, 150), end=(360, 150)),
        ),
        description=(
            "Wide (480x200). A blue circle moves left to right along the top; "
            "a green triangle stays still at the lower right."
        ),
    ),
    SampleClip(
        name="rotated_phone.mp4",
        width=180,
        height=320,
        seconds=3.0,
        fps=12.0,
        shapes=(Shape("circle", "yellow", 50, start=(90, 40), end=(90, 280)),),
        rotation_degrees=90,
        description=(
            "Portrait (180x320 as displayed), stored as 320x180 with 90-degree rotation metadata, "
            "like a phone recording. A yellow circle falls from the top to the bottom."
        ),
    ),
)


def draw_shape(image: np.ndarray, shape: Shape, center: tuple[float, float]) -> None:
    """Draw ``shape`` centred at ``center`` (x, y) into the RGB image (H, W, 3), in place."""
    color = COLORS[shape.color]
    x, y = center
    half = shape.size / 2
    if shape.kind == "square":
        cv2.rectangle(image, (round(x - half), round(y - half)), (round(x + half), round(y + half)), color, -1)
    elif shape.kind == "circle":
        cv2.circle(image, (round(x), round(y)), round(half), color, -1, lineType=cv2.LINE_AA)
    elif shape.kind == "triangle":
        corners = np.array([[x, y - half], [x - half, y + half], [x + half, y + half]]).round().astype(np.int32)
        cv2.fillPoly(image, [corners], color, lineType=cv2.LINE_AA)
    else:
        raise ValueError(f"unknown shape kind {shape.kind!r}; use square, circle or triangle")


def render_frame(width: int, height: int, shapes: tuple[Shape, ...], progress: float) -> np.ndarray:
    """The upright scene (height, width, 3) uint8 RGB with every shape ``progress`` (0..1) along its path."""
    image = np.empty((height, width, 3), np.uint8)
    image[:] = BACKGROUND
    for shape in shapes:
        center = tuple(a + (b - a) * progress for a, b in zip(shape.start, shape.end))
        draw_shape(image, shape, center)
    return image


def clip_frames(clip: SampleClip) -> list[np.ndarray]:
    """The frames as stored: the upright scene turned clockwise by the clip's rotation."""
    count = round(clip.seconds * clip.fps)
    frames = []
    for index in range(count):
        upright = render_frame(clip.width, clip.height, clip.shapes, index / max(count - 1, 1))
        frames.append(np.ascontiguousarray(np.rot90(upright, k=-clip.rotation_degrees // 90)))
    return frames


def write_readme(out_dir: Path, clips: tuple[SampleClip, ...]) -> Path:
    lines = [
        "# Sample clips",
        "",
        "Made by `python scripts/make_sample_clips.py`; do not edit by hand. Solid shapes on a light",
        "background, H.264 in MP4. Sizes are as displayed.",
        "",
        "| clip | size | length | fps | rotation | what is in it |",
        "|---|---|---|---|---|---|",
    ]
    for clip in clips:
        rotation = f"{clip.rotation_degrees} deg" if clip.rotation_degrees else "none"
        lines.append(
            f"| `{clip.name}` | {clip.width}x{clip.height} | {clip.seconds:g} s | {clip.fps:g} | {rotation} "
            f"| {clip.description} |"
        )
    path = out_dir / "README.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "assets" / "clips", help="folder to write into")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for clip in SAMPLE_CLIPS:
        path = write_clip(args.out / clip.name, clip_frames(clip), clip.fps, rotation_degrees=clip.rotation_degrees)
        print(f"{path} ({path.stat().st_size / 1024:.0f} KB)")
    print(write_readme(args.out, SAMPLE_CLIPS))


if __name__ == "__main__":
    main()
