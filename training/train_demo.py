"""Train the bundled demo model: a tiny Qwen3-VL that answers questions about synthetic shape clips.

    python -m training.train_demo --out runs/demo [--steps N | --minutes M] [--device cuda|cpu]

Every example is built the way the application builds its inputs: a scene from
:mod:`training.synthetic`, the frames ``core.video`` would sample at the default sampling
settings, resized to the Qwen3-VL size for the clip, patchified by
``core.families.qwen3_vl.processor.preprocess_video`` and prompted by ``build_chat_inputs``. An example is a
conversation about one clip that asks its questions in a random order, as a person asks
follow-ups; each answer and its ``<|im_end|>`` carry the language-model loss, the prompt none.

What makes the few minutes of training go further:

- Dense signals besides the answers. A linear probe on every merged vision token predicts the
  kind, color and motion of the shape under it (or background, weighted down) and the shape's
  centre in the frame pair, read from the renderer's label maps: the tower learns to see each
  shape's kind and color in the same token. A second probe reads the language model's hidden
  state at every vision token, after :attr:`ModelDims.lm_probe_layer` layers, and predicts the
  same shape's kind, color and motion: motion is only visible by comparing frame pairs, which
  the language model must do token by token. Both probes are dropped when the model is saved.
- A curriculum: the first ``--curriculum-steps`` steps show clips of one shape only, where a
  color or a direction needs no binding to a shape; then one to four shapes.
- Every question is asked in its canonical wording or, half the time, one of its paraphrases
  (``training.synthetic.WORDINGS``).
- Every ``--file-every``-th clip is written to an H.264 file and read back through the
  application's decoder (``core.video.sample_clip``: decode, pick the frames, resize), so the
  model is trained on what the application sees in a file; those clips come from a pool of
  ``--file-pool`` scenes, written once and re-read each time.
- The data workers compute everything that depends only on the example (rendering, prompt,
  multimodal rotary positions, the tower's attention boundaries and position-table taps), so
  the training loop issues only the model's own work. The tower runs once per batch and its
  features reach the language model through the Qwen3-VL ``FeatureInjector``
  (:mod:`training.feature_injection`).

Seed ``i`` gives example ``i``, so the data do not depend on the number of workers. The output
folder is a demo-model folder (bfloat16 safetensors weights, config, tokenizer,
``framewise.json``), written again every ``--save-every-s`` seconds, so an interrupted run still
leaves a usable model.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import random
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import cv2
import numpy as np
import torch
import torch.nn.functional as F
import transformers
from torch.utils.data import DataLoader, Dataset
from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration
from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLModel

from framewise.core.encoding.defs import EncodedItem, VisionItem
from framewise.core.families.qwen3_vl.geometry import VisionGeometry
from framewise.core.families.qwen3_vl.metadata import MetadataCache
from framewise.core.families.qwen3_vl.processor import VideoInputs, preprocess_video
from framewise.core.families.qwen3_vl.prompt import VIDEO_TOKEN, build_chat_inputs
from framewise.core.settings import SamplingSettings
from training.demo_model import (
    DEMO_LABEL,
    DEMO_WORDS,
    IM_END,
    IM_START,
    build_demo_config,
    build_demo_tokenizer,
    demo_generation_config,
    save_demo_model,
    special_token_ids,
)
from training.feature_injection import FeatureInjector
from training.synthetic import (
    COLORS,
    DIRECTIONS,
    SHAPES,
    TRAIN_SEEDS,
    WORDINGS,
    SampledScene,
    answer_words,
    make_scene,
    model_frames,
    questions_for,
    render_labels,
    sample_scene,
    sample_scene_file,
)

IGNORE_INDEX = -100
MAX_TURNS = 6
# Classes the probe predicts per vision token: shape kind, color, motion; class 0 is background.
PROBE_CLASSES = (len(SHAPES) + 1, len(COLORS) + 1, len(DIRECTIONS) + 1)
MIN_COVERAGE = 0.2  # a shape labels a token when it covers this share of the token's pixels
BACKGROUND_WEIGHT = 0.2  # probe weight of a background token against a shape's token
PARAPHRASE_SHARE = 0.5  # share of training questions asked in a paraphrase rather than canonically
# Scenes of the clips that go through a file: their own seed range, apart from the rendered ones.
FILE_POOL_SEEDS = TRAIN_SEEDS[9_000_000:]


@dataclass(frozen=True)
class ModelDims:
    """Sizes of the demo model; the defaults keep its bfloat16 weights under 20 MB.
    ``lm_probe_layer``: the language-model layer whose output the second probe reads."""

    vision_hidden: int = 192
    vision_depth: int = 4
    vision_heads: int = 3
    vision_mlp: int = 768
    deepstack_layers: tuple[int, ...] = (2,)
    text_hidden: int = 256
    text_layers: int = 6
    text_heads: int = 4
    text_kv_heads: int = 2
    head_dim: int = 64
    text_mlp: int = 768
    lm_probe_layer: int = 3


@dataclass(frozen=True)
class Example:
    """One training conversation.

    ``frames``: (T, h, w, 3) uint8 at the Qwen3-VL size; ``input_ids``/``labels``/
    ``mm_token_type_ids``: (L,), labels ``IGNORE_INDEX`` except on the answers;
    ``position_ids``: (3, L) the multimodal rotary positions the model would compute;
    ``token_labels``: (tokens, 3) probe classes of each merged vision token;
    ``token_centres``: (tokens, 2) the centre (x, y) of the shape under it, in [0, 1] of the frame.
    """

    frames: torch.Tensor
    timestamps: tuple[float, ...]
    grid_thw: tuple[int, int, int]
    input_ids: torch.Tensor
    labels: torch.Tensor
    mm_token_type_ids: torch.Tensor
    position_ids: torch.Tensor
    token_labels: torch.Tensor
    token_centres: torch.Tensor


@dataclass(frozen=True)
class Batch:
    """Examples padded on the right to one length L: ids, labels, mask and token types are (B, L),
    ``position_ids`` (3, B, L); ``vision`` holds the tower's precomputed forward arguments for
    all the clips; ``token_labels`` (all tokens, 3), ``token_centres`` (all tokens, 2)."""

    frames: list[torch.Tensor]
    timestamps: list[tuple[float, ...]]
    grids: list[tuple[int, int, int]]
    input_ids: torch.Tensor
    labels: torch.Tensor
    attention_mask: torch.Tensor
    mm_token_type_ids: torch.Tensor
    position_ids: torch.Tensor
    token_labels: torch.Tensor
    token_centres: torch.Tensor
    vision: dict[str, Any]

    def pin_memory(self) -> Batch:
        """The batch in page-locked memory (the DataLoader calls this with ``pin_memory=True``)."""
        pinned = {
            f.name: getattr(self, f.name).pin_memory()
            for f in dataclasses.fields(self)
            if isinstance(getattr(self, f.name), torch.Tensor)
        }
        vision = {k: v.pin_memory() if isinstance(v, torch.Tensor) else v for k, v in self.vision.items()}
        return dataclasses.replace(self, frames=[f.pin_memory() for f in self.frames], vision=vision, **pinned)


class RopeIndex:
    """Qwen3-VL's own multimodal rotary positions (transformers' ``Qwen3VLModel.get_rope_index``)
    without a model, so the data workers compute them on the CPU instead of the training loop."""

    get_rope_index = Qwen3VLModel.get_rope_index
    get_vision_position_ids = Qwen3VLModel.get_vision_position_ids

    def __init__(self, config: Qwen3VLConfig) -> None:
        self.config = config

    def __call__(
        self, input_ids: torch.Tensor, mm_token_type_ids: torch.Tensor, grid_thw: tuple[int, int, int]
    ) -> torch.Tensor:
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
    """Positions right after each ``<|im_start|>assistant\\n``: where the assistant's turns begin."""
    opening = [tokenizer.convert_tokens_to_ids(IM_START), *tokenizer.encode("assistant\n", add_special_tokens=False)]
    width = len(opening)
    return [i + width for i in range(len(input_ids) - width + 1) if list(input_ids[i : i + width]) == opening]


