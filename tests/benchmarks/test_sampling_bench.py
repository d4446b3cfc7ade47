"""benchmarks/sampling_bench.py's open-to-ready measurement runs the demo model, in a copy whose
context holds the clip where the demo's own cannot."""

from __future__ import annotations

import json

from benchmarks.sampling_bench import demo_holding
from framewise.core.model_source import DEMO_MODEL_DIR


def test_a_clip_the_demos_context_holds_uses_the_demo_itself() -> None:
    assert demo_holding(None) == DEMO_MODEL_DIR
    assert demo_holding(12_288) == DEMO_MODEL_DIR


def test_an_hour_at_64k_tokens_gets_a_copy_with_twice_its_tokens_of_context() -> None:
    copy = demo_holding(65_536)
    assert copy != DEMO_MODEL_DIR
    config = json.loads((copy / "config.json").read_text())
    assert config["text_config"]["max_position_embeddings"] == 131_072
    shipped = json.loads((DEMO_MODEL_DIR / "config.json").read_text())
    shipped["text_config"]["max_position_embeddings"] = 131_072
    assert config == shipped
    assert (copy / "model.safetensors").read_bytes() == (DEMO_MODEL_DIR / "model.safetensors").read_bytes()
