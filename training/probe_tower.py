"""How well a demo model's vision tower tells the shapes apart, token by token.

    python -m training.probe_tower [--model assets/demo_model] [--train-clips 120] [--test-clips 50]

Runs the tower (eager, float32, on the CPU) on rendered clips, keeps the merged tokens that a
shape covers (``training.train_demo.token_labels``), fits one linear classifier per property
(the shape's kind, color and motion) on tokens of training-range clips and prints its accuracy on
tokens of held-out clips. A property the tower's tokens do not carry linearly is one the language
model cannot read off a single token either.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

import torch
import torch.nn.functional as F
from transformers import Qwen3VLForConditionalGeneration

from framewise.core.families.qwen3_vl.geometry import VisionGeometry
from framewise.core.families.qwen3_vl.processor import preprocess_video
from framewise.core.loading import DEMO_MODEL_DIR
from framewise.core.settings import SamplingSettings
from training.synthetic import HELD_OUT_SEEDS, TRAIN_SEEDS, make_scene, model_frames, sample_scene
from training.train_demo import token_labels

PROPERTIES = ("kind", "color", "motion")  # the columns of token_labels
PROBE_SEEDS = TRAIN_SEEDS[5_000_000:]


def shape_tokens(model: Qwen3VLForConditionalGeneration, seeds: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """(N, hidden) merged tokens a shape covers in the clips of ``seeds`` and their (N, 3) classes."""
    geometry = VisionGeometry.from_vision_config(model.config.vision_config)
    sampling = SamplingSettings()
    tokens, labels = [], []
    for seed in seeds:
        sampled = sample_scene(make_scene(seed), sampling)
        frames = model_frames(sampled, sampling, geometry)
        video = preprocess_video(frames, sampled.timestamps, geometry)
        with torch.no_grad():
            merged = model.model.visual(
                video.item.pixel_values, grid_thw=torch.tensor([video.item.grid_thw])
            ).pooler_output
        classes, _ = token_labels(sampled, frames.shape[1:3], geometry)
        on_shape = classes[:, 0] > 0
        tokens.append(merged[on_shape])
        labels.append(classes[on_shape])
    return torch.cat(tokens), torch.cat(labels)


def probe_accuracy(train: torch.Tensor, train_labels: torch.Tensor, test: torch.Tensor, test_labels: torch.Tensor) -> float:
    """Accuracy on ``test`` of a linear classifier fitted on standardized ``train`` tokens (N, hidden)."""
    mean, std = train.mean(0), train.std(0) + 1e-6
    train, test = (train - mean) / std, (test - mean) / std
    classes = int(max(train_labels.max(), test_labels.max())) + 1
    linear = torch.nn.Linear(train.shape[1], classes)
    optimizer = torch.optim.Adam(linear.parameters(), lr=1e-2, weight_decay=1e-4)
    for _ in range(300):
        optimizer.zero_grad()
        F.cross_entropy(linear(train), train_labels).backward()
        optimizer.step()
    with torch.no_grad():
        return (linear(test).argmax(-1) == test_labels).float().mean().item()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=DEMO_MODEL_DIR)
    parser.add_argument("--train-clips", type=int, default=120)
    parser.add_argument("--test-clips", type=int, default=50)
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    model = Qwen3VLForConditionalGeneration.from_pretrained(args.model, dtype=torch.float32).eval()
    train, train_labels = shape_tokens(model, PROBE_SEEDS[: args.train_clips])
    test, test_labels = shape_tokens(model, HELD_OUT_SEEDS[: args.test_clips])
    print(f"{len(train)} shape tokens to fit on, {len(test)} held out")
    for column, name in enumerate(PROPERTIES):
        accuracy = probe_accuracy(train, train_labels[:, column], test, test_labels[:, column])
        print(f"{name:<7} {accuracy:.1%}")


if __name__ == "__main__":
    main()
