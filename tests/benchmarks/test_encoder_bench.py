"""benchmarks/encoder_bench.py's pruning check on the CPU with a tiny tower through the encoder's
direct path (the GPU runs the 8B tower through its graphs): a long clip's chunks encoded with and
without pruning after the encoder."""

from __future__ import annotations

import torch
from transformers.models.qwen3_vl.configuration_qwen3_vl import Qwen3VLVisionConfig
from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLVisionModel

from benchmarks import encoder_bench
from framewise.core.encoding.manager import GraphVisionEncoder
from framewise.core.encoding.pruning import kept_token_count
from framewise.core.families.qwen3_vl.adapter import Qwen3VLAdapter
from framewise.core.settings import EncoderSettings


def test_pruning_after_the_encoder_leaves_its_passes_as_they_were() -> None:
    config = Qwen3VLVisionConfig(depth=1, hidden_size=32, num_heads=2, intermediate_size=64, out_hidden_size=64,
                                 num_position_embeddings=64, deepstack_visual_indexes=[0])
    torch.manual_seed(0)
    adapter = Qwen3VLAdapter(Qwen3VLVisionModel(config).eval())
    # Small budgets, so the clip takes several chunks of a few passes.
    settings = EncoderSettings(budgets=(64, 128), max_frame_pairs_per_batch=8)
    encoder = GraphVisionEncoder(adapter, settings, limits=encoder_bench.QWEN3_VL, direct=True)

    check = encoder_bench.pruning_hits(encoder, 0.75, frames=24, size=(64, 96))

    unpruned, pruned = check["unpruned"], check["pruned"]
    assert check["chunks"] > 1 and unpruned["passes"] >= check["chunks"]
    assert unpruned["video_tokens"] == 12 * 2 * 3
    assert pruned["video_tokens"] == kept_token_count((12, 2, 3), 0.75) < unpruned["video_tokens"]
    assert check["graph_counts_equal"] and unpruned["items_replayed"] > 0
    assert pruned["choice_ms"] > 0 and unpruned["choice_ms"] == 0
    assert "graph counts equal" in encoder_bench.pruning_words(check)
