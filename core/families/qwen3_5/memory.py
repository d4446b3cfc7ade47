"""The sizes of a Qwen3.5 language model that its memory estimate counts (:class:`HybridShape`), for
the parts :func:`~framewise.core.families.qwen3_vl.memory.estimate_parts` adds up before anything
is loaded:

- Weights are counted exactly from the shapes: the linear layers a quantized format holds
  (:mod:`.weights`) in that format, everything else (the Gated DeltaNet's beta and decay
  projections, convolutions, per-head vectors, norms, embeddings, the output head unless tied,
  the vision tower) in the activations' dtype. The vision tower is Qwen3-VL's without deepstack
  mergers (:class:`~framewise.core.families.qwen3_vl.memory.EncoderShape` counts it).
- The decoder's state (the "KV cache" part): keys and values of the full-attention layers only,
  for the context (in the cache's layout), plus every linear-attention layer's convolution and recurrent state, the same
  at any length (:meth:`~framewise.core.decoding.hybrid_state.HybridState.bytes_needed`), and the
  copies of those states the decoder keeps as snapshots
  (:data:`~framewise.core.decoding.prefix_reuse.SNAPSHOTS`).
- The encoder graphs are Qwen3-VL's (the same tower, no deepstack outputs), and so are the features
  an open clip keeps (a merged row per video token, no deepstack rows).
- The decode graphs hold the float32 logits and a pool set by the largest prefill graph: the
  largest follow-up bucket over the context, or the largest clip bucket (a clip's pass is graphed,
  its features in the embeddings) over the positions that hold it. Each needs the widest layer's
  activations (a Gated DeltaNet layer's projections or a full layer's gated queries, keys and
  values, and the MLP), the chunked rule's state at each chunk's start, and the additive mask with
  its copy for the query heads that share a key/value head (a segment's, with a scaled cache's
  keys and values read back over a segment, where the context spans several: Qwen3-VL's
  :func:`~framewise.core.families.qwen3_vl.memory.prefill_pool_bytes`). Like Qwen3-VL's, a model
  of what the captures allocate, not a measurement.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from framewise.core.decoding.hybrid_state import FULL_ATTENTION, HybridState
from framewise.core.decoding.linear_attention import CHUNK_SIZE
from framewise.core.decoding.prefix_reuse import SNAPSHOTS
from framewise.core.families.qwen3_5.config import TextShape
from framewise.core.quantization.kv_formats import KVCacheFormat
from framewise.core.quantization.weight_format import WeightFormat


@dataclass(frozen=True)
class HybridShape:
    """A Qwen3.5 language model's sizes, as the estimate asks them
    (:class:`~framewise.core.families.qwen3_vl.memory.LanguageShape`): :class:`TextShape` and the
    MLP's ``intermediate`` width; ``tied_embeddings`` when the output head is the input embedding."""

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
    def vocab(self) -> int:
        return self.text.vocab_size

    @property
    def heads(self) -> int:
        return self.text.heads

    def input_embedding_parameters(self) -> int:
        """Parameters of the input embedding table."""
        return self.text.vocab_size * self.text.hidden_size

    @property
    def kv_heads(self) -> int:
        return self.text.kv_heads

    @property
    def head_dim(self) -> int:
        return self.text.head_dim

    @property
    def value_channels(self) -> int:
        """A Gated DeltaNet layer's value heads x value dim (its output gate's and out_proj's width)."""
        linear = self.text.linear
        return linear.heads * linear.value_dim

    def quantizable_linear_shapes(self, kind: str) -> list[tuple[int, int]]:
        """(N, K) of the linear layers a quantized format holds in one layer of ``kind``."""
        text, hidden = self.text, self.text.hidden_size
        mlp = [(self.intermediate, hidden), (self.intermediate, hidden), (hidden, self.intermediate)]
        if kind == FULL_ATTENTION:
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

    def weight_bytes(self, weight_format: WeightFormat, activations: torch.dtype) -> int:
        """The quantizable linear layers in ``weight_format``, the rest in ``activations``."""
        linears = sum(
            weight_format.linear_bytes(linear, activations)
            for kind in self.text.layer_kinds
            for linear in self.quantizable_linear_shapes(kind)
        )
        return linears + activations.itemsize * self.other_parameters()

    def state_bytes(self, context_tokens: int, activations: torch.dtype, cache_format: KVCacheFormat) -> int:
        """The decoder's state for ``context_tokens`` positions (keys and values in ``cache_format``)
        and the snapshots of its linear layers."""
        text = self.text
        state = HybridState.bytes_needed(
            text.layer_kinds, text.kv_heads, text.head_dim, text.linear, context_tokens, activations, cache_format
        )
        return state + len(SNAPSHOTS) * text.linear_layers * text.linear.state_bytes(activations)

    @property
    def vision_in_embeddings(self) -> bool:
        """True: the features replace token embeddings, so a clip's pass is graphed."""
        return True

    def pass_state_bytes(self, tokens: int) -> int:
        """The chunked gated delta rule's float32 state at each chunk's start, every value head's
        (key_dim, value_dim), for a pass of ``tokens`` tokens."""
        linear = self.text.linear
        return -(-tokens // CHUNK_SIZE) * linear.heads * linear.key_dim * linear.value_dim * 4

    def values_per_token(self) -> int:
        """Activations one token holds inside the widest layer: the hidden pair, a full layer's gated
        queries, keys and values or a Gated DeltaNet layer's projections and their mixing, the MLP."""
        text = self.text
        full_attention = (2 * text.heads + 2 * text.kv_heads) * text.head_dim
        linear_attention = 2 * text.linear.conv_channels + 2 * self.value_channels
        return 2 * text.hidden_size + max(full_attention, linear_attention) + 3 * self.intermediate

