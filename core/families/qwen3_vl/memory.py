"""How much device memory a model will take, estimated from its config before anything is loaded.

Four parts, in bytes: the weights, the KV cache, the encoder graphs and the decode graphs; on a
GPU, an allowance for the caching allocator besides.

- Weights are counted exactly from the shapes. The decoder layers' linear layers take what their
  weight format counts (:meth:`~framewise.core.quantization.weight_format.WeightFormat.linear_bytes`:
  a quantized format's stored bytes and scales); embeddings, norms and the output head are in the
  activations' dtype, the vision tower in its own (the activations', except bfloat16 on a CPU that
  multiplies it natively: :mod:`~framewise.core.encoding.cpu_forms`).
- The KV cache is :meth:`~framewise.core.decoding.kv_cache.StaticKVCache.bytes_needed` for the
  context, in the cache's layout whatever the weight format (keys and values in the activations'
  dtype, or e4m3 with their scales: :class:`~framewise.core.quantization.kv_formats.KVCacheFormat`).
- The encoder graphs share one set of static buffers, sized for the largest token budget (every
  budget's graph reads views of them): inputs (patches, interpolation taps, rotary positions)
  and outputs (merged tokens and deepstack features). Their pool is set by the largest budget's
  live activations: inside one vision block (the residual pair, the normed input, q/k/v, the
  attention output, the MLP's hidden rows before and after GELU), the float32 rotary tables,
  the deepstack features gathered so far and a merger's rows.
- The decode graphs hold the float32 logits and share a pool set by the largest follow-up
  prefill bucket: one decoder layer's activations (hidden, q/k/v, gate/up, their product), the
  additive mask over the whole context and its copy for the query heads that share a key/value
  head (:func:`~framewise.core.decoding.attention.grouped_query_attention`). A scaled cache's
  keys and values are attended a segment of positions at a time
  (:func:`~framewise.core.decoding.attention.segmented_attention`): the mask's copy is then a
  segment's, and the pool also holds one layer's keys and values over a segment read back in the
  activations' dtype (:meth:`KVCacheFormat.read_bytes`) and the segments' merged output.
- Each capture (encoder, decoder) allocates cuBLAS workspaces for its warm-up stream and its
  capture stream.
- An open clip keeps the tower's output for follow-up questions: per video token its merged row
  and one row per deepstack layer, ``out_hidden`` wide, in the activations' dtype. A clip of
  2,048 frames at 64k video tokens holds 2 GiB of them on the 8B (out_hidden 4096, 3 deepstack
  layers, bf16).

The language model's parts are asked of its sizes (:class:`LanguageShape`: :class:`DecoderShape` for
Qwen3-VL's dense one; a family of another language model gives its own, as Qwen3.5 does), the
tower's of :class:`EncoderShape`; :func:`estimate_parts` adds them up.

The graph parts are a model of what the captures allocate, not a measurement; docs/benchmarks.md
compares them with what the engine measured on the GPU. The caching allocator reserves whole
segments, a few percent beyond what the parts hold: :data:`ALLOCATOR_ROUNDING` covers it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from framewise.core.decoding.host_embedding import embedding_stays_on_host
from framewise.core.decoding.kv_cache import StaticKVCache
from framewise.core.encoding.held_features import device_feature_bytes
from framewise.core.memory_plan import MemoryEstimate
from framewise.core.quantization.kv_formats import FLOAT_KV_CACHE, KVCacheFormat
from framewise.core.quantization.weight_format import WeightFormat

# The follow-up prefill's largest token bucket (framewise.core.decoding.prefill_graphs.TOKEN_BUCKETS).
PREFILL_TOKENS = 256
# A clip pass's largest (prefill_graphs.CLIP_TOKEN_BUCKETS), for a model whose features go into its embeddings.
CLIP_PREFILL_TOKENS = 1536
# cuBLAS's workspace for one stream on Hopper cards (less on older ones); a capture uses two streams.
CUBLAS_WORKSPACE = 32 * 2**20
CAPTURE_WORKSPACES = 2 * CUBLAS_WORKSPACE
# What the caching allocator reserves beyond the tensors it holds (whole segments, and the load's
# brief peak above them), as a share of the estimate: measured 1.4-3.4 % plus 0.6 % of load peak
# on an H100 (docs/benchmarks.md, 2026-12-06), rounded up.
ALLOCATOR_ROUNDING = 0.05


@dataclass(frozen=True)
class DecoderShape:
    """A dense decoder's sizes (the keys of a transformers text config).

    Each layer has q/k/v/o projections, per-head q and k norms, a gated MLP (gate, up, down) and
    two norms; one final norm; an output head unless it is tied to the input embedding.
    """

    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tied_embeddings: bool

    @classmethod
    def from_config(cls, text: Mapping[str, Any], tied_embeddings: bool) -> DecoderShape:
        return cls(
            hidden=text["hidden_size"], intermediate=text["intermediate_size"], layers=text["num_hidden_layers"],
            heads=text["num_attention_heads"], kv_heads=text["num_key_value_heads"],
            head_dim=text.get("head_dim") or text["hidden_size"] // text["num_attention_heads"],
            vocab=text["vocab_size"], tied_embeddings=tied_embeddings,
        )

    def linear_shapes(self) -> list[tuple[int, int]]:
        """(N, K) of every linear layer of one decoder layer: q, k, v, o, gate, up, down."""
        query, key_value = self.heads * self.head_dim, self.kv_heads * self.head_dim
        return [
            (query, self.hidden), (key_value, self.hidden), (key_value, self.hidden), (self.hidden, query),
            (self.intermediate, self.hidden), (self.intermediate, self.hidden), (self.hidden, self.intermediate),
        ]

    def input_embedding_parameters(self) -> int:
        """Parameters of the input embedding table."""
        return self.vocab * self.hidden

    def other_parameters(self) -> int:
        """Parameters outside the layers' linear projections: embeddings, norms, the head."""
        per_layer_norms = 2 * self.hidden + 2 * self.head_dim
        heads = 1 if self.tied_embeddings else 2
        return heads * self.vocab * self.hidden + self.layers * per_layer_norms + self.hidden

    def weight_bytes(self, weight_format: WeightFormat, activations: torch.dtype) -> int:
        """The decoder layers' linear layers in ``weight_format``, the rest in ``activations``."""
        linears = self.layers * sum(weight_format.linear_bytes(shape, activations) for shape in self.linear_shapes())
        return linears + activations.itemsize * self.other_parameters()

    def state_bytes(self, context_tokens: int, activations: torch.dtype, cache_format: KVCacheFormat) -> int:
        """Every layer's keys and values for ``context_tokens`` positions in ``cache_format``."""
        return StaticKVCache.bytes_needed(
            self.layers, self.kv_heads, self.head_dim, context_tokens, activations, cache_format
        )

    def values_per_token(self) -> int:
        """Activations one token holds inside a layer: hidden pair, q/k/v, gate/up and their product."""
        return 2 * self.hidden + (self.heads + 2 * self.kv_heads) * self.head_dim + 3 * self.intermediate

    @property
    def vision_in_embeddings(self) -> bool:
        """False: Qwen3-VL adds deepstack features inside its first layers, so no clip pass is graphed."""
        return False

    def pass_state_bytes(self, tokens: int) -> int:
        """Nothing beyond the layer's activations: a dense pass keeps no per-chunk states."""
        return 0


