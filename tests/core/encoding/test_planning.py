"""Planning the encoder's passes: property tests over random requests, and the rules by example."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from framewise.core.encoding.planning import BatchLimits, PlanItem, plan_batches
from framewise.core.errors import SettingsError
from framewise.core.seam import FamilyLimits
from framewise.core.settings import EncoderSettings

# A family whose tokens merge 2x2 patches: every budget is a multiple of 4.
MERGE_BY_FOUR = FamilyLimits(name="Toy", patch_size=16, merge_size=2, frames_per_slice=2, max_frames=768, max_clip_blocks=24576)


def limits(budgets=(64, 128, 256, 512), max_items=4, max_sequences=8) -> BatchLimits:
    return BatchLimits(budgets=tuple(budgets), max_items=max_items, max_sequences=max_sequences, budget_multiple=4)


grids = st.tuples(st.integers(1, 12), st.integers(1, 10).map(lambda v: 2 * v), st.integers(1, 10).map(lambda v: 2 * v))
items_strategy = st.lists(
    st.tuples(st.sampled_from(["image", "video", "audio"]), grids).map(
        lambda pair: PlanItem(pair[0], (1, *pair[1][1:]) if pair[0] == "image" else pair[1])
    ),
    min_size=0,
    max_size=12,
)
limits_strategy = st.builds(
    lambda sizes, max_items, extra_sequences: limits(
        sorted({4 * s for s in sizes}), max_items=max_items, max_sequences=max_items + extra_sequences
    ),
    st.lists(st.integers(4, 100), min_size=1, max_size=5),
    st.integers(1, 4),
    st.integers(0, 8),
)


@settings(max_examples=300, deadline=None)
@given(items=items_strategy, batch_limits=limits_strategy)
def test_every_patch_is_planned_once_in_order_within_the_limits(items, batch_limits):
    plan = plan_batches(items, batch_limits)
    covered = {index: [] for index in range(len(items))}
    for batch in plan:
        for piece in batch.pieces:
            covered[piece.item].append((piece.first, piece.count))
            assert piece.patches_per_slice == items[piece.item].patches_per_slice
        if batch.budget is None:
            assert batch.fallback_reason and len(batch.pieces) == 1
            continue
        assert batch.fallback_reason is None
        assert batch.patches <= batch.budget
        assert batch.budget == batch_limits.smallest_budget(batch.patches)
        assert len(batch.pieces) <= batch_limits.max_items
        assert batch.sequences <= batch_limits.max_sequences
    in_plan_order = [(piece.item, piece.first) for batch in plan for piece in batch.pieces]
    assert in_plan_order == sorted(in_plan_order)  # the items' order, eager items included
    for index, item in enumerate(items):
        # pieces of one item, in plan order, tile its temporal patches from 0 without gaps
        expected_first = 0
        for first, count in covered[index]:
            assert first == expected_first and count >= 1
            expected_first += count
        assert expected_first == item.grid_thw[0]


@settings(max_examples=200, deadline=None)
@given(items=items_strategy, batch_limits=limits_strategy)
def test_only_unsupported_modalities_and_oversized_frames_run_eager(items, batch_limits):
    for batch in plan_batches(items, batch_limits):
        if batch.budget is None:
            item = items[batch.pieces[0].item]
            assert item.modality == "audio" or item.patches_per_slice > batch_limits.max_budget


def test_small_items_share_one_batch_with_the_smallest_fitting_budget():
    plan = plan_batches([PlanItem("image", (1, 4, 4)), PlanItem("video", (2, 4, 6))], limits())
    assert len(plan) == 1
    assert plan[0].patches == 16 + 48 and plan[0].budget == 64
    assert plan[0].padding_fraction == 0.0


def test_item_limit_starts_a_new_batch():
    plan = plan_batches([PlanItem("image", (1, 2, 2))] * 9, limits(max_items=4))
    assert [len(batch.pieces) for batch in plan] == [4, 4, 1]


def test_frame_limit_counts_one_sequence_per_frame_pair():
    plan = plan_batches([PlanItem("video", (5, 2, 2)), PlanItem("video", (5, 2, 2))], limits(max_sequences=8))
    assert [batch.sequences for batch in plan] == [5, 5]  # the second video is not cut to fill the first batch


def test_long_video_is_cut_between_frame_pairs():
    plan = plan_batches([PlanItem("video", (10, 8, 8))], limits(budgets=(64, 256), max_sequences=8))
    assert [(p.first, p.count) for batch in plan for p in batch.pieces] == [(0, 4), (4, 4), (8, 2)]
    assert [batch.budget for batch in plan] == [256, 256, 256]


def test_a_frame_pair_larger_than_every_budget_runs_eager_with_a_reason():
    plan = plan_batches([PlanItem("video", (2, 24, 24)), PlanItem("image", (1, 4, 4))], limits())
    eager = [batch for batch in plan if batch.budget is None]
    assert len(eager) == 1 and eager[0].pieces[0].item == 0
    assert "576 patches" in eager[0].fallback_reason and "max budget" in eager[0].fallback_reason
    assert any(batch.budget == 64 for batch in plan)


def test_unsupported_modality_runs_eager_with_a_reason():
    (batch,) = plan_batches([PlanItem("audio", (1, 2, 2))], limits())
    assert batch.budget is None and "audio" in batch.fallback_reason


def test_limits_from_settings_match_the_settings():
    encoder = EncoderSettings(budgets=(256, 1024), max_items_per_batch=4, max_frame_pairs_per_batch=16)
    expected = BatchLimits(budgets=(256, 1024), max_items=4, max_sequences=16, budget_multiple=4)
    assert BatchLimits.from_settings(encoder, MERGE_BY_FOUR) == expected


@pytest.mark.parametrize(
    "budgets, max_items, max_sequences",
    [((), 1, 1), ((128, 64), 1, 1), ((62,), 1, 1), ((64,), 0, 1), ((64,), 4, 2)],
)
def test_invalid_limits_are_refused(budgets, max_items, max_sequences):
    with pytest.raises(SettingsError):
        BatchLimits(budgets=budgets, max_items=max_items, max_sequences=max_sequences, budget_multiple=4)
