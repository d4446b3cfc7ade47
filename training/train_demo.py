"""Train the bundled demo model: a tiny Qwen3-VL that answers questions about synthetic shape clips.

    python -m training.train_demo --out runs/demo [--steps N | --minutes M] [--device cuda|cpu]

Every example is built the way the application builds its inputs: a scene from
:mod:`training.synthetic`, the frames ``core.video`` would sample at the default sampling
settings, resized to the Qwen3-VL size for the clip, patchified by
``core.processing.preprocess_video`` and prompted by ``build_chat_inputs``; the answer and
``<|im_end|>`` follow, and only they carry loss. Examples are rendered by DataLoader workers
(seed ``i`` gives example ``i``, so the data do not depend on the number of workers); the
patchify runs on the training device.

The output folder is a demo-model folder (safetensors weights, config, tokenizer,
``framewise.json``), written again every ``--save-every-s`` seconds, so an interrupted run still
leaves a usable model.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import math
import os
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
import transformers
from torch.utils.data import DataLoader, Dataset
from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration
from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLModel

from core.demo_model import (
    DEMO_WORDS,
    IM_END,
    IM_START,
    build_demo_config,
    build_demo_tokenizer,
    demo_generation_config,
    save_demo_model,
    special_token_ids,
)
from core.encoder import VisionItem
from core.processing import VideoInputs, VisionGeometry, build_chat_inputs, preprocess_video, resize_frames, video_frame_size
from core.settings import SamplingSettings
from training.synthetic import TRAIN_SEEDS, answer_words, make_scene, questions_for, sample_scene

DEMO_LABEL = "Demo model — trained on synthetic shape clips"
IGNORE_INDEX = -100
MAX_TURNS = 6


@dataclass(frozen=True)
class ModelDims:
    """Sizes of the demo model; the defaults keep its float32 weights under 20 MB."""

    vision_hidden: int = 128
    vision_depth: int = 3
    vision_heads: int = 4
    vision_mlp: int = 512
    deepstack_layers: tuple[int, ...] = (1,)
    text_hidden: int = 256
    text_layers: int = 4
    text_heads: int = 4
    text_kv_heads: int = 2
    head_dim: int = 64
    text_mlp: int = 512


@dataclass(frozen=True)
class Example:
    """One training example.

    ``frames``: (T, h, w, 3) uint8 at the Qwen3-VL size; ``input_ids``/``labels``/
    ``mm_token_type_ids``: (L,) prompt then answer, labels ``IGNORE_INDEX`` on the prompt;
    ``position_ids``: (3, L) the multimodal rotary positions the model would compute.
    """

    frames: torch.Tensor
    timestamps: tuple[float, ...]
    grid_thw: tuple[int, int, int]
    input_ids: torch.Tensor
    labels: torch.Tensor
    mm_token_type_ids: torch.Tensor
    position_ids: torch.Tensor


@dataclass(frozen=True)
class Batch:
    """Examples padded on the right to one length L: ids, labels, mask and token types are (B, L),
    ``position_ids`` (3, B, L)."""

    frames: list[torch.Tensor]
    timestamps: list[tuple[float, ...]]
    grids: list[tuple[int, int, int]]
    input_ids: torch.Tensor
    labels: torch.Tensor
    attention_mask: torch.Tensor
    mm_token_type_ids: torch.Tensor
    position_ids: torch.Tensor

    def pin_memory(self) -> Batch:
        """The batch in page-locked memory (the DataLoader calls this with ``pin_memory=True``)."""
        pinned = {
            f.name: getattr(self, f.name).pin_memory()
            for f in dataclasses.fields(self)
            if isinstance(getattr(self, f.name), torch.Tensor)
        }
        return dataclasses.replace(self, frames=[frames.pin_memory() for frames in self.frames], **pinned)


class RopeIndex:
    """Qwen3-VL's own multimodal rotary positions (transformers' ``Qwen3VLModel.get_rope_index``)
    without a model, so the data workers compute them on the CPU instead of the training loop."""

    get_rope_index = Qwen3VLModel.get_rope_index
    get_vision_position_ids = Qwen3VLModel.get_vision_position_ids

    def __init__(self, config: Qwen3VLConfig) -> None:
        self.config = config

    def __call__(self, input_ids: torch.Tensor, mm_token_type_ids: torch.Tensor, grid_thw: tuple[int, int, int]) -> torch.Tensor:
        """(3, L) positions of one unpadded sequence of (L,) ids."""
        positions, _ = self.get_rope_index(
            input_ids[None], mm_token_type_ids=mm_token_type_ids[None], video_grid_thw=torch.tensor([grid_thw])
        )
        return positions[:, 0]


def prompt_video(frames: np.ndarray, pair_timestamps: Sequence[float], geometry: VisionGeometry) -> VideoInputs:
    """What ``build_chat_inputs`` reads of a clip -- its grid and frame-pair times -- without the
    pixels, which are patchified later on the training device. (T, h, w, 3) frames at the Qwen3-VL size."""
    t = math.ceil(frames.shape[0] / geometry.temporal_patch_size)
    grid = (t, frames.shape[1] // geometry.patch_size, frames.shape[2] // geometry.patch_size)
    item = VisionItem(pixel_values=torch.empty(0, geometry.patch_dim), grid_thw=grid, modality="video")
    return VideoInputs(item=item, pair_timestamps=tuple(pair_timestamps))


def answer_ids(tokenizer: Any, answer: str) -> list[int]:
    """Token ids the model is trained to produce: the answer, then the end-of-turn token."""
    return tokenizer.encode(answer, add_special_tokens=False) + [tokenizer.convert_tokens_to_ids(IM_END)]


def answer_starts(input_ids: Sequence[int], tokenizer: Any) -> list[int]:
    """Positions right after each ``<|im_start|>assistant\n``: where the assistant's turns begin."""
    opening = [tokenizer.convert_tokens_to_ids(IM_START), *tokenizer.encode("assistant\n", add_special_tokens=False)]
    width = len(opening)
    return [i + width for i in range(len(input_ids) - width + 1) if list(input_ids[i : i + width]) == opening]


