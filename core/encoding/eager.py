"""The eager vision encoder: :class:`EagerVisionEncoder` runs the tower's own forward through its
adapter (the reference path, and the only one on a CPU), one of the two
:class:`~framewise.core.encoding.defs.VisionEncoder` implementations beside the CUDA-graph
manager (:mod:`framewise.core.encoding.manager`); and the frame counts both report per pass.
"""

from __future__ import annotations

from typing import Sequence

import torch

from framewise.core.encoding.defs import (
    CaptureReport,
    EncodedItem,
    EncoderOutput,
    SupportsEncoderGraphs,
    VisionItem,
)
from framewise.core.encoding.timing import StageTimer
from framewise.core.events import ChunkStats


class EagerVisionEncoder:
    """Runs the tower's stock forward on all items at once; the reference for every other encoder.

    ``reason`` says, in a few words, why no graph ran; it is recorded on every chunk.
    """

    name = "eager"
    captured = False
    budgets: tuple[int, ...] = ()
    report: CaptureReport | None = None

    def __init__(self, adapter: SupportsEncoderGraphs, reason: str = "graphs off") -> None:
        self.adapter = adapter
        self.reason = reason

    @torch.inference_mode()
    def encode(self, items: Sequence[VisionItem]) -> EncoderOutput:
        if not items:
            return EncoderOutput(items=[], chunks=[])
        with StageTimer(self.adapter.device) as timer:
            outputs = self.adapter.eager_forward(items)
        chunk = ChunkStats(
            chunk_index=0,
            items=len(items),
            frames=sum(item_frames(self.adapter, item) for item in items),
            patches=sum(item.patches for item in items),
            budget=None,
            padding_fraction=0.0,
            encode_ms=timer.elapsed_ms(),
            graph_hit=False,
            fallback_reason=self.reason,
        )
        sizes = [self.adapter.output_rows(item.patches) for item in items]
        return EncoderOutput(items=split_rows(outputs, sizes), chunks=[chunk])

    def clear(self) -> None:
        """Nothing to give back: the eager encoder holds no buffers and changes nothing on the model."""


def item_frames(adapter: SupportsEncoderGraphs, item: VisionItem) -> int:
    """Sampled frames ``item`` stands for: its adapter's count per slice, less the repeated ones."""
    return item.grid_thw[0] * adapter.frames_per_slice(item.modality) - item.repeated_frames


def piece_frames(adapter: SupportsEncoderGraphs, item: VisionItem, first: int, count: int) -> int:
    """Sampled frames among slices ``first .. first + count - 1`` of ``item`` (the repeated ones are in its last slice)."""
    per_slice = adapter.frames_per_slice(item.modality)
    return min((first + count) * per_slice, item_frames(adapter, item)) - first * per_slice


def split_rows(outputs: Sequence[torch.Tensor], sizes: Sequence[int]) -> list[EncodedItem]:
    """Split batched tower outputs, (sum(sizes), hidden) each, into one EncodedItem per size."""
    per_output = [torch.split(output, list(sizes)) for output in outputs]
    return [EncodedItem.from_outputs([parts[i] for parts in per_output]) for i in range(len(sizes))]
