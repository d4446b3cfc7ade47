"""The fused vision forward computes what transformers' tower computes, on the same metadata."""

from __future__ import annotations

import pytest
import torch
from transformers.models.qwen3_vl.configuration_qwen3_vl import Qwen3VLVisionConfig
from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLVisionModel

from framewise.core.errors import EncoderError
from framewise.core.families.qwen3_vl.fused import FusedVisionForward, compile_cache_dir
from framewise.core.families.qwen3_vl.geometry import VisionGeometry
from framewise.core.families.qwen3_vl.metadata import MetadataCache


def tiny_tower(hidden_act: str = "gelu_pytorch_tanh") -> Qwen3VLVisionModel:
    config = Qwen3VLVisionConfig(
        depth=3, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=48,
        num_position_embeddings=64, deepstack_visual_indexes=[0, 2], hidden_act=hidden_act,
    )
    config._attn_implementation = "sdpa"
    return Qwen3VLVisionModel(config).eval()


@pytest.fixture(scope="module")
def tower() -> Qwen3VLVisionModel:
    torch.manual_seed(0)
    return tiny_tower()


def run_both(tower: Qwen3VLVisionModel, fused: FusedVisionForward, grids, padded_rows: int | None = None):
    """Tower output per grid list, and the fused output on the same (optionally padded) buffers."""
    pieces = [("video", grid) for grid in grids]
    patches = sum(t * h * w for t, h, w in grids)
    pixels = torch.randn(patches, 3 * 2 * 16 * 16)
    with torch.inference_mode():
        reference = tower(pixels, grid_thw=torch.tensor(grids))
        metadata = MetadataCache(VisionGeometry.from_visual(tower)).batch(
            pieces, rows=padded_rows, max_sequences=None if padded_rows is None else 16
        )
        rows = metadata.rows
        buffer = torch.zeros(rows, pixels.shape[1])
        buffer[:patches] = pixels
        embeds, deepstack = fused(
            buffer, metadata.interp_indices, metadata.interp_weights, metadata.position_ids,
            metadata.cu_seqlens, max(metadata.max_sequence_length, 1),
        )
    return reference, embeds[: patches // 4], [layer[: patches // 4] for layer in deepstack]


@pytest.mark.parametrize("grids", [[(1, 4, 6)], [(2, 4, 4), (1, 6, 2)], [(3, 2, 8)]])
def test_uncompiled_fused_forward_equals_the_tower(tower: Qwen3VLVisionModel, grids) -> None:
    fused = FusedVisionForward(tower, "sdpa_masked", compiled=False)
    reference, embeds, deepstack = run_both(tower, fused, grids)
    torch.testing.assert_close(embeds, reference.pooler_output, rtol=1e-4, atol=1e-5)
    assert len(deepstack) == len(reference.deepstack_features) == 2
    for ours, theirs in zip(deepstack, reference.deepstack_features):
        torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-5)


def test_padding_rows_do_not_change_the_real_rows(tower: Qwen3VLVisionModel) -> None:
    fused = FusedVisionForward(tower, "sdpa_masked", compiled=False)
    reference, embeds, deepstack = run_both(tower, fused, [(2, 4, 4)], padded_rows=64)
    torch.testing.assert_close(embeds, reference.pooler_output, rtol=1e-4, atol=1e-5)
    assert not any(layer.isnan().any() for layer in deepstack)


def test_compiled_fused_forward_serves_two_row_counts_with_one_compile(tower: Qwen3VLVisionModel) -> None:
    torch._dynamo.reset()
    fused = FusedVisionForward(tower, "sdpa_masked", compiled=True)
    for rows, grids in ((64, [(2, 4, 4)]), (96, [(1, 4, 6), (2, 4, 4)])):
        reference, embeds, _ = run_both(tower, fused, grids, padded_rows=rows)
        torch.testing.assert_close(embeds, reference.pooler_output, rtol=1e-4, atol=1e-5)
    frames = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    assert frames <= 4, f"{frames} graphs compiled: the row count should be dynamic (stem, block, two mergers)"


def test_an_unknown_activation_is_refused_with_a_reason() -> None:
    with pytest.raises(EncoderError, match="activation"):
        FusedVisionForward(tiny_tower("quick_gelu"), "sdpa_masked", compiled=False)


def test_the_compile_cache_is_keyed_by_the_tower_shape(tower: Qwen3VLVisionModel, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("FRAMEWISE_CACHE_DIR", str(tmp_path))
    here = compile_cache_dir(tower, torch.device("cpu"))
    other = compile_cache_dir(tiny_tower("gelu"), torch.device("cpu"))
    assert here.parent == tmp_path / "inductor" and here != other
