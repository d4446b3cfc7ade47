"""The engine on CUDA: graphs by default, every chunk a graph hit, same answers as the eager encoder."""

from __future__ import annotations

from pathlib import Path

import pytest

from framewise.core.backends.local.engine import Engine
from framewise.core.settings import AppSettings
from tests.conftest import SAMPLE_CLIPS

pytestmark = pytest.mark.gpu

CUDA_FP32 = (
    AppSettings()
    .replace("model", device="cuda", dtype="float32")
    .replace("encoder", min_budget=256, max_budget=4096)
    .replace("generation", max_new_tokens=12)
)
QUESTIONS = ("What color is the square?", "How many shapes are there?", "Which way does the square move?")


@pytest.fixture(scope="module")
def clips() -> list[Path]:
    return sorted(SAMPLE_CLIPS.glob("*.mp4"))


def answers(settings: AppSettings, clips: list[Path]) -> tuple[Engine, list[str]]:
    engine = Engine(settings)
    engine.load()
    texts = []
    for clip in clips:
        engine.open_clip(clip)
        texts += [engine.ask(question).text for question in QUESTIONS]
        engine.new_conversation()
    return engine, texts


def test_graphs_are_the_default_on_cuda_and_answer_like_eager(clips: list[Path]) -> None:
    graphs, graph_answers = answers(CUDA_FP32, clips)
    info = graphs.info()
    assert info.graphs_enabled and info.encoder_name != "eager" and info.device.startswith("cuda")
    assert info.graph_budgets and info.graph_budgets[-1] == 4096
    summary = graphs.clip.summary
    assert summary.graph_hit and all(chunk.graph_hit for chunk in summary.chunks)
    assert graphs.metrics.snapshot().item_misses == 0

    _, eager_answers = answers(CUDA_FP32.replace("encoder", use_graphs=False), clips)
    assert graph_answers == eager_answers


def test_a_picture_goes_through_the_image_graphs_and_answers_like_eager(tmp_path: Path) -> None:
    from tests.core.test_images import red_square_picture

    picture = red_square_picture(tmp_path, "red_square.mp4")  # the content, not the name, decides
    graphs = Engine(CUDA_FP32)
    graphs.load()
    summary = graphs.open_clip(picture)
    assert summary.kind == "image" and graphs.clip is not None and graphs.clip.image is not None
    assert summary.graph_hit and summary.chunks and all(chunk.graph_hit for chunk in summary.chunks)
    assert graphs.metrics.snapshot().item_hits == 1
    graph_answer = graphs.ask("What color is the square?").text

    eager = Engine(CUDA_FP32.replace("encoder", use_graphs=False))
    eager.load()
    eager.open_clip(picture)
    assert graph_answer == eager.ask("What color is the square?").text
    assert graph_answer.split()[0] == "red"


def test_two_clips_in_one_prompt_answer_like_eager(clips: list[Path]) -> None:
    first, second = clips[:2]

    def first_tokens(settings: AppSettings) -> list[str]:
        engine = Engine(settings)
        engine.load()
        engine.open_clip(first)
        engine.add_clip(second)
        assert len(engine.clips) == 2
        return engine.ask("What color is the square?").text.split()[:3]

    graph_tokens = first_tokens(CUDA_FP32)
    assert graph_tokens and graph_tokens == first_tokens(CUDA_FP32.replace("encoder", use_graphs=False))
