"""Still pictures open as images: one image item, the prompt's image span, no times."""

from __future__ import annotations

import shutil
from pathlib import Path

import cv2
import numpy as np
import pytest

from framewise.core.backends.local.engine import Engine
from framewise.core.events import ClipSampled, EncodeDone
from framewise.core.video.still import read_still
from tests.core.test_engine import FAST, Recorder
from training.clip_writer import write_clip
from training.synthetic import COLORS


def red_square_picture(folder: Path, name: str = "red_square.png") -> Path:
    """A gray 320x224 picture with a red square in its middle, written as PNG (whatever ``name`` says)."""
    picture = np.full((224, 320, 3), 128, np.uint8)
    picture[80:150, 125:195] = COLORS["red"]
    png = folder / "red_square.png"
    cv2.imwrite(str(png), picture[..., ::-1])
    if png.name != name:
        shutil.copy(png, folder / name)
    return folder / name


@pytest.mark.parametrize("suffix", [".png", ".jpg", ".webp"])
def test_a_picture_reads_as_one_upright_rgb_image(tmp_path: Path, suffix: str) -> None:
    picture = np.zeros((48, 64, 3), np.uint8)
    picture[..., 0] = 220
    path = tmp_path / f"red{suffix}"
    cv2.imwrite(str(path), picture[..., ::-1])
    still = read_still(path)
    assert still is not None and still.pixels.shape == (48, 64, 3)
    assert abs(int(still.pixels[24, 32, 0]) - 220) <= 4 and still.pixels[24, 32, 2] < 8
    assert (still.info.width, still.info.height, still.info.frame_count) == (64, 48, 1)


def test_a_png_renamed_mp4_is_still_a_picture(tmp_path: Path) -> None:
    assert read_still(red_square_picture(tmp_path, "looks_like_a_clip.mp4")) is not None


def test_a_one_frame_video_file_is_a_picture(tmp_path: Path) -> None:
    path = tmp_path / "one.mp4"
    write_clip(path, np.full((1, 64, 64, 3), 200, np.uint8), fps=2)
    still = read_still(path)
    assert still is not None and still.pixels.shape == (64, 64, 3)


def test_a_file_with_two_frames_stays_a_video(tmp_path: Path) -> None:
    path = tmp_path / "two.mp4"
    write_clip(path, np.zeros((2, 64, 64, 3), np.uint8), fps=2)
    assert read_still(path) is None


@pytest.fixture(scope="module")
def engine() -> tuple[Engine, Recorder]:
    recorder = Recorder()
    engine = Engine(FAST, sink=recorder)
    engine.load()
    return engine, recorder


def test_a_picture_opens_as_one_image_item(engine: tuple[Engine, Recorder], tmp_path: Path) -> None:
    engine_, recorder = engine
    summary = engine_.open_clip(red_square_picture(tmp_path, "red_square.mp4"))
    assert summary.kind == "image" and summary.frames == 1 and summary.timestamps == (0.0,)
    assert engine_.clip is not None and engine_.clip.kind == "image" and engine_.clip.video is None
    assert engine_.clip.image is not None and engine_.clip.image.modality == "image"
    assert engine_.clip.image.grid_thw[0] == 1  # one temporal patch, not a zero-length clip's pairs
    sampled = recorder.of(ClipSampled)[-1]
    assert sampled.kind == "image" and len(sampled.thumbnails) == 1
    assert recorder.of(EncodeDone)[-1].kind == "image"
    loaded = engine_.loaded
    assert loaded is not None
    inputs = loaded.family.build_prompt(loaded.tokenizer, "What color is the square?", images=[engine_.clip.image],
                                        limits=loaded.limits)
    assert [grid[0] for grid in inputs.grids] == ["image"] and "seconds>" not in inputs.text


def test_a_clip_after_a_picture_is_a_video_again(engine: tuple[Engine, Recorder], tmp_path: Path) -> None:
    engine_, _ = engine
    engine_.open_clip(red_square_picture(tmp_path))
    path = tmp_path / "two.mp4"
    write_clip(path, np.zeros((4, 64, 64, 3), np.uint8), fps=2)
    assert engine_.open_clip(path).kind == "video" and engine_.clip is not None and engine_.clip.video is not None


def test_the_demo_model_names_the_red_square_in_a_picture(engine: tuple[Engine, Recorder], tmp_path: Path) -> None:
    engine_, _ = engine
    engine_.open_clip(red_square_picture(tmp_path))
    answer = engine_.ask("What color is the square?").text
    assert answer.split()[0] == "red", answer
