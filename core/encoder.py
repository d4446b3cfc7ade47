"""The vision-encoder seam: the one place the engine calls Qwen3-VL's vision tower through.

:class:`VisionEncoder` is the protocol; :class:`EagerVisionEncoder` runs the tower's own
``forward`` (the reference path, and the only one on a CPU). The CUDA-graph encoder in
``core.encoder_graphs`` implements the same protocol.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Literal, Protocol, Sequence

import torch

from framewise.core.events import ChunkStats

Modality = Literal["image", "video"]


@dataclass(frozen=True)
class VisionItem:
    """One image or video ready for the tower.

    ``pixel_values``: (t*h*w, 3*2*16*16) patch rows in Qwen3-VL's order, where
    ``grid_thw = (t, h, w)`` counts temporal patches (frame pairs) and 16-pixel patches.
    """

    pixel_values: torch.Tensor
    grid_thw: tuple[int, int, int]
    modality: Modality

    @property
    def patches(self) -> int:
        t, h, w = self.grid_thw
        return t * h * w

    @property
    def frames(self) -> int:
        """Frames the item stands for: 2 per temporal patch of a video, 1 for an image."""
        return self.grid_thw[0] * 2 if self.modality == "video" else 1


@dataclass(frozen=True)
class EncodedItem:
    """The tower's output for one item.

    ``embeds``: (patches/4, out_hidden) merged tokens; ``deepstack``: one tensor of the same
    shape per deepstack layer.
    """

    embeds: torch.Tensor
    deepstack: tuple[torch.Tensor, ...]


@dataclass(frozen=True)
class EncoderOutput:
    """Per-item outputs in the order the items were given, and one stats record per pass."""

    items: list[EncodedItem]
    chunks: list[ChunkStats]


class VisionEncoder(Protocol):
    """What the engine needs of a vision encoder."""

    name: str

    def encode(self, items: Sequence[VisionItem]) -> EncoderOutput:
        """Encode ``items``; outputs keep their order."""
        ...


class StageTimer:
    """Times a region of work: CUDA events on a GPU (read after the stream is done), else a host clock."""

    def __init__(self, device: torch.device) -> None:
        self._cuda = device.type == "cuda"
        if self._cuda:
            self._start = torch.cuda.Event(enable_timing=True)
            self._end = torch.cuda.Event(enable_timing=True)

    def __enter__(self) -> StageTimer:
        if self._cuda:
            self._start.record()
        else:
            self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._cuda:
            self._end.record()
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

    def __init__(self, visual: torch.nn.Module, reason: str = "graphs off") -> None:
        self.visual = visual
        self.reason = reason

    @torch.inference_mode()
    def encode(self, items: Sequence[VisionItem]) -> EncoderOutput:
        if not items:
            return EncoderOutput(items=[], chunks=[])
        device = next(self.visual.parameters()).device
        dtype = next(self.visual.parameters()).dtype
        pixels = torch.cat([item.pixel_values for item in items]).to(device=device, dtype=dtype)
        grid = torch.tensor([item.grid_thw for item in items], device=device)
        with StageTimer(device) as timer:
            output = self.visual(pixels, grid_thw=grid, return_dict=True)
        encode_ms = timer.elapsed_ms()
        frames = sum(item.frames for item in items)
        chunk = ChunkStats(
            chunk_index=0,
            items=len(items),
            frames=frames,
            patches=sum(item.patches for item in items),
            budget=None,
            padding_fraction=0.0,
            encode_ms=encode_ms,
            ms_per_frame=encode_ms / frames,
            graph_hit=False,
            fallback_reason=self.reason,
        )
        return EncoderOutput(items=split_per_item(output.pooler_output, output.deepstack_features, items), chunks=[chunk])


def split_per_item(
    embeds: torch.Tensor, deepstack: Sequence[torch.Tensor], items: Sequence[VisionItem]
) -> list[EncodedItem]:
    """Split batched tower output (sum of merged tokens, out_hidden) into one EncodedItem per item."""
    sizes = [item.patches // 4 for item in items]
    per_item_embeds = torch.split(embeds, sizes)
    per_layer = [torch.split(layer, sizes) for layer in deepstack]
    return [
        EncodedItem(embeds=per_item_embeds[i], deepstack=tuple(layer[i] for layer in per_layer))
        for i in range(len(items))
    ]
