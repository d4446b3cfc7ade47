"""Qwen3.5's sizes read from a checkpoint's text_config, and the tiny checkpoints the tests write."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer, Qwen3_5ForConditionalGeneration, Qwen3_5TextConfig

from framewise.core.decoding.hybrid_state import FULL_ATTENTION, LINEAR_ATTENTION
from framewise.core.errors import ModelLoadError
from framewise.core.families.qwen3_5.config import TextShape
from training.demo_model import special_token_ids
from tests.core.families.qwen3_5.checkpoint import tiny_config, tiny_model, write_tiny_checkpoint

# The text_config of a 9B-shaped checkpoint as its config.json writes it: no layer_types, the rotary
# share at the top level as older configs have it.
NINE_B = {
    "hidden_size": 4096, "vocab_size": 248320, "max_position_embeddings": 262144, "num_hidden_layers": 32,
    "full_attention_interval": 4, "num_attention_heads": 16, "num_key_value_heads": 4, "head_dim": 256,
    "partial_rotary_factor": 0.25, "linear_num_key_heads": 16, "linear_num_value_heads": 32,
    "linear_key_head_dim": 128, "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4,
}


def test_the_9b_shape_has_one_full_attention_layer_in_four() -> None:
    shape = TextShape.from_text_config(NINE_B)
    assert shape.layer_kinds[:4] == (LINEAR_ATTENTION, LINEAR_ATTENTION, LINEAR_ATTENTION, FULL_ATTENTION)
    assert (shape.full_layers, shape.linear_layers) == (8, 24)
    assert shape.rotary_dim == 64
    assert shape.linear.conv_channels == 2 * 16 * 128 + 32 * 128 and shape.linear.heads == 32
    # 8 layers x 4 KV heads x 256 x keys and values x bf16: 32 KiB a token.
    per_token = 8 * 4 * 256 * 2 * 2
    assert per_token == 32 * 1024


def test_the_shape_agrees_with_transformers_reading_of_the_same_config() -> None:
    config = Qwen3_5TextConfig(**NINE_B)
    assert TextShape.from_text_config(config.to_dict()) == TextShape.from_text_config(NINE_B)
    assert tuple(config.layer_types) == TextShape.from_text_config(NINE_B).layer_kinds


def test_listed_layer_types_win_and_an_unknown_kind_or_missing_field_is_named() -> None:
    listed = {**NINE_B, "num_hidden_layers": 2, "layer_types": [FULL_ATTENTION, LINEAR_ATTENTION]}
    assert TextShape.from_text_config(listed).layer_kinds == (FULL_ATTENTION, LINEAR_ATTENTION)
    with pytest.raises(ModelLoadError, match="sliding_attention"):
        TextShape.from_text_config({**listed, "layer_types": ["sliding_attention", LINEAR_ATTENTION]})
    with pytest.raises(ModelLoadError, match="linear_conv_kernel_dim"):
        TextShape.from_text_config({key: value for key, value in NINE_B.items() if key != "linear_conv_kernel_dim"})


def test_a_written_tiny_checkpoint_loads_with_its_tokenizer_and_weights(tmp_path: Path) -> None:
    folder = write_tiny_checkpoint(tmp_path / "tiny", seed=4)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = Qwen3_5ForConditionalGeneration.from_pretrained(folder)
    assert model.config.model_type == "qwen3_5"
    assert model.config.text_config.vocab_size == len(tokenizer)
    assert model.config.video_token_id == tokenizer.convert_tokens_to_ids("<|video_pad|>")
    expected = tiny_model(tiny_config(len(tokenizer), special_token_ids(tokenizer)), seed=4).state_dict()
    loaded = model.state_dict()
    assert loaded.keys() == expected.keys()
    assert all(torch.equal(loaded[name], expected[name]) for name in expected)

