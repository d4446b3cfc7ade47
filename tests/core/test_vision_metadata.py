"""Vision metadata against transformers' own, and the graph encoder's whole path run directly on the CPU."""

from __future__ import annotations

import dataclasses
from contextlib import contextmanager

import pytest
import torch
from transformers.models.qwen3_vl.configuration_qwen3_vl import Qwen3VLVisionConfig
from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLVisionModel
from transformers.vision_utils import (
    get_vision_cu_seqlens,
    get_vision_interpolation_indices_and_weights,
    get_vision_position_ids,
)

from framewise.core.attention import REGISTERED_NAMES, available_attention_backends, register_backends, resolve_backend
from framewise.core.encoder import EagerVisionEncoder, VisionItem
from framewise.core.encoder_graphs import GraphVisionEncoder, make_vision_encoder, percentile
from framewise.core.errors import EncoderError
from framewise.core.settings import EncoderSettings
from framewise.core.vision_metadata import MetadataCache, TowerGeometry

GRIDS = [(1, 2, 2), (1, 4, 6), (1, 8, 8), (3, 6, 4), (2, 10, 14), (1, 48, 48), (1, 64, 32), (4, 2, 30)]
SETTINGS = EncoderSettings(budgets=(64, 128, 256), max_items_per_batch=4, max_frames_per_batch=8)


@pytest.fixture(scope="module")
def visual() -> Qwen3VLVisionModel:
    """A tiny random tower with the real position table (48x48) and head_dim 72."""
    torch.manual_seed(0)
    config = Qwen3VLVisionConfig(
        depth=3, hidden_size=144, num_heads=2, intermediate_size=256, out_hidden_size=96,
        num_position_embeddings=2304, deepstack_visual_indexes=[0, 2],
    )
    return Qwen3VLVisionModel(config).eval()


@contextmanager
def attention(visual: torch.nn.Module, name: str):
    original = visual.config._attn_implementation
    visual.config._attn_implementation = name
    try:
        yield
    finally:
        visual.config._attn_implementation = original


def model_metadata(visual, grids, align_corners=None):
    """What the tower computes for ``grids`` by itself."""
    grid = torch.tensor(grids)
    indices, weights = get_vision_interpolation_indices_and_weights(
        grid,
        num_grid_per_side=visual.num_grid_per_side,
        mode=visual.interpolation_mode,
        align_corners=visual.interpolation_align_corners if align_corners is None else align_corners,
        spatial_merge_size=visual.spatial_merge_size,
    )
    return indices, weights, get_vision_position_ids(grid, visual.spatial_merge_size), get_vision_cu_seqlens(grid)


def vision_item(grid, modality="video", seed=0) -> VisionItem:
    t, h, w = grid
    generator = torch.Generator().manual_seed(seed)
    return VisionItem(pixel_values=torch.randn(t * h * w, 1536, generator=generator), grid_thw=grid, modality=modality)


@pytest.mark.parametrize("align_corners", [True, False])
@pytest.mark.parametrize("grid", GRIDS)
def test_item_metadata_equals_the_models_own(visual, grid, align_corners):
    geometry = dataclasses.replace(TowerGeometry.from_visual(visual), align_corners=align_corners)
    metadata = MetadataCache(geometry).batch([("video", grid)])
    indices, weights, position_ids, cu_seqlens = model_metadata(visual, [grid], align_corners)
    assert torch.equal(metadata.interp_indices, indices)
    assert torch.equal(metadata.interp_weights, weights)
    assert torch.equal(metadata.position_ids, position_ids)
    assert torch.equal(metadata.cu_seqlens, cu_seqlens)


def test_batch_metadata_equals_the_models_own_for_mixed_grids(visual):
    grids = [(1, 4, 6), (3, 6, 4), (1, 2, 2), (2, 10, 14)]
    metadata = MetadataCache(TowerGeometry.from_visual(visual)).batch([("image", g) for g in grids])
    for ours, theirs in zip(
        (metadata.interp_indices, metadata.interp_weights, metadata.position_ids, metadata.cu_seqlens),
        model_metadata(visual, grids),
    ):
        assert torch.equal(ours, theirs)
    assert metadata.sequences == 1 + 3 + 1 + 2
    assert metadata.max_sequence_length == 140


def test_padded_batch_has_one_trailing_padding_sequence(visual):
    cache = MetadataCache(TowerGeometry.from_visual(visual))
    metadata = cache.batch([("image", (1, 4, 6)), ("video", (2, 2, 4))], rows=64, max_sequences=6)
    assert metadata.rows == 64 and metadata.patches == 40
    assert metadata.cu_seqlens.tolist() == [0, 24, 32, 40, 64, 64, 64, 64]
    assert metadata.cu_seqlens.dtype == torch.int32
    assert not metadata.interp_indices[40:].any() and not metadata.interp_weights[40:].any()
    assert not metadata.position_ids[40:].any()
    assert metadata.max_sequence_length == 24  # the padding sequence is the longest
    with pytest.raises(EncoderError):
        cache.batch([("video", (7, 2, 2))], rows=64, max_sequences=6)


