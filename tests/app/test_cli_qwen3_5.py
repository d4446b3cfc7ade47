"""The CLI on a tiny random-weight Qwen3.5 checkpoint (the CPU): info names the family and its
layers, ask answers as the engine does about a clip, a clip and a picture, and a closer look."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from framewise.core.backends.local.engine import Engine
from tests.app.test_cli import framewise
from tests.conftest import SAMPLE_CLIPS
from tests.core.families.qwen3_5.checkpoint import write_tiny_checkpoint
from tests.core.families.qwen3_5.test_qwen3_5_engine import settings_for
from tests.core.test_images import red_square_picture

CLIP = SAMPLE_CLIPS / "red_square_moves_right.mp4"


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    return write_tiny_checkpoint(tmp_path_factory.mktemp("cli") / "tiny", seed=2)


def flags(checkpoint: Path) -> list[str]:
    return ["--model", str(checkpoint), "--device", "cpu", "--dtype", "float32", "--max-frames", "4",
            "--max-new-tokens", "6"]


def test_info_names_qwen3_5_its_layers_and_what_a_token_takes_in_the_cache(checkpoint: Path) -> None:
    result = framewise("info", *flags(checkpoint))
    assert result.returncode == 0, result.stderr
    assert "family:             Qwen3.5, 2 linear-attention + 1 full-attention layers" in result.stdout
    assert "(float32, 1 KiB a token)" in result.stdout  # one full-attention layer: 2 x 2 heads x 64 x 4 bytes
    info = json.loads(framewise("info", *flags(checkpoint), "--json").stdout)
    assert info["family"] == "Qwen3.5" and info["layout"]["layers"] == [["linear-attention", 2], ["full-attention", 1]]
    assert info["memory_estimate"]["kv_cache"] > 0


def test_ask_answers_about_a_clip_and_a_picture_as_the_engine_does(checkpoint: Path, tmp_path: Path) -> None:
    still = red_square_picture(tmp_path)
    engine = Engine(settings_for(checkpoint))
    engine.load()
    engine.open_clip(CLIP)
    engine.add_clip(still)
    expected = engine.ask("What is red?").text

    result = framewise("ask", str(CLIP), str(still), "What is red?", "--json", *flags(checkpoint))
    assert result.returncode == 0, result.stderr
    payload = json.loads(result.stdout)
    assert payload["family"] == "Qwen3.5" and payload["answer"] == expected
    assert [clip["kind"] for clip in payload["clips"]] == ["video", "image"]
    assert 0 < payload["stats"]["new_tokens"] <= 6


def test_a_closer_look_at_a_span_is_asked_about_beside_the_whole_clip(checkpoint: Path) -> None:
    result = framewise("ask", str(CLIP), "What moves?", "--start", "1", "--end", "3", "--json", *flags(checkpoint))
    assert result.returncode == 0, result.stderr
    whole, span = json.loads(result.stdout)["clips"]
    assert whole["span"] is None and span["span"] == [1.0, 3.0]
    assert all(1.0 - 1e-6 <= time <= 3.0 for time in span["timestamps"])
