"""Qwen3-VL's vision metadata against transformers' own, and the graph-safe attention backends."""

from __future__ import annotations

import dataclasses
from contextlib import contextmanager

import pytest
import torch
from transformers.vision_utils import (
    get_vision_cu_seqlens,
    get_vision_interpolation_indices_and_weights,
    get_vision_position_ids,
)

from framewise.core.errors import EncoderError
from framewise.core.encoding import attention_backends as attention_module
from framewise.core.encoding.attention_backends import (
    REGISTERED_NAMES,
    available_attention_backends,
    register_backends,
    resolve_backend,
)
from framewise.core.families.qwen3_vl.geometry import VisionGeometry
from framewise.core.families.qwen3_vl.metadata import MetadataCache

GRIDS = [(1, 2, 2), (1, 4, 6), (1, 8, 8), (3, 6, 4), (2, 10, 14), (1, 48, 48), (1, 64, 32), (4, 2, 30)]


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


@pytest.mark.parametrize("align_corners", [True, False])
@pytest.mark.parametrize("grid", GRIDS)
def test_item_metadata_equals_the_models_own(visual, grid, align_corners):
    geometry = dataclasses.replace(VisionGeometry.from_visual(visual), align_corners=align_corners)
    metadata = MetadataCache(geometry).batch([("video", grid)])
    indices, weights, position_ids, cu_seqlens = model_metadata(visual, [grid], align_corners)
    assert torch.equal(metadata.interp_indices, indices)
    assert torch.equal(metadata.interp_weights, weights)
    assert torch.equal(metadata.position_ids, position_ids)
    assert torch.equal(metadata.cu_seqlens, cu_seqlens)


def test_batch_metadata_equals_the_models_own_for_mixed_grids(visual):
    grids = [(1, 4, 6), (3, 6, 4), (1, 2, 2), (2, 10, 14)]
    metadata = MetadataCache(VisionGeometry.from_visual(visual)).batch([("image", g) for g in grids])
    for ours, theirs in zip(
        (metadata.interp_indices, metadata.interp_weights, metadata.position_ids, metadata.cu_seqlens),
        model_metadata(visual, grids),
    ):
        assert torch.equal(ours, theirs)
    assert metadata.sequences == 1 + 3 + 1 + 2
    assert metadata.max_sequence_length == 140


def test_padded_batch_has_one_trailing_padding_sequence(visual):
    cache = MetadataCache(VisionGeometry.from_visual(visual))
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
    cache = MetadataCache(VisionGeometry.from_visual(visual))
    cache.batch([("image", (1, 4, 4))])
    assert (cache.hits, cache.misses) == (0, 1)
    cache.batch([("image", (1, 4, 4)), ("video", (1, 4, 4))])
    assert (cache.hits, cache.misses) == (1, 2)  # same grid, other modality: its own entry
    cache.batch([("image", (1, 4, 4))])
    assert cache.hits == 2


def test_cache_drops_the_least_recently_used_grid(visual):
    cache = MetadataCache(VisionGeometry.from_visual(visual), capacity=2)
    for grid in [(1, 2, 2), (1, 2, 4), (1, 2, 2), (1, 4, 4), (1, 2, 2)]:
        cache.item("image", grid)
    assert len(cache) == 2 and cache.misses == 3 and cache.hits == 2


def test_odd_grid_is_refused_with_a_clear_message(visual):
    with pytest.raises(EncoderError, match="multiple of 32 pixels"):
        MetadataCache(VisionGeometry.from_visual(visual)).item("image", (1, 3, 4))


@torch.inference_mode()
def test_forward_with_precomputed_metadata_equals_the_stock_forward(visual):
    grids = [(1, 4, 6), (3, 6, 4), (2, 10, 14)]
    pixels = torch.randn(sum(t * h * w for t, h, w in grids), 1536)
    stock = visual(pixels, grid_thw=torch.tensor(grids), return_dict=True)
    metadata = MetadataCache(VisionGeometry.from_visual(visual)).batch([("video", g) for g in grids])
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
    metadata = MetadataCache(VisionGeometry.from_visual(visual)).batch([("video", g) for g in grids], 128, 8)
    padded = torch.cat([pixels, torch.zeros(32, 1536)])
    with attention(visual, REGISTERED_NAMES["sdpa_masked"]):
        ours = visual(padded, grid_thw=None, return_dict=True, **metadata.forward_kwargs(128))
    assert torch.isfinite(ours.pooler_output).all()
    torch.testing.assert_close(ours.pooler_output[:24], stock.pooler_output, rtol=1e-5, atol=1e-5)


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


