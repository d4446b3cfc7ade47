"""Accuracy of a model on held-out synthetic shape clips, through the application's own path.

    python -m training.evaluate [--model PATH] [--n 200] [--device cpu|cuda] [--dtype fp8] [--graphs]
        [--pruning off|auto|RATE] [--json PATH] [--same-answers-as EARLIER.json]

Clips come from :data:`training.synthetic.HELD_OUT_SEEDS` (never used in training). Each clip is
sampled as ``core.video`` samples a file and resized to its Qwen3-VL size, then handed to the
application's :class:`~framewise.core.backends.local.engine.Engine` (``open_frames``), which encodes it once (CUDA graphs
with ``--graphs`` on a GPU, else eager); every question the clip allows is asked on its own,
greedily, in its canonical wording, and then once more in one of its paraphrases
(``training.synthetic.WORDINGS``, chosen by the seed and the question's place). With
``--pruning`` the engine prunes each clip's video tokens after encoding it, as
``sampling.pruning`` does in the application.
Prints the accuracy per question kind and overall (canonical wordings), the paraphrases' accuracy
on a line of its own, then one JSON object. ``--same-answers-as`` counts the answers that are word
for word those of an earlier ``--json`` report on the same clips (another dtype's, say: FP8 against
float32 is greedy agreement on trained weights).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Sequence

from framewise.core.backends.local.engine import Engine
from framewise.core.families.qwen3_vl.geometry import VisionGeometry
from framewise.core.families.qwen3_vl.processor import fit_video_frames
from framewise.core.settings import (
    KV_CACHE_DTYPES,
    AppSettings,
    DecodingSettings,
    EncoderSettings,
    GenerationSettings,
    ModelSettings,
    SamplingSettings,
)
from training.synthetic import HELD_OUT_SEEDS, QUESTION_KINDS, WORDINGS, make_scene, questions_for, sample_scene

MAX_NEW_TOKENS = 8


@dataclass(frozen=True)
class Answer:
    seed: int
    kind: str
    question: str
    expected: str
    answer: str
    wording: int = 0

    @property
    def correct(self) -> bool:
        return normalize(self.answer) == normalize(self.expected)


@dataclass(frozen=True)
class Report:
    """Accuracy per question kind and overall on the canonical wordings, the paraphrases'
    accuracy (``paraphrases``: asked, correct, accuracy), and every answer given."""

    model: str
    device: str
    dtype: str
    encoder: str
    clips: int
    seconds: float
    per_kind: dict[str, dict[str, float]]
    overall: float
    paraphrases: dict[str, float]
    answers: list[Answer]

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["answers"] = [asdict(a) | {"correct": a.correct} for a in self.answers]
        return data


def normalize(text: str) -> str:
    return " ".join(text.strip().lower().rstrip(".!").split())


class Answerer:
    """The application's engine, asked one question at a time about each held-out clip."""

    def __init__(
        self, model: ModelSettings, encoder: EncoderSettings, pruning: str = "off",
        decoding: DecodingSettings = DecodingSettings(),
    ) -> None:
        settings = AppSettings(
            model=model, encoder=encoder, generation=GenerationSettings(max_new_tokens=MAX_NEW_TOKENS),
            sampling=SamplingSettings(pruning=pruning), decoding=decoding,
        )
        self.engine = Engine(settings)
        self.info = self.engine.load()

    def answer_all(self, seed: int, sampling: SamplingSettings, *, paraphrased: bool = True) -> list[Answer]:
        """Encode the held-out clip of ``seed`` once and answer each of its questions on its own, in
        their canonical wording and, with ``paraphrased``, once more reworded."""
        sampled = sample_scene(make_scene(seed), sampling)
        frames = fit_video_frames(sampled.frames, sampling, geometry=self.geometry)
        self.engine.open_frames(frames, sampled.timestamps, f"held-out clip {seed}")
        answers = []
        canonical = questions_for(sampled)
        reworded = [q.reworded(paraphrase_wording(seed, i, q.kind)) for i, q in enumerate(canonical)]
        for question in [*canonical, *(reworded if paraphrased else [])]:
            self.engine.new_conversation()
            text = self.engine.ask(question.text).text
            answers.append(Answer(seed, question.kind, question.text, question.answer, text, question.wording))
        return answers

    @property
    def geometry(self) -> VisionGeometry:
        return self.engine.loaded.adapter.geometry


def paraphrase_wording(seed: int, place: int, kind: str) -> int:
    """The paraphrase (an index into ``WORDINGS[kind]``, not 0) asked of a clip's ``place``-th question."""
    return 1 + (seed + place) % (len(WORDINGS[kind]) - 1)


def accuracy(answers: Sequence[Answer]) -> dict[str, float]:
    right = sum(a.correct for a in answers)
    return {"asked": len(answers), "correct": right, "accuracy": right / max(1, len(answers))}