def make_example(
    seed: int, tokenizer: Any, sampling: SamplingSettings, geometry: VisionGeometry, rope_index: RopeIndex
) -> Example:
    """The example for ``seed``: a conversation about the clip asking its questions in a random
    order (at most :data:`MAX_TURNS`), as a person asks follow-ups in the application. The first
    turn is a question with no history, as evaluated; every answer carries loss."""
    sampled = sample_scene(make_scene(seed), sampling)
    questions = questions_for(sampled)
    order = np.random.default_rng([seed, 1]).permutation(len(questions))[:MAX_TURNS]
    turns = [questions[i] for i in order]
    height, width = sampled.frames.shape[1:3]
    size = video_frame_size(len(sampled.frames), height, width, sampling, geometry=geometry)
    frames = resize_frames(sampled.frames, size)
    video = prompt_video(frames, sampled.pair_timestamps, geometry)
    history = [(q.text, q.answer) for q in turns[:-1]]
    prompt = build_chat_inputs(tokenizer, turns[-1].text, video=video, history=history, geometry=geometry)
    last = torch.tensor(answer_ids(tokenizer, turns[-1].answer))
    input_ids = torch.cat([prompt.input_ids[0], last])
    labels = torch.full_like(input_ids, IGNORE_INDEX)
    starts = answer_starts(input_ids.tolist(), tokenizer)
    assert len(starts) == len(turns), "the chat template should open one assistant turn per question"
    for start, question in zip(starts, turns):
        target = torch.tensor(answer_ids(tokenizer, question.answer))
        assert torch.equal(input_ids[start : start + len(target)], target), "answers tokenize differently in context"
        labels[start : start + len(target)] = target
    token_types = torch.cat([prompt.mm_token_type_ids[0], torch.zeros_like(last)])
    grid = video.item.grid_thw
    return Example(
        frames=torch.from_numpy(np.ascontiguousarray(frames)),
        timestamps=sampled.timestamps,
        grid_thw=grid,
        input_ids=input_ids,
        labels=labels,
        mm_token_type_ids=token_types,
        position_ids=rope_index(input_ids, token_types, grid),
    )


