"""The recipe of the bundled demo model: a tiny Qwen3-VL with its own tokenizer and chat template.
The application loads the demo model from its folder like any checkpoint; this module is for
making one (``scripts/make_demo_model.py``, ``training/train_demo.py``) and for the tests.

Everything here is a pure function of its arguments, so the demo model can be rebuilt bit for
bit (``scripts/make_demo_model.py``) and a trained one built on the same pieces:

- :func:`build_demo_tokenizer`: byte-level BPE whose vocabulary holds the 256 byte symbols plus
  whole words; a word in the vocabulary is one token, anything else falls back to its bytes, so
  every string round-trips. The Qwen special tokens are added as special tokens.
- :data:`CHAT_TEMPLATE`: the Qwen chat format, with one vision block per image or video item.
- :func:`build_demo_config`: a Qwen3-VL config of the released architecture at a tiny size.
- :func:`init_demo_model`: seeded random weights.
- :func:`save_demo_model`: the folder layout of a Hugging Face checkpoint, plus ``framewise.json``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import torch
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import GenerationConfig, PreTrainedTokenizerFast, Qwen3VLConfig, Qwen3VLForConditionalGeneration

from framewise.core.families.qwen3_vl.prompt import IMAGE_PAD, VIDEO_PAD, VISION_END, VISION_START
from framewise.core.loading import MODEL_INFO_FILE

ENDOFTEXT = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
VISION_PAD = "<|vision_pad|>"
SPECIAL_TOKENS = (ENDOFTEXT, IM_START, IM_END, VISION_START, VISION_END, VISION_PAD, IMAGE_PAD, VIDEO_PAD)

DEMO_SEED = 20250101
# Shown next to the demo model's answers (framewise.json's "label"): the trained model that ships
# in assets/demo_model, and the random-weights model of scripts/make_demo_model.py.
DEMO_LABEL = "Demo model — trained on synthetic shape clips"
UNTRAINED_DEMO_LABEL = "Demo model — random weights"

# Words a person asks about simple clips with, every word of the synthetic-clip questions and
# answers (training/synthetic.py), the chat roles and the digits; each becomes one token in four
# spellings (word, " word", "Word", " Word").
DEMO_WORDS: tuple[str, ...] = tuple(sorted(set("""
    a about after all an and any appear appeared appears are around as at background before
    big black blue both brown by can circle circles clip color colors colour count describe
    did direction disappear disappears do does down during each end first five for four frame
    frames from go goes gray green grey happen happens has have here how i image in is it its
    last left many me move moved moves moving much no none not number object objects of on one
    or orange other picture pink purple red right scene second seconds see seven shape shapes
    show six small square squares start still tell ten that the then there these they thing
    things this three time to top triangle triangles two up video way what when where which
    white who why with yellow yes you zero
    user assistant system
    0 1 2 3 4 5 6 7 8 9