class LanguageShape(Protocol):
    """What the estimate asks of a language model's sizes (:class:`DecoderShape` for Qwen3-VL's dense
    one, a family's own for another): ``vocab``, the attention's ``heads`` over ``kv_heads`` of
    ``head_dim``, and whether the output head is the input embedding (``tied_embeddings``)."""

    vocab: int
    heads: int
    kv_heads: int
    head_dim: int
    tied_embeddings: bool

    def input_embedding_parameters(self) -> int:
        """Parameters of the input embedding table."""
        ...

    def weight_bytes(self, weight_format: WeightFormat, activations: torch.dtype) -> int:
        """Bytes of the language model's weights."""
        ...

    def state_bytes(self, context_tokens: int, activations: torch.dtype, cache_format: KVCacheFormat) -> int:
        """Bytes of what the decoder keeps for ``context_tokens`` positions, keys and values in
        ``cache_format``."""
        ...

    def values_per_token(self) -> int:
        """Activations one token holds inside its widest layer."""
        ...

    @property
    def vision_in_embeddings(self) -> bool:
        """Whether vision features go into the input embeddings alone (a clip's pass is graphed)."""
        ...

    def pass_state_bytes(self, tokens: int) -> int:
        """Bytes a pass of ``tokens`` tokens keeps besides the activations (a chunked rule's states)."""
        ...


