"""Memory and load time of the real engine per weight dtype, each run in a fresh process.

Writes once (cached in ``--cache``) a random-weight bf16 checkpoint of Qwen3-VL at the 2B or 8B
shapes (language model and vision tower) with the real 151,936-token vocabulary and the demo
model's tokenizer and chat template, which the loader's checks accept. Then, per dtype
(``bfloat16``; ``fp8``: the language model's linear layers quantized while loading), each in a
new process through :class:`~framewise.core.backends.local.engine.Engine` at the default settings (graphs on):

- ``short`` run, twice (a first start with empty compile caches, a second start with the
  caches the first left): load, then a 32-frame 720p clip opened and asked about;
- ``long`` run: the sampling settings raised to Qwen3-VL's released preprocessing (768 frames,
  24,576 merge blocks: the context grows to hold it), load, then a 768-frame 720p clip opened and
  asked about; ``--long-frames 2048 --long-pixels N`` measures a longer clip.

After the load and after each clip it records ``torch.cuda.max_memory_reserved()`` (the peak so
far), ``torch.cuda.memory_reserved()`` and the device's used memory (``torch.cuda.mem_get_info``:
what other programs see, the CUDA context included); the load's seconds (weights, encoder graphs,
decoder graphs) and what the engine measured it holds (:class:`~framewise.core.memory_plan.HeldMemory`).
Clips are synthetic frames handed to :meth:`~framewise.core.backends.local.engine.Engine.open_frames` at the
size the model family samples a 1280x720 clip to. Writes ``memory_bench.json`` (every run) and
``memory_bench.md`` (the table) under ``--out``; each run's JSON stays under ``--out/runs`` and
the table is made from every run there, so dtypes may be run by separate commands. Prompts are
prefilled in chunks of ``--prefill-chunk-tokens`` (``decoding.prefill_chunk_tokens``); compare
chunk sizes with one ``--out`` each.

    python3 benchmarks/memory_bench.py --size 8B --out results/memory          # bf16 and fp8
    python3 benchmarks/memory_bench.py --size 8B --dtypes fp8 --out results/memory
    python3 benchmarks/memory_bench.py --size 8B --dtypes fp8 --prefill-chunk-tokens 2048 --out results/memory-2048
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
from typing import Any

import numpy as np
import torch

BENCHMARKS = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCHMARKS.parent))
sys.path.insert(0, str(BENCHMARKS))

from safetensors.torch import save_file  # noqa: E402
from transformers import AutoTokenizer, Qwen3VLForConditionalGeneration  # noqa: E402

from decode_bench import TEXT_SIZES, VOCAB  # noqa: E402
from encoder_bench import TOWERS  # noqa: E402
from framewise.core.backends.local.engine import Engine  # noqa: E402
from framewise.core.families.qwen3_vl.limits import QWEN3_VL_LIMITS  # noqa: E402
from framewise.core.model_source import DEMO_MODEL_DIR, family_limits_of  # noqa: E402
from framewise.core.memory_plan import GIB  # noqa: E402
from framewise.core.settings import PREFILL_CHUNK_TOKENS, AppSettings  # noqa: E402
from training.demo_model import build_demo_config, special_token_ids  # noqa: E402

# depth, hidden, heads, MLP, out hidden (the language model's width), deepstack layers
TOWER_SIZES = {**TOWERS, "tiny": (2, 64, 2, 128, TEXT_SIZES["tiny"][0], (1,))}
DEMO_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json")
SHARD_BYTES = 4 * 2**30
CLIP_HEIGHT, CLIP_WIDTH, CLIP_FPS = 720, 1280, 2.0
QUESTION = "What happens in the clip?"


# ----------------------------------------------------------------------------- the checkpoint


def checkpoint_config(size: str) -> Any:
    """A Qwen3-VL config at ``size``'s shapes with the real vocabulary and the demo tokenizer's
    special token ids."""
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


def ensure_checkpoint(size: str, cache: Path) -> Path:
    """The folder of ``size``'s random bf16 checkpoint under ``cache``, written when missing (a
    folder left half-written by an interrupted run is written again)."""
    folder = cache / f"qwen3-vl-{size}-random-bf16"
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
    weights one, biases zero, the rest N(0, 0.02)), and their index; generated shard by shard, so
    the whole model is never in memory."""
    with torch.device("meta"):
        shapes = {name: tensor.shape for name, tensor in Qwen3VLForConditionalGeneration(config).state_dict().items()}
    if config.tie_word_embeddings:
        shapes.pop("lm_head.weight")
    generator = torch.Generator().manual_seed(0)
    weight_map: dict[str, str] = {}
    shard: dict[str, torch.Tensor] = {}
    shard_bytes, total = 0, 0
    for name, shape in shapes.items():
        shard[name] = random_tensor(name, shape, generator)
        shard_bytes += shard[name].nbytes
        if shard_bytes >= SHARD_BYTES:
            total += _save_shard(folder, shard, weight_map)
            shard, shard_bytes = {}, 0
    if shard:
        total += _save_shard(folder, shard, weight_map)
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index, indent=1))