""".split())))

# Pre-tokenization: a word with its leading space, one digit (with its leading space), a run of
# other symbols, or whitespace. Digits stay single so numbers of any length share four tokens.
_SPLIT_PATTERN = r" ?\p{L}+| ?\p{N}| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"

CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    f"{{{{- '{IM_START}' + message['role'] + '\\n' -}}}}"
    "{%- if message['content'] is string -%}"
    "{{- message['content'] -}}"
    "{%- else -%}"
    "{%- for item in message['content'] -%}"
    "{%- if item['type'] == 'image' or 'image' in item or 'image_url' in item -%}"
    f"{{{{- '{VISION_START}{IMAGE_PAD}{VISION_END}' -}}}}"
    "{%- elif item['type'] == 'video' or 'video' in item -%}"
    f"{{{{- '{VISION_START}{VIDEO_PAD}{VISION_END}' -}}}}"
    "{%- elif item['type'] == 'text' -%}"
    "{{- item['text'] -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- endif -%}"
    f"{{{{- '{IM_END}\\n' -}}}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}"
    f"{{{{- '{IM_START}assistant\\n' -}}}}"
    "{%- endif -%}"
)


def build_demo_tokenizer(words: Iterable[str] = DEMO_WORDS) -> PreTrainedTokenizerFast:
    """A byte-level tokenizer with ``words`` as whole-word tokens and the Qwen special tokens.

    Ids: 0-255 the byte symbols (in code point order), then the word tokens (sorted), then
    :data:`SPECIAL_TOKENS` in that order. A pre-token found in the vocabulary is emitted whole;
    any other is split into its bytes (there are no merges), so every string round-trips.
    ``eos_token`` is ``<|im_end|>``, ``pad_token`` ``<|endoftext|>``; the vision tokens are
    reachable as ``tokenizer.image_token`` etc., as transformers' Qwen3-VL processor expects.
    """
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    vocab = {symbol: index for index, symbol in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    spellings = {
        "".join(piece for piece, _ in byte_level.pre_tokenize_str(form))
        for word in words
        for form in _spellings(word)
    }
    for symbol in sorted(spellings - vocab.keys()):
        vocab[symbol] = len(vocab)

    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[], ignore_merges=True))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Split(Regex(_SPLIT_PATTERN), behavior="isolated"), byte_level]
    )
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens([AddedToken(token, special=True, normalized=False) for token in SPECIAL_TOKENS])
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token=IM_END,
        pad_token=ENDOFTEXT,
        model_max_length=32768,
        chat_template=CHAT_TEMPLATE,
        extra_special_tokens={
            "image_token": IMAGE_PAD,
            "video_token": VIDEO_PAD,
            "vision_start_token": VISION_START,
            "vision_end_token": VISION_END,
        },
    )


def _spellings(word: str) -> tuple[str, ...]:
    word = word.strip()
    if not word:
        return ()
    capital = word[:1].upper() + word[1:]
    return (word, " " + word, capital, " " + capital)


def build_demo_config(
    vocab_size: int,
    special_ids: dict[str, int],
    *,
    vision_hidden: int = 64,
    vision_heads: int = 2,
    vision_intermediate: int = 256,
    depth: int = 4,
    deepstack_visual_indexes: Sequence[int] = (0, 1, 2),
    num_position_embeddings: int = 2304,
    text_hidden: int = 128,
    text_intermediate: int = 384,
    text_layers: int = 4,
    text_heads: int = 4,
    text_kv_heads: int = 2,
    head_dim: int = 32,
    rope_theta: float = 5_000_000.0,
    max_position_embeddings: int = 32768,
) -> Qwen3VLConfig:
    """A tiny Qwen3-VL config with the released checkpoints' architecture.

    Same as the real ones: patch 16, temporal patch 2, spatial merge 2, a square learned
    position table (default 48x48), deepstack layers, ``gelu_pytorch_tanh`` vision MLP, text
    rope with interleaved mrope sections (t, h, w) in the real 24:20:20 proportion of
    ``head_dim / 2``, tied word embeddings. ``special_ids`` maps the token strings of
    :data:`SPECIAL_TOKENS` to ids (``tokenizer.get_vocab()`` does).
    """
    side = math.isqrt(num_position_embeddings)
    if side * side != num_position_embeddings:
        raise ValueError(f"num_position_embeddings must be a perfect square, got {num_position_embeddings}")
    if not deepstack_visual_indexes or not all(0 <= index < depth for index in deepstack_visual_indexes):
        raise ValueError(f"deepstack_visual_indexes {list(deepstack_visual_indexes)} must lie in [0, {depth})")
    if vision_hidden % vision_heads:
        raise ValueError(f"vision_hidden {vision_hidden} is not a multiple of vision_heads {vision_heads}")
    missing = [token for token in SPECIAL_TOKENS if token not in special_ids]
    if missing:
        raise ValueError(f"special_ids lacks {missing}")
    vision_config = {
        "depth": depth,
        "hidden_size": vision_hidden,
        "hidden_act": "gelu_pytorch_tanh",
        "intermediate_size": vision_intermediate,
        "num_heads": vision_heads,
        "in_channels": 3,
        "patch_size": 16,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
        "out_hidden_size": text_hidden,
        "num_position_embeddings": num_position_embeddings,
        "deepstack_visual_indexes": list(deepstack_visual_indexes),
        "initializer_range": 0.02,
    }
    text_config = {
        "vocab_size": vocab_size,
        "hidden_size": text_hidden,
        "intermediate_size": text_intermediate,
        "num_hidden_layers": text_layers,
        "num_attention_heads": text_heads,
        "num_key_value_heads": text_kv_heads,
        "head_dim": head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": max_position_embeddings,
        "initializer_range": 0.02,
        "rms_norm_eps": 1e-6,
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": rope_theta,
            "mrope_section": mrope_section(head_dim),
            "mrope_interleaved": True,
        },
        "attention_bias": False,
        "pad_token_id": special_ids[ENDOFTEXT],
        "bos_token_id": special_ids[ENDOFTEXT],
        "eos_token_id": special_ids[IM_END],
    }
    return Qwen3VLConfig(
        text_config=text_config,
        vision_config=vision_config,
        image_token_id=special_ids[IMAGE_PAD],
        video_token_id=special_ids[VIDEO_PAD],
        vision_start_token_id=special_ids[VISION_START],
        vision_end_token_id=special_ids[VISION_END],
        tie_word_embeddings=True,
    )


def mrope_section(head_dim: int) -> list[int]:
    """Rotary frequencies per axis (t, h, w), summing to ``head_dim / 2``, split 24:20:20 as in
    the released checkpoints (head_dim 128 -> [24, 20, 20], 32 -> [6, 5, 5])."""
    if head_dim % 2:
        raise ValueError(f"head_dim must be even, got {head_dim}")
    half = head_dim // 2
    spatial = half * 20 // 64
    return [half - 2 * spatial, spatial, spatial]


def special_token_ids(tokenizer: PreTrainedTokenizerFast) -> dict[str, int]:
    """Ids of :data:`SPECIAL_TOKENS` in ``tokenizer``."""
    vocab = tokenizer.get_vocab()
    return {token: vocab[token] for token in SPECIAL_TOKENS}


def demo_generation_config(config: Qwen3VLConfig) -> GenerationConfig:
    """Greedy decoding that stops at ``<|im_end|>`` or ``<|endoftext|>`` (ids from ``config``,
    as :func:`build_demo_config` set them)."""
    text = config.text_config
    return GenerationConfig(
        bos_token_id=text.bos_token_id,
        eos_token_id=[text.eos_token_id, text.pad_token_id],
        pad_token_id=text.pad_token_id,
        do_sample=False,
    )


def init_demo_model(config: Qwen3VLConfig, seed: int = DEMO_SEED) -> Qwen3VLForConditionalGeneration:
    """A float32 model on the CPU with random weights drawn from ``seed``; the global RNG is left
    as it was. The same config and seed give identical tensors."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen3VLForConditionalGeneration(config)
    model.generation_config = demo_generation_config(config)
    return model.eval()


