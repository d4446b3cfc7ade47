"""The bundled demo model answers held-out synthetic clips correctly, eager on the CPU."""

from __future__ import annotations

import pytest

from framewise.core.models import DEMO_MODEL_DIR, read_model_info
from framewise.core.settings import EncoderSettings, ModelSettings
from training.evaluate import evaluate
from training.train_demo import DEMO_LABEL

CLIPS = 14  # about 60 questions; every kind is asked
# The shipped model does not reach the 90 % it is meant to (docs/demo_model.md has its measured
# accuracy). The floor sits well above guessing (about 30 % with these answer sets) and below the
# shipped model's measured accuracy, so a pipeline that feeds the model anything other than what
# it was trained on (patch order, timestamps, prompt format) fails here.
FLOOR = 0.45


def accuracy_table(report) -> str:
    return ", ".join(f"{kind} {row['correct']}/{row['asked']}" for kind, row in report.per_kind.items())


@pytest.mark.timeout(180)
def test_bundled_demo_model_answers_held_out_clips_on_the_cpu() -> None:
    label = read_model_info(DEMO_MODEL_DIR).get("label")
    if label != DEMO_LABEL:
        pytest.skip(f"assets/demo_model is {label!r}, not the trained demo model (see docs/demo_model.md)")
    report = evaluate(ModelSettings(source="demo", device="cpu"), EncoderSettings(use_graphs=False), clips=CLIPS)
    assert {kind for kind in report.per_kind} == {"color", "motion", "count", "first", "appear"}
    assert len(report.answers) >= 50
    assert report.overall >= FLOOR, accuracy_table(report)
