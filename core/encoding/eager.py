"""The eager vision encoder: :class:`EagerVisionEncoder` runs the tower's own forward through its
adapter (the reference path, and the only one on a CPU), one of the two
:class:`~framewise.core.encoding.defs.VisionEncoder` implementations beside the CUDA-graph
manager (:mod:`framewise.core.encoding.manager`); and the frame counts both report per pass.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import torch

from framewise.core.encoding.defs import (
    CaptureReport,
    EncodedItem,
    EncoderOutput,
    SupportsEncoderGraphs,
    VisionItem,
)
from framewise.core.encoding.planning import BatchLimits, PlanItem, plan_batches
from framewise.core.encoding.timing import StageTimer
from framewise.core.events import ChunkStats

# Rows a run of the tower takes at most on a CPU. There the elementwise work between its matrix
# products is bound by memory traffic, so a pass runs a few thousand rows at a time, whose
# activations stay in the processor's cache (docs/benchmarks.md, "Reading long clips on 2 cores").
CPU_RUN_ROWS = 4096


class EagerVisionEncoder:
    """Runs the tower's stock forward on the items; the reference for every other encoder.

    ``reason`` says, in a few words, why no graph ran; it is recorded on every chunk. On a CPU the
    items go through the tower in runs of at most ``cpu_run_rows`` rows, cut between slices
    (:func:`runs_of_rows`); elsewhere all at once.
    """

    name = "eager"
    captured = False
    budgets: tuple[int, ...] = ()
    report: CaptureReport | None = None

    def __init__(
        self, adapter: SupportsEncoderGraphs, reason: str = "graphs off", cpu_run_rows: int = CPU_RUN_ROWS
    ) -> None:
        self.adapter = adapter
        self.reason = reason
        self.cpu_run_rows = cpu_run_rows

    @torch.inference_mode()
    def encode(self, items: Sequence[VisionItem]) -> EncoderOutput:
        if not items:
            return EncoderOutput(items=[], chunks=[])
        with StageTimer(self.adapter.device) as timer:
            outputs = self._forward(items)
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

    def _forward(self, items: Sequence[VisionItem]) -> tuple[torch.Tensor, ...]:
        """The tower's outputs for ``items`` together, each (sum of the items' output rows, hidden)."""
        if self.adapter.device.type != "cpu":
            return self.adapter.eager_forward(items)
        runs = [self.adapter.eager_forward(run) for run in runs_of_rows(items, self.cpu_run_rows)]
        return tuple(torch.cat(parts) for parts in zip(*runs))


def runs_of_rows(items: Sequence[VisionItem], max_rows: int) -> list[list[VisionItem]]:
    """``items`` in order as runs of at most ``max_rows`` patch rows each, packed as the planner
    packs a graph's passes (:func:`~framewise.core.encoding.planning.plan_batches`): an item cut
    between its slices where it fits no run whole; an item whose slices are larger than
    ``max_rows`` a run of its own. Every slice attends within itself, so the runs' outputs,
    joined, are the items' outputs."""
    plan = [PlanItem(item.modality, item.grid_thw) for item in items]
    limits = BatchLimits((max_rows,), max_items=len(items), max_sequences=max(max_rows, len(items)), budget_multiple=1)
    return [
        [slices_of(items[piece.item], piece.first, piece.count) for piece in batch.pieces]
        for batch in plan_batches(plan, limits)
    ]


def slices_of(item: VisionItem, first: int, count: int) -> VisionItem:
    """Slices ``first .. first + count - 1`` of ``item`` as an item of their own; the repeated
    frames go with the last slice."""
    t, h, w = item.grid_thw
    if first == 0 and count == t:
        return item
    last = first + count == t
    return dataclasses.replace(
        item,
        pixel_values=item.pixel_values[first * h * w : (first + count) * h * w],
        grid_thw=(count, h, w),
        repeated_frames=item.repeated_frames if last else 0,
    )


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
