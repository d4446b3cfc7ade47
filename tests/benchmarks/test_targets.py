"""benchmarks/targets.sh and targets_summary.py on the CPU: the script's own command lines run at
tiny shapes (tiny_python.py), each step logged and timed, a failed step leaving the others to
run, the old tree run from its folder against its own install, the run's time budget kept; the
summary's verdicts from results of known values."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import targets_summary
from tests.conftest import REPO_ROOT

SCRIPT = REPO_ROOT / "benchmarks" / "targets.sh"
GIB = 2**30


def tiny_python(folder: Path) -> Path:
    """An executable that runs a benchmark through tiny_python.py with this interpreter."""
    wrapper = folder / "python"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{REPO_ROOT / "tests/benchmarks/tiny_python.py"}" "$@"\n')
    wrapper.chmod(0o755)
    return wrapper


def run_targets(tmp_path: Path, *steps: str, **environment: str) -> tuple[Path, str]:
    out = tmp_path / "out"
    env = {**os.environ, "PYTHON": str(tiny_python(tmp_path)), "CACHE": str(tmp_path / "cache"), **environment}
    finished = subprocess.run(["bash", str(SCRIPT), str(out), *steps], env=env, capture_output=True, text=True,
                              timeout=600)
    assert finished.returncode == 0, finished.stderr[-2000:]
    return out, finished.stdout


def steps_table(out: Path) -> dict[str, str]:
    return {line.split("\t")[0]: line.split("\t")[1] for line in (out / "steps.tsv").read_text().splitlines()}


def test_every_step_runs_its_benchmark_and_a_failed_one_leaves_the_rest(tmp_path: Path) -> None:
    out, printed = run_targets(tmp_path, "decode", "stop_prune", "encoder", "memory")

    assert steps_table(out) == {"decode": "0", "stop_prune": "0", "encoder": "2", "memory": "0"}
    decode = json.loads((out / "decode" / "decode_bench.json").read_text())
    assert [result["size"] for result in decode["results"]] == ["tiny", "3.5-tiny"]
    assert all("long_clip" in run for result in decode["results"] for run in result["dtypes"].values())
    prefill = json.loads((out / "stop_prune" / "prefill_chunks.json").read_text())
    assert len(prefill["rows"][0]["stops"]) == 3 and prefill["pruning"]["rate"] == 0.75
    assert "needs a CUDA GPU" in (out / "encoder" / "log.txt").read_text()
    runs = {path.name: json.loads(path.read_text()) for path in out.glob("memory/*/runs/*.json")}
    assert sorted(runs) == ["3.5-tiny-fp8-long-1-2048-kvfp8.json", "3.5-tiny-fp8-long-1-768.json",
                            "tiny-fp8-long-1-2048-kvfp8.json", "tiny-fp8-long-1-768-kvfp8.json",
                            "tiny-fp8-long-1-768.json"]
    assert "error" not in runs["tiny-fp8-long-1-768.json"]
    assert runs["tiny-fp8-long-1-768.json"]["clip"]["frames"] == 8
    # The FP8 cache's setting, where the app has it, reached the run; where it has not, the run says so.
    wide = runs["tiny-fp8-long-1-2048-kvfp8.json"]
    assert "kv_cache_dtype" in wide.get("error", "kv_cache_dtype")
    assert "n/a    encoder graph hits" in printed and "step encoder failed (exit 2)" in printed
    assert (out / "targets.md").read_text().startswith("| target | measured | target | result |")


def test_the_old_tree_runs_from_its_folder_against_its_own_install(tmp_path: Path) -> None:
    """As the real scripts do, the fake one puts its repository's root first on sys.path, where the
    old tree's source folder framewise/ sits beside benchmarks/: the package it imports must still
    be the old tree's install, not that folder."""
    baseline, site = tmp_path / "baseline", tmp_path / "site"
    for package in (baseline / "framewise", site / "framewise"):
        package.mkdir(parents=True)
        (package / "__init__.py").write_text(f"WHERE = {str(package.parent)!r}\n")
    (baseline / "tests").mkdir()
    (baseline / "benchmarks").mkdir()
    (baseline / "benchmarks" / "decode_bench.py").write_text(
        "import json, os, sys\n"
        "from pathlib import Path\n"
        "sys.path.insert(0, str(Path(__file__).resolve().parents[1]))\n"
        "import framewise\n"
        "out = sys.argv[sys.argv.index('--out') + 1]\n"
        "os.makedirs(out, exist_ok=True)\n"
        "keys = ('PYTHONPATH', 'FRAMEWISE_CACHE_DIR')\n"
        "seen = {'cwd': os.getcwd(), 'argv': sys.argv[1:], 'framewise': framewise.WHERE,\n"
        "        'tests': os.path.isdir('tests'), **{key: os.environ.get(key) for key in keys}}\n"
        "json.dump(seen, open(os.path.join(out, 'seen.json'), 'w'))\n"
    )
    out, _ = run_targets(tmp_path, "decode_old", BASELINE=str(baseline), OLD_SITE=str(site))

    seen = json.loads((out / "decode_old" / "seen.json").read_text())
    assert steps_table(out) == {"decode_old": "0"}
    assert seen["framewise"] == str(site) and seen["PYTHONPATH"].split(":")[0] == str(site)
    assert seen["tests"]  # the old tree's tests/ beside its benchmarks, for the helpers they import
    assert seen["FRAMEWISE_CACHE_DIR"] == str(tmp_path / "cache" / "compile-old")
    assert seen["argv"][0] == "--quick"