@dataclass(frozen=True)
class EncoderShape:
    """A vision tower's sizes: ``depth`` pre-norm blocks (layer norms with bias, fused qkv with
    bias, GELU MLP), a patch embedding of ``patch_elements`` inputs a patch, a learned position
    table, and ``1 + deepstack_layers`` mergers from 2x2 patches to ``out_hidden`` (the first
    normalises before merging, the deepstack ones after)."""

    hidden: int
    intermediate: int
    depth: int
    out_hidden: int
    heads: int
    patch_elements: int
    positions: int
    deepstack_layers: int
    merge_area: int

    @classmethod
    def from_config(cls, vision: Mapping[str, Any]) -> EncoderShape:
        patch = vision["patch_size"]
        return cls(
            hidden=vision["hidden_size"], intermediate=vision["intermediate_size"], depth=vision["depth"],
            out_hidden=vision["out_hidden_size"], heads=vision.get("num_heads", 16),  # transformers' default
            patch_elements=vision.get("in_channels", 3) * vision.get("temporal_patch_size", 2) * patch * patch,
            positions=vision["num_position_embeddings"], deepstack_layers=len(vision.get("deepstack_visual_indexes", ())),
            merge_area=vision.get("spatial_merge_size", 2) ** 2,
        )

    def parameters(self) -> int:
        hidden, intermediate = self.hidden, self.intermediate
        block = 4 * hidden + (3 * hidden * hidden + 3 * hidden) + (hidden * hidden + hidden) + (
            2 * intermediate * hidden + intermediate + hidden
        )
        merged = self.merge_area * hidden
        merger_linears = merged * merged + merged + self.out_hidden * merged + self.out_hidden
        mergers = (2 * hidden + merger_linears) + self.deepstack_layers * (2 * merged + merger_linears)
        embeddings = hidden * self.patch_elements + hidden + self.positions * hidden
        return embeddings + self.depth * block + mergers


