"""One line per GPU target of issues 41, 42 and 43, from what ``benchmarks/targets.sh`` wrote under
OUT: the value measured, the target, and met, MISSED, or n/a with why (a step that failed, ran out
of time or was not run). Also writes the lines as a table to ``OUT/targets.md``.

Issue 41's lines compare the new tree with the old one measured in the same call (new ÷ old): a
new tree at most 3 % slower meets them.

    python3 benchmarks/targets_summary.py OUT
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

GIB = 2**30
QWEN3_5_9B, QWEN3_VL_8B = "3.5-9B", "8B"
NAMES = {QWEN3_5_9B: "Qwen3.5-9B", QWEN3_VL_8B: "Qwen3-VL-8B"}
DTYPES = ("bfloat16", "fp8")
# Issue 42: decode at most these multiples of the weight-read floor.
FLOOR_LIMITS = {"bfloat16": 1.35, "fp8": 1.4}
# Issue 42: keys and values a token takes in bf16 (KiB).
KV_KIB = {QWEN3_5_9B: 32, QWEN3_VL_8B: 144}
# Fresh-process memory: (size, memory_bench label) -> (peak GiB at most, peak over steady at most or None).
MEMORY_LIMITS = {
    (QWEN3_5_9B, "768"): (12.0, 1.05),
    (QWEN3_VL_8B, "768"): (12.5, 1.1),
    (QWEN3_VL_8B, "768-kvfp8"): (12.5, 1.1),
    (QWEN3_VL_8B, "2048-kvfp8"): (16.0, None),
    (QWEN3_5_9B, "2048-kvfp8"): (12.0, None),
}
MEMORY_WORDS = {
    "768": "768 frames at the full pixel budget",
    "768-kvfp8": "768 frames at the full pixel budget, FP8 KV cache",
    "2048-kvfp8": "2,048 frames, 64k tokens, FP8 KV cache",
}
SAME_AS_BEFORE = 1.03  # issue 41: new ÷ old at most


@dataclass(frozen=True)
class Line:
    """One target: ``met`` None when it was not measured (``shown`` then says why)."""

    target: str
    shown: str
    limit: str
    met: bool | None

    @property
    def verdict(self) -> str:
        return {True: "met", False: "MISSED", None: "n/a"}[self.met]


def at_most(target: str, value: float | None, limit: float, unit: str, why: str = "not measured",
            digits: int = 2) -> Line:
    """``value`` against an upper ``limit``; n/a with ``why`` when there is no value."""
    if value is None:
        return Line(target, why, f"≤ {limit:g}{unit}", None)
    return Line(target, f"{value:.{digits}f}{unit}", f"≤ {limit:g}{unit}", value <= limit)


def load(out: Path, step: str, name: str) -> Any:
    """The JSON file ``name`` a step wrote under ``out/step``, or None."""
    path = out / step / name
    return json.loads(path.read_text()) if path.is_file() else None


def dig(value: Any, *keys: Any) -> Any:
    """``value[k0][k1]...``, or None where any of it is missing."""
    for key in keys:
        if isinstance(value, dict) and key in value:
            value = value[key]
        elif isinstance(value, list) and isinstance(key, int) and -len(value) <= key < len(value):
            value = value[key]
        else:
            return None
    return value


def step_status(out: Path, step: str) -> str:
    """How a step ended, in words, from ``out/steps.tsv`` and the last line of its log."""
    statuses = {}
    table = out / "steps.tsv"
    if table.is_file():
        for line in table.read_text().splitlines():
            name, code, seconds = (line.split("\t") + ["", ""])[:3]
            statuses[name] = (code, seconds)
    if step not in statuses:
        return f"step {step} did not run"
    code, seconds = statuses[step]
    if code == "0":
        return f"step {step} ended without it"
    log = out / step / "log.txt"
    last = log.read_text(errors="replace").strip().splitlines()[-1:] if log.is_file() else []
    reason = {"124": "out of time", "skipped": "skipped: no time left",
              "checkpoints": "not run: the random checkpoints were not written"}.get(code, f"failed (exit {code})")
    return f"step {step} {reason} after {seconds} s" + (f": {last[0][:160]}" if last else "")


def _decode_entry(decode: Any, size: str, dtype: str, *keys: str) -> Any:
    result = next((item for item in dig(decode, "results") or [] if item.get("size") == size), None)
    return dig(result, "dtypes", dtype, *keys)


def decode_lines(out: Path) -> Iterator[Line]:
    """Issue 42: decode against the floor (both families), the 9B's first question, the 768-frame
    prefill of the 9B against the 8B's, keys and values a token."""
    decode, why = load(out, "decode", "decode_bench.json"), step_status(out, "decode")
    for size in (QWEN3_5_9B, QWEN3_VL_8B):
        for dtype in DTYPES:
            ratio = _decode_entry(decode, size, dtype, "modes", "framewise", "floor_ratio")
            yield at_most(f"{NAMES[size]} {dtype} decode ÷ weight-read floor", ratio, FLOOR_LIMITS[dtype], "×", why)
    for dtype in DTYPES:
        ttft = _decode_entry(decode, QWEN3_5_9B, dtype, "modes", "framewise", "ttft_first_median_ms")
        yield at_most(f"Qwen3.5-9B {dtype} first question, 32 frames: TTFT median", ttft, 50, " ms", why, 1)
    for dtype in DTYPES:
        ours, theirs = (_decode_entry(decode, size, dtype, "long_clip", "prefill_median_ms")
                        for size in (QWEN3_5_9B, QWEN3_VL_8B))
        ratio = ours / theirs if ours is not None and theirs else None
        yield at_most(f"768-frame prefill, {dtype}: Qwen3.5-9B ÷ Qwen3-VL-8B", ratio, 1.0, "×", why)
    for size in (QWEN3_5_9B, QWEN3_VL_8B):
        measured = _decode_entry(decode, size, "bfloat16", "modes", "framewise", "kv_bytes_per_token")
        target = f"{NAMES[size]} keys and values a token, bf16"
        if measured is None:
            yield Line(target, why, f"{KV_KIB[size]} KiB expected", None)
        else:
            yield Line(target, f"{measured / 1024:g} KiB", f"{KV_KIB[size]} KiB expected", measured == KV_KIB[size] * 1024)