def test_steps_past_the_budget_are_skipped_and_said_so(tmp_path: Path) -> None:
    out, printed = run_targets(tmp_path, "decode", "stop_prune", BUDGET_S="20")

    assert steps_table(out) == {"decode": "skipped", "stop_prune": "skipped"}
    assert "step decode skipped: no time left" in printed


def _decode_result(size: str, floor: dict[str, float], ttft: float, prefill: float, kv: int, token_ms: float) -> dict:
    def run(dtype: str) -> dict:
        mode = {"floor_ratio": floor[dtype], "ttft_first_median_ms": ttft, "kv_bytes_per_token": kv,
                "token_ms_mean": token_ms}
        return {"modes": {"framewise": mode}, "long_clip": {"prefill_median_ms": prefill}}

    return {"size": size, "dtypes": {"bfloat16": run("bfloat16"), "fp8": run("fp8")}}


def _write(out: Path, step: str, name: str, data: dict) -> None:
    (out / step).mkdir(parents=True, exist_ok=True)
    (out / step / name).write_text(json.dumps(data))


def test_the_summary_judges_each_target(tmp_path: Path) -> None:
    out = tmp_path
    _write(out, "decode", "decode_bench.json", {"results": [
        _decode_result("8B", {"bfloat16": 1.2, "fp8": 1.45}, 40.0, 1000.0, 144 * 1024, 6.0),
        _decode_result("3.5-9B", {"bfloat16": 1.3, "fp8": 1.39}, 55.0, 900.0, 32 * 1024, 6.5),
    ]})
    _write(out, "decode_old", "decode_bench.json", {"results": [
        _decode_result("8B", {"bfloat16": 1.2, "fp8": 1.45}, 40.0, 1000.0, 144 * 1024, 5.7)]})
    run = {"spec": {"size": "8B", "label": "768"}, "after_load": {"reserved": 11 * GIB},
           "after_clip": {"max_reserved": 12 * GIB}}
    _write(out, "memory/8b-768/runs", "8B-fp8-long-1-768.json", run)
    _write(out, "stop_prune", "prefill_chunks.json", {
        "rows": [{"stops": [{"stopped": True, "to_return_ms": 12.0, "to_idle_ms": 30.0},
                            {"stopped": True, "to_return_ms": 61.0, "to_idle_ms": 70.0},
                            {"stopped": False, "to_return_ms": None, "to_idle_ms": None}]}],
        "pruning": {"ratio": 0.3}})
    (out / "steps.tsv").write_text("memory\t0\t80\n")

    lines = {line.target: line for line in targets_summary.summarize(out)}

    def verdict(target: str) -> str:
        return lines[target].verdict

    assert verdict("Qwen3.5-9B bfloat16 decode ÷ weight-read floor") == "met"
    assert verdict("Qwen3-VL-8B fp8 decode ÷ weight-read floor") == "MISSED"
    assert verdict("Qwen3.5-9B fp8 first question, 32 frames: TTFT median") == "MISSED"
    assert lines["768-frame prefill, bfloat16: Qwen3.5-9B ÷ Qwen3-VL-8B"].shown == "0.90×"
    assert verdict("Qwen3.5-9B keys and values a token, bf16") == "met"
    assert verdict("Qwen3-VL-8B FP8, 768 frames at the full pixel budget: fresh-process peak reserved") == "met"
    assert verdict("Qwen3-VL-8B FP8, 768 frames at the full pixel budget: peak ÷ reserved after load") == "met"
    missing = lines["Qwen3.5-9B FP8, 768 frames at the full pixel budget: fresh-process peak reserved"]
    assert missing.verdict == "n/a" and missing.shown == "step memory ended without it"
    stop = lines["Qwen3-VL-8B FP8, 64k-token prefill: Stop answered (worst of the stops)"]
    assert stop.verdict == "MISSED" and stop.shown.startswith("61.0 ms (2 stops; device idle after 70.0 ms)")
    assert verdict("Qwen3-VL-8B FP8, 64k tokens pruned at 0.75: prefill ÷ unpruned") == "met"
    slower = lines["issue 41: 8B bfloat16 ms a token, new ÷ old"]
    assert slower.verdict == "MISSED" and slower.shown == "1.053× (6.00 against 5.70)"
    assert verdict("issue 41: 8B fp8 first question TTFT median, new ÷ old") == "met"
    assert lines["encoder graph hits, 2,048-frame clip, pruning 0.75 against off"].shown == "step encoder did not run"


@pytest.mark.parametrize(("value", "met"), [(11.99, True), (12.0, True), (12.01, False)])
def test_a_limit_is_met_up_to_and_including_it(value: float, met: bool) -> None:
    assert targets_summary.at_most("peak", value, 12.0, " GiB").met is met
