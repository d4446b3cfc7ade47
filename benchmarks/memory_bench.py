"""Memory and load time of the real engine per weight dtype, each run in a fresh process.

Writes once (cached in ``--cache``; ``--prepare`` only writes it) a random-weight bf16 checkpoint
of Qwen3-VL at the 2B or 8B shapes, or of Qwen3.5 at the 0.8B or 9B ones (``3.5-0.8B``,
``3.5-9B``), language model and vision tower, with the real vocabulary (151,936 or 248,320 tokens)
and the demo model's tokenizer and chat template, which the loader's checks accept. Then, per dtype
(``bfloat16``; ``fp8``: the language model's linear layers quantized while loading), each in a
new process through :class:`~framewise.core.backends.local.engine.Engine` at the default settings (graphs on):

- ``short`` run, twice (a first start with empty compile caches, a second start with the
  caches the first left): load, then a 32-frame 720p clip opened and asked about;
- ``long`` run: the sampling settings raised to Qwen3-VL's released preprocessing (768 frames,
  24,576 merge blocks: the context grows to hold it), load, then a 768-frame 720p clip opened and
  asked about; ``--long-frames 2048 --long-pixels N`` measures a longer clip.

``--scenarios long`` runs only the long run; ``--set section.field=value`` (repeatable) changes a
further setting in every run (``decoding.kv_cache_dtype=fp8``, ``sampling.pruning=0.75``);
``--label`` names such runs apart; ``--compile-cache`` shares compile caches with other processes;
``--peak-owners N`` records the allocator's history and names the N largest owners of what was
allocated and reserved at the load's peak and at the clip's (:mod:`peak_owners`).

After the load and after each clip it records ``torch.cuda.max_memory_reserved()`` (the peak so
far), ``torch.cuda.memory_reserved()`` and the device's used memory (``torch.cuda.mem_get_info``:
what other programs see, the CUDA context included); the load's seconds (weights, encoder graphs,
decoder graphs) and what the engine measured it holds (:class:`~framewise.core.memory_plan.HeldMemory`).
Clips are synthetic frames handed to :meth:`~framewise.core.backends.local.engine.Engine.open_frames` at the
size the model family samples a 1280x720 clip to. Writes ``memory_bench.json`` (every run) and
``memory_bench.md`` (the table) under ``--out``; each run's JSON stays under ``--out/runs`` and
the table is made from every run there, so dtypes may be run by separate commands (one after the
other: run commands at once with an ``--out`` each; ``torch.cuda.max_memory_reserved`` is the
process's own, but the device's used memory then counts the others). Prompts are
prefilled in chunks of ``--prefill-chunk-tokens`` (``decoding.prefill_chunk_tokens``); compare
chunk sizes with one ``--out`` each.

    python3 benchmarks/memory_bench.py --size 8B --out results/memory          # bf16 and fp8
    python3 benchmarks/memory_bench.py --size 8B --dtypes fp8 --out results/memory
    python3 benchmarks/memory_bench.py --size 8B --dtypes fp8 --prefill-chunk-tokens 2048 --out results/memory-2048
    python3 benchmarks/memory_bench.py --size 8B --dtypes fp8 --scenarios long --long-frames 2048 \
        --long-pixels 134217728 --set decoding.kv_cache_dtype=fp8 --label 2048-kvfp8 --out results/memory-2048
    python3 benchmarks/memory_bench.py --size tiny --device cpu --short-frames 4 --long-frames 8 \\
        --long-pixels 491520 --new-tokens 4 --out /tmp/memory                     # CPU smoke test
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

BENCHMARKS = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCHMARKS.parent))
sys.path.insert(0, str(BENCHMARKS))

from safetensors.torch import save_file  # noqa: E402
from transformers import (  # noqa: E402
    AutoTokenizer,
    Qwen3_5Config,
    Qwen3_5ForConditionalGeneration,
    Qwen3VLForConditionalGeneration,
)

from decode_bench import QWEN3_5_SIZES, TEXT_SIZES, VOCAB, qwen3_5_text_config  # noqa: E402
from encoder_bench import TOWERS  # noqa: E402
from peak_owners import ALLOCATED, RESERVED, peak_owners  # noqa: E402
from framewise.core.backends.local.engine import Engine  # noqa: E402
from framewise.core.families.qwen3_vl.limits import QWEN3_VL_LIMITS  # noqa: E402
from framewise.core.model_source import DEMO_MODEL_DIR, family_limits_of  # noqa: E402
from framewise.core.memory_plan import GIB  # noqa: E402
from framewise.core.settings import PREFILL_CHUNK_TOKENS, AppSettings  # noqa: E402
from training import demo_model  # noqa: E402
from training.demo_model import build_demo_config, special_token_ids  # noqa: E402

# depth, hidden, heads, MLP, out hidden (the language model's width), deepstack layers; Qwen3.5's
# towers are Qwen3-VL's without deepstack layers (released configs)
TOWER_SIZES = {
    **TOWERS,
    "tiny": (2, 64, 2, 128, TEXT_SIZES["tiny"][0], (1,)),
    "3.5-0.8B": (12, 768, 12, 3072, QWEN3_5_SIZES["3.5-0.8B"][0], ()),
    "3.5-9B": (27, 1152, 16, 4304, QWEN3_5_SIZES["3.5-9B"][0], ()),
    "3.5-tiny": (2, 64, 2, 128, QWEN3_5_SIZES["3.5-tiny"][0], ()),
}
DEMO_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json")
SHARD_BYTES = 4 * 2**30
# Random values the checkpoint's matrices repeat (a prime count, so rows do not repeat in step);
# drawing every weight anew took most of a checkpoint's writing time.
RANDOM_POOL = 4_194_301
CLIP_HEIGHT, CLIP_WIDTH, CLIP_FPS = 720, 1280, 2.0
QUESTION = "What happens in the clip?"
# Allocator events kept for --peak-owners: a load and a 2,048-frame clip's prefill stay within it.
PEAK_TRACE_ENTRIES = 2_000_000


# ----------------------------------------------------------------------------- the checkpoint


def checkpoint_config(size: str) -> Any:
    """A config at ``size``'s shapes (a Qwen3-VL size, or a Qwen3.5 one) with the real vocabulary
    and the demo tokenizer's special token ids."""
    if size in QWEN3_5_SIZES:
        return _qwen3_5_checkpoint_config(size)
    hidden, intermediate, layers, heads, kv_heads, head_dim, tied = TEXT_SIZES[size]
    depth, vision_hidden, vision_heads, mlp, out_hidden, deepstack = TOWER_SIZES[size]
    assert out_hidden == hidden, f"{size}: the tower's output width must be the language model's"
    tokenizer = AutoTokenizer.from_pretrained(DEMO_MODEL_DIR)
    config = build_demo_config(
        VOCAB, special_token_ids(tokenizer), vision_hidden=vision_hidden, vision_heads=vision_heads,
        vision_intermediate=mlp, depth=depth, deepstack_visual_indexes=deepstack, text_hidden=hidden,
        text_intermediate=intermediate, text_layers=layers, text_heads=heads, text_kv_heads=kv_heads,
        head_dim=head_dim, max_position_embeddings=262144,
    )
    config.tie_word_embeddings = tied
    return config


