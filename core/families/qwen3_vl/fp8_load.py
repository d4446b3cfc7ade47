"""Loading a Qwen3-VL checkpoint with FP8 language weights: an FP8 checkpoint as stored, or a bf16
one quantized while it loads.

The model is built with its parameters on the meta device (buffers, such as the rotary tables,
are computed as usual), then filled tensor by tensor from the safetensors files straight onto
the target device by :func:`~framewise.core.quantization.loading.load_checkpoint`, so neither the
CPU nor the device ever holds the whole model in full precision. The language model's decoder
layers keep their linear layers in FP8; everything else (vision tower, embeddings, norms, output
head) ends up in the activations' dtype, FP8 weights stored there included (dequantized once).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from torch import nn

from framewise.core.quantization.formats import UNQUANTIZED, checkpoint_weight_format, detect_weight_format
from framewise.core.quantization.fp8 import dequantize
from framewise.core.quantization.linear import Fp8Linear
from framewise.core.quantization.loading import load_checkpoint, meta_tensors

LANGUAGE_LAYERS = "model.language_model.layers."
# The projections a decoder layer's fused passes multiply as one stacked matrix, in row order
# (as :func:`~framewise.core.decoding.dense_layers.dense_layers` stacks them).
STACKED_PROJECTIONS = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"))


def is_fp8_checkpoint(path: Path) -> bool:
    """Whether the config.json in ``path`` declares FP8 weights (raises QuantizationFormatError for
    a quantization Framewise cannot run); the weights themselves are checked while loading."""
    config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    return detect_weight_format(config if isinstance(config, dict) else {}).scheme != "none"


def load_fp8(model_class: type, path: Path, dtype: torch.dtype, device: torch.device) -> tuple[nn.Module, dict[str, Any]]:
    """The checkpoint in ``path`` as ``model_class`` on ``device``, its decoder layers' linear layers
    in FP8 (as stored, or quantized on load from a float checkpoint), the rest in ``dtype``; and a
    loading report shaped like transformers' (``missing_keys``, ``mismatched_keys``)."""
    import transformers

    fmt, _ = checkpoint_weight_format(path)
    config = transformers.AutoConfig.from_pretrained(path, local_files_only=True)
    config._attn_implementation = "sdpa"
    with _parameters_on_meta():
        model = model_class._from_config(config, dtype=dtype)
    _move_buffers(model, device)
    files = sorted(path.glob("*.safetensors"))
    report = load_checkpoint(
        model, files, fmt, device, dtype,
        quantize_on_load=lambda name: fmt is UNQUANTIZED and name.startswith(LANGUAGE_LAYERS),
        stacked_with=stacked_projections,
    )
    _dequantize_outside_language_layers(model, dtype)
    if getattr(config, "tie_word_embeddings", False) or getattr(config.get_text_config(), "tie_word_embeddings", False):
        model.lm_head.weight = model.model.language_model.embed_tokens.weight
    if (path / "generation_config.json").is_file():  # the answer's end tokens, as from_pretrained reads them
        model.generation_config = transformers.GenerationConfig.from_pretrained(path, local_files_only=True)
    return model.eval(), {"missing_keys": meta_tensors(model), "mismatched_keys": report.mismatched}


def stacked_projections(module_name: str) -> tuple[str, ...] | None:
    """The module names of the decoder-layer projections stacked with ``module_name`` (itself
    included, in row order), or None for any other module."""
    if not module_name.startswith(LANGUAGE_LAYERS):
        return None
    parent, _, leaf = module_name.rpartition(".")
    for group in STACKED_PROJECTIONS:
        if leaf in group:
            return tuple(f"{parent}.{member}" for member in group)
    return None


def _move_buffers(model: nn.Module, device: torch.device) -> None:
    """Move the buffers of ``model`` to ``device`` (``Module.to`` would fail on its meta parameters)."""
    for module in model.modules():
        for name, buffer in module._buffers.items():
            if buffer is not None and not buffer.is_meta:
                module._buffers[name] = buffer.to(device)


@contextmanager
def _parameters_on_meta() -> Iterator[None]:
    """Modules built inside put their parameters on the meta device (no memory, no random
    initialisation) and their buffers where they would be anyway. It swaps
    ``nn.Module.register_parameter`` for its duration, process-wide: the model is built on the one
    thread that loads it, and nothing else builds modules meanwhile."""
    register = nn.Module.register_parameter

    def register_on_meta(module: nn.Module, name: str, parameter: nn.Parameter | None) -> None:
        register(module, name, parameter)
        if parameter is not None:
            module._parameters[name] = nn.Parameter(parameter.to("meta"), requires_grad=parameter.requires_grad)

    nn.Module.register_parameter = register_on_meta  # type: ignore[method-assign]
    try:
        yield
    finally:
        nn.Module.register_parameter = register  # type: ignore[method-assign]


def _dequantize_outside_language_layers(model: nn.Module, dtype: torch.dtype) -> None:
    """Replace every FP8 linear layer outside the decoder layers (a checkpoint may store the vision
    tower's in FP8) by an ``nn.Linear`` in ``dtype``: the encoder's graphs read plain weights."""
    for name, module in list(model.named_modules()):
        if isinstance(module, Fp8Linear) and not name.startswith(LANGUAGE_LAYERS):
            linear = nn.Linear(module.in_features, module.out_features, bias=module.bias is not None,
                               device="meta", dtype=dtype)
            linear.weight = nn.Parameter(dequantize(module.weight, module.weight_scale, module.scheme, dtype),
                                         requires_grad=False)
            if module.bias is not None:
                linear.bias = nn.Parameter(module.bias.to(dtype), requires_grad=False)
            parent, _, child = name.rpartition(".")
            setattr(model.get_submodule(parent), child, linear)
