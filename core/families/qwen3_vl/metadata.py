"""The vision tower's per-batch metadata, computed on the CPU and cached by ``(modality, grid_thw)``
and, padded for a graph's pass, on the device by the pass's pieces.

Qwen3-VL's vision forward derives four things from ``grid_thw`` with host-side loops: the
bilinear taps into its learned (side x side) position table, the rotary position ids (row, col
in 2x2 merge-block order), the attention boundaries ``cu_seqlens`` (one sequence per temporal
patch) and ``max_seqlen``. Passed in as keyword arguments they are used as they are, which is
what lets the forward run inside a CUDA graph. The values here equal transformers' own; the
padded form adds one trailing sequence that covers the rows no item fills.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable, Hashable, Sequence, TypeVar

import torch

from framewise.core.errors import EncoderError
from framewise.core.families.qwen3_vl.geometry import VisionGeometry

T = TypeVar("T")


@dataclass(frozen=True)
class ItemMetadata:
    """Metadata of one item (or one piece of a video) with ``n = t*h*w`` patch rows.

    ``interp_indices``/``interp_weights``: (n, 4) int64 / float32 bilinear taps into the flat
    position table; ``position_ids``: (n, 2) int64 (row, col); ``sequence_lengths``: h*w, t times.
    """

    interp_indices: torch.Tensor
    interp_weights: torch.Tensor
    position_ids: torch.Tensor
    sequence_lengths: tuple[int, ...]


@dataclass(frozen=True)
class BatchMetadata:
    """Metadata of one pass over ``rows`` patch rows, ``patches`` of them real.

    ``cu_seqlens``: int32 boundaries; in the padded form ``(max_sequences + 2,)``, with the
    padding rows as one trailing sequence and unused slots repeating the final boundary.
    """

    interp_indices: torch.Tensor
    interp_weights: torch.Tensor
    position_ids: torch.Tensor
    cu_seqlens: torch.Tensor
    patches: int
    sequences: int
    max_sequence_length: int

    @property
    def rows(self) -> int:
        return self.interp_indices.shape[0]

    def forward_kwargs(self, max_seqlen: int) -> dict[str, torch.Tensor | int]:
        """Keyword arguments for ``Qwen3VLVisionModel.forward`` that replace its own computation."""
        return {
            "interp_indices": self.interp_indices,
            "interp_weights": self.interp_weights,
            "position_ids": self.position_ids,
            "cu_seqlens": self.cu_seqlens,
            "max_seqlen": max_seqlen,
        }


def frame_position_ids(height: int, width: int, merge_size: int) -> torch.Tensor:
    """(height*width, 2) int64 (row, col) of each patch of one frame, in merge-block order."""
    m = merge_size
    blocks = (height // m, width // m, m, m)
    rows = torch.arange(height).view(height // m, 1, m, 1).expand(blocks)
    cols = torch.arange(width).view(1, width // m, 1, m).expand(blocks)
    return torch.stack([rows.flatten(), cols.flatten()], dim=-1)


def axis_taps(size: int, side: int, align_corners: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Linear-interpolation taps of an axis of ``size`` positions into a table axis of ``side``.

    Returns (size, 2) int64 taps and (size, 2) float32 weights, computed with the same float32
    operations as transformers' ``vision_utils`` so the results are bitwise equal.
    """
    index = torch.arange(size, dtype=torch.float32)
    if align_corners:
        source = index * (side - 1) / max(size - 1, 1)
    else:
        source = (index + 0.5) * side / size - 0.5
    floor = torch.floor(source)
    offsets = torch.arange(0, 2)
    taps = (floor.long()[:, None] + offsets).clamp(0, side - 1)
    weights = (1 - (source[:, None] - floor[:, None] - offsets).abs()).clamp(min=0)
    return taps, weights


def item_metadata(grid_thw: tuple[int, int, int], geometry: VisionGeometry) -> ItemMetadata:
    """Compute the metadata of one item; every temporal patch repeats the first frame's."""
    t, h, w = grid_thw
    if h % geometry.merge_size or w % geometry.merge_size:
        raise EncoderError(
            f"Grid {h}x{w} patches is not a multiple of the {geometry.merge_size}x{geometry.merge_size} merge; "
            "resize the input to a multiple of 32 pixels."
        )
    side = geometry.num_grid_per_side
    position_ids = frame_position_ids(h, w, geometry.merge_size)
    row_taps, row_weights = axis_taps(h, side, geometry.align_corners)
    col_taps, col_weights = axis_taps(w, side, geometry.align_corners)
    rows, cols = position_ids[:, 0], position_ids[:, 1]
    indices = (row_taps[rows][:, :, None] * side + col_taps[cols][:, None, :]).reshape(-1, 4)
    weights = (row_weights[rows][:, :, None] * col_weights[cols][:, None, :]).reshape(-1, 4)
    return ItemMetadata(
        interp_indices=indices.repeat(t, 1),
        interp_weights=weights.repeat(t, 1),
        position_ids=position_ids.repeat(t, 1),
        sequence_lengths=(h * w,) * t,
    )


