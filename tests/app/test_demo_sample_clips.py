"""``framewise ask`` on each sample clip in assets/clips answers its color and motion questions
with the bundled demo model, on the CPU (assets/clips/README.md says what each clip shows)."""

from __future__ import annotations

import contextlib
import io
import json

import pytest

from framewise.app.cli import main
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


def ask(clip: str, question: str) -> dict:
    """The JSON result of ``framewise ask CLIP QUESTION --json --device cpu``, run in this process."""
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(io.StringIO()):
        returncode = main(["ask", str(SAMPLE_CLIPS / clip), question, "--json", "--device", "cpu"])
    assert returncode == 0, stdout.getvalue()
    return json.loads(stdout.getvalue())


def test_every_sample_clip_is_asked_about() -> None:
    assert {clip for clip, _, _ in CASES} == {path.name for path in SAMPLE_CLIPS.glob("*.mp4")}


@pytest.mark.parametrize(("clip", "question", "expected"), CASES)
def test_the_demo_model_answers_the_sample_clip(clip: str, question: str, expected: str) -> None:
    result = ask(clip, question)
    assert result["answer"].strip().lower().rstrip(".") == expected, result["answer"]
