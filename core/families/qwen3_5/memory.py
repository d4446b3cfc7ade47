"""How much device memory a Qwen3.5 checkpoint will take, estimated from its config before anything
is loaded: the parts of :mod:`framewise.core.families.qwen3_vl.memory`, for a hybrid language model.

- Weights are counted exactly from the shapes: the linear layers a quantized format holds
  (:mod:`.weights`) in that format, everything else (the Gated DeltaNet's beta and decay
  projections, convolutions, per-head vectors, norms, embeddings, the output head unless tied,
  the vision tower) in the activations' dtype. The vision tower is Qwen3-VL's without deepstack
  mergers (:class:`~framewise.core.families.qwen3_vl.memory.EncoderShape` counts it).
- The decoder's state (the "KV cache" part): keys and values of the full-attention layers only,
  for the context, plus every linear-attention layer's convolution and recurrent state, the same
  at any length (:meth:`~framewise.core.decoding.hybrid_state.HybridState.bytes_needed`), and the
  copies of those states the decoder keeps as snapshots
  (:data:`~framewise.core.decoding.prefix_reuse.SNAPSHOTS`).
- The encoder graphs are Qwen3-VL's (the same tower, no deepstack outputs), and so are the features
  an open clip keeps (a merged row per video token, no deepstack rows).
- The decode graphs hold the float32 logits and a pool set by the largest follow-up prefill
  bucket: the widest layer's activations (a Gated DeltaNet layer's projections or a full layer's
  gated queries, keys and values, and the MLP), the full layer's keys and values repeated for every
  query head over the context, and the additive mask. Like Qwen3-VL's, a model of what the
  captures allocate, not a measurement.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from framewise.core.decoding.hybrid_state import HybridState
from framewise.core.decoding.prefix_reuse import SNAPSHOTS
from framewise.core.families.qwen3_5.config import TextShape
from framewise.core.families.qwen3_vl.memory import (
    CAPTURE_WORKSPACES,
    PREFILL_TOKENS,
    EncoderShape,
    clip_feature_bytes,
    encoder_graph_bytes,
    with_allocator_rounding,
)
from framewise.core.memory_plan import MemoryEstimate
from framewise.core.quantization.weight_format import WeightFormat

@dataclass(frozen=True)
class HybridShape:
    """A Qwen3.5 language model's sizes: :class:`TextShape` and the MLP's ``intermediate`` width;
    ``tied_embeddings`` when the output head is the input embedding."""

    text: TextShape
    intermediate: int
    tied_embeddings: bool

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> HybridShape:
        """From a config.json dict (its ``text_config``; ``tie_word_embeddings`` at either level)."""
        text = config["text_config"]
        tied = bool(config.get("tie_word_embeddings", text.get("tie_word_embeddings", False)))
        return cls(TextShape.from_text_config(text), int(text["intermediate_size"]), tied)

    @property
    def value_channels(self) -> int:
        """A Gated DeltaNet layer's value heads x value dim (its output gate's and out_proj's width)."""
        linear = self.text.linear
        return linear.heads * linear.value_dim

    def quantizable_linear_shapes(self, kind: str) -> list[tuple[int, int]]:
        """(N, K) of the linear layers a quantized format holds in one layer of ``kind``."""
        text, hidden = self.text, self.text.hidden_size
        mlp = [(self.intermediate, hidden), (self.intermediate, hidden), (hidden, self.intermediate)]
        if kind == "full_attention":
            queries, keys_values = text.heads * text.head_dim, text.kv_heads * text.head_dim
            # q_proj holds the output gate's rows beside the queries'
            return [(2 * queries, hidden), (keys_values, hidden), (keys_values, hidden), (hidden, queries), *mlp]
        return [(text.linear.conv_channels, hidden), (self.value_channels, hidden),
                (hidden, self.value_channels), *mlp]

    def other_parameters(self) -> int:
        """Parameters kept in the activations' dtype: embeddings, the head unless tied, norms, and
        per linear layer its beta and decay projections, convolution, A_log, dt_bias, gated norm."""
        text, hidden = self.text, self.text.hidden_size
        linear = text.linear
        per_linear_layer = (
            2 * linear.heads * hidden + linear.conv_channels * linear.conv_kernel + 2 * linear.heads + linear.value_dim
        )
        heads = 1 if self.tied_embeddings else 2
        return (
            heads * text.vocab_size * hidden
            + len(text.layer_kinds) * 2 * hidden
            + text.full_layers * 2 * text.head_dim
            + text.linear_layers * per_linear_layer
            + hidden
        )


def weight_bytes(
    shape: HybridShape, encoder: EncoderShape, weight_format: WeightFormat, activations: torch.dtype
) -> int:
    """Bytes of every weight: the quantizable linear layers in ``weight_format``, the rest in ``activations``."""
    linears = sum(
        weight_format.linear_bytes(linear, activations)
        for kind in shape.text.layer_kinds
        for linear in shape.quantizable_linear_shapes(kind)
    )
    return linears + activations.itemsize * (shape.other_parameters() + encoder.parameters())


def state_bytes(text: TextShape, context_tokens: int, activations: torch.dtype) -> int:
    """The decoder's state for ``context_tokens`` positions and the snapshots of its linear layers."""
    state = HybridState.bytes_needed(
        text.layer_kinds, text.kv_heads, text.head_dim, text.linear, context_tokens, activations
    )
    return state + len(SNAPSHOTS) * text.linear_layers * text.linear.state_bytes(activations)


def decode_graph_bytes(shape: HybridShape, element: int, context_tokens: int) -> int:
    """The float32 logits, the pool the largest follow-up prefill bucket needs over a context of
    ``context_tokens`` positions, and the capture's workspaces."""
    text = shape.text
    full_attention = (2 * text.heads + 2 * text.kv_heads) * text.head_dim
    linear_attention = text.linear.conv_channels * 2 + shape.value_channels * 2  # projections and their mixing
    layer_per_token = (2 * text.hidden_size + max(full_attention, linear_attention) + 3 * shape.intermediate) * element
    repeated_keys_values = 2 * text.heads * context_tokens * text.head_dim * element
    mask = PREFILL_TOKENS * context_tokens * element
    return text.vocab_size * 4 + PREFILL_TOKENS * layer_per_token + repeated_keys_values + mask + CAPTURE_WORKSPACES


def estimate_memory(
    config: Mapping[str, Any],
    weight_format: WeightFormat,
    activations: torch.dtype,
    context_tokens: int,
    encoder_budgets: Sequence[int],
    device_type: str = "cuda",
    clip_tokens: int = 0,
) -> MemoryEstimate:
    """The device memory a Qwen3.5 checkpoint with this config.json (a dict) takes on a
    ``device_type`` device, as :func:`~framewise.core.families.qwen3_vl.memory.estimate_memory`
    words it for Qwen3-VL (an open clip of ``clip_tokens`` video tokens keeps one merged row a
    token: the tower has no deepstack layers); the ``kv_cache`` part is the whole decoder state
    (:func:`state_bytes`)."""
    shape = HybridShape.from_config(config)
    encoder = EncoderShape.from_config(config["vision_config"])
    element = activations.itemsize
    parts = MemoryEstimate(
        weights=weight_bytes(shape, encoder, weight_format, activations),
        kv_cache=state_bytes(shape.text, context_tokens, activations),
        encoder_graphs=encoder_graph_bytes(encoder, encoder_budgets, element),
        decode_graphs=0 if device_type == "cpu" else decode_graph_bytes(shape, element, context_tokens),
        clip_features=clip_feature_bytes(encoder, clip_tokens, element),
    )
    return with_allocator_rounding(parts, device_type)
