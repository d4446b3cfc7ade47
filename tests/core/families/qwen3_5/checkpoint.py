"""Tiny random-weight Qwen3.5 models for tests: two Gated DeltaNet layers and one full-attention
layer (Qwen3.5's layer kinds and weight names, at toy sizes), a one-block vision tower, and a
writer of loadable checkpoints with the bundled demo model's tokenizer."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Sequence

import torch
from transformers import AutoTokenizer, GenerationConfig, Qwen3_5Config, Qwen3_5ForConditionalGeneration

from training.demo_model import (
    ENDOFTEXT,
    IM_END,
    IMAGE_PAD,
    VIDEO_PAD,
    VISION_END,
    VISION_START,
    special_token_ids,
)
from tests.conftest import REPO_ROOT
# Imported for what it does: transformers' Qwen3.5 runs its own torch code, the tests' reference,
# also where fla-core is installed.
from tests.core.families.qwen3_5 import transformers_reference  # noqa: F401

DEMO_MODEL = REPO_ROOT / "assets" / "demo_model"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
# A chat template that behaves as Qwen3.5's released one does where Framewise relies on it (written
# here, not copied): ChatML; one vision block per clip or picture; the answer opened with a
# thinking block, empty with enable_thinking=False; earlier answers shown without their thinking.
CHAT_TEMPLATE = (
    "{%- set thinking = enable_thinking is not defined or enable_thinking -%}"
    "{%- set ns = namespace(last_user=-1) -%}"
    "{%- for message in messages -%}{%- if message.role == 'user' -%}{%- set ns.last_user = loop.index0 -%}"
    "{%- endif -%}{%- endfor -%}"
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message.role + '\n' -}}"
    "{%- if message.content is string -%}"
    "{%- set text = message.content -%}"
    "{%- if message.role == 'assistant' and '</think>' in text -%}"
    "{%- set text = text.split('</think>')[-1].lstrip('\n') -%}{%- endif -%}"
    "{%- if message.role == 'assistant' and loop.index0 > ns.last_user -%}{{- '<think>\n\n</think>\n\n' -}}"
    "{%- endif -%}"
    "{{- text -}}"
    "{%- else -%}{%- for item in message.content -%}"
    "{%- if item.type == 'image' -%}{{- '<|vision_start|><|image_pad|><|vision_end|>' -}}"
    "{%- elif item.type == 'video' -%}{{- '<|vision_start|><|video_pad|><|vision_end|>' -}}"
    "{%- elif item.type == 'text' -%}{{- item.text -}}{%- endif -%}"
    "{%- endfor -%}{%- endif -%}"
    "{{- '<|im_end|>\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\n' -}}"
    "{%- if thinking -%}{{- '<think>\n' -}}{%- else -%}{{- '<think>\n\n</think>\n\n' -}}{%- endif -%}"
    "{%- endif -%}"
)
LAYER_TYPES = ("linear_attention", "linear_attention", "full_attention")
# Ids of the special tokens in a model without a tokenizer: the last ones of a 300-token vocabulary.
TOY_IDS = {ENDOFTEXT: 294, IM_END: 295, IMAGE_PAD: 296, VIDEO_PAD: 297, VISION_START: 298, VISION_END: 299}


def tiny_config(
    vocab_size: int = 300, special_ids: dict[str, int] = TOY_IDS, layer_types: Sequence[str] = LAYER_TYPES,
    linear_head_dim: int = 16, attention: tuple[int, int, int] = (4, 2, 64),
) -> Qwen3_5Config:
    """Qwen3.5 at toy sizes: hidden 64, full attention of ``attention`` (query heads, key/value
    heads, head dim: by default 4 heads over 2 of 64) with rotary on a quarter of each head
    (interleaved mrope, [3, 3, 2] of 64-dim heads, in the released 11:11:10 proportion), linear
    attention 2 key heads and 4 value heads of ``linear_head_dim`` (each key head serving
    two value heads, as in the released 9B), a 4-tap convolution; a one-block vision tower of patch
    16, merge 2."""
    heads, kv_heads, head_dim = attention
    rotary_pairs = head_dim // 8  # a quarter of the head, in pairs
    temporal = round(rotary_pairs * 11 / 32)
    text = {
        "vocab_size": vocab_size, "hidden_size": 64, "intermediate_size": 128,
        "num_hidden_layers": len(layer_types), "layer_types": list(layer_types),
        "num_attention_heads": heads, "num_key_value_heads": kv_heads, "head_dim": head_dim,
        "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": linear_head_dim,
        "linear_value_head_dim": linear_head_dim, "linear_conv_kernel_dim": 4, "max_position_embeddings": 4096,
        "rope_parameters": {
            "rope_type": "default", "rope_theta": 10_000_000.0, "partial_rotary_factor": 0.25,
            "mrope_section": [temporal, temporal, rotary_pairs - 2 * temporal], "mrope_interleaved": True,
        },
        "pad_token_id": special_ids[ENDOFTEXT], "eos_token_id": special_ids[IM_END],
    }
    vision = {
        "depth": 1, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2, "out_hidden_size": 64,
        "num_position_embeddings": 64, "patch_size": 16, "temporal_patch_size": 2, "spatial_merge_size": 2,
    }
    return Qwen3_5Config(
        text_config=text, vision_config=vision,
        image_token_id=special_ids[IMAGE_PAD], video_token_id=special_ids[VIDEO_PAD],
        vision_start_token_id=special_ids[VISION_START], vision_end_token_id=special_ids[VISION_END],
    )


def tiny_model(config: Qwen3_5Config, seed: int = 0, dtype: torch.dtype = torch.float32):
    """A ``Qwen3_5ForConditionalGeneration`` of ``config`` whose weights are drawn from ``seed`` so
    that every term counts: matrices scaled by their fan-in, norm weights away from their
    initial values, decay rates between 1 and 16. The global RNG is left as it was."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen3_5ForConditionalGeneration(config)
        with torch.no_grad():
            for name, parameter in model.named_parameters():
                _spread(name, parameter)
    return model.to(dtype).eval()


