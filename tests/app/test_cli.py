"""``framewise`` CLI end to end on the demo model, on the CPU."""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from framewise.app.cli import main
from tests.conftest import REPO_ROOT, SAMPLE_CLIPS

FAST = ["--max-frames", "4", "--max-new-tokens", "8", "--device", "cpu"]


def framewise(*args: str) -> subprocess.CompletedProcess[str]:
    """Run the CLI in this process (loading torch once for all tests); same result shape as a subprocess."""
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        returncode = main(list(args))
    return subprocess.CompletedProcess(args, returncode, stdout.getvalue(), stderr.getvalue())


@pytest.fixture(scope="module")
def sample_clip() -> Path:
    clips = sorted(SAMPLE_CLIPS.glob("*.mp4"))
    assert clips, "assets/clips holds the sample clips; run scripts/make_sample_clips.py"
    return clips[0]


def test_ask_streams_a_labelled_answer_then_the_stats(sample_clip: Path) -> None:
    result = framewise("ask", str(sample_clip), "What color is the square?", *FAST)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("[Demo model")
    assert "frames 4, patches" in result.stdout
    assert "tokens/s" in result.stdout
    assert "[load]" in result.stderr  # progress went to stderr, not into the answer


def test_ask_json_is_one_object_with_answer_and_stats(sample_clip: Path) -> None:
    result = framewise("ask", str(sample_clip), "How many shapes are there?", "--json", *FAST)
    assert result.returncode == 0, result.stderr
    payload = json.loads(result.stdout)
    assert payload["clip"]["name"] == sample_clip.name
    assert len(payload["clip"]["timestamps"]) == payload["clip"]["frames"] == 4
    assert payload["model_label"].startswith("Demo model")
    assert 0 < payload["stats"]["new_tokens"] <= 8
    assert payload["stats"]["time_to_first_token_ms"] > 0


def test_ask_about_a_missing_clip_says_so_and_exits_2(tmp_path: Path) -> None:
    result = framewise("ask", str(tmp_path / "nope.mp4"), "Anything?", *FAST)
    assert result.returncode == 2
    assert "nope.mp4" in result.stderr
    assert "Traceback" not in result.stderr


def test_ask_about_random_bytes_exits_2_with_a_message(tmp_path: Path) -> None:
    junk = tmp_path / "junk.mp4"
    junk.write_bytes(bytes(range(256)) * 64)
    result = framewise("ask", str(junk), "Anything?", *FAST)
    assert result.returncode == 2
    assert "junk.mp4" in result.stderr and "Traceback" not in result.stderr


def test_invalid_setting_is_refused_before_loading() -> None:
    result = framewise("info", "--max-frames", "7")
    assert result.returncode == 2
    assert "sampling.max_frames" in result.stderr


def test_info_says_the_encoder_runs_eager_on_the_cpu() -> None:
    result = framewise("info", "--device", "cpu")
    assert result.returncode == 0, result.stderr
    assert "eager" in result.stdout and "CPU" in result.stdout
    assert "attention backends:" in result.stdout
    info = json.loads(framewise("info", "--device", "cpu", "--json").stdout)
    assert info["graphs_enabled"] is False and info["device"] == "cpu"


def test_the_installed_module_runs_as_a_program() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "framewise.app.cli", "info", "--device", "cpu"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=240,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("model:")


def test_the_demo_model_names_the_color_of_the_square_in_the_sample_clip() -> None:
    clip = SAMPLE_CLIPS / "red_square_moves_right.mp4"
    result = framewise("ask", str(clip), "What color is the square?", "--json", "--device", "cpu")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["answer"] == "red"