class ShapeQuestions(Dataset):
    """Map-style dataset: index ``i`` is the example of seed ``seeds[i]``."""

    def __init__(
        self, tokenizer: Any, config: Qwen3VLConfig, seeds: range, sampling: SamplingSettings
    ) -> None:
        self.tokenizer, self.seeds, self.sampling = tokenizer, seeds, sampling
        self.geometry = VisionGeometry.from_vision_config(config.vision_config)
        self.rope_index = RopeIndex(config)

    def __len__(self) -> int:
        return len(self.seeds)

    def __getitem__(self, index: int) -> Example:
        return make_example(self.seeds[index], self.tokenizer, self.sampling, self.geometry, self.rope_index)


def collate(examples: Sequence[Example], pad_id: int) -> Batch:
    length = max(len(e.input_ids) for e in examples)

    def padded(rows: list[torch.Tensor], value: int) -> torch.Tensor:
        out = torch.full((len(rows), length), value, dtype=torch.long)
        for i, row in enumerate(rows):
            out[i, : len(row)] = row
        return out

    ids = [e.input_ids for e in examples]
    positions = torch.zeros(3, len(examples), length, dtype=torch.long)
    for i, example in enumerate(examples):
        positions[:, i, : example.position_ids.shape[1]] = example.position_ids
    return Batch(
        frames=[e.frames for e in examples],
        timestamps=[e.timestamps for e in examples],
        grids=[e.grid_thw for e in examples],
        input_ids=padded(ids, pad_id),
        labels=padded([e.labels for e in examples], IGNORE_INDEX),
        attention_mask=padded([torch.ones_like(row) for row in ids], 0),
        mm_token_type_ids=padded([e.mm_token_type_ids for e in examples], 0),
        position_ids=positions,
    )


def model_inputs(batch: Batch, device: torch.device, geometry: VisionGeometry) -> dict[str, torch.Tensor]:
    """Forward arguments for a batch: pixels patchified on ``device`` by the application's own function."""
    videos = [
        preprocess_video(frames.to(device, non_blocking=True), times, geometry)
        for frames, times in zip(batch.frames, batch.timestamps)
    ]
    for video, grid in zip(videos, batch.grids):
        assert video.item.grid_thw == grid, "the prompt was built for another grid"
    return dict(
        input_ids=batch.input_ids.to(device, non_blocking=True),
        attention_mask=batch.attention_mask.to(device, non_blocking=True),
        mm_token_type_ids=batch.mm_token_type_ids.to(device, non_blocking=True),
        position_ids=batch.position_ids.to(device, non_blocking=True),
        labels=batch.labels.to(device, non_blocking=True),
        pixel_values_videos=torch.cat([video.item.pixel_values for video in videos]),
        video_grid_thw=torch.tensor(batch.grids, device=device),
        use_cache=False,
    )


def build_model(tokenizer: Any, dims: ModelDims, seed: int) -> Qwen3VLForConditionalGeneration:
    """A float32 model with weights drawn from ``seed``."""
    config = build_demo_config(
        len(tokenizer),
        special_token_ids(tokenizer),
        vision_hidden=dims.vision_hidden,
        vision_heads=dims.vision_heads,
        vision_intermediate=dims.vision_mlp,
        depth=dims.vision_depth,
        deepstack_visual_indexes=dims.deepstack_layers,
        text_hidden=dims.text_hidden,
        text_intermediate=dims.text_mlp,
        text_layers=dims.text_layers,
        text_heads=dims.text_heads,
        text_kv_heads=dims.text_kv_heads,
        head_dim=dims.head_dim,
    )
    torch.manual_seed(seed)
    model = Qwen3VLForConditionalGeneration(config)
    model.generation_config = demo_generation_config(config)
    return model