class MetadataCache:
    """Metadata cached on two levels, least recently used dropped past each level's capacity.

    Items by ``(modality, grid_thw)`` on the CPU (``capacity``); whole padded passes by their
    pieces, rows and sequence slots on the device they are read on (``pass_capacity``), so a
    pass of shapes seen before costs no host work and no host-to-device copy; the encoder's
    ``clear()`` drops the passes (:meth:`drop_passes`). ``hits``/``misses``
    count item lookups and ``pass_hits``/``pass_misses`` pass lookups, so tests and the
    encoder's stats (``framewise.core.encoding.manager.EncoderStats``) can see each level work.
    """

    def __init__(self, geometry: VisionGeometry, capacity: int = 256, pass_capacity: int = 64) -> None:
        self.geometry = geometry
        self.capacity = capacity
        self.pass_capacity = pass_capacity
        self.hits = 0
        self.misses = 0
        self.pass_hits = 0
        self.pass_misses = 0
        self._items: OrderedDict[tuple[str, tuple[int, int, int]], ItemMetadata] = OrderedDict()
        self._passes: OrderedDict[tuple, BatchMetadata] = OrderedDict()

    def __len__(self) -> int:
        return len(self._items)

    def drop_passes(self) -> None:
        """Forget every cached pass (their device memory goes back when nothing else holds it)."""
        self._passes.clear()

    def item(self, modality: str, grid_thw: tuple[int, int, int]) -> ItemMetadata:
        key = (modality, tuple(int(v) for v in grid_thw))
        computed, hit = _lookup(self._items, key, self.capacity, lambda: item_metadata(key[1], self.geometry))
        self.hits += hit
        self.misses += not hit
        return computed

    def padded_pass(
        self,
        pieces: Sequence[tuple[str, tuple[int, int, int]]],
        rows: int,
        max_sequences: int,
        device: torch.device,
    ) -> BatchMetadata:
        """:meth:`batch` padded to ``rows`` and ``max_sequences``, its tensors on ``device``.

        The tensors are shared by every lookup of the same pass: read them, never write them.
        """
        key = (tuple((modality, tuple(int(v) for v in grid)) for modality, grid in pieces), rows, max_sequences, device)

        def on_device() -> BatchMetadata:
            host = self.batch(pieces, rows=rows, max_sequences=max_sequences)
            return dataclasses.replace(
                host,
                interp_indices=host.interp_indices.to(device),
                interp_weights=host.interp_weights.to(device),
                position_ids=host.position_ids.to(device),
                cu_seqlens=host.cu_seqlens.to(device),
            )

        computed, hit = _lookup(self._passes, key, self.pass_capacity, on_device)
        self.pass_hits += hit
        self.pass_misses += not hit
        return computed

    def batch(
        self,
        pieces: Sequence[tuple[str, tuple[int, int, int]]],
        rows: int | None = None,
        max_sequences: int | None = None,
    ) -> BatchMetadata:
        """Metadata of one pass over ``pieces`` (modality, grid) in order.

        With ``rows`` and ``max_sequences`` (a graph's budget and sequence slots) the result is
        padded: zero taps and positions past the real rows, the padding rows one trailing
        sequence, unused ``cu_seqlens`` slots repeating ``rows``. Without them it is exactly
        what the tower computes for these grids.
        """
        parts = [self.item(modality, grid) for modality, grid in pieces]
        lengths = [length for part in parts for length in part.sequence_lengths]
        patches = sum(lengths)
        padded = rows is not None
        rows = patches if rows is None else rows
        if patches > rows:
            raise EncoderError(f"{patches} patches do not fit a pass of {rows} rows.")
        slots = len(lengths) + 1 if max_sequences is None else max_sequences + 2
        if len(lengths) + 2 > slots and padded:
            raise EncoderError(f"{len(lengths)} frame pairs do not fit a pass sized for {max_sequences}.")
        indices = torch.zeros(rows, 4, dtype=torch.int64)
        weights = torch.zeros(rows, 4, dtype=torch.float32)
        position_ids = torch.zeros(rows, 2, dtype=torch.int64)
        indices[:patches] = torch.cat([part.interp_indices for part in parts])
        weights[:patches] = torch.cat([part.interp_weights for part in parts])
        position_ids[:patches] = torch.cat([part.position_ids for part in parts])
        cu_seqlens = torch.full((slots,), rows, dtype=torch.int32)
        cu_seqlens[0] = 0
        cu_seqlens[1 : len(lengths) + 1] = torch.tensor(lengths, dtype=torch.int64).cumsum(0)
        padding = rows - patches
        return BatchMetadata(
            interp_indices=indices,
            interp_weights=weights,
            position_ids=position_ids,
            cu_seqlens=cu_seqlens,
            patches=patches,
            sequences=len(lengths),
            max_sequence_length=max(lengths + [padding]),
        )


def _lookup(store: OrderedDict, key: Hashable, capacity: int, compute: Callable[[], T]) -> tuple[T, bool]:
    """``store[key]`` and whether it was there; computed and stored if not, the least recently
    used entry dropped past ``capacity``."""
    cached = store.get(key)
    if cached is not None:
        store.move_to_end(key)
        return cached, True
    computed = compute()
    store[key] = computed
    if len(store) > capacity:
        store.popitem(last=False)
    return computed, False