def _memory_runs(out: Path) -> dict[tuple[str, str], dict[str, Any]]:
    runs = {}
    for path in sorted(out.glob("memory/*/runs/*.json")):
        run = json.loads(path.read_text())
        runs[(run["spec"]["size"], run["spec"].get("label", ""))] = run
    return runs


def memory_lines(out: Path) -> Iterator[Line]:
    """Issues 42 and 43: each fresh process's peak reserved memory, and its peak over its steady state."""
    runs, why = _memory_runs(out), step_status(out, "memory")
    for (size, label), (limit, steady_limit) in MEMORY_LIMITS.items():
        run = runs.get((size, label))
        target = f"{NAMES[size]} FP8, {MEMORY_WORDS[label]}: fresh-process peak reserved"
        reason = f"its run failed: {run['error'][:160]}" if run and "error" in run else why
        steady, peak = dig(run, "after_load", "reserved"), dig(run, "after_clip", "max_reserved")
        yield at_most(target, None if peak is None else peak / GIB, limit, " GiB", reason)
        if steady_limit is not None:
            ratio = peak / steady if peak is not None and steady else None
            yield at_most(f"{NAMES[size]} FP8, {MEMORY_WORDS[label]}: peak ÷ reserved after load", ratio,
                          steady_limit, "×", reason, 3)


