"""benchmarks/decode_bench.py end to end on the CPU with the tiny shapes (the GPU runs the real
sizes): the first question timed again, each time from an empty cache, into the JSON and table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import decode_bench


def test_the_first_question_is_timed_again_from_an_empty_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    reused: list[int] = []
    ask = decode_bench.FramewiseRunner.ask

    def recording_ask(runner, ids, new_tokens):
        answer = ask(runner, ids, new_tokens)
        reused.append(runner.last.prefix_tokens_reused)
        return answer

    monkeypatch.setattr(decode_bench.FramewiseRunner, "ask", recording_ask)
    arguments = ["--sizes", "tiny", "--device", "cpu", "--dtypes", "float32", "--modes", "framewise",
                 "--new-tokens", "2", "--follow-ups", "1", "--first-repeats", "3", "--out", str(tmp_path)]
    assert decode_bench.main(arguments) == 0

    entry = json.loads((tmp_path / "decode_bench.json").read_text())["results"][0]["dtypes"]["float32"]["modes"]["framewise"]
    repeats = entry["ttft_first_repeats_ms"]
    assert len(repeats) == 3 and min(repeats) > 0
    assert min(repeats) <= entry["ttft_first_median_ms"] <= max(repeats)
    assert reused[-4] > 0  # the follow-up reused the first question's cache ...
    assert reused[-3:] == [0, 0, 0]  # ... and each repeat prefilled the whole question again
    row = next(line for line in (tmp_path / "decode_bench.md").read_text().splitlines()
               if line.startswith("| tiny | float32 | framewise |"))
    assert f"| {entry['ttft_first_median_ms']:.1f} ({min(repeats):.1f}–{max(repeats):.1f}) |" in row