def _qwen3_5_checkpoint_config(size: str) -> Qwen3_5Config:
    depth, vision_hidden, vision_heads, mlp, out_hidden, _ = TOWER_SIZES[size]
    ids = special_token_ids(AutoTokenizer.from_pretrained(DEMO_MODEL_DIR))
    text = {**qwen3_5_text_config(size), "pad_token_id": ids[demo_model.ENDOFTEXT], "eos_token_id": ids[demo_model.IM_END]}
    assert out_hidden == text["hidden_size"], f"{size}: the tower's output width must be the language model's"
    vision = {"depth": depth, "hidden_size": vision_hidden, "num_heads": vision_heads, "intermediate_size": mlp,
              "out_hidden_size": out_hidden, "num_position_embeddings": 2304}
    return Qwen3_5Config(
        text_config=text, vision_config=vision, tie_word_embeddings=text["tie_word_embeddings"],
        image_token_id=ids[demo_model.IMAGE_PAD], video_token_id=ids[demo_model.VIDEO_PAD],
        vision_start_token_id=ids[demo_model.VISION_START], vision_end_token_id=ids[demo_model.VISION_END],
    )


def ensure_checkpoint(size: str, cache: Path) -> Path:
    """The folder of ``size``'s random bf16 checkpoint under ``cache``, written when missing (a
    folder left half-written by an interrupted run is written again)."""
    family = "qwen3.5" if size in QWEN3_5_SIZES else "qwen3-vl"
    folder = cache / f"{family}-{size.removeprefix('3.5-')}-random-bf16"
    if (folder / "complete").is_file():
        return folder
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    config = checkpoint_config(size)
    config.save_pretrained(folder)
    for name in DEMO_FILES:
        shutil.copy(DEMO_MODEL_DIR / name, folder / name)
    write_random_weights(folder, config)
    (folder / "complete").touch()
    return folder


