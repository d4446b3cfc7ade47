"""Video token pruning through the real engine: the prefill of a long clip pruned against unpruned,
in one process, with the encoder's graph hits of both.

Loads the random-weight checkpoint ``memory_bench`` writes (Qwen3-VL at the 2B or 8B shapes, in
``--cache``) through :class:`~framewise.core.backends.local.engine.Engine` at the default settings
(encoder and decode graphs on), with the sampling settings raised to ``--frames`` frames and a
budget of ``--video-tokens`` video tokens (default: the family's most frames, and its most tokens
up to 65,536). One synthetic clip of that many random frames, at the size the family samples a
1280x720 clip to, is opened with :meth:`~Engine.open_frames` and asked one question, with
``sampling.pruning`` off and at each ``--rates``, taking turns, ``--repeats`` times after one
warm-up round. Opening the clip again each time makes every question prefill the whole prompt.

Random frames change everywhere, so pruning keeps exactly the share its rate leaves (the first
frame pair whole); the prefill's time then depends on the tokens alone, as on a real clip with as
many kept. Per setting: the video tokens before and after, the prompt's tokens, the prefill's
milliseconds (``DecoderStats.prefill_ms``; median, min, max) and the time to the first token, the
encoder's passes, their budgets and graph hits (each clip must be one hit, with the same passes
whatever the rate), and the prefill's time as a ratio of the unpruned one.

Writes ``pruning_bench.json`` and ``pruning_bench.md`` under ``--out``.

    python3 benchmarks/pruning_bench.py --size 8B --dtype fp8 --out results/pruning          # the long clip
    python3 benchmarks/pruning_bench.py --size tiny --device cpu --dtype float32 --frames 8 \\
        --video-tokens 960 --repeats 1 --out /tmp/pruning                                 # CPU smoke test
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch

BENCHMARKS = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCHMARKS.parent))
sys.path.insert(0, str(BENCHMARKS))

from memory_bench import QUESTION, TOWER_SIZES, ensure_checkpoint, synthetic_clip  # noqa: E402
from framewise.core.backends.local.engine import Engine  # noqa: E402
from framewise.core.events import EncodeDone  # noqa: E402
from framewise.core.families.qwen3_vl.limits import QWEN3_VL_LIMITS  # noqa: E402
from framewise.core.model_source import family_limits_of  # noqa: E402
from framewise.core.settings import AppSettings  # noqa: E402

MOST_VIDEO_TOKENS = 65_536  # the default budget's cap: a 64k-token clip, issue 43's long-clip target


def bench_settings(args: argparse.Namespace, checkpoint: Path) -> AppSettings:
    """The defaults with the run's model, its long clip's sampling bounds and short answers."""
    limits = family_limits_of(str(checkpoint))
    assert limits is not None, f"{checkpoint} names no known family"
    tokens = args.video_tokens or min(limits.max_clip_pixels // limits.pixels_per_video_token, MOST_VIDEO_TOKENS)
    frames = args.frames or limits.max_frames
    return (
        AppSettings()
        .replace("model", source=str(checkpoint), device=args.device, dtype=args.dtype)
        .replace("sampling", max_frames=frames, max_pixels=tokens * limits.pixels_per_video_token)
        .replace("generation", max_new_tokens=args.new_tokens)
        .validate(limits)
    )


def one_question(engine: Engine, settings: AppSettings, pruning: str, clip: tuple[Any, list[float]]) -> dict[str, Any]:
    """The clip opened afresh with ``pruning`` and asked one question: what encoding it and the
    prefill reported."""
    engine.apply_settings(settings.replace("sampling", pruning=pruning))
    frames, times = clip
    encoded: EncodeDone = engine.open_frames(frames, times, f"{len(times)} synthetic frames")
    done = engine.ask(QUESTION)
    decoder = done.stats.decoder
    assert decoder is not None
    return {
        "video_tokens_before": encoded.video_tokens_before,
        "video_tokens_after": encoded.video_tokens_after,
        "prompt_tokens": decoder.prompt_tokens,
        "prefill_ms": decoder.prefill_ms,
        "first_token_ms": done.stats.time_to_first_token_ms,
        "encode_ms": encoded.encode_ms,
        "passes": [(chunk.patches, chunk.budget, chunk.graph_hit) for chunk in encoded.chunks],
        "graph_hit": encoded.graph_hit,
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Every setting, taking turns, after one warm-up round; the runs of each and their summary."""
    checkpoint = ensure_checkpoint(args.size, Path(args.cache))
    settings = bench_settings(args, checkpoint)
    engine = Engine(settings)
    info = engine.load()
    clip = synthetic_clip(engine, settings, settings.sampling.max_frames)
    prunings = ["off", *args.rates.split(",")]
    runs: dict[str, list[dict[str, Any]]] = {pruning: [] for pruning in prunings}
    for round_index in range(args.repeats + 1):
        for pruning in prunings:
            result = one_question(engine, settings, pruning, clip)
            if round_index:  # the first round warms up
                runs[pruning].append(result)
    metrics = engine.metrics.snapshot()
    return {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "device": torch.cuda.get_device_name() if args.device == "cuda" else args.device,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "model": f"Qwen3-VL {args.size} shapes, random weights, {info.precision}",
        "graphs": info.graphs_enabled,
        "context_tokens": info.decoder.context_tokens if info.decoder else None,
        "clip": {"frames": len(clip[1]), "height": clip[0].shape[1], "width": clip[0].shape[2]},
        "encoder_items": metrics.items,
        "encoder_item_hits": metrics.item_hits,
        "summary": summarize(runs),
        "runs": runs,
    }