def evaluate(
    model: ModelSettings,
    encoder: EncoderSettings,
    *,
    clips: int = 200,
    seeds: Sequence[int] = HELD_OUT_SEEDS,
    sampling: SamplingSettings = SamplingSettings(),
    pruning: str = "off",
    decoding: DecodingSettings = DecodingSettings(),
) -> Report:
    """Ask every question of the first ``clips`` held-out clips, their video tokens pruned as
    ``pruning`` says and decoded with the ``decoding`` settings (the KV cache's dtype); see the
    module docstring."""
    answerer = Answerer(model, encoder, pruning, decoding)
    started = time.perf_counter()
    answers = [answer for seed in seeds[:clips] for answer in answerer.answer_all(seed, sampling)]
    seconds = time.perf_counter() - started
    canonical = [a for a in answers if a.wording == 0]
    per_kind = {
        kind: accuracy(of_kind) for kind in QUESTION_KINDS if (of_kind := [a for a in canonical if a.kind == kind])
    }
    return Report(
        model=answerer.info.model_name,
        device=answerer.info.device,
        dtype=_precision(answerer.info.dtype, model.dtype, decoding.kv_cache_dtype),
        encoder=answerer.info.graphs_reason,
        clips=clips,
        seconds=round(seconds, 2),
        per_kind=per_kind,
        overall=accuracy(canonical)["accuracy"],
        paraphrases=accuracy([a for a in answers if a.wording != 0]),
        answers=answers,
    )


def _precision(activations: str, dtype_setting: str, kv_cache_setting: str) -> str:
    """The dtypes in a few words: the activations', the weights' where quantized, the KV cache's
    where it is not the activations'."""
    words = f"fp8 weights, {activations} activations" if dtype_setting == "fp8" else activations
    return words if kv_cache_setting == "auto" else f"{words}, {kv_cache_setting} KV cache"


def same_answers(report: Report, earlier: dict[str, Any]) -> tuple[int, int]:
    """(answers word for word the same as in ``earlier``, a report's JSON; questions both asked)."""
    before = {(answer["seed"], answer["question"]): answer["answer"] for answer in earlier["answers"]}
    both = [answer for answer in report.answers if (answer.seed, answer.question) in before]
    return sum(answer.answer == before[(answer.seed, answer.question)] for answer in both), len(both)


def print_report(report: Report) -> None:
    print(f"model {report.model} on {report.device} ({report.dtype}); {report.encoder}")
    print(f"{'question':<10}{'asked':>7}{'correct':>9}{'accuracy':>10}")
    for kind, row in report.per_kind.items():
        print(f"{kind:<10}{row['asked']:>7}{row['correct']:>9}{row['accuracy']:>10.1%}")
    total = sum(int(row["asked"]) for row in report.per_kind.values())
    correct = sum(int(row["correct"]) for row in report.per_kind.values())
    print(f"{'overall':<10}{total:>7}{correct:>9}{report.overall:>10.1%}")
    row = report.paraphrases
    print(f"{'paraphrase':<10}{row['asked']:>7}{row['correct']:>9}{row['accuracy']:>10.1%}")
    print(f"{report.clips} clips in {report.seconds:.1f} s")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="demo", help="'demo' (the bundled model) or a model folder")
    parser.add_argument("--n", type=int, default=200, help="held-out clips; every question of each is asked")
    parser.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    parser.add_argument("--dtype", default="auto", choices=("auto", "float32", "bfloat16", "float16", "fp8"),
                        help="fp8: the language model's linear layers quantized on load")
    parser.add_argument("--graphs", action="store_true", help="encode through the CUDA-graph encoder (CUDA only)")
    parser.add_argument("--pruning", default="off", help="off, auto, or the share of video tokens to prune")
    parser.add_argument("--kv-cache", default="auto", choices=KV_CACHE_DTYPES,
                        help="fp8: the decoder's keys and values in e4m3 with a scale per token and head")
    parser.add_argument("--json", type=Path, default=None, help="also write the report, answers included, here")
    parser.add_argument("--same-answers-as", type=Path, default=None,
                        help="an earlier --json report: count the answers that are the same word for word")
    args = parser.parse_args(argv)
    report = evaluate(
        ModelSettings(source=args.model, device=args.device, dtype=args.dtype),
        EncoderSettings(use_graphs=args.graphs),
        clips=args.n,
        pruning=args.pruning,
        decoding=DecodingSettings(kv_cache_dtype=args.kv_cache),
    )
    print_report(report)
    summary = {k: v for k, v in report.to_json().items() if k != "answers"}
    print(json.dumps(summary))
    if args.json:
        args.json.write_text(json.dumps(report.to_json(), indent=1) + "\n")
    if args.same_answers_as:
        same, both = same_answers(report, json.loads(args.same_answers_as.read_text(encoding="utf-8")))
        print(f"{same} of {both} answers word for word as in {args.same_answers_as}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
