"""On the GPU, what the engine says a loaded model holds is what the caching allocator reserved for
it: a random checkpoint at the 2B shapes (benchmarks/memory_bench.py writes it), bf16 and FP8
quantized on load, default settings (encoder and decode graphs on), its output head tied to the
input embedding as released or untied (the embedding then held by the host); and the estimate made
before loading covers it."""

from __future__ import annotations

import gc
import json
from pathlib import Path

import pytest
import torch

from safetensors.torch import save_file

from benchmarks import memory_bench
from framewise.core.backends.local.engine import Engine
from framewise.core import loading
from framewise.core.decoding.host_embedding import HostEmbedding, move_input_embedding_to_host
from framewise.core.loading import estimate_memory
from framewise.core.settings import AppSettings

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tied = memory_bench.ensure_checkpoint("2B", tmp_path_factory.mktemp("memory_bench"))
    return {"tied": tied, "untied": untied_copy(tied, tmp_path_factory.mktemp("untied"))}


def untied_copy(folder: Path, into: Path) -> Path:
    """Checkpoint ``folder`` (linked, not copied) with an output head of its own, random."""
    for path in folder.iterdir():
        if path.suffix == ".safetensors" or path.name == "complete":
            (into / path.name).symlink_to(path)
        elif path.is_file():
            (into / path.name).write_bytes(path.read_bytes())
    config = json.loads((into / "config.json").read_text())
    config["tie_word_embeddings"] = config["text_config"]["tie_word_embeddings"] = False
    (into / "config.json").write_text(json.dumps(config))
    text = config["text_config"]
    head = torch.randn(text["vocab_size"], text["hidden_size"], generator=torch.Generator().manual_seed(0)) * 0.02
    save_file({"lm_head.weight": head.to(torch.bfloat16)}, into / "head.safetensors")
    index = json.loads((into / "model.safetensors.index.json").read_text())
    index["weight_map"]["lm_head.weight"] = "head.safetensors"
    index["metadata"]["total_size"] += 2 * head.numel()
    (into / "model.safetensors.index.json").write_text(json.dumps(index))
    return into


@pytest.mark.parametrize("head", ["tied", "untied"])
@pytest.mark.parametrize("dtype", ["bfloat16", "fp8"])
def test_the_held_total_matches_the_memory_reserved_after_load(
    checkpoints: dict[str, Path], head: str, dtype: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = AppSettings().replace("model", source=str(checkpoints[head]), device="cuda", dtype=dtype)
    read_into: list[torch.device] = []  # where the loader left the input embedding's table

    def moving(model: torch.nn.Module, device: torch.device) -> bool:
        read_into.append(model.get_input_embeddings().weight.device)
        return move_input_embedding_to_host(model, device)

    monkeypatch.setattr(loading, "move_input_embedding_to_host", moving)
    gc.collect()
    torch.cuda.empty_cache()
    before = torch.cuda.memory_reserved()
    engine = Engine(settings)
    held = engine.load().held_memory
    assert isinstance(engine.parts.loaded.model.get_input_embeddings(), HostEmbedding) == (head == "untied")
    if head == "untied":  # read into the host's memory, never onto the card (a tied one goes with the model)
        assert [device.type for device in read_into] == ["cpu"]
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