def test_cache_hits_rise_on_a_repeated_grid(visual):
    cache = MetadataCache(TowerGeometry.from_visual(visual))
    cache.batch([("image", (1, 4, 4))])
    assert (cache.hits, cache.misses) == (0, 1)
    cache.batch([("image", (1, 4, 4)), ("video", (1, 4, 4))])
    assert (cache.hits, cache.misses) == (1, 2)  # same grid, other modality: its own entry
    cache.batch([("image", (1, 4, 4))])
    assert cache.hits == 2


def test_cache_drops_the_least_recently_used_grid(visual):
    cache = MetadataCache(TowerGeometry.from_visual(visual), capacity=2)
    for grid in [(1, 2, 2), (1, 2, 4), (1, 2, 2), (1, 4, 4), (1, 2, 2)]:
        cache.item("image", grid)
    assert len(cache) == 2 and cache.misses == 3 and cache.hits == 2


def test_odd_grid_is_refused_with_a_clear_message(visual):
    with pytest.raises(EncoderError, match="multiple of 32 pixels"):
        MetadataCache(TowerGeometry.from_visual(visual)).item("image", (1, 3, 4))


@torch.inference_mode()
def test_forward_with_precomputed_metadata_equals_the_stock_forward(visual):
    grids = [(1, 4, 6), (3, 6, 4), (2, 10, 14)]
    pixels = torch.randn(sum(t * h * w for t, h, w in grids), 1536)
    stock = visual(pixels, grid_thw=torch.tensor(grids), return_dict=True)
    metadata = MetadataCache(TowerGeometry.from_visual(visual)).batch([("video", g) for g in grids])
    ours = visual(pixels, grid_thw=None, return_dict=True, **metadata.forward_kwargs(metadata.max_sequence_length))
    assert torch.equal(ours.pooler_output, stock.pooler_output)
    for mine, theirs in zip(ours.deepstack_features, stock.deepstack_features):
        assert torch.equal(mine, theirs)


@torch.inference_mode()
def test_padded_forward_with_masked_attention_equals_the_stock_forward(visual):
    register_backends()
    grids = [(1, 4, 6), (3, 6, 4)]
    pixels = torch.randn(24 + 72, 1536)
    stock = visual(pixels, grid_thw=torch.tensor(grids), return_dict=True)
    metadata = MetadataCache(TowerGeometry.from_visual(visual)).batch([("video", g) for g in grids], 128, 8)
    padded = torch.cat([pixels, torch.zeros(32, 1536)])
    with attention(visual, REGISTERED_NAMES["sdpa_masked"]):
        ours = visual(padded, grid_thw=None, return_dict=True, **metadata.forward_kwargs(128))
    assert torch.isfinite(ours.pooler_output).all()
    torch.testing.assert_close(ours.pooler_output[:24], stock.pooler_output, rtol=1e-5, atol=1e-5)


# --------------------------------------------------------------------------- the encoder, run directly


def reference(visual, items):
    with torch.inference_mode():
        return EagerVisionEncoder(visual).encode(items)


def assert_same_outputs(got, expected, tolerance=1e-5):
    assert len(got.items) == len(expected.items)
    for mine, theirs in zip(got.items, expected.items):
        assert mine.embeds.shape == theirs.embeds.shape
        torch.testing.assert_close(mine.embeds, theirs.embeds, rtol=tolerance, atol=tolerance)
        assert len(mine.deepstack) == len(theirs.deepstack) == 2
        for layer, reference_layer in zip(mine.deepstack, theirs.deepstack):
            torch.testing.assert_close(layer, reference_layer, rtol=tolerance, atol=tolerance)