def test_the_geometry_of_a_tower_is_its_configs_and_only_bilinear_tables_are_taken(visual, monkeypatch):
    geometry = VisionGeometry.from_visual(visual)
    assert (geometry.num_grid_per_side, geometry.merge_size, geometry.patch_dim) == (48, 2, 1536)
    assert geometry == VisionGeometry.from_vision_config(visual.config) == VisionGeometry()
    monkeypatch.setattr(visual, "interpolation_mode", "bicubic")
    with pytest.raises(EncoderError, match="only bilinear"):
        VisionGeometry.from_visual(visual)


def test_auto_takes_the_tile_kernel_on_a_gpu_in_any_dtype_and_the_flash_kernels_without_triton(monkeypatch):
    gpu = torch.device("cuda")
    with_triton = ["triton", "varlen", "sdpa_masked", "eager"]
    monkeypatch.setattr(attention_module, "available_attention_backends", lambda: with_triton)
    assert resolve_backend("auto", gpu, torch.float32) == "triton"
    assert resolve_backend("auto", gpu, torch.bfloat16) == "triton"
    assert resolve_backend("triton", gpu, torch.float32) == "triton"
    monkeypatch.setattr(attention_module, "available_attention_backends", lambda: with_triton[1:])
    assert resolve_backend("auto", gpu, torch.bfloat16) == "varlen"
    assert resolve_backend("auto", gpu, torch.float32) == "sdpa_masked"
    with pytest.raises(EncoderError, match="not available"):
        resolve_backend("triton", gpu, torch.bfloat16)


def test_a_repeated_pass_is_served_from_the_pass_cache(visual):
    cache = MetadataCache(VisionGeometry.from_visual(visual))
    pieces = [("video", (2, 4, 4)), ("image", (1, 2, 4))]
    first = cache.padded_pass(pieces, 64, 6, torch.device("cpu"))
    expected = cache.batch(pieces, rows=64, max_sequences=6)
    for name in ("interp_indices", "interp_weights", "position_ids", "cu_seqlens"):
        assert torch.equal(getattr(first, name), getattr(expected, name))
    item_lookups = cache.hits + cache.misses
    again = cache.padded_pass(list(pieces), 64, 6, torch.device("cpu"))
    assert again is first and (cache.pass_hits, cache.pass_misses) == (1, 1)
    assert cache.hits + cache.misses == item_lookups  # a pass hit looks up no item


def test_a_pass_of_other_rows_or_slots_is_its_own_entry(visual):
    cache = MetadataCache(VisionGeometry.from_visual(visual))
    pieces = [("image", (1, 4, 4))]
    shapes = {(64, 6): None, (128, 6): None, (64, 8): None}
    for rows, slots in shapes:
        shapes[rows, slots] = cache.padded_pass(pieces, rows, slots, torch.device("cpu"))
    assert cache.pass_misses == 3 and cache.pass_hits == 0
    assert [m.rows for m in shapes.values()] == [64, 128, 64]
    assert [len(m.cu_seqlens) for m in shapes.values()] == [8, 8, 10]


def test_the_pass_cache_drops_the_least_recently_used_pass(visual):
    cache = MetadataCache(VisionGeometry.from_visual(visual), pass_capacity=2)
    cpu = torch.device("cpu")
    for grid in [(1, 2, 2), (1, 2, 4), (1, 2, 2), (1, 4, 4), (1, 2, 2), (1, 2, 4)]:
        cache.padded_pass([("image", grid)], 32, 4, cpu)
    assert (cache.pass_hits, cache.pass_misses) == (2, 4)  # (1, 2, 4) was dropped for (1, 4, 4)
