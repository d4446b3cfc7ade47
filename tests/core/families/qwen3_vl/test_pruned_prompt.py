"""A Qwen3-VL prompt about a clip whose video tokens were pruned (EVS).

Every frame pair's ``<t.t seconds>`` marker is followed by exactly the pads of the tokens that pair
kept (vLLM writes other counts there: its issue 30847), the spans place the kept feature rows, and
the rotary positions of every kept token are those it had in the unpruned prompt.
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from framewise.core.decoding import Prompt
from framewise.core.decoding.pruned_positions import kept_positions, prompt_positions
from framewise.core.encoding.defs import EncodedItem
from framewise.core.encoding.pruning import Retention, prune_encoded, retained_mask
from framewise.core.families.qwen3_vl.chat import time_marker
from training.demo_model import (
    build_demo_config,
    build_demo_tokenizer,
    init_demo_model,
    special_token_ids,
)
from framewise.core.families.qwen3_vl.geometry import VisionGeometry
from framewise.core.families.qwen3_vl.language import Qwen3VLLanguageModel
from framewise.core.families.qwen3_vl.processor import VideoInputs, preprocess_image, preprocess_video
from framewise.core.families.qwen3_vl.prompt import VIDEO_TOKEN, ChatInputs, build_chat_inputs

TOKENIZER = build_demo_tokenizer()
GEOMETRY = VisionGeometry()
HEIGHT, WIDTH = 64, 96  # 4 x 6 patches: 2 x 3 = 6 merged tokens a frame pair
PER_PAIR = 6
BLOCK = re.compile(r"(<\d+\.\d seconds>)<\|vision_start\|>((?:<\|video_pad\|>)*)<\|vision_end\|>")


@pytest.fixture(scope="module")
def model() -> torch.nn.Module:
    config = build_demo_config(len(TOKENIZER), special_token_ids(TOKENIZER), depth=1, deepstack_visual_indexes=(0,))
    return init_demo_model(config, seed=1)


def clip(pairs: int, seed: int = 0) -> VideoInputs:
    frames = np.random.default_rng(seed).integers(0, 256, (2 * pairs, HEIGHT, WIDTH, 3), dtype=np.uint8)
    return preprocess_video(frames, [0.4 * i for i in range(2 * pairs)], GEOMETRY)


def merged_tokens(pairs: int, seed: int, still: float = 0.5, hidden: int = 8) -> torch.Tensor:
    """(pairs * 6, hidden) random merged tokens, a share ``still`` of them copies of the token one pair before."""
    generator = torch.Generator().manual_seed(seed)
    tokens = torch.randn(pairs, PER_PAIR, hidden, generator=generator)
    copied = torch.rand(pairs, PER_PAIR, generator=generator) < still
    for index in range(1, pairs):
        tokens[index][copied[index]] = tokens[index - 1][copied[index]]
    return tokens.reshape(pairs * PER_PAIR, hidden)


def pruned_clip(pairs: int, rate: float, seed: int = 0, still: float = 0.5) -> tuple[VideoInputs, torch.Tensor]:
    """A clip with its retention at ``rate`` over random merged tokens, and those tokens."""
    tokens = merged_tokens(pairs, seed, still)
    video = clip(pairs, seed)
    return dataclasses.replace(video, retention=retained_mask(tokens, (pairs, 2, 3), rate)), tokens


def blocks_in(ids: torch.Tensor) -> list[tuple[str, int]]:
    """(time marker, pads in the vision block right after it) for every time marker, read from the
    prompt's token ids."""
    return [(marker, pads.count("<|video_pad|>")) for marker, pads in BLOCK.findall(TOKENIZER.decode(ids[0]))]


def assert_markers_match(inputs: ChatInputs, video: VideoInputs, retention: Retention) -> None:
    """Each pair's marker, in order, followed by exactly the pads of the tokens that pair kept;
    as many pads in all as kept feature rows."""
    blocks = blocks_in(inputs.input_ids)
    assert [marker for marker, _ in blocks] == [time_marker(seconds) for seconds in video.pair_timestamps]
    assert tuple(count for _, count in blocks) == retention.kept_per_slice
    assert int((inputs.input_ids == TOKENIZER.convert_tokens_to_ids("<|video_pad|>")).sum()) == retention.kept


@settings(max_examples=40, deadline=None)
@given(
    pairs=st.integers(1, 6),
    rate=st.floats(0.0, 1.0, exclude_max=True),
    seed=st.integers(0, 2**31 - 1),
    still=st.sampled_from([0.0, 0.5, 1.0]),
)
def test_each_marker_is_followed_by_the_pads_its_frame_pair_kept(pairs, rate, seed, still) -> None:
    video, _ = pruned_clip(pairs, rate, seed, still)
    inputs = build_chat_inputs(TOKENIZER, "What moves?", videos=[video], geometry=GEOMETRY)
    assert_markers_match(inputs, video, video.retention)
    assert TOKENIZER.decode(inputs.input_ids[0]) == inputs.prompt_text
    assert TOKENIZER.encode(inputs.prompt_text, add_special_tokens=False) == inputs.input_ids[0].tolist()
    video_pads = inputs.input_ids == TOKENIZER.convert_tokens_to_ids("<|video_pad|>")
    assert torch.equal(inputs.mm_token_type_ids == VIDEO_TOKEN, video_pads)