def save_demo_model(
    folder: Path,
    model: Qwen3VLForConditionalGeneration,
    tokenizer: PreTrainedTokenizerFast,
    *,
    label: str,
    description: str,
    made_by: str,
    dtype: torch.dtype = torch.float32,
    extra: dict[str, Any] | None = None,
) -> list[Path]:
    """Write a loadable checkpoint: config.json, generation_config.json, model.safetensors,
    the tokenizer files (tokenizer.json, tokenizer_config.json, chat template) and
    ``framewise.json``.

    ``framewise.json`` holds ``label`` (the text shown next to this model's answers),
    ``description``, ``made_by`` (the command that made it), the parameter count, the vocabulary
    size, the weights' dtype and whatever ``extra`` adds. Weights are stored in ``dtype`` as one
    safetensors file. Returns the files written, sorted.
    """
    if not label.strip():
        raise ValueError("label must not be empty: it is shown next to this model's answers")
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder, state_dict=_state_dict_in(model, dtype), max_shard_size="1GB")
    tokenizer.save_pretrained(folder)
    info = {
        "name": "demo",
        "label": label,
        "description": description,
        "made_by": made_by,
        "parameters": sum(p.numel() for p in model.parameters()),
        "vocabulary": len(tokenizer),
        "weights_dtype": str(dtype).removeprefix("torch."),
        **(extra or {}),
    }
    (folder / MODEL_INFO_FILE).write_text(json.dumps(info, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return sorted(path for path in folder.iterdir() if path.is_file())


def _state_dict_in(model: torch.nn.Module, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """The model's weights on the CPU in ``dtype``; tensors shared in the model (tied
    embeddings) stay shared, so they are stored once."""
    converted: dict[int, torch.Tensor] = {}
    state = {}
    for name, tensor in model.state_dict().items():
        key = tensor.data_ptr()
        if key not in converted:
            converted[key] = tensor.detach().to("cpu", dtype)
        state[name] = converted[key]
    return state
