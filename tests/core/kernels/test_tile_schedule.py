"""The tile list of the Triton attention kernel: every row of every sequence in exactly one tile."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from framewise.core.kernels.tile_schedule import tile_count, tile_schedule


def boundaries(lengths: list[int], empty_slots: int) -> torch.Tensor:
    """cu_seqlens of ``lengths`` followed by ``empty_slots`` empty sequences (the graphs' layout)."""
    ends = torch.tensor(lengths, dtype=torch.int64).cumsum(0)
    rows = int(ends[-1]) if lengths else 0
    return torch.cat([torch.zeros(1), ends, torch.full((empty_slots,), rows)]).to(torch.int32)


@settings(max_examples=200, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 300), min_size=1, max_size=12),
    empty_slots=st.integers(0, 20),
    block_m=st.sampled_from([16, 64, 128]),
)
def test_every_row_is_in_exactly_one_tile_of_its_own_sequence(lengths, empty_slots, block_m):
    cu_seqlens = boundaries(lengths, empty_slots)
    rows = int(cu_seqlens[-1])
    schedule = tile_schedule(cu_seqlens, rows, block_m)
    assert schedule.dtype == torch.int32
    assert schedule.shape == (2, tile_count(rows, len(cu_seqlens) - 1, block_m))

    owner = torch.full((rows,), -1)
    real = schedule[0] >= 0
    for sequence, first_row in schedule[:, real].T.tolist():
        start, end = int(cu_seqlens[sequence]), int(cu_seqlens[sequence + 1])
        assert start <= first_row < end, "a tile starts outside its sequence"
        covered = slice(first_row, min(first_row + block_m, end))
        assert (owner[covered] == -1).all(), "two tiles share a row"
        owner[covered] = sequence
    expected = torch.repeat_interleave(torch.arange(len(cu_seqlens) - 1), (cu_seqlens[1:] - cu_seqlens[:-1]).long())
    assert torch.equal(owner, expected)
    # Real tiles come first, in sequence order: programs past them have nothing to do.
    assert real.sum() == sum(-(-length // block_m) for length in lengths)
    assert not real[int(real.sum()):].any()
    assert torch.equal(schedule[0, real], schedule[0, real].sort().values)


def test_a_graphs_capture_layout_has_one_sequence_over_the_whole_budget():
    cu_seqlens = torch.tensor([0] + [1024] * 65, dtype=torch.int32)
    schedule = tile_schedule(cu_seqlens, 1024, 64)
    assert schedule[0, :16].tolist() == [0] * 16
    assert schedule[1, :16].tolist() == list(range(0, 1024, 64))
    assert (schedule[0, 16:] == -1).all()