def write_random_weights(folder: Path, config: Any) -> None:
    """bf16 safetensors shards of random weights for every tensor ``config``'s model has (norm
    weights one, biases zero, the rest N(0, 0.02) values of one pool repeated), and their index;
    generated shard by shard, so the whole model is never in memory."""
    model_class = Qwen3_5ForConditionalGeneration if config.model_type == "qwen3_5" else Qwen3VLForConditionalGeneration
    with torch.device("meta"):
        shapes = {name: tensor.shape for name, tensor in model_class(config).state_dict().items()}
    if config.tie_word_embeddings:
        shapes.pop("lm_head.weight")
    pool = (torch.randn(RANDOM_POOL, generator=torch.Generator().manual_seed(0)) * 0.02).to(torch.bfloat16)
    weight_map: dict[str, str] = {}
    shard: dict[str, torch.Tensor] = {}
    shard_bytes, total = 0, 0
    for name, shape in shapes.items():
        shard[name] = random_tensor(name, shape, pool, start=total + shard_bytes)
        shard_bytes += shard[name].nbytes
        if shard_bytes >= SHARD_BYTES:
            total += _save_shard(folder, shard, weight_map)
            shard, shard_bytes = {}, 0
    if shard:
        total += _save_shard(folder, shard, weight_map)
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index, indent=1))


def random_tensor(name: str, shape: torch.Size, pool: torch.Tensor, start: int) -> torch.Tensor:
    """A bf16 tensor of ``shape`` for weight ``name``: biases zero, norm weights one, anything else
    ``pool``'s values from index ``start`` on, repeated."""
    if name.endswith(".bias"):
        return torch.zeros(shape, dtype=torch.bfloat16)
    if "norm" in name:
        return torch.ones(shape, dtype=torch.bfloat16)
    count, offset = shape.numel(), start % pool.numel()
    repeats = (offset + count) // pool.numel() + 1
    return pool.repeat(repeats)[offset : offset + count].view(shape).clone()


def _save_shard(folder: Path, tensors: dict[str, torch.Tensor], weight_map: dict[str, str]) -> int:
    """Save ``tensors`` as the next shard; returns its bytes."""
    file = f"model-{len(set(weight_map.values())) + 1:05d}.safetensors"
    save_file(tensors, folder / file, metadata={"format": "pt"})
    weight_map.update(dict.fromkeys(tensors, file))
    return sum(tensor.nbytes for tensor in tensors.values())


