"""The bundled demo model through the encoder CUDA graphs: the same answers as the eager encoder
on the same GPU, at the 90 % target (the CPU test's targets and their marks); and quantized to FP8
on load, at the same target, with the same answers on a second run."""

from __future__ import annotations

import pytest
import torch

from framewise.core.loading import DEMO_MODEL_DIR, read_model_info
from framewise.core.settings import EncoderSettings, ModelSettings
from training.demo_model import DEMO_LABEL
from training.evaluate import Report, evaluate
from tests.core.test_demo_accuracy import PARAPHRASE_TARGET, TARGET

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

CLIPS = 40


@pytest.fixture(scope="module")
def reports() -> tuple[Report, Report]:
    label = read_model_info(DEMO_MODEL_DIR).get("label")
    if label != DEMO_LABEL:
        pytest.fail(f"assets/demo_model is {label!r}, not the trained demo model; see docs/demo_model.md")
    model = ModelSettings(source="demo", device="cuda")
    return (
        evaluate(model, EncoderSettings(use_graphs=True), clips=CLIPS),
        evaluate(model, EncoderSettings(use_graphs=False), clips=CLIPS),
    )


def test_graphs_give_the_eager_answers(reports: tuple[Report, Report]) -> None:
    graphs, eager = reports
    assert "CUDA graphs captured" in graphs.encoder, graphs.encoder
    differing = [
        (g.seed, g.question, g.answer, e.answer) for g, e in zip(graphs.answers, eager.answers) if g.answer != e.answer
    ]
    assert len(graphs.answers) == len(eager.answers) and not differing, differing


def test_graphs_reach_the_targets(reports: tuple[Report, Report]) -> None:
    graphs, _ = reports
    assert graphs.overall >= TARGET, {kind: row["accuracy"] for kind, row in graphs.per_kind.items()}
    assert graphs.paraphrases["accuracy"] >= PARAPHRASE_TARGET, graphs.paraphrases


@pytest.fixture(scope="module")
def fp8_reports() -> tuple[Report, Report]:
    model = ModelSettings(source="demo", device="cuda", dtype="fp8")
    return tuple(evaluate(model, EncoderSettings(use_graphs=True), clips=CLIPS) for _ in range(2))  # type: ignore[return-value]


def test_fp8_quantized_on_load_reaches_the_targets(fp8_reports: tuple[Report, Report]) -> None:
    fp8, _ = fp8_reports
    assert fp8.overall >= TARGET, {kind: row["accuracy"] for kind, row in fp8.per_kind.items()}
    assert fp8.paraphrases["accuracy"] >= PARAPHRASE_TARGET, fp8.paraphrases


def test_fp8_answers_are_the_same_on_a_second_run(fp8_reports: tuple[Report, Report]) -> None:
    first, second = fp8_reports
    assert [a.answer for a in first.answers] == [a.answer for a in second.answers]
