"""The bundled demo model through the encoder CUDA graphs: the same answers as the eager encoder
on the same GPU, at the 90 % target (the CPU test's targets and their marks)."""

from __future__ import annotations

import pytest
import torch

from framewise.core.families.qwen3_vl.demo_model import DEMO_LABEL
from framewise.core.loading import DEMO_MODEL_DIR, read_model_info
from framewise.core.settings import EncoderSettings, ModelSettings
from tests.core.test_demo_accuracy import PARAPHRASE_TARGET, TARGET
from training.evaluate import Report, evaluate

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