# ----------------------------------------------------------------------------- one run (a fresh process)


@dataclass(frozen=True)
class RunSpec:
    """One fresh process: ``scenario`` ``"short"`` or ``"long"``, ``start`` 1 (cold caches) or 2;
    ``overrides`` more settings, ``("section.field", "value")`` each (the value read as JSON where
    it is JSON, else as the text); ``label`` tells runs of one size, dtype and scenario apart."""

    checkpoint: str
    size: str
    dtype: str
    device: str
    scenario: str
    start: int
    frames: int
    max_pixels: int | None
    new_tokens: int
    prefill_chunk_tokens: int = PREFILL_CHUNK_TOKENS
    overrides: tuple[tuple[str, str], ...] = ()
    label: str = ""
    peak_owners: int = 0

    def __post_init__(self) -> None:
        # A spec read back from JSON has lists where tuples were.
        object.__setattr__(self, "overrides", tuple(tuple(pair) for pair in self.overrides))

    @property
    def name(self) -> str:
        return f"{self.size}-{self.dtype}-{self.scenario}-{self.start}" + (f"-{self.label}" if self.label else "")


def run_settings(spec: RunSpec) -> AppSettings:
    """The defaults, with the run's model, dtype and device; the long run samples up to its frames
    within ``max_pixels`` (the context follows); then the spec's overrides."""
    settings = (
        AppSettings()
        .replace("model", source=spec.checkpoint, device=spec.device, dtype=spec.dtype)
        .replace("generation", max_new_tokens=spec.new_tokens)
        .replace("decoding", prefill_chunk_tokens=spec.prefill_chunk_tokens)
    )
    if spec.scenario == "long":
        settings = settings.replace("sampling", max_frames=spec.frames, max_pixels=spec.max_pixels)
    for key, text in spec.overrides:
        section, _, field = key.partition(".")
        settings = settings.replace(section, **{field: _setting_value(text)})
    return settings.validate(family_limits_of(spec.checkpoint))


