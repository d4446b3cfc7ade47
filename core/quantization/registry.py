"""The weight formats Framewise loads, and choosing one for a checkpoint.

A format is a :class:`~framewise.core.quantization.weight_format.WeightFormat` subclass in a module
of this package and one line in :data:`WEIGHT_FORMATS`. Loading chooses once
(:func:`choose_weight_format`): the format the checkpoint's config.json declares, else the one the
dtype setting names, else float weights; then hands the chosen object to the family's loader and
to the memory estimate.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from framewise.core.errors import QuantizationFormatError
from framewise.core.quantization.float_weights import FLOAT_PRODUCTS, FLOAT_WEIGHTS
from framewise.core.quantization.formats import read_checkpoint_layout
from framewise.core.quantization.fp8_formats import BlockFp8Checkpoint, ChannelFp8Checkpoint, Fp8QuantizedOnLoad
from framewise.core.quantization.weight_format import LinearProducts, WeightFormat

# In the order they are asked; float weights answer when none does.
WEIGHT_FORMATS: list[type[WeightFormat]] = [BlockFp8Checkpoint, ChannelFp8Checkpoint, Fp8QuantizedOnLoad]


def register_weight_format(kind: type[WeightFormat]) -> None:
    """Add ``kind`` to the formats asked, after those there (a test's own format, for one)."""
    if kind not in WEIGHT_FORMATS:
        WEIGHT_FORMATS.append(kind)


def unregister_weight_format(kind: type[WeightFormat]) -> None:
    WEIGHT_FORMATS.remove(kind)


def choose_weight_format(config: Mapping[str, Any], setting: str, device: torch.device) -> WeightFormat:
    """The format a checkpoint with this config.json (a dict) loads in with the dtype ``setting``
    onto ``device``: the one its config declares, else one the setting chooses, else float weights.

    Raises QuantizationFormatError for a declared quantization no format runs."""
    declared = declared_weight_format(config)
    if declared is not None:
        return declared
    for kind in WEIGHT_FORMATS:
        chosen = kind.chosen(setting, device)
        if chosen is not None:
            return chosen
    return FLOAT_WEIGHTS


def declared_weight_format(config: Mapping[str, Any]) -> WeightFormat | None:
    """The format config.json (a dict) declares in its ``quantization_config``; None without one.

    Raises QuantizationFormatError, naming the quantization and what to choose instead, for one no
    format runs."""
    if config.get("quantization_config") is None:
        return None
    for kind in WEIGHT_FORMATS:
        declared = kind.declared(config)
        if declared is not None:
            return declared
    layout = read_checkpoint_layout(config)  # raises, in words, for every quantization it does not read
    raise QuantizationFormatError(f"config.json declares {layout.description}, which no registered weight format loads.")


def format_settings() -> tuple[str, ...]:
    """The dtype settings that choose a format (beside the float dtypes), in the registry's order."""
    return tuple(kind.setting for kind in WEIGHT_FORMATS if kind.setting is not None)


def linear_products(module: nn.Module) -> LinearProducts | None:
    """The products of a linear layer as a weight format put it in place: an ``nn.Linear``'s float
    products, a quantized layer's own ``products``; None for any other module."""
    if isinstance(module, nn.Linear):
        return FLOAT_PRODUCTS
    return getattr(module, "products", None)
