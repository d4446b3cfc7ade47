"""The bundled demo model answers each sample clip in assets/clips about its colors and motion, on
the CPU (assets/clips/README.md says what each clip shows). One engine, loaded as ``framewise ask
--device cpu`` loads it, answers every case; tests/app/test_cli.py runs ``framewise ask`` itself."""

from __future__ import annotations

import pytest

from framewise.core.backends import create_engine
from framewise.core.backends.base import AnsweringBackend
from framewise.core.settings import AppSettings
from tests.conftest import SAMPLE_CLIPS

CASES = [
    ("red_square_moves_right.mp4", "What color is the square?", "red"),
    ("red_square_moves_right.mp4", "Which way does the square move?", "right"),
    ("two_shapes_wide.mp4", "What color is the circle?", "blue"),
    ("two_shapes_wide.mp4", "Which way does the circle move?", "right"),
    ("two_shapes_wide.mp4", "What color is the triangle?", "green"),
    ("two_shapes_wide.mp4", "Which way does the triangle move?", "it does not move"),
    ("rotated_phone.mp4", "What color is the circle?", "yellow"),
    ("rotated_phone.mp4", "Which way does the circle move?", "down"),
]


@pytest.fixture(scope="module")
def engine() -> AnsweringBackend:
    """The engine ``framewise ask --device cpu`` builds: the default settings on the CPU."""
    engine = create_engine(AppSettings().replace("model", device="cpu"))
    engine.load()
    return engine


def test_every_sample_clip_is_asked_about() -> None:
    assert {clip for clip, _, _ in CASES} == {path.name for path in SAMPLE_CLIPS.glob("*.mp4")}


@pytest.mark.parametrize(("clip", "question", "expected"), CASES)
def test_the_demo_model_answers_the_sample_clip(
    engine: AnsweringBackend, clip: str, question: str, expected: str
) -> None:
    path = SAMPLE_CLIPS / clip
    if engine.open_clip_path() == path:
        engine.new_conversation()  # the clip stays encoded; the earlier question and answer go
    else:
        engine.open_clip(path)
    answer = engine.ask(question).text
    assert answer.strip().lower().rstrip(".") == expected, answer
