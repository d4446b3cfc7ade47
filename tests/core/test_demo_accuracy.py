"""The bundled demo model answers held-out synthetic clips at the 90 % target, eager on the CPU.

The clips are the first :data:`CLIPS` held-out seeds (fixed); every question is asked in its
canonical wording and once paraphrased. The targets are the demo model's, not the shipped
weights' measured accuracy: where those weights fall short (docs/demo_model.md has the numbers),
the test is marked as an expected failure that says by how much, and it turns into a failure as
soon as the target is reached, so the mark cannot outlive the shortfall.
"""

from __future__ import annotations

import pytest

from framewise.core.loading import DEMO_MODEL_DIR, read_model_info
from framewise.core.settings import EncoderSettings, ModelSettings
from training.demo_model import DEMO_LABEL
from training.evaluate import Answer, Report, evaluate, same_answers
from training.synthetic import QUESTION_KINDS

CLIPS = 32  # about 130 questions in their canonical wording and as many paraphrased
TARGET = 0.90
PARAPHRASE_TARGET = 0.80


def short_of_target(measured: str) -> pytest.MarkDecorator:
    return pytest.mark.xfail(strict=True, reason=f"the shipped weights answer {measured} (target {TARGET:.0%})")


# What the shipped weights answer on these clips (CPU, eager), where it is below the target.
BELOW_TARGET = {
    "appear": short_of_target("89 % of appear questions (17 of 19)"),
}


def accuracy_table(report: Report) -> str:
    return ", ".join(f"{kind} {row['correct']}/{row['asked']}" for kind, row in report.per_kind.items())


def test_the_shipped_demo_model_is_the_trained_one() -> None:
    label = read_model_info(DEMO_MODEL_DIR).get("label")
    assert label == DEMO_LABEL, (
        f"assets/demo_model is {label!r}, not the trained demo model ({DEMO_LABEL!r}); restore it with "
        "`git checkout -- assets/demo_model` or train one (docs/demo_model.md)"
    )


@pytest.fixture(scope="module")
def report() -> Report:
    label = read_model_info(DEMO_MODEL_DIR).get("label")
    if label != DEMO_LABEL:
        pytest.fail(f"assets/demo_model is {label!r}, not the trained demo model; see docs/demo_model.md")
    return evaluate(ModelSettings(source="demo", device="cpu"), EncoderSettings(use_graphs=False), clips=CLIPS)


@pytest.mark.timeout(300)
def test_every_question_kind_is_asked(report: Report) -> None:
    assert set(report.per_kind) == set(QUESTION_KINDS)
    assert sum(int(row["asked"]) for row in report.per_kind.values()) >= 100
    assert report.paraphrases["asked"] == sum(int(row["asked"]) for row in report.per_kind.values())


@pytest.mark.parametrize(
    "kind", [pytest.param(kind, marks=BELOW_TARGET.get(kind, ())) for kind in QUESTION_KINDS]
)
def test_each_question_kind_reaches_the_target(report: Report, kind: str) -> None:
    assert report.per_kind[kind]["accuracy"] >= TARGET, accuracy_table(report)


def test_overall_accuracy_reaches_the_target(report: Report) -> None:
    assert report.overall >= TARGET, accuracy_table(report)


def test_paraphrased_questions_reach_their_target(report: Report) -> None:
    assert report.paraphrases["accuracy"] >= PARAPHRASE_TARGET, report.paraphrases


def test_half_the_video_tokens_pruned_still_reaches_the_overall_target() -> None:
    """Issue 43's bar for pruning: at rate 0.5 the demo model keeps the 90 % target overall (the
    same clips answer 98.5 % unpruned; docs/long-clips.md has the table, and the rate 0.75's)."""
    pruned = evaluate(
        ModelSettings(source="demo", device="cpu"), EncoderSettings(use_graphs=False), clips=CLIPS, pruning="0.5"
    )
    assert pruned.overall >= TARGET, accuracy_table(pruned)


def test_same_answers_counts_word_for_word_matches_on_questions_both_asked() -> None:
    def answer(seed: int, question: str, text: str) -> Answer:
        return Answer(seed, "color", question, "red", text)

    report = Report("demo", "cpu", "float32", "eager", 2, 0.0, {}, 1.0, {}, [
        answer(1, "What color?", "red"), answer(1, "Which way?", "left"), answer(2, "What color?", "blue"),
    ])
    earlier = {"answers": [
        {"seed": 1, "question": "What color?", "answer": "red"},
        {"seed": 1, "question": "Which way?", "answer": "Left"},  # differs in case: not the same
        {"seed": 3, "question": "What color?", "answer": "blue"},  # a clip the report did not ask
    ]}
    assert same_answers(report, earlier) == (1, 2)
