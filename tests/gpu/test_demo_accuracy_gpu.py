"""The bundled demo model through the encoder CUDA graphs: the same answers as the eager encoder
on the same GPU, and as far above guessing as on the CPU."""

from __future__ import annotations

import pytest
import torch

from framewise.core.models import DEMO_MODEL_DIR, read_model_info
from framewise.core.settings import EncoderSettings, ModelSettings
from training.evaluate import evaluate
from training.train_demo import DEMO_LABEL

pytestmark = pytest.mark.gpu

CLIPS = 40
FLOOR = 0.45  # see tests/core/test_demo_accuracy.py


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_demo_model_through_graphs_answers_as_eager_and_above_the_floor() -> None:
    label = read_model_info(DEMO_MODEL_DIR).get("label")
    if label != DEMO_LABEL:
        pytest.skip(f"assets/demo_model is {label!r}, not the trained demo model (see docs/demo_model.md)")
    model = ModelSettings(source="demo", device="cuda")
    graphs = evaluate(model, EncoderSettings(use_graphs=True), clips=CLIPS)
    eager = evaluate(model, EncoderSettings(use_graphs=False), clips=CLIPS)
    assert "CUDA graphs captured" in graphs.encoder, graphs.encoder
    assert [a.answer for a in graphs.answers] == [a.answer for a in eager.answers]
    assert graphs.overall >= FLOOR, {kind: row["accuracy"] for kind, row in graphs.per_kind.items()}