def random_tensor(name: str, shape: torch.Size, generator: torch.Generator) -> torch.Tensor:
    if name.endswith(".bias"):
        return torch.zeros(shape, dtype=torch.bfloat16)
    if "norm" in name:
        return torch.ones(shape, dtype=torch.bfloat16)
    return (torch.randn(shape, generator=generator) * 0.02).to(torch.bfloat16)


def _save_shard(folder: Path, tensors: dict[str, torch.Tensor], weight_map: dict[str, str]) -> int:
    """Save ``tensors`` as the next shard; returns its bytes."""
    file = f"model-{len(set(weight_map.values())) + 1:05d}.safetensors"
    save_file(tensors, folder / file, metadata={"format": "pt"})
    weight_map.update(dict.fromkeys(tensors, file))
    return sum(tensor.nbytes for tensor in tensors.values())


# ----------------------------------------------------------------------------- one run (a fresh process)


@dataclass(frozen=True)
class RunSpec:
    """One fresh process: ``scenario`` ``"short"`` or ``"long"``, ``start`` 1 (cold caches) or 2."""

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

    @property
    def name(self) -> str:
        return f"{self.size}-{self.dtype}-{self.scenario}-{self.start}"


def run_settings(spec: RunSpec) -> AppSettings:
    """The defaults, with the run's model, dtype and device; the long run samples up to its frames
    within ``max_pixels`` (the context follows)."""
    settings = (
        AppSettings()
        .replace("model", source=spec.checkpoint, device=spec.device, dtype=spec.dtype)
        .replace("generation", max_new_tokens=spec.new_tokens)
        .replace("decoding", prefill_chunk_tokens=spec.prefill_chunk_tokens)
    )
    if spec.scenario == "long":
        settings = settings.replace("sampling", max_frames=spec.frames, max_pixels=spec.max_pixels)
    return settings.validate(family_limits_of(spec.checkpoint))


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
    """Load, then one clip opened and asked about; the memory after each and the load's seconds."""
    settings = run_settings(spec)
    device = torch.device(spec.device)
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
    """Per dtype: the short run's first and second start, then the long run."""
    common = dict(checkpoint=str(checkpoint), size=args.size, device=args.device, new_tokens=args.new_tokens,
                  prefill_chunk_tokens=args.prefill_chunk_tokens)
    long_pixels = args.long_pixels or QWEN3_VL_LIMITS.released_clip_pixels
    return [
        spec
        for dtype in args.dtypes.split(",")
        for spec in (
            RunSpec(**common, dtype=dtype, scenario="short", start=1, frames=args.short_frames, max_pixels=None),
            RunSpec(**common, dtype=dtype, scenario="short", start=2, frames=args.short_frames, max_pixels=None),
            RunSpec(**common, dtype=dtype, scenario="long", start=1, frames=args.long_frames, max_pixels=long_pixels),
        )
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
    """One row per size and dtype: peak reserved and device used after the load, the short clip
    and the long clip (GiB), the engine's held total after the load, the load's seconds on the
    first and second start; then the runs that failed, with why."""
    by_name = {RunSpec(**run["spec"]).name: run for run in runs}
    rows = [
        "| size | dtype | peak reserved: load / short clip / long clip (GiB) | device used: load / short / long (GiB) "
        "| held after load (GiB) | load + capture: 1st / 2nd start (s) |",
        "|---|---|---|---|---|---|",
    ]
    pairs = dict.fromkeys((run["spec"]["size"], run["spec"]["dtype"]) for run in runs)
    for size, dtype in pairs:
        first, second, long = (by_name.get(f"{size}-{dtype}-{name}") for name in ("short-1", "short-2", "long-1"))
        short = second or first
        peaks = " / ".join(_gib(_field(run, *keys, "max_reserved")) for run, keys in
                           ((short, ("after_load",)), (short, ("after_clip",)), (long, ("after_clip",))))
        used = " / ".join(_gib(_field(run, *keys, "device_used")) for run, keys in
                          ((short, ("after_load",)), (short, ("after_clip",)), (long, ("after_clip",))))
        held = _gib(_field(short, "held_memory", "total"))
        seconds = " / ".join("–" if (value := _field(run, "load_seconds")) is None else f"{value:.1f}" for run in (first, second))
        rows.append(f"| {size} | {dtype} | {peaks} | {used} | {held} | {seconds} |")
    failures = [f"- {RunSpec(**run['spec']).name}: {run['error']}" for run in runs if "error" in run]
    return "\n".join(rows + ([""] + failures if failures else [])) + "\n"


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
    out.mkdir(parents=True, exist_ok=True)
    checkpoint = ensure_checkpoint(args.size, cache)
    compile_cache = cache / "compile"
    for spec in specs_for(args, checkpoint):
        if spec.scenario == "short" and spec.start == 1:
            shutil.rmtree(compile_cache, ignore_errors=True)  # a first start compiles everything anew
        result = run_child(spec, out, compile_cache, args.timeout)
        print(f"{spec.name}: {result.get('error') or 'done'}", file=sys.stderr)
    write_results(out, args)
    return 0


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
    parser.add_argument("--child", help=argparse.SUPPRESS)
    return parser


if __name__ == "__main__":
    raise SystemExit(main())
