"""On the GPU, what the engine says a loaded model holds is what the caching allocator reserved for
it: a random checkpoint at the 2B shapes (benchmarks/memory_bench.py writes it), bf16 and FP8
quantized on load, default settings (encoder and decode graphs on); and the estimate made before
loading covers it."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest
import torch

from benchmarks import memory_bench
from framewise.core.backends.local.engine import Engine
from framewise.core.loading import estimate_memory
from framewise.core.settings import AppSettings

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return memory_bench.ensure_checkpoint("2B", tmp_path_factory.mktemp("memory_bench"))


@pytest.mark.parametrize("dtype", ["bfloat16", "fp8"])
def test_the_held_total_matches_the_memory_reserved_after_load(checkpoint: Path, dtype: str) -> None:
    settings = AppSettings().replace("model", source=str(checkpoint), device="cuda", dtype=dtype)
    gc.collect()
    torch.cuda.empty_cache()
    before = torch.cuda.memory_reserved()
    engine = Engine(settings)
    held = engine.load().held_memory
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    grown = torch.cuda.memory_reserved() - before
    try:
        assert held.reserved == pytest.approx(grown, rel=0.01)  # every build step was measured
        # on failure, where the excess is: each build step's growth beside the parts it holds
        by_step = {step: f"{size / 2**30:.3f} GiB" for step, size in engine.parts.reserved_by_step.items()}
        assert held.total == pytest.approx(grown, rel=0.05), f"{held.describe()}; reserved by step {by_step}"
        estimate = estimate_memory(settings)
        assert held.weight_total == pytest.approx(estimate.weights, rel=0.02), estimate.describe()
        assert held.kv_cache == pytest.approx(estimate.kv_cache, rel=0.05), estimate.describe()
        # the estimate made before loading covers what was reserved, and is not far above it (a
        # clip's features come with the clip, not at load)
        assert grown <= estimate.at_load <= 1.1 * grown, f"{estimate.describe()}; held {held.describe()}"
    finally:
        engine.parts.release()
