"""Accuracy of a model on held-out synthetic shape clips, through the application's own path.

    python -m training.evaluate [--model PATH] [--n 200] [--device cpu|cuda] [--graphs] [--json PATH]

Clips come from :data:`training.synthetic.HELD_OUT_SEEDS` (never used in training). Each clip is
sampled as ``core.video`` samples a file and resized to its Qwen3-VL size, then handed to the
application's :class:`~framewise.core.engine.Engine` (``open_frames``), which encodes it once (CUDA graphs
with ``--graphs`` on a GPU, else eager); every question the clip allows is asked on its own,
greedily.
Prints the accuracy per question kind and overall, then one JSON object.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Sequence

from framewise.core.engine import Engine
from framewise.core.processing import VisionGeometry, fit_video_frames
from framewise.core.settings import AppSettings, EncoderSettings, GenerationSettings, ModelSettings, SamplingSettings
from training.synthetic import HELD_OUT_SEEDS, QUESTION_KINDS, make_scene, questions_for, sample_scene

MAX_NEW_TOKENS = 8


@dataclass(frozen=True)
class Answer:
    seed: int
    kind: str
    question: str
    expected: str
    answer: str

    @property
    def correct(self) -> bool:
        return normalize(self.answer) == normalize(self.expected)


@dataclass(frozen=True)
class Report:
    """Accuracy per question kind and overall, and every answer given."""

    model: str
    device: str
    dtype: str
    encoder: str
    clips: int
    seconds: float
    per_kind: dict[str, dict[str, float]]
    overall: float
    answers: list[Answer]

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["answers"] = [asdict(a) | {"correct": a.correct} for a in self.answers]
        return data


def normalize(text: str) -> str:
    return " ".join(text.strip().lower().rstrip(".!").split())


class Answerer:
    """The application's engine, asked one question at a time about each held-out clip."""

    def __init__(self, model: ModelSettings, encoder: EncoderSettings) -> None:
        settings = AppSettings(
            model=model, encoder=encoder, generation=GenerationSettings(max_new_tokens=MAX_NEW_TOKENS)
        )
        self.engine = Engine(settings)
        self.info = self.engine.load()

    def answer_all(self, seed: int, sampling: SamplingSettings) -> list[Answer]:
        """Encode the held-out clip of ``seed`` once and answer each of its questions on its own."""
        sampled = sample_scene(make_scene(seed), sampling)
        frames = fit_video_frames(sampled.frames, sampling, geometry=self.geometry)
        self.engine.open_frames(frames, sampled.timestamps, f"held-out clip {seed}")
        answers = []
        for question in questions_for(sampled):
            self.engine.new_conversation()
            text = self.engine.ask(question.text).text
            answers.append(Answer(seed, question.kind, question.text, question.answer, text))
        return answers

    @property
    def geometry(self) -> VisionGeometry:
        return self.engine.loaded.geometry


def evaluate(
    model: ModelSettings,
    encoder: EncoderSettings,
    *,
    clips: int = 200,
    seeds: Sequence[int] = HELD_OUT_SEEDS,
    sampling: SamplingSettings = SamplingSettings(),
) -> Report:
    """Ask every question of the first ``clips`` held-out clips; see the module docstring."""
    answerer = Answerer(model, encoder)
    started = time.perf_counter()
    answers = [answer for seed in seeds[:clips] for answer in answerer.answer_all(seed, sampling)]
    seconds = time.perf_counter() - started
    asked, right = Counter(a.kind for a in answers), Counter(a.kind for a in answers if a.correct)
    per_kind = {
        kind: {"asked": asked[kind], "correct": right[kind], "accuracy": right[kind] / asked[kind]}
        for kind in QUESTION_KINDS
        if asked[kind]
    }
    return Report(
        model=answerer.info.model_name,
        device=answerer.info.device,
        dtype=answerer.info.dtype,
        encoder=answerer.info.graphs_reason,
        clips=clips,
        seconds=round(seconds, 2),
        per_kind=per_kind,
        overall=sum(right.values()) / max(1, len(answers)),
        answers=answers,
    )


def print_report(report: Report) -> None:
    print(f"model {report.model} on {report.device} ({report.dtype}); {report.encoder}")
    print(f"{'question':<10}{'asked':>7}{'correct':>9}{'accuracy':>10}")
    for kind, row in report.per_kind.items():
        print(f"{kind:<10}{row['asked']:>7}{row['correct']:>9}{row['accuracy']:>10.1%}")
    total = sum(int(row["asked"]) for row in report.per_kind.values())
    correct = sum(int(row["correct"]) for row in report.per_kind.values())
    print(f"{'overall':<10}{total:>7}{correct:>9}{report.overall:>10.1%}")
    print(f"{report.clips} clips in {report.seconds:.1f} s")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="demo", help="'demo' (the bundled model) or a model folder")
    parser.add_argument("--n", type=int, default=200, help="held-out clips; every question of each is asked")
    parser.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    parser.add_argument("--dtype", default="auto", choices=("auto", "float32", "bfloat16", "float16"))
    parser.add_argument("--graphs", action="store_true", help="encode through the CUDA-graph encoder (CUDA only)")
    parser.add_argument("--json", type=Path, default=None, help="also write the report, answers included, here")
    args = parser.parse_args(argv)
    report = evaluate(
        ModelSettings(source=args.model, device=args.device, dtype=args.dtype),
        EncoderSettings(use_graphs=args.graphs),
        clips=args.n,
    )
    print_report(report)
    summary = {k: v for k, v in report.to_json().items() if k != "answers"}
    print(json.dumps(summary))
    if args.json:
        args.json.write_text(json.dumps(report.to_json(), indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
