"""A small Qwen3-VL vision tower shared by the Qwen3-VL tests."""

from __future__ import annotations

import pytest
import torch
from transformers.models.qwen3_vl.configuration_qwen3_vl import Qwen3VLVisionConfig
from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLVisionModel


@pytest.fixture(scope="module")
def visual() -> Qwen3VLVisionModel:
    """A tiny random tower with the real position table (48x48) and head_dim 72."""
    torch.manual_seed(0)
    config = Qwen3VLVisionConfig(
        depth=3, hidden_size=144, num_heads=2, intermediate_size=256, out_hidden_size=96,
        num_position_embeddings=2304, deepstack_visual_indexes=[0, 2],
    )
    return Qwen3VLVisionModel(config).eval()
