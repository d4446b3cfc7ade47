"""The eager vision encoder: the reference every other encoder is checked against."""

from __future__ import annotations

import pytest
import torch
from transformers.models.qwen3_vl.configuration_qwen3_vl import Qwen3VLVisionConfig
from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLVisionModel

from framewise.core.encoding.defs import VisionItem
from framewise.core.encoding.eager import EagerVisionEncoder, runs_of_rows
from framewise.core.families.qwen3_vl.adapter import Qwen3VLAdapter


@pytest.fixture(scope="module")
def tower() -> Qwen3VLVisionModel:
    torch.manual_seed(0)
    config = Qwen3VLVisionConfig(
        depth=2, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=48,
        num_position_embeddings=64, deepstack_visual_indexes=[0, 1],
    )
    config._attn_implementation = "sdpa"
    return Qwen3VLVisionModel(config).eval()


def item(grid: tuple[int, int, int], modality: str = "video", repeated_frames: int = 0) -> VisionItem:
    t, h, w = grid
    return VisionItem(torch.randn(t * h * w, 3 * 2 * 16 * 16), grid, modality, repeated_frames)  # type: ignore[arg-type]


def test_outputs_match_one_forward_per_item_and_keep_the_order(tower: Qwen3VLVisionModel) -> None:
    items = [item((2, 4, 6)), item((1, 2, 2), "image"), item((1, 6, 4))]
    output = EagerVisionEncoder(Qwen3VLAdapter(tower)).encode(items)
    assert len(output.items) == 3
    for vision_item, encoded in zip(items, output.items):
        with torch.inference_mode():
            alone = tower(vision_item.pixel_values, grid_thw=torch.tensor([vision_item.grid_thw]))
        assert encoded.embeds.shape == (vision_item.patches // 4, 48)
        torch.testing.assert_close(encoded.embeds, alone.pooler_output, rtol=1e-5, atol=1e-5)
        assert len(encoded.deepstack) == 2
        for ours, theirs in zip(encoded.deepstack, alone.deepstack_features):
            torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5)


def test_one_chunk_is_reported_as_an_eager_miss(tower: Qwen3VLVisionModel) -> None:
    output = EagerVisionEncoder(Qwen3VLAdapter(tower)).encode([item((2, 4, 4)), item((1, 2, 2), "image")])
    (chunk,) = output.chunks
    assert chunk.frames == 4 + 1 and chunk.patches == 32 + 4
    assert not chunk.graph_hit and chunk.budget is None and chunk.fallback_reason
    assert chunk.ms_per_frame == pytest.approx(chunk.encode_ms / 5)


def test_no_items_is_no_work(tower: Qwen3VLVisionModel) -> None:
    output = EagerVisionEncoder(Qwen3VLAdapter(tower)).encode([])
    assert output.items == [] and output.chunks == []


def test_runs_on_the_cpu_give_the_outputs_of_one_pass(tower: Qwen3VLVisionModel) -> None:
    items = [item((5, 4, 4)), item((1, 2, 2), "image"), item((3, 4, 6), repeated_frames=1)]
    whole = EagerVisionEncoder(Qwen3VLAdapter(tower), cpu_run_rows=10**6).encode(items)
    in_runs = EagerVisionEncoder(Qwen3VLAdapter(tower), cpu_run_rows=40).encode(items)
    assert [chunk.frames for chunk in in_runs.chunks] == [chunk.frames for chunk in whole.chunks] == [10 + 1 + 5]
    for ours, theirs in zip(in_runs.items, whole.items):
        torch.testing.assert_close(ours.embeds, theirs.embeds, rtol=1e-5, atol=1e-5)
        for our_layer, their_layer in zip(ours.deepstack, theirs.deepstack, strict=True):
            torch.testing.assert_close(our_layer, their_layer, rtol=1e-5, atol=1e-5)


def test_runs_cut_items_between_slices_and_keep_every_row_in_order() -> None:
    items = [item((5, 4, 4), repeated_frames=1), item((1, 2, 2), "image"), item((2, 8, 8))]
    runs = runs_of_rows(items, 40)
    # 16-row slices two to a run; the image joins the open run; an item of 64-row slices is a run of its own
    assert [[piece.grid_thw for piece in run] for run in runs] == [
        [(2, 4, 4)], [(2, 4, 4)], [(1, 4, 4), (1, 2, 2)], [(2, 8, 8)],
    ]
    pieces = [piece for run in runs for piece in run]
    assert [piece.repeated_frames for piece in pieces] == [0, 0, 1, 0, 0]
    joined = torch.cat([piece.pixel_values for piece in pieces])
    torch.testing.assert_close(joined, torch.cat([vision_item.pixel_values for vision_item in items]), rtol=0, atol=0)