def _setting_value(text: str) -> Any:
    """``text`` as JSON where it is JSON (numbers, true, null), else the text itself (fp8, auto)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def memory_now(device: torch.device) -> dict[str, int | None]:
    """The allocator's peak and current reserved bytes, and the device's used bytes (None off CUDA)."""
    if device.type != "cuda":
        return {"max_reserved": None, "reserved": None, "device_used": None}
    torch.cuda.synchronize(device)
    free, total = torch.cuda.mem_get_info(device)
    return {
        "max_reserved": torch.cuda.max_memory_reserved(device),
        "reserved": torch.cuda.memory_reserved(device),
        "device_used": total - free,
    }


def synthetic_clip(engine: Engine, settings: AppSettings, frames: int) -> tuple[np.ndarray, list[float]]:
    """``frames`` random frames at the size the model family samples a 1280x720 clip of that many
    frames to, and their times at 2 frames a second."""
    loaded = engine.loaded
    height, width = loaded.family.frame_sizing(settings.sampling, loaded.limits).size(frames, CLIP_HEIGHT, CLIP_WIDTH)
    pixels = np.random.default_rng(0).integers(0, 256, (frames, height, width, 3), dtype=np.uint8)
    return pixels, [index / CLIP_FPS for index in range(frames)]


def run_once(spec: RunSpec) -> dict[str, Any]:
    """Load, then one clip opened and asked about; the memory after each and the load's seconds;
    with ``spec.peak_owners``, what held the memory at the load's peak and at the clip's."""
    device = torch.device(spec.device)
    if not (spec.peak_owners and device.type == "cuda"):
        return _run(spec, device, lambda: None)
    torch.cuda.memory._record_memory_history(max_entries=PEAK_TRACE_ENTRIES, stacks="python")
    marks: list[int] = []
    result = _run(spec, device, lambda: marks.append(len(_device_trace())))
    trace = _device_trace()
    torch.cuda.memory._record_memory_history(enabled=None)
    result["peak_owners"] = {
        f"{stretch} {kind}": peak_owners(trace[start:stop], spec.peak_owners, actions)
        for stretch, (start, stop) in (("load", (0, marks[0])), ("clip", (marks[0], len(trace))))
        for kind, actions in (("allocated", ALLOCATED), ("reserved", RESERVED))
    }
    return result


def _device_trace() -> list[dict[str, Any]]:
    """The recorded allocator history of the current device."""
    return torch.cuda.memory._snapshot()["device_traces"][torch.cuda.current_device()]


def _run(spec: RunSpec, device: torch.device, loaded: Callable[[], None]) -> dict[str, Any]:
    """:func:`run_once`'s measurements, calling ``loaded`` once the model is loaded."""
    settings = run_settings(spec)
    started = time.perf_counter()
    engine = Engine(settings)
    info = engine.load()
    result: dict[str, Any] = {
        "spec": asdict(spec),
        "load_seconds": time.perf_counter() - started,
        "encoder_capture_seconds": info.capture_seconds,
        "decoder_capture_seconds": info.decoder.capture_seconds if info.decoder else None,
        "context_tokens": info.decoder.context_tokens if info.decoder else None,
        "held_memory": {**asdict(info.held_memory), "total": info.held_memory.total},
        "after_load": memory_now(device),
    }
    loaded()
    frames, timestamps = synthetic_clip(engine, settings, spec.frames)
    encoded = engine.open_frames(frames, timestamps, f"{spec.frames} synthetic frames")
    done = engine.ask(QUESTION)
    result["clip"] = {"frames": encoded.frames, "height": frames.shape[1], "width": frames.shape[2],
                      "encode_ms": encoded.encode_ms, "prompt_tokens": done.stats.decoder.prompt_tokens
                      if done.stats.decoder else None, "new_tokens": done.stats.new_tokens}
    result["after_clip"] = memory_now(device)
    return result


# ----------------------------------------------------------------------------- the runs and the table


