"""Video token pruning (EVS) against a reference written from the paper's description.

The reference below is a plain loop in double precision, written from the rule as the EVS paper
(arXiv 2510.14624) and vLLM's ``video_pruning_rate`` state it: the first frame pair is kept
whole; every later token scores ``1 - cos`` against the token at its place one pair before; over
the whole clip the highest scores are kept (equal scores: the earlier token), so that the clip
keeps ``max(h*w, int(t*h*w*(1 - q)))`` tokens.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from framewise.core.encoding import pruning
from framewise.core.encoding.defs import EncodedItem
from framewise.core.encoding.pruning import Retention, kept_token_count, prune_encoded, retained_mask
from framewise.core.errors import SettingsError


def reference_scores(embeds: torch.Tensor, grid: tuple[int, int, int]) -> list[tuple[float, int]]:
    """(dissimilarity, row) of every token of the later slices, in double precision."""
    t, h, w = grid
    per_slice = h * w
    rows = embeds.double().tolist()
    scored = []
    for index in range(1, t):
        for place in range(per_slice):
            now, before = rows[index * per_slice + place], rows[(index - 1) * per_slice + place]
            dot = sum(a * b for a, b in zip(now, before))
            norms = sum(a * a for a in now) * sum(b * b for b in before)
            scored.append((1 - dot / math.sqrt(norms), index * per_slice + place))
    return scored


def reference_kept(embeds: torch.Tensor, grid: tuple[int, int, int], rate: float) -> tuple[list[bool], list[float]]:
    """Which rows the rule keeps, and the later tokens' scores from highest to lowest."""
    t, h, w = grid
    per_slice = h * w
    keep = max(per_slice, int(t * per_slice * (1 - rate)))
    ranked = sorted(reference_scores(embeds, grid), key=lambda pair: (-pair[0], pair[1]))
    kept_rows = set(range(per_slice)) | {row for _, row in ranked[: keep - per_slice]}
    return [row in kept_rows for row in range(t * per_slice)], [score for score, _ in ranked]


@st.composite
def clips(draw: st.DrawFn) -> tuple[torch.Tensor, tuple[int, int, int], float]:
    """Random merged tokens (t*h*w, hidden) float32, a share of them exact copies of the token one
    slice before (nothing moved there), and a rate in [0, 1)."""
    grid = (draw(st.integers(1, 7)), draw(st.integers(1, 4)), draw(st.integers(1, 4)))
    hidden = draw(st.integers(2, 6))
    still = draw(st.sampled_from([0.0, 0.3, 0.8, 1.0]))
    generator = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    t, h, w = grid
    embeds = torch.randn(t, h * w, hidden, generator=generator)
    copied = torch.rand(t, h * w, generator=generator) < still
    for index in range(1, t):
        embeds[index][copied[index]] = embeds[index - 1][copied[index]]
    rate = draw(st.one_of(st.just(0.0), st.floats(0.0, 1.0, exclude_max=True), st.sampled_from([0.5, 0.75, 0.9])))
    return embeds.reshape(t * h * w, hidden), grid, rate


def unambiguous_cut(ranked: list[float], grid: tuple[int, int, int], rate: float) -> bool:
    """Whether float32 and double precision must agree on the kept set: the last kept and first
    dropped scores are exact ties (copies, both 0) or far apart."""
    t, h, w = grid
    cut = kept_token_count(grid, rate) - h * w
    if cut == 0 or cut == len(ranked):
        return True
    last, first_dropped = ranked[cut - 1], ranked[cut]
    return (last == first_dropped == 0.0) or last - first_dropped > 1e-4


@settings(max_examples=300, deadline=None)
@given(clips())
def test_the_kept_tokens_are_the_references(clip) -> None:
    embeds, grid, rate = clip
    expected, ranked = reference_kept(embeds, grid, rate)
    assume(unambiguous_cut(ranked, grid, rate))
    retention = retained_mask(embeds, grid, rate)
    assert retention.mask.tolist() == expected
    assert retention.grid == grid


@settings(max_examples=200, deadline=None)
@given(clips())
def test_counts_first_slice_and_total_follow_the_rule(clip) -> None:
    embeds, grid, rate = clip
    t, h, w = grid
    retention = retained_mask(embeds, grid, rate)
    per_slice = retention.kept_per_slice
    assert len(per_slice) == t and all(0 <= count <= h * w for count in per_slice)
    assert per_slice[0] == h * w  # the first frame pair whole
    assert retention.mask[: h * w].all()
    assert sum(per_slice) == retention.kept == max(h * w, int(t * h * w * (1 - rate)))
    assert per_slice == tuple(int(retention.mask[i * h * w : (i + 1) * h * w].sum()) for i in range(t))


@pytest.mark.parametrize(
    ("grid", "rate", "kept"),
    [
        ((4, 2, 3), 0.5, 12),  # 24 tokens, half of them
        ((4, 2, 3), 0.0, 24),
        ((2, 2, 2), 0.75, 4),  # int(8 * 0.25) = 2 is below the first pair's 4
        ((1, 5, 5), 0.9, 25),  # one pair: kept whole
        ((20, 1, 5), 0.9, 9),  # 100 * (1 - 0.9) is 9.999... in double precision; vLLM truncates it to 9 too
        ((3, 1, 4), 0.7, 4),  # 12 * 0.3 = 3.6 -> 3, below the first pair's 4
    ],
)
def test_the_kept_count_is_the_truncated_share_of_the_whole_clip(grid, rate, kept) -> None:
    assert kept_token_count(grid, rate) == kept