def use_varlen_vision_attention(model: Qwen3VLForConditionalGeneration, device: torch.device) -> bool:
    """Run the vision tower's attention as one varlen kernel per layer (instead of one SDPA call
    per frame pair) when this machine can, checked by a forward and backward pass against SDPA."""
    if device.type != "cuda":
        return False
    from core.attention import REGISTERED_NAMES, register_backends

    register_backends()
    visual = model.model.visual
    grid = torch.tensor([[2, 4, 6], [1, 8, 4]], device=device)
    patches = int(grid.prod(-1).sum())
    pixels = torch.randn(patches, visual.patch_embed.proj.weight[0].numel(), device=device)
    outputs = []
    for name in ("sdpa", REGISTERED_NAMES["varlen"]):
        visual.config._attn_implementation = name
        visual.zero_grad()
        try:
            with torch.autocast("cuda", dtype=torch.bfloat16):
                merged = visual(pixels, grid_thw=grid, return_dict=True).pooler_output
            merged.float().square().mean().backward()
        except Exception as error:  # noqa: BLE001 - any failure means: keep SDPA
            print(f"varlen vision attention unavailable ({error}); using SDPA per frame pair", flush=True)
            visual.config._attn_implementation = "sdpa"
            return False
        outputs.append(merged.detach().float())
    visual.zero_grad()
    error = (outputs[1] - outputs[0]).norm() / outputs[0].norm()
    if not error < 3e-2:
        print(f"varlen vision attention differs from SDPA (relative error {error:.3g}); using SDPA", flush=True)
        visual.config._attn_implementation = "sdpa"
        return False
    return True


