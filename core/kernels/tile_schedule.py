"""The list of tiles :mod:`~framewise.core.kernels.vision_attention` walks: one per query block of
each real sequence. Plain torch, so it runs (and is tested) without Triton or a GPU."""

from __future__ import annotations

import math

import torch

# Query rows per tile (the attention kernel's BLOCK_M).
BLOCK_M = 64


def tile_count(rows: int, sequences: int, block_m: int = BLOCK_M) -> int:
    """The most tiles ``sequences`` sequences over ``rows`` rows can need: each needs
    ceil(length / block_m) <= length / block_m + 1."""
    return math.ceil(rows / block_m) + sequences


def tile_schedule(cu_seqlens: torch.Tensor, rows: int, block_m: int = BLOCK_M) -> torch.Tensor:
    """The tile list for ``cu_seqlens`` (sequences + 1,) int32 over ``rows`` rows.

    Returns (2, tile_count(rows, sequences)) int32: row 0 each tile's sequence (-1 past the real
    tiles), row 1 its first query row. Tiles are in sequence order; runs on the device, no sync.
    """
    cu_seqlens = cu_seqlens.to(torch.int64)
    sequences = cu_seqlens.numel() - 1
    lengths = cu_seqlens[1:] - cu_seqlens[:-1]
    tiles_per_sequence = (lengths + block_m - 1) // block_m
    tile_ends = tiles_per_sequence.cumsum(0)
    tiles = torch.arange(tile_count(rows, sequences, block_m), device=cu_seqlens.device)
    sequence = torch.searchsorted(tile_ends, tiles, right=True)
    real = sequence < sequences
    clamped = sequence.clamp(max=sequences - 1)
    first_row = cu_seqlens[clamped] + (tiles - (tile_ends - tiles_per_sequence)[clamped]) * block_m
    return torch.stack((torch.where(real, clamped, -1), first_row)).to(torch.int32)
