"""The graph manager's whole path with the Qwen3-VL adapter, run directly (no CUDA graph) on the CPU."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from framewise.core.encoding.defs import VisionItem
from framewise.core.encoding.eager import EagerVisionEncoder
from framewise.core.encoding.manager import GraphVisionEncoder, make_vision_encoder
from framewise.core.errors import EncoderError
from framewise.core.families import family_for
from framewise.core.families.qwen3_vl.adapter import Qwen3VLAdapter
from framewise.core.encoding.attention_backends import REGISTERED_NAMES
from framewise.core.metrics import EncoderMetricsAccumulator
from framewise.core.settings import EncoderSettings

QWEN3_VL = family_for("qwen3_vl").limits
SETTINGS = EncoderSettings(budgets=(64, 128, 256), max_items_per_batch=4, max_frame_pairs_per_batch=8)


def vision_item(grid, modality="video", seed=0) -> VisionItem:
    t, h, w = grid
    generator = torch.Generator().manual_seed(seed)
    return VisionItem(pixel_values=torch.randn(t * h * w, 1536, generator=generator), grid_thw=grid, modality=modality)


def reference(visual, items):
    with torch.inference_mode():
        return EagerVisionEncoder(Qwen3VLAdapter(visual)).encode(items)


def assert_same_outputs(got, expected, tolerance=1e-5):
    assert len(got.items) == len(expected.items)
    for mine, theirs in zip(got.items, expected.items):
        assert mine.embeds.shape == theirs.embeds.shape
        torch.testing.assert_close(mine.embeds, theirs.embeds, rtol=tolerance, atol=tolerance)
        assert len(mine.deepstack) == len(theirs.deepstack) == 2
        for layer, reference_layer in zip(mine.deepstack, theirs.deepstack):
            torch.testing.assert_close(layer, reference_layer, rtol=tolerance, atol=tolerance)


@pytest.mark.parametrize("fuse_kernels", [True, False], ids=["fused", "tower kernels"])
def test_direct_encoder_matches_eager_on_mixed_split_and_oversized_items(visual, fuse_kernels):
    items = [
        vision_item((1, 8, 12), "image", 1),
        vision_item((3, 6, 4), "video", 2),
        vision_item((12, 4, 4), "video", 3),  # 12 frame pairs > 8 sequences: cut in two
        vision_item((1, 18, 16), "image", 4),  # 288 patches > every budget: eager
        *[vision_item((1, 2, 4), "image", 5 + i) for i in range(5)],  # more items than one batch takes
    ]
    expected = reference(visual, items)
    settings = dataclasses.replace(SETTINGS, fuse_kernels=fuse_kernels)
    encoder = GraphVisionEncoder(Qwen3VLAdapter(visual), settings, direct=True, limits=QWEN3_VL)
    try:
        assert encoder.fused is fuse_kernels and ("fused" in encoder.name) is fuse_kernels
        got = encoder.encode(items)
        assert_same_outputs(got, expected)
        eager = [chunk for chunk in got.chunks if not chunk.graph_hit]
        assert len(eager) == 1 and "288 patches" in eager[0].fallback_reason and eager[0].budget is None
        replays = [chunk for chunk in got.chunks if chunk.graph_hit]
        for chunk in replays:
            assert chunk.patches <= chunk.budget and chunk.items <= 4 and chunk.fallback_reason is None
        assert [chunk.chunk_index for chunk in got.chunks] == list(range(len(got.chunks)))
        assert sum(chunk.frames for chunk in got.chunks) == sum(2 * item.grid_thw[0] if item.modality == "video" else 1 for item in items)
        stats = encoder.stats()
        assert (stats.items_replayed, stats.items_eager) == (8, 1)
        assert stats.replays == len(replays) and stats.eager_passes == 1
        assert stats.hit_rate == pytest.approx(8 / 9)

        misses_before, hits_before = stats.metadata_misses, stats.metadata_hits
        second = encoder.encode(items)
        assert_same_outputs(second, expected)  # same request again: buffers reused
        again = encoder.stats()
        assert again.metadata_misses == misses_before and again.metadata_hits > hits_before
        metrics = EncoderMetricsAccumulator().add_item([*got.chunks, *second.chunks])
        assert again.items_replayed == 16 and metrics.ms_per_frame_p99 >= metrics.ms_per_frame_p50 > 0
    finally:
        encoder.clear()


def test_direct_encoder_after_clear_and_new_settings(visual):
    items = [vision_item((2, 4, 4), "video", 7), vision_item((1, 6, 6), "image", 8)]
    expected = reference(visual, items)
    adapter = Qwen3VLAdapter(visual)
    encoder = GraphVisionEncoder(adapter, SETTINGS, direct=True, limits=QWEN3_VL)
    try:
        assert visual.config._attn_implementation == REGISTERED_NAMES["sdpa_masked"]
        encoder.encode(items)
        passes_built = adapter.metadata.pass_misses
        encoder.clear()
        assert not encoder.captured and visual.config._attn_implementation == "sdpa"
        with pytest.raises(EncoderError, match="not captured"):
            encoder.encode(items)
        encoder.capture()
        assert_same_outputs(encoder.encode(items), expected)
        assert adapter.metadata.pass_misses == 2 * passes_built  # clear() dropped the cached passes
        # New encoder settings: the engine clears the encoder and builds another over the same adapter.
        encoder.clear()
        encoder = GraphVisionEncoder(adapter, dataclasses.replace(SETTINGS, budgets=(32, 96)), direct=True, limits=QWEN3_VL)
        assert encoder.budgets == (32, 96)
        got = encoder.encode(items)
        assert_same_outputs(got, expected)
        assert [chunk.budget for chunk in got.chunks] == [96]
    finally:
        encoder.clear()


def test_direct_encoder_refuses_mismatched_pixels(visual):
    encoder = GraphVisionEncoder(Qwen3VLAdapter(visual), SETTINGS, direct=True, limits=QWEN3_VL)
    try:
        bad = VisionItem(pixel_values=torch.zeros(10, 1536), grid_thw=(1, 4, 4), modality="image")
        with pytest.raises(EncoderError, match="do not match grid"):
            encoder.encode([bad])
        assert encoder.encode([]).items == []
    finally:
        encoder.clear()


def test_progress_is_reported_per_graph(visual):
    events = []
    encoder = GraphVisionEncoder(Qwen3VLAdapter(visual), SETTINGS, direct=True, progress=events.append, limits=QWEN3_VL)
    encoder.clear()
    assert [event.current for event in events] == [0, 1, 2, 3]
    assert all(event.stage == "capture" and event.total == 3 for event in events)
    assert "256" in events[0].message  # largest budget first


def test_graphs_without_cuda_are_refused_and_the_factory_says_why(visual):
    with pytest.raises(EncoderError, match="CUDA device"):
        GraphVisionEncoder(Qwen3VLAdapter(visual), SETTINGS, limits=QWEN3_VL)
    encoder, reason = make_vision_encoder(Qwen3VLAdapter(visual), SETTINGS, limits=QWEN3_VL)
    assert encoder.name == "eager" and reason == "CUDA not available: the encoder runs eager on the CPU"
    encoder, reason = make_vision_encoder(Qwen3VLAdapter(visual), dataclasses.replace(SETTINGS, use_graphs=False), limits=QWEN3_VL)
    assert encoder.name == "eager" and "off" in reason