def test_direct_encoder_matches_eager_on_mixed_split_and_oversized_items(visual):
    items = [
        vision_item((1, 8, 12), "image", 1),
        vision_item((3, 6, 4), "video", 2),
        vision_item((12, 4, 4), "video", 3),  # 12 frame pairs > 8 sequences: cut in two
        vision_item((1, 18, 16), "image", 4),  # 288 patches > every budget: eager
        *[vision_item((1, 2, 4), "image", 5 + i) for i in range(5)],  # more items than one batch takes
    ]
    expected = reference(visual, items)
    encoder = GraphVisionEncoder(visual, SETTINGS, direct=True)
    try:
        got = encoder.encode(items)
        assert_same_outputs(got, expected)
        eager = [chunk for chunk in got.chunks if not chunk.graph_hit]
        assert len(eager) == 1 and "288 patches" in eager[0].fallback_reason and eager[0].budget is None
        replays = [chunk for chunk in got.chunks if chunk.graph_hit]
        for chunk in replays:
            assert chunk.patches <= chunk.budget and chunk.items <= 4 and chunk.fallback_reason is None
        assert [chunk.chunk_index for chunk in got.chunks] == list(range(len(got.chunks)))
        assert sum(chunk.frames for chunk in got.chunks) == sum(item.frames for item in items)
        stats = encoder.stats()
        assert (stats.items_replayed, stats.items_eager) == (8, 1)
        assert stats.replays == len(replays) and stats.eager_passes == 1
        assert stats.hit_rate == pytest.approx(8 / 9)

        misses_before, hits_before = stats.metadata_misses, stats.metadata_hits
        assert_same_outputs(encoder.encode(items), expected)  # same request again: buffers reused
        again = encoder.stats()
        assert again.metadata_misses == misses_before and again.metadata_hits > hits_before
        assert again.items_replayed == 16 and again.ms_per_frame_p99 >= again.ms_per_frame_p50 > 0
    finally:
        encoder.clear()


def test_direct_encoder_after_clear_and_new_settings(visual):
    items = [vision_item((2, 4, 4), "video", 7), vision_item((1, 6, 6), "image", 8)]
    expected = reference(visual, items)
    encoder = GraphVisionEncoder(visual, SETTINGS, direct=True)
    try:
        assert visual.config._attn_implementation == REGISTERED_NAMES["sdpa_masked"]
        encoder.clear()
        assert not encoder.captured and visual.config._attn_implementation == "sdpa"
        with pytest.raises(EncoderError, match="not captured"):
            encoder.encode(items)
        encoder.capture()
        assert_same_outputs(encoder.encode(items), expected)
        assert encoder.reconfigure(dataclasses.replace(SETTINGS, budgets=(32, 96))) is True
        assert encoder.budgets == (32, 96)
        assert encoder.reconfigure(dataclasses.replace(SETTINGS, budgets=(32, 96))) is False
        got = encoder.encode(items)
        assert_same_outputs(got, expected)
        assert [chunk.budget for chunk in got.chunks] == [96]
    finally:
        encoder.clear()


def test_direct_encoder_refuses_mismatched_pixels(visual):
    encoder = GraphVisionEncoder(visual, SETTINGS, direct=True)
    try:
        bad = VisionItem(pixel_values=torch.zeros(10, 1536), grid_thw=(1, 4, 4), modality="image")
        with pytest.raises(EncoderError, match="do not match grid"):
            encoder.encode([bad])
        assert encoder.encode([]).items == []
    finally:
        encoder.clear()


def test_progress_is_reported_per_graph(visual):
    events = []
    encoder = GraphVisionEncoder(visual, SETTINGS, direct=True, progress=events.append)
    encoder.clear()
    assert [event.current for event in events] == [0, 1, 2, 3]
    assert all(event.stage == "capture" and event.total == 3 for event in events)
    assert "256" in events[0].message  # largest budget first


def test_graphs_without_cuda_are_refused_and_the_factory_says_why(visual):
    with pytest.raises(EncoderError, match="CUDA device"):
        GraphVisionEncoder(visual, SETTINGS)
    encoder, reason = make_vision_encoder(visual, SETTINGS, torch.device("cpu"))
    assert encoder.name == "eager" and reason == "CUDA not available: the encoder runs eager on the CPU"
    encoder, reason = make_vision_encoder(visual, dataclasses.replace(SETTINGS, use_graphs=False), torch.device("cpu"))
    assert encoder.name == "eager" and "off" in reason


def test_backend_choice_and_refusals():
    cpu = torch.device("cpu")
    assert resolve_backend("auto", cpu, torch.float32) == "sdpa_masked"
    assert resolve_backend("sdpa_masked", cpu, torch.bfloat16) == "sdpa_masked"
    with pytest.raises(EncoderError, match="not available"):
        resolve_backend("varlen", cpu, torch.bfloat16)
    with pytest.raises(EncoderError, match="inside CUDA graphs"):
        resolve_backend("eager", cpu, torch.float32)
    backends = available_attention_backends()
    assert backends[-2:] == ["sdpa_masked", "eager"]
    if not torch.cuda.is_available():
        assert backends == ["sdpa_masked", "eager"]


def test_percentile_is_nearest_rank():
    values = list(range(1, 101))
    assert percentile(values, 50) == 50 and percentile(values, 99) == 99 and percentile(values, 100) == 100
    assert percentile([], 50) is None and percentile([3.0], 99) == 3.0
