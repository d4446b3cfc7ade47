"""The fused vision forward computes what transformers' tower computes, on the same metadata."""

from __future__ import annotations

import functools

import pytest
import torch
from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLVisionModel

from framewise.core.errors import EncoderError
from framewise.core.families.qwen3_vl.fused import FusedVisionForward, compile_cache_dir
from tests.core.families.qwen3_vl.references import graphs_compiled_at_two_row_counts, run_both, tiny_tower


@pytest.fixture(scope="module")
def tower() -> Qwen3VLVisionModel:
    torch.manual_seed(0)
    return tiny_tower()


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


def test_compiled_fused_forward_serves_two_row_counts_with_one_compile(tower: Qwen3VLVisionModel, monkeypatch) -> None:
    """The product's own ``torch.compile`` request, traced by dynamo and AOTAutograd as for inductor
    but run by ``aot_eager``: the product compiles only on CUDA, so inductor's CPU code generation
    is none of its paths (tests/gpu/test_fused_compile_gpu.py runs inductor there)."""
    compile_with_backend(monkeypatch, "aot_eager")
    close = functools.partial(torch.testing.assert_close, rtol=1e-4, atol=1e-5)
    frames = graphs_compiled_at_two_row_counts(tower, close)
    assert 0 < frames <= 4, f"{frames} graphs compiled: the row count should be dynamic (stem, block, two mergers)"


def compile_with_backend(monkeypatch: pytest.MonkeyPatch, backend: str) -> None:
    """``torch.compile`` with the caller's own options, and ``backend`` in place of the default inductor."""
    compile_ = torch.compile
    monkeypatch.setattr(torch, "compile", lambda function, **options: compile_(function, backend=backend, **options))


def test_an_unknown_activation_is_refused_with_a_reason() -> None:
    with pytest.raises(EncoderError, match="activation"):
        FusedVisionForward(tiny_tower("quick_gelu"), "sdpa_masked", compiled=False)


def test_the_compile_cache_is_keyed_by_the_tower_shape(tower: Qwen3VLVisionModel, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("FRAMEWISE_CACHE_DIR", str(tmp_path))
    here = compile_cache_dir(tower, torch.device("cpu"))
    other = compile_cache_dir(tiny_tower("gelu"), torch.device("cpu"))
    assert here.parent == tmp_path / "inductor" and here != other