def _spread(name: str, parameter: torch.nn.Parameter) -> None:
    if name.endswith("A_log"):
        parameter.copy_(torch.empty_like(parameter).uniform_(1.0, 16.0).log())
    elif parameter.dim() >= 2:
        fan_in = parameter[0].numel()
        parameter.normal_(0.0, fan_in**-0.5)
    else:  # norm weights, dt_bias, biases
        parameter.add_(torch.empty_like(parameter).uniform_(-0.5, 0.5))


def write_tiny_checkpoint(
    folder: Path, seed: int = 0, layer_types: Sequence[str] = LAYER_TYPES, linear_head_dim: int = 16
) -> Path:
    """Write a loadable tiny Qwen3.5 checkpoint into ``folder``: config.json and model.safetensors
    of :func:`tiny_model`, the demo model's tokenizer files and :data:`CHAT_TEMPLATE`; the
    vocabulary and special token ids are the tokenizer's, an answer ends at ``<|im_end|>``.
    Returns ``folder``."""
    tokenizer = AutoTokenizer.from_pretrained(DEMO_MODEL)
    config = tiny_config(len(tokenizer), special_token_ids(tokenizer), layer_types, linear_head_dim)
    model = tiny_model(config, seed)
    ids = special_token_ids(tokenizer)
    model.generation_config = GenerationConfig(eos_token_id=[ids[IM_END], ids[ENDOFTEXT]], pad_token_id=ids[ENDOFTEXT])
    model.save_pretrained(folder)
    for name in TOKENIZER_FILES:
        shutil.copy(DEMO_MODEL / name, folder / name)
    (folder / "chat_template.jinja").write_text(CHAT_TEMPLATE, encoding="utf-8")
    return folder