def encoder_graph_bytes(encoder: EncoderShape, budgets: Sequence[int], element: int) -> int:
    """The static buffers and the pool, both set by the largest of ``budgets`` (patch rows), and
    the capture's workspaces."""
    if not budgets:
        return 0
    rows = max(budgets)
    merged = rows // encoder.merge_area
    # patches; interpolation taps (4 int64 indices, 4 float32 weights); rotary positions (2 int64)
    inputs_per_row = encoder.patch_elements * element + 4 * 8 + 4 * 4 + 2 * 8
    outputs_per_merged_row = (1 + encoder.deepstack_layers) * encoder.out_hidden * element
    buffers = rows * inputs_per_row + merged * outputs_per_merged_row
    block_per_row = (2 * encoder.hidden + 3 * encoder.hidden + encoder.hidden + 2 * encoder.intermediate) * element
    rotary_per_row = 2 * (encoder.hidden // encoder.heads) * 4  # cos and sin, float32
    # a merger's gathered rows, its first product and GELU; the deepstack features kept so far
    merged_per_row = 3 * encoder.merge_area * encoder.hidden * element + encoder.deepstack_layers * encoder.out_hidden * element
    pool = rows * (block_per_row + rotary_per_row) + merged * merged_per_row
    return buffers + pool + CAPTURE_WORKSPACES


def decode_graph_bytes(
    language: LanguageShape, activations: torch.dtype, context_tokens: int, cache_format: KVCacheFormat = FLOAT_KV_CACHE
) -> int:
    """The float32 logits, the shared pool, and the capture's workspaces. The pool is what the
    largest prefill graph needs: the largest follow-up bucket over the whole context, or, for a
    model whose clip passes are graphed, the largest clip bucket over the positions that hold it."""
    pool = prefill_pool_bytes(language, activations, PREFILL_TOKENS, context_tokens, cache_format)
    if language.vision_in_embeddings:
        # Captured over the least context bucket that holds it: buckets double, so under twice its length.
        clip = min(CLIP_PREFILL_TOKENS, context_tokens)
        held = min(2 * clip, context_tokens)
        pool = max(pool, prefill_pool_bytes(language, activations, clip, held, cache_format))
    return language.vocab * 4 + pool + CAPTURE_WORKSPACES


def prefill_pool_bytes(
    language: LanguageShape, activations: torch.dtype, tokens: int, context: int, cache_format: KVCacheFormat
) -> int:
    """What a prefill graph of ``tokens`` tokens over ``context`` positions in ``cache_format``
    allocates: a layer's activations and any per-chunk states, the mask, and for each attention
    call over a segment of the context (the whole of it for a float cache) the mask's copy for
    each query head of a key/value head and the keys and values read back from their format;
    where a scaled cache's context spans several segments, their merge: the float32 output summed
    so far, and a segment's output with its copy regrouped by query head."""
    element = activations.itemsize
    layer = tokens * language.values_per_token() * element + language.pass_state_bytes(tokens)
    attended = cache_format.segment_positions(context)
    read_back = cache_format.read_bytes(language.kv_heads, language.head_dim, context, activations)
    mask = tokens * context * element
    grouped_mask = language.heads // language.kv_heads * tokens * attended * element
    outputs = tokens * language.heads * language.head_dim
    merge = outputs * (4 + 2 * element) if attended < context else 0
    return layer + read_back + mask + grouped_mask + merge


def clip_feature_bytes(encoder: EncoderShape, clip_tokens: int, element: int) -> int:
    """The tower's output kept for an open clip of ``clip_tokens`` video tokens: a merged row and a
    row per deepstack layer each."""
    return clip_tokens * (1 + encoder.deepstack_layers) * encoder.out_hidden * element


def _clip_features_held(feature_bytes: int, device_type: str) -> int:
    """What an open clip's features take on a ``device_type`` device: a long clip's wait in the
    host's memory beside a CUDA device (:mod:`~framewise.core.encoding.held_features`)."""
    return feature_bytes if device_type == "cpu" else device_feature_bytes(feature_bytes)


def estimate_parts(
    language: LanguageShape,
    vision_config: Mapping[str, Any],
    weight_format: WeightFormat,
    activations: torch.dtype,
    context_tokens: int,
    encoder_budgets: Sequence[int],
    device_type: str,
    clip_tokens: int,
    cache_format: KVCacheFormat | None,
    tower_dtype: torch.dtype | None = None,
) -> MemoryEstimate:
    """The device memory a model takes on a ``device_type`` device: its ``language`` model's
    weights (linear layers in ``weight_format``, the rest in ``activations``) and its decoder state
    for ``context_tokens`` positions, keys and values in ``cache_format`` (None: in
    ``activations``), a tower of ``vision_config`` (a config.json's dict) in ``tower_dtype`` (None:
    in ``activations``; its outputs in ``activations`` either way), encoder graphs for ``encoder_budgets`` (patch rows each; none when graphs are off), decode
    graphs, and the features an open clip of ``clip_tokens`` video tokens keeps on the device
    (none on CUDA for a clip whose features wait in the host's memory). On the CPU the
    decoder captures no graphs and nothing is added for a caching allocator (it has none); on CUDA
    an input embedding that is not the output head is kept on the host and not counted."""
    cache_format = cache_format or FLOAT_KV_CACHE
    encoder = EncoderShape.from_config(vision_config)
    element, tower_element = activations.itemsize, (tower_dtype or activations).itemsize
    on_host = embedding_stays_on_host(device_type, language.tied_embeddings)
    host_embedding = element * language.input_embedding_parameters() if on_host else 0
    parts = MemoryEstimate(
        weights=language.weight_bytes(weight_format, activations) - host_embedding + tower_element * encoder.parameters(),
        kv_cache=language.state_bytes(context_tokens, activations, cache_format),
        encoder_graphs=encoder_graph_bytes(encoder, encoder_budgets, tower_element),
        decode_graphs=0 if device_type == "cpu" else decode_graph_bytes(
            language, activations, context_tokens, cache_format
        ),
        clip_features=_clip_features_held(clip_feature_bytes(encoder, clip_tokens, element), device_type),
    )
    if device_type == "cpu":
        return parts
    return dataclasses.replace(parts, allocator_rounding=math.ceil(parts.total * ALLOCATOR_ROUNDING))