def token_labels(
    sampled: SampledScene, size: tuple[int, int], geometry: VisionGeometry
) -> tuple[torch.Tensor, torch.Tensor]:
    """Probe targets of each merged vision token, in the tower's output order (frame pair, then
    32x32 blocks in raster order) for frames resized to ``size`` (h, w): (tokens, 3) int64
    classes (kind, color, motion; 0 background) and (tokens, 2) float32 centre (x, y) of the
    shape in the pair, as a share of the frame's width and height (0 on background). A token
    takes the shape covering most of its pixels in the pair, if that covers at least
    :data:`MIN_COVERAGE` of them."""
    scene = sampled.scene
    height, width = size
    maps = np.stack([
        cv2.resize(render_labels(scene, t), (width, height), interpolation=cv2.INTER_NEAREST)
        for t in sampled.timestamps
    ])
    pair = geometry.temporal_patch_size
    if pad := -len(maps) % pair:
        maps = np.concatenate([maps, maps[-1:].repeat(pad, axis=0)])
    block = geometry.factor
    blocks = maps.reshape(len(maps) // pair, pair, height // block, block, width // block, block)
    coverage = np.stack(
        [(blocks == index + 1).mean(axis=(1, 3, 5)) for index in range(len(scene.shapes))], axis=-1
    ).reshape(-1, len(scene.shapes))
    owner = np.where(coverage.max(axis=1) >= MIN_COVERAGE, coverage.argmax(axis=1) + 1, 0)
    classes = np.zeros((len(scene.shapes) + 1, 3), np.int64)
    for index, shape in enumerate(scene.shapes):
        classes[index + 1] = (
            SHAPES.index(shape.kind) + 1,
            list(COLORS).index(shape.color) + 1,
            DIRECTIONS.index(shape.direction) + 1,
        )
    pairs = len(maps) // pair
    times = np.asarray(sampled.timestamps + sampled.timestamps[-1:] * pad).reshape(pairs, pair).mean(axis=1)
    centres = np.zeros((pairs, len(scene.shapes) + 1, 2), np.float32)
    for index, shape in enumerate(scene.shapes):
        centres[:, index + 1] = [shape.center_at(float(t)) for t in times]
    centres /= np.array([scene.width, scene.height], np.float32)
    tokens_per_pair = owner.size // pairs
    pair_of_token = np.repeat(np.arange(pairs), tokens_per_pair)
    return torch.from_numpy(classes[owner]), torch.from_numpy(centres[pair_of_token, owner])


def pick_wordings(questions: Sequence[Any], rng: np.random.Generator) -> list[Any]:
    """Each question in its canonical wording or, with probability :data:`PARAPHRASE_SHARE`, in
    one of its other wordings, chosen uniformly."""
    worded = []
    for question in questions:
        count = len(WORDINGS[question.kind])
        paraphrase = count > 1 and rng.random() < PARAPHRASE_SHARE
        worded.append(question.reworded(int(rng.integers(1, count))) if paraphrase else question)
    return worded


def make_example(
    seed: int,
    tokenizer: Any,
    sampling: SamplingSettings,
    geometry: VisionGeometry,
    rope_index: RopeIndex,
    *,
    shape_count: int | None = None,
    clip_folder: Path | None = None,
) -> Example:
    """The example for ``seed``: a conversation about the clip asking its questions in a random
    order and wording (at most :data:`MAX_TURNS`). The first turn is a question with no history,
    as evaluated. ``shape_count`` fixes the number of shapes; with ``clip_folder`` the clip goes
    through a file there and the application's decoder (``sample_scene_file``)."""
    scene = make_scene(seed, shape_count)
    if clip_folder is None:
        sampled = sample_scene(scene, sampling)
    else:
        sampled = sample_scene_file(scene, sampling, clip_folder, geometry)
    questions = questions_for(sampled)
    rng = np.random.default_rng([seed, 1])
    order = rng.permutation(len(questions))[:MAX_TURNS]
    turns = pick_wordings([questions[i] for i in order], rng)
    frames = model_frames(sampled, sampling, geometry)
    size = frames.shape[1:3]
    video = prompt_video(frames, sampled.pair_timestamps, geometry)
    history = [(q.text, q.answer) for q in turns[:-1]]
    prompt = build_chat_inputs(tokenizer, turns[-1].text, videos=[video], history=history, geometry=geometry)
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
    labels_of_tokens, centres = token_labels(sampled, size, geometry)
    return Example(
        frames=torch.from_numpy(np.ascontiguousarray(frames)),
        timestamps=sampled.timestamps,
        grid_thw=grid,
        input_ids=input_ids,
        labels=labels,
        mm_token_type_ids=token_types,
        position_ids=rope_index(input_ids, token_types, grid),
        token_labels=labels_of_tokens,
        token_centres=centres,
    )


@dataclass(frozen=True)
class DataPlan:
    """Which clip example ``i`` is: the first ``single_shape`` examples have one shape (the
    curriculum); every ``file_every``-th goes through a file in ``clip_folder`` (0: none), its
    scene taken in turn from a pool of ``file_pool`` scenes of :data:`FILE_POOL_SEEDS`."""

    single_shape: int = 0
    file_every: int = 0
    file_pool: int = 512
    clip_folder: Path | None = None

    def clip(self, index: int, seeds: range) -> tuple[int, int | None, Path | None]:
        """(scene seed, fixed shape count or None, clip folder or None) of example ``index``."""
        shape_count = 1 if index < self.single_shape else None
        if self.file_every and self.clip_folder is not None and index % self.file_every == self.file_every - 1:
            return FILE_POOL_SEEDS[(index // self.file_every) % self.file_pool], shape_count, self.clip_folder
        return seeds[index], shape_count, None


class ShapeQuestions(Dataset):
    """Map-style dataset: index ``i`` is the example :meth:`DataPlan.clip` names for ``i``
    (by default the seed ``seeds[i]``); :meth:`collate` batches."""

    def __init__(
        self,
        tokenizer: Any,
        config: Qwen3VLConfig,
        seeds: range,
        sampling: SamplingSettings,
        plan: DataPlan = DataPlan(),
    ) -> None:
        self.tokenizer, self.seeds, self.sampling, self.plan = tokenizer, seeds, sampling, plan
        self.geometry = VisionGeometry.from_vision_config(config.vision_config)
        self.rope_index = RopeIndex(config)
        self.metadata = MetadataCache(self.geometry)

    def __len__(self) -> int:
        return len(self.seeds)

    def __getitem__(self, index: int) -> Example:
        seed, shape_count, folder = self.plan.clip(index, self.seeds)
        return make_example(
            seed, self.tokenizer, self.sampling, self.geometry, self.rope_index,
            shape_count=shape_count, clip_folder=folder,
        )

    def collate(self, examples: Sequence[Example]) -> Batch:
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
        vision = self.metadata.batch([("video", e.grid_thw) for e in examples])
        return Batch(
            frames=[e.frames for e in examples],
            timestamps=[e.timestamps for e in examples],
            grids=[e.grid_thw for e in examples],
            input_ids=padded(ids, self.tokenizer.pad_token_id),
            labels=padded([e.labels for e in examples], IGNORE_INDEX),
            attention_mask=padded([torch.ones_like(row) for row in ids], 0),
            mm_token_type_ids=padded([e.mm_token_type_ids for e in examples], 0),
            position_ids=positions,
            token_labels=torch.cat([e.token_labels for e in examples]),
            token_centres=torch.cat([e.token_centres for e in examples]),
            vision=vision.forward_kwargs(max_seqlen=vision.max_sequence_length),
        )


def weighted_class_loss(
    logits: torch.Tensor,
    labels: torch.Tensor,
    groups: Sequence[int],
    weights: torch.Tensor,
    group_weights: Sequence[float],
) -> torch.Tensor:
    """Weighted mean over the class groups (``group_weights``) of the ``weights``-weighted
    cross-entropy: ``logits`` (N, sum(groups)), ``labels`` (N, len(groups)) class per group,
    ``weights`` (N,)."""
    parts = torch.split(logits.float(), tuple(groups), dim=-1)
    total = sum(
        scale * (F.cross_entropy(group, labels[:, i], reduction="none") * weights).sum()
        for i, (group, scale) in enumerate(zip(parts, group_weights))
    )
    return total / (sum(group_weights) * weights.sum().clamp_min(1e-6))


class VisionProbe(torch.nn.Module):
    """Linear probe on the merged vision tokens (the tower's output): logits of
    :data:`PROBE_CLASSES` and the shape's centre. Background tokens weigh
    :data:`BACKGROUND_WEIGHT`. Training only."""

    def __init__(self, hidden: int, group_weights: Sequence[float]) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(hidden, sum(PROBE_CLASSES) + 2)
        self.group_weights = tuple(group_weights)

    def loss(self, tokens: torch.Tensor, labels: torch.Tensor, centres: torch.Tensor) -> torch.Tensor:
        """Class loss plus the squared error of the centre on shape tokens; ``tokens`` (N, hidden),
        ``labels`` (N, 3), ``centres`` (N, 2)."""
        out = self.linear(tokens).float()
        shape = labels[:, 0] > 0
        weights = torch.where(shape, 1.0, BACKGROUND_WEIGHT)
        classes = weighted_class_loss(out[:, :-2], labels, PROBE_CLASSES, weights, self.group_weights)
        error = (out[:, -2:] - centres).square().sum(-1)
        return classes + 10.0 * (error * shape).sum() / shape.sum().clamp_min(1)


class LanguageProbe(torch.nn.Module):
    """Linear probe on the language model's hidden state at each vision token: logits of
    :data:`PROBE_CLASSES` (kind, color, motion of the shape there). Training only."""

    def __init__(self, hidden: int, group_weights: Sequence[float]) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(hidden, sum(PROBE_CLASSES))
        self.group_weights = tuple(group_weights)

    def loss(self, states: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """``states`` (N, hidden) at the vision tokens in order, ``labels`` (N, 3)."""
        weights = torch.where(labels[:, 0] > 0, 1.0, BACKGROUND_WEIGHT)
        return weighted_class_loss(self.linear(states), labels, PROBE_CLASSES, weights, self.group_weights)


class LayerOutput:
    """Keeps the hidden states (B, L, hidden) a decoder layer outputs, through a forward hook."""

    def __init__(self, layer: torch.nn.Module) -> None:
        self.states: torch.Tensor | None = None
        self.handle = layer.register_forward_hook(self._keep)

    def _keep(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        self.states = output[0] if isinstance(output, tuple) else output

    def take(self) -> torch.Tensor:
        states, self.states = self.states, None
        assert states is not None, "the layer did not run"
        return states


@dataclass(frozen=True)
class Losses:
    """The scalar losses of one batch."""

    answer: torch.Tensor
    vision_probe: torch.Tensor
    language_probe: torch.Tensor


def batch_losses(
    model: Qwen3VLForConditionalGeneration,
    probes: tuple[VisionProbe, LanguageProbe],
    probed_layer: LayerOutput,
    injector: FeatureInjector,
    batch: Batch,
    device: torch.device,
    geometry: VisionGeometry,
) -> Losses:
    """The losses of a batch. Pixels are patchified on ``device`` by the application's own
    function; the tower runs once on all clips with the precomputed metadata."""
    videos = [
        preprocess_video(frames.to(device, non_blocking=True), times, geometry)
        for frames, times in zip(batch.frames, batch.timestamps)
    ]
    for video, grid in zip(videos, batch.grids):
        assert video.item.grid_thw == grid, "the prompt was built for another grid"
    grid_thw = torch.tensor(batch.grids, device=device)
    vision_kwargs = {
        k: v.to(device, non_blocking=True) if isinstance(v, torch.Tensor) else v for k, v in batch.vision.items()
    }
    tower = model.model.visual(
        torch.cat([video.item.pixel_values for video in videos]), grid_thw=grid_thw, return_dict=True, **vision_kwargs
    )
    features = EncodedItem(embeds=tower.pooler_output, deepstack=tuple(tower.deepstack_features))
    token_types = batch.mm_token_type_ids.to(device, non_blocking=True)
    with injector.serving(video=[features]):
        output = model(
            input_ids=batch.input_ids.to(device, non_blocking=True),
            attention_mask=batch.attention_mask.to(device, non_blocking=True),
            mm_token_type_ids=token_types,
            position_ids=batch.position_ids.to(device, non_blocking=True),
            labels=batch.labels.to(device, non_blocking=True),
            pixel_values_videos=torch.empty(0, device=device),
            video_grid_thw=grid_thw,
            use_cache=False,
        )
    labels = batch.token_labels.to(device, non_blocking=True)
    vision_probe, language_probe = probes
    states = probed_layer.take()[token_types == VIDEO_TOKEN]
    return Losses(
        answer=output.loss,
        vision_probe=vision_probe.loss(tower.pooler_output, labels, batch.token_centres.to(device, non_blocking=True)),
        language_probe=language_probe.loss(states, labels),
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
    from framewise.core.encoding.attention_backends import REGISTERED_NAMES, register_backends

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


def load_weights(model: Qwen3VLForConditionalGeneration, folder: Path) -> None:
    """Copy the weights of an earlier demo model (same sizes and vocabulary) into ``model``."""
    earlier = Qwen3VLForConditionalGeneration.from_pretrained(folder, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(earlier.state_dict(), strict=False)
    if unexpected or [name for name in missing if name != "lm_head.weight"]:  # lm_head is tied to the embeddings
        raise SystemExit(f"{folder} is not a demo model of these sizes: missing {missing}, unexpected {unexpected}")


def learning_rate(step: int, total: int, peak: float, warmup: int) -> float:
    """Linear warm-up, then cosine decay to a tenth of the peak."""
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def save(model: Qwen3VLForConditionalGeneration, tokenizer: Any, out: Path, training: dict[str, Any]) -> None:
    """Write the demo-model folder in bfloat16; ``training`` (how it was made) goes into framewise.json."""
    save_demo_model(
        out,
        model,
        tokenizer,
        label=DEMO_LABEL,
        description=(
            "A tiny Qwen3-VL (the released architecture at a small size) trained on synthetic clips of moving "
            "squares, circles and triangles. It answers what color a shape is, which way it moves, how many "
            "shapes there are, what appears first and when a shape appears; anything else it answers poorly."
        ),
        made_by=training["command"],
        dtype=torch.bfloat16,
        extra={"training": training},
    )


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
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--warmup", type=int, default=150)
    parser.add_argument("--probe-weight", type=float, default=0.5, help="weight of the vision-token probe loss")
    parser.add_argument(
        "--lm-probe-weight", type=float, default=0.5, help="weight of the probe on the language model's vision tokens"
    )
    parser.add_argument(
        "--kind-weight", type=float, default=3.0,
        help="weight of the shape-kind term in both probes, against 1 for color and for motion",
    )
    parser.add_argument("--curriculum-steps", type=int, default=150, help="first steps with one shape per clip")
    parser.add_argument(
        "--file-every", type=int, default=8,
        help="every N-th clip goes through an H.264 file and the application's decoder (0: none)",
    )
    parser.add_argument("--file-pool", type=int, default=512, help="scenes the file clips are taken from")
    parser.add_argument(
        "--clip-folder", type=Path, default=None,
        help="where the file clips are written (default: a temporary folder, removed at the end)",
    )
    parser.add_argument("--workers", type=int, default=max(1, min(14, (os.cpu_count() or 2) - 2)))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--init", type=Path, default=None, help="continue from the weights of this model folder")
    parser.add_argument("--first-seed", type=int, default=0, help="seed of the first training clip")
    parser.add_argument("--save-every-s", type=float, default=60.0)
    parser.add_argument("--log-every", type=int, default=50)
    args = parser.parse_args(argv)
    if (args.steps is None) == (args.minutes is None):
        parser.error("give exactly one of --steps and --minutes")
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="framewise-clips-") as scratch:
        train(args, args.clip_folder or Path(scratch))


def train(args: argparse.Namespace, clip_folder: Path) -> None:
    """The training run ``args`` describe; file clips are written into ``clip_folder``."""
    transformers.utils.logging.disable_progress_bar()
    seed_everything(args.seed)
    device = torch.device(args.device)
    dims = ModelDims()
    tokenizer = build_demo_tokenizer(sorted(set(DEMO_WORDS) | set(answer_words())))
    model = build_model(tokenizer, dims, args.seed)
    if args.init is not None:
        load_weights(model, args.init)
    model.to(device)
    hidden = model.config.text_config.hidden_size
    group_weights = (args.kind_weight, 1.0, 1.0)  # kind, color, motion
    probes = (VisionProbe(hidden, group_weights).to(device), LanguageProbe(hidden, group_weights).to(device))
    probed_layer = LayerOutput(model.model.language_model.layers[dims.lm_probe_layer - 1])
    injector = FeatureInjector(model)
    geometry = VisionGeometry.from_vision_config(model.config.vision_config)
    params = sum(p.numel() for p in model.parameters())
    print(f"model: {params / 1e6:.2f} M parameters ({params * 2 / 1e6:.1f} MB in bfloat16)", flush=True)
    varlen = use_varlen_vision_attention(model, device)
    print(f"vision attention: {'varlen' if varlen else 'sdpa per frame pair'}", flush=True)

    clip_folder.mkdir(parents=True, exist_ok=True)
    plan = DataPlan(
        single_shape=args.curriculum_steps * args.batch,
        file_every=args.file_every,
        file_pool=args.file_pool,
        clip_folder=clip_folder,
    )
    dataset = ShapeQuestions(tokenizer, model.config, TRAIN_SEEDS[args.first_seed :], SamplingSettings(), plan)
    loader = DataLoader(
        dataset,
        batch_size=args.batch,
        shuffle=False,  # consecutive seeds are unrelated scenes already
        collate_fn=dataset.collate,
        num_workers=args.workers,
        pin_memory=device.type == "cuda",
        persistent_workers=args.workers > 0,
        prefetch_factor=4 if args.workers > 0 else None,
        worker_init_fn=_single_threaded,
    )
    trained = [
        *model.named_parameters(),
        *((f"probe{i}.{n}", p) for i, probe in enumerate(probes) for n, p in probe.named_parameters()),
    ]
    decay = [p for n, p in trained if p.dim() >= 2 and "embed" not in n]
    no_decay = [p for n, p in trained if not (p.dim() >= 2 and "embed" not in n)]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.05}, {"params": no_decay, "weight_decay": 0.0}],
        lr=args.lr, betas=(0.9, 0.98), fused=device.type == "cuda",
    )
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda")

    total = args.steps if args.steps is not None else 10**9
    budget_s = args.minutes * 60 if args.minutes is not None else None
    started = time.perf_counter()
    last_save = started
    timing_start = (0, started)
    sums = torch.zeros(3, device=device)  # the losses since the last log line
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
            losses = batch_losses(model, probes, probed_layer, injector, batch, device, geometry)
        optimizer.zero_grad(set_to_none=True)
        loss = losses.answer + args.probe_weight * losses.vision_probe + args.lm_probe_weight * losses.language_probe
        loss.backward()
        torch.nn.utils.clip_grad_norm_([p for _, p in trained], 1.0)
        optimizer.step()
        sums += torch.stack([losses.answer.detach(), losses.vision_probe.detach(), losses.language_probe.detach()])
        step += 1

        now = time.perf_counter()
        if budget_s is not None and args.steps is None:
            # Plan the run from the speed between half and the end of the warm-up (start-up excluded).
            if step == args.warmup // 2:
                timing_start = (step, now)
            elif step == args.warmup:
                rate = (step - timing_start[0]) / (now - timing_start[1])
                total = max(step + 1, int(step + 0.95 * rate * (budget_s - (now - started))))
                print(f"{rate:.1f} steps/s: training {total} steps (reproduce with --steps {total})", flush=True)
        if step % args.log_every == 0:
            answer_mean, vision_mean, language_mean = (sums / args.log_every).tolist()
            print(
                f"step {step}/{total if total < 10**9 else '?'} answer loss {answer_mean:.4f} "
                f"probe losses {vision_mean:.4f} (vision) {language_mean:.4f} (language) "
                f"lr {optimizer.param_groups[0]['lr']:.2e} {now - started:.0f} s (waited {waiting_s:.1f} s for data)",
                flush=True,
            )
            sums.zero_()
            waiting_s = 0.0
        if now - last_save >= args.save_every_s:
            save(model, tokenizer, args.out, _state(args, dims, step, total, now - started, varlen, params))
            last_save = now
        ready = time.perf_counter()
    elapsed = time.perf_counter() - started
    save(model, tokenizer, args.out, _state(args, dims, step, total, elapsed, varlen, params))
    print(f"trained {step} steps in {elapsed:.0f} s; saved to {args.out}", flush=True)


def _single_threaded(worker_id: int) -> None:
    torch.set_num_threads(1)


def _state(
    args: argparse.Namespace, dims: ModelDims, step: int, total: int, seconds: float, varlen: bool, params: int
) -> dict[str, Any]:
    return {
        "steps_done": step,
        "steps_planned": total,
        "seconds": round(seconds, 1),
        "batch": args.batch,
        "lr": args.lr,
        "warmup": args.warmup,
        "probe_weight": args.probe_weight,
        "lm_probe_weight": args.lm_probe_weight,
        "kind_weight": args.kind_weight,
        "curriculum_steps": args.curriculum_steps,
        "file_every": args.file_every,
        "file_pool": args.file_pool,
        "seed": args.seed,
        "first_seed": args.first_seed,
        "init": str(args.init) if args.init else None,
        "dims": dataclasses.asdict(dims),
        "device": torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu",
        "vision_attention": "varlen" if varlen else "sdpa",
        "parameters": params,
        "torch": torch.__version__,
        "command": "python -m training.train_demo " + " ".join(sys.argv[1:]),
    }


if __name__ == "__main__":
    main()
