"""Qwen3.5's language-model sizes, read from a checkpoint's ``text_config`` (a config.json mapping or
``Qwen3_5TextConfig.to_dict()``) without building the model: what the hybrid decoder state, the
memory estimate and the limits need."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from framewise.core.decoding.hybrid_state import FULL_ATTENTION, LINEAR_ATTENTION, LinearLayerShape
from framewise.core.errors import ModelLoadError

# transformers' defaults where a config leaves a field out (Qwen3_5TextConfig, transformers 5.17).
DEFAULT_FULL_ATTENTION_INTERVAL = 4
DEFAULT_PARTIAL_ROTARY_FACTOR = 0.25


@dataclass(frozen=True)
class TextShape:
    """The sizes of a Qwen3.5 language model. ``layer_kinds[i]`` is :data:`FULL_ATTENTION` or
    :data:`LINEAR_ATTENTION`; full-attention layers have ``heads`` query heads over ``kv_heads``
    key/value heads of ``head_dim``, rotary on the first ``rotary_dim`` of each head; linear layers
    have ``linear_key_heads`` key heads and the states of ``linear``."""

    hidden_size: int
    vocab_size: int
    max_positions: int
    layer_kinds: tuple[str, ...]
    heads: int
    kv_heads: int
    head_dim: int
    rotary_dim: int
    linear_key_heads: int
    linear: LinearLayerShape

    @classmethod
    def from_text_config(cls, text: Mapping[str, Any]) -> TextShape:
        """Read ``text`` (the ``text_config`` of a ``qwen3_5`` checkpoint). Raises ModelLoadError naming
        the field when one is missing or a layer kind is unknown."""
        head_dim = int(text.get("head_dim") or _field(text, "hidden_size") // _field(text, "num_attention_heads"))
        rope = text.get("rope_parameters") or {}
        factor = rope.get("partial_rotary_factor", text.get("partial_rotary_factor", DEFAULT_PARTIAL_ROTARY_FACTOR))
        key_heads, key_dim = _field(text, "linear_num_key_heads"), _field(text, "linear_key_head_dim")
        value_heads, value_dim = _field(text, "linear_num_value_heads"), _field(text, "linear_value_head_dim")
        return cls(
            hidden_size=_field(text, "hidden_size"),
            vocab_size=_field(text, "vocab_size"),
            max_positions=_field(text, "max_position_embeddings"),
            layer_kinds=layer_kinds(text),
            heads=_field(text, "num_attention_heads"),
            kv_heads=_field(text, "num_key_value_heads"),
            head_dim=head_dim,
            rotary_dim=int(head_dim * factor),
            linear_key_heads=key_heads,
            linear=LinearLayerShape(
                conv_channels=2 * key_heads * key_dim + value_heads * value_dim,
                conv_kernel=_field(text, "linear_conv_kernel_dim"),
                heads=value_heads,
                key_dim=key_dim,
                value_dim=value_dim,
            ),
        )

    @property
    def full_layers(self) -> int:
        """Layers that keep keys and values."""
        return self.layer_kinds.count(FULL_ATTENTION)

    @property
    def linear_layers(self) -> int:
        """Layers that keep a convolution and a recurrent state."""
        return self.layer_kinds.count(LINEAR_ATTENTION)


def layer_kinds(text: Mapping[str, Any]) -> tuple[str, ...]:
    """Each layer's kind: ``layer_types`` where the config lists them, else every
    ``full_attention_interval``-th layer full attention (layer i when (i + 1) is a multiple)."""
    kinds = text.get("layer_types")
    if kinds is None:
        interval = int(text.get("full_attention_interval", DEFAULT_FULL_ATTENTION_INTERVAL))
        count = _field(text, "num_hidden_layers")
        return tuple(FULL_ATTENTION if (index + 1) % interval == 0 else LINEAR_ATTENTION for index in range(count))
    unknown = set(kinds) - {FULL_ATTENTION, LINEAR_ATTENTION}
    if unknown:
        raise ModelLoadError(f"text_config.layer_types holds {sorted(unknown)}; Qwen3.5 layers are "
                         f"{FULL_ATTENTION!r} or {LINEAR_ATTENTION!r}")
    return tuple(kinds)


def _field(text: Mapping[str, Any], name: str) -> int:
    if text.get(name) is None:
        raise ModelLoadError(f"the checkpoint's text_config has no {name!r}, which a Qwen3.5 language model needs")
    return int(text[name])