def run_child(spec: RunSpec, out: Path, compile_cache: Path, timeout_s: float) -> dict[str, Any]:
    """``spec`` in a new process with ``compile_cache`` as its compile caches; its JSON, or why it failed."""
    result_file = out / "runs" / f"{spec.name}.json"
    result_file.parent.mkdir(parents=True, exist_ok=True)
    environment = {**os.environ, "FRAMEWISE_CACHE_DIR": str(compile_cache), "TRITON_CACHE_DIR": str(compile_cache / "triton")}
    command = [sys.executable, str(Path(__file__).resolve()), "--child", json.dumps(asdict(spec)), "--out", str(result_file)]
    try:
        finished = subprocess.run(command, env=environment, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        result = {"spec": asdict(spec), "error": f"did not finish within {timeout_s:.0f} s"}
    else:
        if finished.returncode == 0:
            return json.loads(result_file.read_text())
        result = {"spec": asdict(spec), "error": (finished.stderr.strip().splitlines() or ["no output"])[-1]}
    result_file.write_text(json.dumps(result, indent=1))
    return result


def specs_for(args: argparse.Namespace, checkpoint: Path) -> list[RunSpec]:
    """Per dtype: the short run's first and second start, then the long run (those of
    ``args.scenarios``), with ``args.overrides`` and ``args.label``."""
    common = dict(checkpoint=str(checkpoint), size=args.size, device=args.device, new_tokens=args.new_tokens,
                  prefill_chunk_tokens=args.prefill_chunk_tokens, overrides=tuple(args.overrides), label=args.label,
                  peak_owners=args.peak_owners)
    long_pixels = args.long_pixels or QWEN3_VL_LIMITS.released_clip_pixels
    return [
        spec
        for dtype in args.dtypes.split(",")
        for spec in (
            RunSpec(**common, dtype=dtype, scenario="short", start=1, frames=args.short_frames, max_pixels=None),
            RunSpec(**common, dtype=dtype, scenario="short", start=2, frames=args.short_frames, max_pixels=None),
            RunSpec(**common, dtype=dtype, scenario="long", start=1, frames=args.long_frames, max_pixels=long_pixels),
        )
        if spec.scenario in args.scenarios
    ]


def _gib(value: int | None) -> str:
    return "–" if value is None else f"{value / GIB:.2f}"


def _field(run: dict[str, Any] | None, *keys: str) -> Any:
    """``run[keys[0]][keys[1]]...``, or None where the run failed or lacks it."""
    value: Any = run
    for key in keys:
        if not isinstance(value, dict) or key not in value:
            return None
        value = value[key]
    return value


def markdown_table(runs: list[dict[str, Any]]) -> str:
    """One row per size, dtype and label: peak reserved and device used after the load, the short
    clip and the long clip (GiB), the engine's held total after the load, the long run's reserved
    memory after its load against its peak (the steady state and how far the clip took it), the
    load's seconds on the first and second start; then the runs that failed, with why."""
    by_name = {RunSpec(**run["spec"]).name: run for run in runs}
    rows = [
        "| size | dtype | label | peak reserved: load / short clip / long clip (GiB) | device used: load / short / long "
        "(GiB) | held after load (GiB) | long run: reserved after load → peak (GiB), peak ÷ after load "
        "| load + capture: 1st / 2nd start (s) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    groups = dict.fromkeys((run["spec"]["size"], run["spec"]["dtype"], run["spec"].get("label", "")) for run in runs)
    for size, dtype, label in groups:
        suffix = f"-{label}" if label else ""
        first, second, long = (by_name.get(f"{size}-{dtype}-{name}{suffix}") for name in ("short-1", "short-2", "long-1"))
        short = second or first
        peaks = " / ".join(_gib(_field(run, *keys, "max_reserved")) for run, keys in
                           ((short, ("after_load",)), (short, ("after_clip",)), (long, ("after_clip",))))
        used = " / ".join(_gib(_field(run, *keys, "device_used")) for run, keys in
                          ((short, ("after_load",)), (short, ("after_clip",)), (long, ("after_clip",))))
        held = _gib(_field(short or long, "held_memory", "total"))
        seconds = " / ".join("–" if (value := _field(run, "load_seconds")) is None else f"{value:.1f}" for run in (first, second))
        rows.append(f"| {size} | {dtype} | {label or '–'} | {peaks} | {used} | {held} | {_steady_words(long)} | {seconds} |")
    failures = [f"- {RunSpec(**run['spec']).name}: {run['error']}" for run in runs if "error" in run]
    return "\n".join(rows + ([""] + failures if failures else [])) + "\n"


def steady_and_peak(run: dict[str, Any] | None) -> tuple[int, int] | None:
    """A run's reserved bytes once loaded (the steady state) and its peak by the clip's end, or
    None where the run failed or did not measure them (no CUDA)."""
    steady, peak = _field(run, "after_load", "reserved"), _field(run, "after_clip", "max_reserved")
    return None if steady is None or peak is None else (steady, peak)


def _steady_words(run: dict[str, Any] | None) -> str:
    measured = steady_and_peak(run)
    if measured is None:
        return "–"
    steady, peak = measured
    return f"{_gib(steady)} → {_gib(peak)}, {peak / steady:.3f}"


def clip_words(runs: list[dict[str, Any]]) -> str:
    """The clips as they were sampled, from the first run of each scenario that finished."""
    words = {}
    for run in runs:
        clip, scenario = run.get("clip"), run["spec"]["scenario"]
        if clip and scenario not in words:
            words[scenario] = (
                f"{scenario} clip: {clip['frames']} frames of {clip['width']}x{clip['height']}, "
                f"{clip['prompt_tokens']} prompt tokens, context {run['context_tokens']} tokens"
            )
    return "; ".join(words[scenario] for scenario in ("short", "long") if scenario in words)


def write_results(out: Path, args: argparse.Namespace) -> list[dict[str, Any]]:
    runs = [json.loads(path.read_text()) for path in sorted((out / "runs").glob("*.json"))]
    device = torch.cuda.get_device_name() if args.device == "cuda" and torch.cuda.is_available() else args.device
    payload = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "device": device,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "runs": runs,
    }
    (out / "memory_bench.json").write_text(json.dumps(payload, indent=1))
    table = markdown_table(runs)
    header = f"{payload['date']}, {device}, torch {torch.__version__}: `{payload['command']}`\n\n{clip_words(runs)}\n\n"
    (out / "memory_bench.md").write_text(header + table)
    print(header + table)
    return runs


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.child:
        spec = RunSpec(**json.loads(args.child))
        Path(args.out).write_text(json.dumps(run_once(spec), indent=1))
        return 0
    out, cache = Path(args.out), Path(args.cache)
    checkpoint = ensure_checkpoint(args.size, cache)
    if args.prepare:
        print(checkpoint)
        return 0
    out.mkdir(parents=True, exist_ok=True)
    compile_cache = Path(args.compile_cache) if args.compile_cache else cache / "compile"
    for spec in specs_for(args, checkpoint):
        if spec.scenario == "short" and spec.start == 1:
            shutil.rmtree(compile_cache, ignore_errors=True)  # a first start compiles everything anew
        result = run_child(spec, out, compile_cache, args.timeout)
        print(f"{spec.name}: {result.get('error') or 'done'}", file=sys.stderr)
    write_results(out, args)
    return 0


def _override(text: str) -> tuple[str, str]:
    key, equals, value = text.partition("=")
    if not equals or "." not in key:
        raise argparse.ArgumentTypeError(f"{text!r}: write a setting as section.field=value")
    return key, value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", default="8B", choices=sorted(TOWER_SIZES))
    parser.add_argument("--dtypes", default="bfloat16,fp8", help="comma-separated model.dtype values")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--out", default="results/memory", help="results folder (or, with --child, the run's JSON file)")
    parser.add_argument("--cache", default=str(Path.home() / ".cache" / "framewise-bench"),
                        help="where the checkpoint and the runs' compile caches are kept")
    parser.add_argument("--short-frames", type=int, default=32)
    parser.add_argument("--long-frames", type=int, default=QWEN3_VL_LIMITS.released_frames)
    parser.add_argument("--long-pixels", type=int, default=None,
                        help="the long run's sampling max pixels (default: Qwen3-VL's released preprocessing's)")
    parser.add_argument("--new-tokens", type=int, default=128, help="tokens of each answer at most")
    parser.add_argument("--prefill-chunk-tokens", type=int, default=PREFILL_CHUNK_TOKENS,
                        help="decoding.prefill_chunk_tokens: the tokens of one prefill pass")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds each run may take")
    parser.add_argument("--scenarios", default="short,long", type=lambda text: text.split(","),
                        help="which runs: short (first and second start), long, or both")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.FIELD=VALUE",
                        type=_override, help="a further setting for every run (repeatable), e.g. decoding.kv_cache_dtype=fp8")
    parser.add_argument("--label", default="", help="names these runs apart from others of the same size and dtype")
    parser.add_argument("--compile-cache", default=None,
                        help="the runs' compile caches (default: --cache/compile; emptied before a first start)")
    parser.add_argument("--peak-owners", type=int, default=0, metavar="N",
                        help="record the allocator's history and name the N largest owners of the memory at the "
                             "load's peak and at the clip's (slower; CUDA only)")
    parser.add_argument("--prepare", action="store_true", help="only write the checkpoint when missing")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    return parser


if __name__ == "__main__":
    raise SystemExit(main())