def test_the_marker_check_fails_on_counts_spread_evenly_over_the_later_pairs() -> None:
    """vLLM's prompt keeps the first pair whole and spreads the rest evenly, whatever each pair
    kept; the check above catches such a prompt."""
    tokens = merged_tokens(3, seed=0, still=0.0)
    tokens[PER_PAIR : 2 * PER_PAIR] = tokens[:PER_PAIR]  # the second pair does not move: it keeps nothing
    retention = retained_mask(tokens, (3, 2, 3), 0.5)
    assert retention.kept_per_slice == (6, 0, 3)
    even = Retention(torch.tensor([True] * 6 + [True, True] + [False] * 4 + [True] + [False] * 5), (3, 2, 3))
    assert even.kept == retention.kept
    video = clip(3)
    evenly = build_chat_inputs(TOKENIZER, "What moves?", videos=[dataclasses.replace(video, retention=even)])
    with pytest.raises(AssertionError):
        assert_markers_match(evenly, video, retention)
    honest = build_chat_inputs(TOKENIZER, "What moves?", videos=[dataclasses.replace(video, retention=retention)])
    assert_markers_match(honest, video, retention)


@settings(max_examples=25, deadline=None)
@given(rate=st.floats(0.0, 0.95), seed=st.integers(0, 2**31 - 1))
def test_the_spans_place_each_pairs_kept_rows_on_its_own_pads(rate, seed) -> None:
    video, tokens = pruned_clip(5, rate, seed)
    retention = video.retention
    inputs = build_chat_inputs(TOKENIZER, "What moves?", videos=[video])
    features = prune_encoded(EncodedItem(tokens, (tokens * 2,)), retention)
    kept_rows = retention.mask.nonzero().flatten()
    pairs_with_tokens = [index for index, count in enumerate(retention.kept_per_slice) if count]
    assert len(inputs.spans) == len(pairs_with_tokens)
    for span, pair in zip(inputs.spans, pairs_with_tokens):
        assert span.item == 0 and span.length == retention.kept_per_slice[pair]
        assert (kept_rows[span.row : span.row + span.length] // PER_PAIR == pair).all()
    rows = Prompt(inputs.input_ids, inputs.token_types, inputs.spans, inputs.grids, (features,)).vision_rows(0)
    assert torch.equal(rows.mask, inputs.mm_token_type_ids == VIDEO_TOKEN)
    assert torch.equal(rows.embeds, tokens[kept_rows]) and torch.equal(rows.deepstack[0], tokens[kept_rows] * 2)


def test_a_pair_that_kept_nothing_keeps_its_marker_and_an_empty_block() -> None:
    tokens = merged_tokens(3, seed=0, still=0.0)
    tokens[2 * PER_PAIR :] = tokens[PER_PAIR : 2 * PER_PAIR]  # the last pair does not move
    video = dataclasses.replace(clip(3), retention=retained_mask(tokens, (3, 2, 3), 0.5))
    assert video.retention.kept_per_slice == (6, 3, 0)
    inputs = build_chat_inputs(TOKENIZER, "What moves?", videos=[video])
    assert f"{time_marker(video.pair_timestamps[2])}<|vision_start|><|vision_end|>" in inputs.prompt_text
    assert [(span.row, span.length) for span in inputs.spans] == [(0, 6), (6, 3)]


def test_rate_zero_builds_exactly_the_unpruned_prompt() -> None:
    video = clip(4)
    plain = build_chat_inputs(TOKENIZER, "What moves?", videos=[video])
    retention = retained_mask(merged_tokens(4, 0), (4, 2, 3), 0.0)
    kept_all = build_chat_inputs(TOKENIZER, "What moves?", videos=[dataclasses.replace(video, retention=retention)])
    assert kept_all.unpruned is None
    for field in ("input_ids", "attention_mask", "mm_token_type_ids"):
        assert torch.equal(getattr(kept_all, field), getattr(plain, field))
    assert (kept_all.spans, kept_all.grids, kept_all.prompt_text) == (plain.spans, plain.grids, plain.prompt_text)


def test_the_unpruned_prompt_is_the_one_built_without_pruning_and_the_kept_tokens_cut_it() -> None:
    video, _ = pruned_clip(5, 0.6)
    pruned = build_chat_inputs(TOKENIZER, "What moves?", videos=[video])
    plain = build_chat_inputs(TOKENIZER, "What moves?", videos=[dataclasses.replace(video, retention=None)])
    unpruned = pruned.unpruned
    assert torch.equal(unpruned.input_ids, plain.input_ids)
    assert torch.equal(unpruned.token_types, plain.mm_token_type_ids)
    assert torch.equal(unpruned.input_ids[:, unpruned.kept], pruned.input_ids)
    assert unpruned.pruned_tokens == video.retention.total - video.retention.kept > 0
    assert pruned.grids == plain.grids  # positions are computed over the unpruned grid


def test_a_retention_of_another_clips_grid_is_refused() -> None:
    video = dataclasses.replace(clip(4), retention=Retention.keep_all((4, 3, 6)))
    with pytest.raises(ValueError, match=r"retention of grid \(4, 3, 6\) for a clip of 4 frame pairs of 4x6 patches"):
        build_chat_inputs(TOKENIZER, "What moves?", videos=[video])


# ---------------------------------------------------------------------------------------------
# Positions


def rope_index(model: torch.nn.Module, inputs: ChatInputs | object, ids: torch.Tensor, types: torch.Tensor):
    """transformers' own get_rope_index over a prompt: (3, n) positions and the offset of later tokens."""
    videos = [grid for kind, grid in inputs.grids if kind == "video"]
    images = [grid for kind, grid in inputs.grids if kind == "image"]
    rope, deltas = model.model.get_rope_index(
        ids,
        mm_token_type_ids=types,
        video_grid_thw=torch.tensor(videos) if videos else None,
        image_grid_thw=torch.tensor(images) if images else None,
        attention_mask=torch.ones_like(ids),
    )
    return rope[:, 0], int(deltas.reshape(-1)[0])


def unpruned_index_of_every_token(pruned: ChatInputs, videos: list[VideoInputs]) -> list[int]:
    """Where each token of the pruned prompt stands in the unpruned one, found from the clips'
    retentions alone: other tokens keep their order; the g-th kept video row of the prompt's clips
    (clip after clip) is the unpruned prompt's video pad of that row."""
    unpruned_types = pruned.unpruned.token_types[0]
    others = (unpruned_types != VIDEO_TOKEN).nonzero().flatten().tolist()
    video_pads = (unpruned_types == VIDEO_TOKEN).nonzero().flatten().tolist()
    rows, offset = [], 0
    for video in videos:
        rows += [offset + row for row in video.retention.mask.nonzero().flatten().tolist()]
        offset += video.retention.total
    others_iter, rows_iter = iter(others), iter(rows)
    return [
        video_pads[next(rows_iter)] if kind == VIDEO_TOKEN else next(others_iter)
        for kind in pruned.mm_token_type_ids[0].tolist()
    ]


def test_at_rate_zero_the_positions_are_get_rope_indexs(model) -> None:
    language = Qwen3VLLanguageModel(model, fused_steps=False)
    video = dataclasses.replace(clip(4), retention=retained_mask(merged_tokens(4, 0), (4, 2, 3), 0.0))
    inputs = build_chat_inputs(TOKENIZER, "What moves?", videos=[video])
    positions = prompt_positions(language, inputs.input_ids, inputs.token_types, inputs.grids, inputs.unpruned)
    rope, offset = rope_index(model, inputs, inputs.input_ids, inputs.token_types)
    assert torch.equal(positions.rope, rope) and positions.rope_offset == offset
    every = torch.ones(inputs.input_ids.shape[1], dtype=torch.bool)
    all_kept = kept_positions(positions, every)
    assert torch.equal(all_kept.rope, rope) and all_kept.rope_offset == offset


@settings(max_examples=20, deadline=None)
@given(rates=st.tuples(st.floats(0.05, 0.95), st.floats(0.0, 0.95)), seed=st.integers(0, 2**31 - 1))
def test_every_kept_token_has_the_position_it_had_unpruned(model, rates, seed) -> None:
    """Two clips (pruned at two rates) and a picture, after an earlier turn: each kept video
    token, each text token after a clip and the picture's tokens at their unpruned positions; the
    next token generated at the position it would have had."""
    language = Qwen3VLLanguageModel(model, fused_steps=False)
    videos = [pruned_clip(4, rates[0], seed)[0], pruned_clip(3, rates[1], seed + 1)[0]]
    image = preprocess_image(np.full((64, 64, 3), 90, np.uint8), GEOMETRY, min_pixels=32 * 32, max_pixels=64 * 64)
    inputs = build_chat_inputs(TOKENIZER, "Which differs?", videos=videos, images=[image], history=[("Hi.", "Hello.")])
    full_rope, full_offset = rope_index(model, inputs, inputs.unpruned.input_ids, inputs.unpruned.token_types)

    positions = prompt_positions(language, inputs.input_ids, inputs.token_types, inputs.grids, inputs.unpruned)
    assert torch.equal(positions.rope, full_rope[:, unpruned_index_of_every_token(inputs, videos)])
    pruned_length, full_length = inputs.input_ids.shape[1], inputs.unpruned.input_ids.shape[1]
    assert pruned_length + positions.rope_offset == full_length + full_offset


def test_a_prompt_whose_keep_mask_does_not_fit_is_refused(model) -> None:
    language = Qwen3VLLanguageModel(model, fused_steps=False)
    video, _ = pruned_clip(4, 0.5)
    inputs = build_chat_inputs(TOKENIZER, "What moves?", videos=[video])
    with pytest.raises(ValueError, match="kept tokens for a prompt of"):
        prompt_positions(language, inputs.input_ids[:, 1:], inputs.token_types[:, 1:], inputs.grids, inputs.unpruned)