def test_rate_zero_keeps_every_token_and_the_features_unchanged() -> None:
    embeds = torch.randn(5 * 6, 8, generator=torch.Generator().manual_seed(5))
    item = EncodedItem(embeds=embeds, deepstack=(embeds * 2,))
    retention = retained_mask(embeds, (5, 2, 3), 0.0)
    assert retention.mask.all() and not retention.prunes
    assert prune_encoded(item, retention) is item  # the unpruned path, not a copy


def test_a_clip_that_does_not_move_keeps_its_first_pair_and_then_the_earliest_tokens() -> None:
    """Exact copies score 0: with no motion at all the ranking falls back to row order."""
    first = torch.randn(6, 4, generator=torch.Generator().manual_seed(4))
    embeds = first.repeat(4, 1)  # 4 pairs of 6 tokens, all equal to the first pair
    retention = retained_mask(embeds, (4, 2, 3), 0.5)
    assert retention.kept_per_slice == (6, 6, 0, 0)


def test_the_tokens_that_moved_are_kept_before_those_that_did_not() -> None:
    generator = torch.Generator().manual_seed(3)
    embeds = torch.randn(6, 4, generator=generator).repeat(3, 1)  # 3 pairs of 6 tokens, nothing moves ...
    moved_rows = [13, 15, 17]
    embeds[moved_rows] = torch.randn(3, 4, generator=generator)  # ... but three tokens of the last pair
    retention = retained_mask(embeds, (3, 2, 3), 0.5)  # 9 kept: the first pair and the 3 moved, not rows 6-8
    assert retention.mask.nonzero().flatten().tolist() == [0, 1, 2, 3, 4, 5, *moved_rows]


def test_scoring_in_bounded_pieces_gives_the_same_tokens(monkeypatch: pytest.MonkeyPatch) -> None:
    generator = torch.Generator().manual_seed(1)
    embeds = torch.randn(9 * 12, 16, generator=generator)
    whole = retained_mask(embeds, (9, 3, 4), 0.6)
    for rows in (1, 12, 25, 50):
        monkeypatch.setattr(pruning, "_SCORE_ROWS", rows)
        assert torch.equal(retained_mask(embeds, (9, 3, 4), 0.6).mask, whole.mask)


def test_bfloat16_tokens_are_scored_as_their_float32_values() -> None:
    embeds = torch.randn(6 * 8, 32, generator=torch.Generator().manual_seed(2)).bfloat16()
    assert torch.equal(retained_mask(embeds, (6, 2, 4), 0.5).mask, retained_mask(embeds.float(), (6, 2, 4), 0.5).mask)


def test_pruning_keeps_the_same_rows_of_the_tokens_and_every_deepstack_layer_in_order() -> None:
    embeds = torch.arange(4 * 6 * 3, dtype=torch.float32).reshape(24, 3) ** 0.5
    item = EncodedItem(embeds=embeds, deepstack=(embeds + 1, embeds * 3))
    retention = retained_mask(embeds, (4, 2, 3), 0.5)
    pruned = prune_encoded(item, retention)
    rows = retention.mask.nonzero().flatten()
    assert pruned.embeds.shape == (retention.kept, 3)
    assert torch.equal(pruned.embeds, embeds[rows])
    assert [torch.equal(layer, source[rows]) for layer, source in zip(pruned.deepstack, item.deepstack)] == [True, True]


@pytest.mark.parametrize("rate", [-0.1, 1.0, 1.5, float("nan"), float("inf")])
def test_a_rate_outside_zero_to_one_is_a_settings_error(rate: float) -> None:
    with pytest.raises(SettingsError, match="at least 0 and below 1") as raised:
        retained_mask(torch.randn(12, 4), (2, 2, 3), rate)
    assert raised.value.field == "sampling.pruning"


def test_embeddings_that_are_not_the_grids_rows_are_refused() -> None:
    with pytest.raises(ValueError, match="not the 12 rows"):
        retained_mask(torch.randn(10, 4), (2, 2, 3), 0.5)
    with pytest.raises(ValueError, match="retention covers 12"):
        prune_encoded(EncodedItem(torch.randn(10, 4), ()), Retention.keep_all((2, 2, 3)))


def test_each_frame_reads_the_kept_share_of_its_own_slice() -> None:
    mask = torch.tensor([1, 1, 1, 1] + [1, 0, 0, 0] + [0, 0, 1, 1], dtype=torch.bool)
    retention = Retention(mask, (3, 2, 2))
    assert retention.kept_per_frame(6, 2) == (1.0, 1.0, 0.25, 0.25, 0.5, 0.5)
    assert retention.kept_per_frame(5, 2) == (1.0, 1.0, 0.25, 0.25, 0.5)  # the last slice's frame repeated
    with pytest.raises(ValueError, match="3 slices"):
        retention.kept_per_frame(4, 2)
