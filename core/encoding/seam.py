"""The vision-encoder seam: the one place the engine calls a model's vision tower through.

:class:`VisionEncoder` is the protocol; :class:`EagerVisionEncoder` runs the tower's own
forward through its adapter (the reference path, and the only one on a CPU). The CUDA-graph
manager in :mod:`framewise.core.encoding.manager` implements the same protocol.
"""

from __future__ import annotations

import time
from typing import Protocol, Sequence

import torch

from framewise.core.encoding.defs import (
    CaptureReport,
    EncodedItem,
    EncoderOutput,
    SupportsEncoderGraphs,
    VisionItem,
)
from framewise.core.events import ChunkStats


class VisionEncoder(Protocol):
    """What the engine needs of a vision encoder.

    ``captured``: whether graphs run the tower; ``budgets``: the captured token budgets
    (empty without graphs); ``report``: what capturing cost, ``None`` without graphs.
    """

    name: str

    @property
    def captured(self) -> bool: ...

    @property
    def budgets(self) -> tuple[int, ...]: ...

    @property
    def report(self) -> CaptureReport | None: ...

    def encode(self, items: Sequence[VisionItem]) -> EncoderOutput:
        """Encode ``items``; outputs keep their order."""
        ...

    def clear(self) -> None:
        """Give back what the encoder holds and undo what it changed on the model."""
        ...


class StageTimer:
    """Times a region of work: CUDA events on a GPU (read after the stream is done), else a host clock.

    ``events`` (start, end) lets a caller reuse timing events it keeps instead of creating two, and
    ``stream`` spares looking the current stream up at every record.
    """

    def __init__(
        self,
        device: torch.device,
        events: tuple[torch.cuda.Event, torch.cuda.Event] | None = None,
        stream: torch.cuda.Stream | None = None,
    ) -> None:
        self._cuda = device.type == "cuda"
        if self._cuda:
            self._start, self._end = events or (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
            self._stream = stream

    def __enter__(self) -> StageTimer:
        if self._cuda:
            self._start.record(self._stream)
        else:
            self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._cuda:
            self._end.record(self._stream)
        else:
            self._elapsed_ms = (time.perf_counter() - self._t0) * 1e3

    def elapsed_ms(self) -> float:
        """Milliseconds between enter and exit; synchronizes on the end event on a GPU."""
        if self._cuda:
            self._end.synchronize()
            return self._start.elapsed_time(self._end)
        return self._elapsed_ms


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