def learning_rate(step: int, total: int, peak: float, warmup: int) -> float:
    """Linear warm-up, then cosine decay to a tenth of the peak."""
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def save(model: Qwen3VLForConditionalGeneration, tokenizer: Any, out: Path, training: dict[str, Any]) -> None:
    """Write the demo-model folder; ``training`` (how it was made) goes into framewise.json."""
    info = {
        "name": "demo",
        "label": DEMO_LABEL,
        "description": (
            "A tiny Qwen3-VL (the released architecture at a small size) trained on synthetic clips of moving "
            "squares, circles and triangles. It answers what color a shape is, which way it moves, how many "
            "shapes there are, what appears first and when a shape appears; anything else it answers poorly."
        ),
        "made_by": training["command"],
        "parameters": training["parameters"],
        "vocabulary": len(tokenizer),
        "weights_dtype": "float32",
        "training": training,
    }
    save_demo_model(out, model, tokenizer, info)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder to write the demo model into")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--steps", type=int, default=None, help="optimizer steps (reproducible)")
    parser.add_argument(
        "--minutes", type=float, default=None,
        help="without --steps: choose the step count that fits this many minutes, from the speed measured "
        "during warm-up (the log prints it, for reproducing with --steps)",
    )
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--lr", type=float, default=1.5e-3)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--workers", type=int, default=max(1, min(14, (os.cpu_count() or 2) - 2)))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--save-every-s", type=float, default=60.0)
    parser.add_argument("--log-every", type=int, default=50)
    args = parser.parse_args(argv)
    if (args.steps is None) == (args.minutes is None):
        parser.error("give exactly one of --steps and --minutes")
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    transformers.utils.logging.disable_progress_bar()
    seed_everything(args.seed)
    device = torch.device(args.device)
    sampling = SamplingSettings()
    tokenizer = build_demo_tokenizer(sorted(set(DEMO_WORDS) | set(answer_words())))
    model = build_model(tokenizer, ModelDims(), args.seed).to(device)
    geometry = VisionGeometry.from_vision_config(model.config.vision_config)
    params = sum(p.numel() for p in model.parameters())
    print(f"model: {params / 1e6:.2f} M parameters ({params * 4 / 2**20:.1f} MiB in float32)", flush=True)
    varlen = use_varlen_vision_attention(model, device)
    print(f"vision attention: {'varlen' if varlen else 'sdpa per frame pair'}", flush=True)

    dataset = ShapeQuestions(tokenizer, model.config, TRAIN_SEEDS, sampling)
    loader = DataLoader(
        dataset,
        batch_size=args.batch,
        shuffle=False,  # consecutive seeds are unrelated scenes already
        collate_fn=functools.partial(collate, pad_id=tokenizer.pad_token_id),
        num_workers=args.workers,
        pin_memory=device.type == "cuda",
        persistent_workers=args.workers > 0,
        prefetch_factor=4 if args.workers > 0 else None,
        worker_init_fn=_single_threaded,
    )
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2 and "embed" not in n]
    no_decay = [p for n, p in model.named_parameters() if not (p.dim() >= 2 and "embed" not in n)]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.05}, {"params": no_decay, "weight_decay": 0.0}],
        lr=args.lr, betas=(0.9, 0.98), fused=device.type == "cuda",
    )
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda")

    total = args.steps if args.steps is not None else 10**9
    budget_s = args.minutes * 60 if args.minutes is not None else None
    started = time.perf_counter()
    last_save = started
    timing_start: tuple[int, float] | None = None
    running_loss = torch.zeros((), device=device)
    model.train()
    step = 0
    waiting_s = 0.0  # time spent waiting for the data workers since the last log line
    ready = time.perf_counter()
    for batch in loader:
        waiting_s += time.perf_counter() - ready
        if step >= total:
            break
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step, total, args.lr, args.warmup)
        with autocast:
            loss = model(**model_inputs(batch, device, geometry)).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        running_loss += loss.detach()
        step += 1

        now = time.perf_counter()
        if budget_s is not None and args.steps is None:
            if step == args.warmup // 4:
                timing_start = (step, now)
            elif step == args.warmup:
                assert timing_start is not None
                rate = (step - timing_start[0]) / (now - timing_start[1])
                total = max(step + 1, int(step + 0.92 * rate * (budget_s - (now - started))))
                print(f"{rate:.1f} steps/s: training {total} steps (reproduce with --steps {total})", flush=True)
        if step % args.log_every == 0:
            print(
                f"step {step}/{total if total < 10**9 else '?'} loss {running_loss.item() / args.log_every:.4f} "
                f"lr {optimizer.param_groups[0]['lr']:.2e} {now - started:.0f} s (waited {waiting_s:.1f} s for data)",
                flush=True,
            )
            running_loss.zero_()
            waiting_s = 0.0
        if now - last_save >= args.save_every_s:
            save(model, tokenizer, args.out, _state(args, step, total, now - started, varlen, params))
            last_save = now
        ready = time.perf_counter()
    elapsed = time.perf_counter() - started
    save(model, tokenizer, args.out, _state(args, step, total, elapsed, varlen, params))
    print(f"trained {step} steps in {elapsed:.0f} s; saved to {args.out}", flush=True)


def _single_threaded(worker_id: int) -> None:
    torch.set_num_threads(1)


def _state(args: argparse.Namespace, step: int, total: int, seconds: float, varlen: bool, params: int) -> dict[str, Any]:
    return {
        "steps_done": step,
        "steps_planned": total,
        "seconds": round(seconds, 1),
        "batch": args.batch,
        "lr": args.lr,
        "warmup": args.warmup,
        "seed": args.seed,
        "device": torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu",
        "vision_attention": "varlen" if varlen else "sdpa",
        "parameters": params,
        "torch": torch.__version__,
        "command": "python -m training.train_demo " + " ".join(sys.argv[1:]),
    }


if __name__ == "__main__":
    main()
