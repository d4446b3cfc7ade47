"""Loading a Qwen3-VL checkpoint tensor by tensor in a quantized weight format: a checkpoint stored
quantized, or a float one quantized while it loads.

The model is built with its parameters on the meta device (buffers, such as the rotary tables,
are computed as usual), then filled tensor by tensor from the safetensors files straight onto
the target device by :func:`~framewise.core.quantization.loading.load_checkpoint`, so neither the
CPU nor the device ever holds the whole model in full precision. The weight format decides what
the language model's decoder layers' linear layers become; everything else (vision tower,
embeddings, norms, output head) stays in floating point, in the activations' dtype, quantized
weights stored there included (turned back into floats once).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from framewise.core.decoding.host_embedding import embedding_stays_on_host
from framewise.core.quantization.loading import (
    KeepFloat,
    load_checkpoint,
    meta_tensors,
    move_buffers,
    parameters_on_meta,
)
from framewise.core.quantization.weight_format import WeightFormat

LANGUAGE_LAYERS = "model.language_model.layers."
INPUT_EMBEDDING = "model.language_model.embed_tokens.weight"
# The projections a decoder layer's fused passes multiply as one stacked matrix, in row order
# (as :func:`~framewise.core.decoding.dense_layers.dense_layers` stacks them).
STACKED_PROJECTIONS = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"))


def load_streamed(
    model_class: type,
    path: Path,
    weight_format: WeightFormat,
    dtype: torch.dtype,
    device: torch.device,
    keep_float: KeepFloat | None = None,
    stacked_with: Callable[[str], Sequence[str] | None] | None = None,
) -> tuple[nn.Module, dict[str, Any]]:
    """The checkpoint in ``path`` as ``model_class`` on ``device``, its decoder layers' linear layers
    in ``weight_format``, the rest in ``dtype``; and a loading report shaped like transformers'
    (``missing_keys``, ``mismatched_keys``).

    ``keep_float`` and ``stacked_with`` are :func:`load_checkpoint`'s (default: Qwen3-VL's,
    :func:`stays_float` and :func:`stacked_projections`); a family whose model is built the same
    way (Qwen3.5) passes its own."""
    import transformers

    config = transformers.AutoConfig.from_pretrained(path, local_files_only=True)
    config._attn_implementation = "sdpa"
    with parameters_on_meta():
        model = model_class._from_config(config, dtype=dtype)
    move_buffers(model, device)
    files = sorted(path.glob("*.safetensors"))
    tied = getattr(config, "tie_word_embeddings", False) or getattr(config.get_text_config(), "tie_word_embeddings", False)
    # An input embedding the decoder reads from the host is read there, never taking the device's memory.
    on_host = {INPUT_EMBEDDING} if embedding_stays_on_host(device.type, tied) else set()
    report = load_checkpoint(
        model, files, weight_format, device, dtype,
        keep_float=keep_float or stays_float, stacked_with=stacked_with or stacked_projections,
        on_host=on_host.__contains__,
    )
    if tied:
        model.lm_head.weight = model.model.language_model.embed_tokens.weight
    if (path / "generation_config.json").is_file():  # the answer's end tokens, as from_pretrained reads them
        model.generation_config = transformers.GenerationConfig.from_pretrained(path, local_files_only=True)
    return model.eval(), {"missing_keys": meta_tensors(model), "mismatched_keys": report.mismatched}


def stays_float(module_name: str) -> bool:
    """Whether the linear layer ``module_name`` stays in floating point: every one outside the
    language model's decoder layers (the encoder's graphs read plain weights)."""
    return not module_name.startswith(LANGUAGE_LAYERS)


def stacked_projections(
    module_name: str, groups: tuple[tuple[str, ...], ...] = STACKED_PROJECTIONS
) -> tuple[str, ...] | None:
    """The module names of the decoder-layer projections stacked with ``module_name`` (itself
    included, in row order) as ``groups`` (leaf names in row order) stack them, or None for any
    other module."""
    if not module_name.startswith(LANGUAGE_LAYERS):
        return None
    parent, _, leaf = module_name.rpartition(".")
    for group in groups:
        if leaf in group:
            return tuple(f"{parent}.{member}" for member in group)
    return None