def stop_and_pruning_lines(out: Path) -> Iterator[Line]:
    """Issue 43: Stop inside a 64k-token prefill, the pruned prefill against the unpruned one, and
    the encoder's graph counts with pruning on."""
    prefill, why = load(out, "stop_prune", "prefill_chunks.json"), step_status(out, "stop_prune")
    stops = [stop for stop in dig(prefill, "rows", 0, "stops") or [] if stop["stopped"]]
    worst = max((stop["to_return_ms"] for stop in stops), default=None)
    idle = max((stop["to_idle_ms"] for stop in stops), default=None)
    line = at_most("Qwen3-VL-8B FP8, 64k-token prefill: Stop answered (worst of the stops)", worst, 50, " ms", why, 1)
    yield Line(line.target, line.shown + (f" ({len(stops)} stops; device idle after {idle:.1f} ms)" if stops else ""),
               line.limit, line.met)
    yield at_most("Qwen3-VL-8B FP8, 64k tokens pruned at 0.75: prefill ÷ unpruned", dig(prefill, "pruning", "ratio"),
                  0.35, "×", why)
    check = dig(load(out, "encoder", "encoder_bench.json"), "towers", 0, "pruning")
    target = "encoder graph hits, 2,048-frame clip, pruning 0.75 against off"
    if check is None:
        yield Line(target, step_status(out, "encoder"), "equal", None)
    else:
        counts = " against ".join(f"{check[label]['items_replayed']} hits, {check[label]['items_eager']} eager"
                                  for label in ("pruned", "unpruned"))
        yield Line(target, counts, "equal", check["graph_counts_equal"])


def _ratio_line(target: str, new: float | None, old: float | None, why: str) -> Line:
    ratio = new / old if new is not None and old else None
    line = at_most(target, ratio, SAME_AS_BEFORE, "×", why, 3)
    if ratio is None:
        return line
    return Line(line.target, f"{line.shown} ({new:.2f} against {old:.2f})", line.limit, line.met)


def before_and_after_lines(out: Path) -> Iterator[Line]:
    """Issue 41: the new tree against the old one, decode --quick and the 8B encoder."""
    new, old = load(out, "decode", "decode_bench.json"), load(out, "decode_old", "decode_bench.json")
    why = f"{step_status(out, 'decode')}; {step_status(out, 'decode_old')}"
    for dtype in DTYPES:
        for key, words in (("token_ms_mean", "ms a token"), ("ttft_first_median_ms", "first question TTFT median")):
            values = [_decode_entry(tree, QWEN3_VL_8B, dtype, "modes", "framewise", key) for tree in (new, old)]
            yield _ratio_line(f"issue 41: 8B {dtype} {words}, new ÷ old", *values, why)
    new, old = load(out, "encoder", "encoder_bench.json"), load(out, "encoder_old", "encoder_bench.json")
    why = f"{step_status(out, 'encoder')}; {step_status(out, 'encoder_old')}"
    for workload in dig(old, "towers", 0, "workloads") or {"video 16x448x448": None}:
        values = [dig(tree, "towers", 0, "workloads", workload, "fused", "mean_ms") for tree in (new, old)]
        yield _ratio_line(f"issue 41: 8B encoder, {workload}, fused mean, new ÷ old", *values, why)
    values = [dig(tree, "towers", 0, "stream", "fused", "mean_ms") for tree in (new, old)]
    yield _ratio_line("issue 41: 8B encoder, random stream, fused mean, new ÷ old", *values, why)


SECTIONS: tuple[Callable[[Path], Iterator[Line]], ...] = (
    decode_lines, memory_lines, stop_and_pruning_lines, before_and_after_lines,
)


def summarize(out: Path) -> list[Line]:
    return [line for section in SECTIONS for line in section(out)]


def markdown(lines: list[Line]) -> str:
    rows = ["| target | measured | target | result |", "|---|---|---|---|"]
    rows += [f"| {line.target} | {line.shown} | {line.limit} | {line.verdict} |" for line in lines]
    return "\n".join(rows) + "\n"


def main(argv: list[str] | None = None) -> int:
    arguments = sys.argv[1:] if argv is None else argv
    if len(arguments) != 1:
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    out = Path(arguments[0])
    lines = summarize(out)
    for line in lines:
        print(f"{line.verdict:6} {line.target}: {line.shown} (target {line.limit})")
    (out / "targets.md").write_text(markdown(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