def summarize(runs: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Per setting: its tokens, the prefill's median, min and max milliseconds and its ratio to the
    unpruned median, the median time to the first token, and whether every clip's encoder passes
    were those of the unpruned clip and all graph hits."""
    unpruned = statistics.median(result["prefill_ms"] for result in runs["off"])
    reference_passes = runs["off"][0]["passes"]
    summary = {}
    for pruning, results in runs.items():
        prefill = [result["prefill_ms"] for result in results]
        summary[pruning] = {
            "video_tokens": f"{results[0]['video_tokens_before']} -> {results[0]['video_tokens_after']}",
            "prompt_tokens": results[0]["prompt_tokens"],
            "prefill_ms_median": statistics.median(prefill),
            "prefill_ms_min": min(prefill),
            "prefill_ms_max": max(prefill),
            "prefill_ratio": statistics.median(prefill) / unpruned,
            "first_token_ms_median": statistics.median(result["first_token_ms"] for result in results),
            "same_passes_as_unpruned": all(result["passes"] == reference_passes for result in results),
            "all_graph_hits": all(result["graph_hit"] for result in results),
        }
    return summary


def markdown(payload: dict[str, Any]) -> str:
    clip = payload["clip"]
    lines = [
        f"{payload['date']}, {payload['device']}, torch {payload['torch']}: `{payload['command']}`",
        "",
        f"{payload['model']}; a clip of {clip['frames']:,} random frames of {clip['width']}x{clip['height']}; "
        f"encoder graphs {'on' if payload['graphs'] else 'off'}, {payload['encoder_item_hits']} of "
        f"{payload['encoder_items']} clips encoded as graph hits; context {payload['context_tokens']:,} tokens.",
        "",
        "| pruning | video tokens | prompt tokens | prefill ms (median, min–max) | ÷ unpruned | first token ms | "
        "passes as unpruned | graph hits |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for pruning, row in payload["summary"].items():
        lines.append(
            f"| {pruning} | {row['video_tokens']} | {row['prompt_tokens']:,} | {row['prefill_ms_median']:.1f} "
            f"({row['prefill_ms_min']:.1f}–{row['prefill_ms_max']:.1f}) | {row['prefill_ratio']:.2f} | "
            f"{row['first_token_ms_median']:.0f} | {'yes' if row['same_passes_as_unpruned'] else 'NO'} | "
            f"{'all' if row['all_graph_hits'] else 'NOT all'} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", default="8B", choices=sorted(TOWER_SIZES))
    parser.add_argument("--dtype", default="fp8", help="model.dtype")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--frames", type=int, default=0, help=f"frames of the clip (0: the family's most, "
                        f"{QWEN3_VL_LIMITS.max_frames:,} for Qwen3-VL here)")
    parser.add_argument("--video-tokens", type=int, default=0,
                        help=f"the clip's video token budget (0: the family's most, at most {MOST_VIDEO_TOKENS:,})")
    parser.add_argument("--rates", default="0.75", help="comma-separated pruning rates to compare with off")
    parser.add_argument("--repeats", type=int, default=5, help="rounds after the warm-up round")
    parser.add_argument("--new-tokens", type=int, default=8, help="tokens of each answer at most")
    parser.add_argument("--out", default="results/pruning")
    parser.add_argument("--cache", default=str(Path.home() / ".cache" / "framewise-bench"),
                        help="where memory_bench keeps the random checkpoint")
    args = parser.parse_args(argv)
    payload = run(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "pruning_bench.json").write_text(json.dumps(payload, indent=1))
    table = markdown(payload)
    (out / "pruning_bench.md").write_text(table)
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
