"""Qwen3-VL's language model, run pass by pass over a :class:`StaticKVCache`.

Everything the decoder needs to know about Qwen3-VL's language model lives here: how the vision
features enter (in place of the tokens the decoder marks, with their deepstack features added
after the first layers), the 3-D rotary positions (the model's own ``get_rope_index`` over the whole prompt, so
they agree with ``generate()``), and the offset that carries them on past the prompt: a token
generated at cache position ``p`` has rotary position ``p + rope_offset`` on all three axes.

Its dense layers run through the generic dense-layer passes
(:mod:`framewise.core.decoding.dense_layers`: stacked projections, few-kernel prefills and decode
steps, the Triton step kernels where they can run, quantized weights alike). Layers of another shape (the
MoE model's experts), or a language model built with ``fused_steps=False``, run the model's own
decoder layers, rotary embedding and norm, called the way ``Qwen3VLTextModel.forward`` calls them,
with Framewise's cache and attention function.
"""

from __future__ import annotations

import inspect
from typing import Sequence

import torch

from framewise.core.decoding.attention import AttentionMask, causal_mask, decoder_attention, prefill_mask
from framewise.core.decoding.defs import PromptPositions, VisionRows
from framewise.core.decoding.dense_layers import (
    Product,
    RowAdditions,
    dense_layers,
    dense_stack,
    kernel_step_stack,
    load_step_kernels,
    prefill_product,
    project,
    step_weights_note,
)
from framewise.core.decoding.host_embedding import look_up
from framewise.core.decoding.kv_cache import StaticKVCache
from framewise.core.quantization.kv_formats import FLOAT_KV_CACHE, KVCacheFormat
from framewise.core.seam import PieceGrid


class Qwen3VLLanguageModel:
    """The language half of a ``Qwen3VLForConditionalGeneration`` (or its MoE sibling), as the
    decoder's :class:`~framewise.core.decoding.defs.LanguageModel`. Rotary positions have three
    axes (temporal, height, width).

    ``fused_steps`` (default) lays dense layers out for few-kernel prefills and decode steps;
    ``False`` runs both through the model's own layers (the reference the dense passes are tested
    against).
    ``step_kernels`` runs fused steps through the Triton kernels; by default they are used where
    they can run (:func:`~framewise.core.decoding.dense_layers.load_step_kernels`). The states it
    makes keep keys and values in ``cache_format``.
    """

    def __init__(
        self, model: torch.nn.Module, fused_steps: bool = True, step_kernels: bool | None = None,
        cache_format: KVCacheFormat = FLOAT_KV_CACHE,
    ) -> None:
        self.model = model
        self.text = model.model.language_model
        self.config = model.config.text_config
        parameter = self.text.norm.weight  # not the embedding's, which may be held by the host
        self.device = parameter.device
        self.dtype = parameter.dtype
        layer_parameters = inspect.signature(self.text.layers[0].forward).parameters
        # transformers renamed the layers' cache argument after 5.17.
        self._cache_keyword = "cache" if "cache" in layer_parameters else "past_key_values"
        self.cache_format = cache_format
        self._dense = dense_layers(self.text, self.config) if fused_steps else None
        self._kernels = (
            load_step_kernels(self.device, self.config, step_kernels, self._dense, cache_format) if self._dense else None
        )

    @property
    def fused_steps(self) -> bool:
        """Whether decode steps run the few-kernel layout (dense layers) or the model's own layers."""
        return self._dense is not None

    @property
    def step_kernels(self) -> bool:
        """Whether decode steps run through the Triton kernels."""
        return self._kernels is not None

    def disable_step_kernels(self) -> None:
        """Run later decode steps as torch ops (after the kernels failed to compile or capture)."""
        self._kernels = None

    @property
    def vision_in_embeddings(self) -> bool:
        """Never: Qwen3-VL adds deepstack features to the hidden states of its first layers."""
        return False

    @property
    def step_description(self) -> str:
        """How a decode step runs, in a few words."""
        if self._kernels is not None:
            return f"Triton kernels, 6 launches a layer{step_weights_note(self._dense or ())}"
        return "few-kernel torch ops" if self._dense is not None else "the model's own layers"

    # ------------------------------------------------------------------ sizes

    @property
    def layers(self) -> int:
        return len(self.text.layers)

    @property
    def kv_heads(self) -> int:
        return self.config.num_key_value_heads

    @property
    def head_dim(self) -> int:
        return getattr(self.config, "head_dim", None) or self.config.hidden_size // self.config.num_attention_heads

    @property
    def vocab_size(self) -> int:
        return self.config.vocab_size

    @property
    def max_positions(self) -> int:
        return self.config.max_position_embeddings

    @property
    def rope_axes(self) -> int:
        return 3  # temporal, height, width

    def new_state(self, max_tokens: int) -> StaticKVCache:
        """A zeroed KV cache of every layer for ``max_tokens`` positions on the model's device."""
        return StaticKVCache(
            self.layers, self.kv_heads, self.head_dim, max_tokens, self.dtype, self.device, self.cache_format
        )

    def state_bytes(self, max_tokens: int) -> int:
        """Device memory :meth:`new_state` takes for ``max_tokens`` positions."""
        return StaticKVCache.bytes_needed(
            self.layers, self.kv_heads, self.head_dim, max_tokens, self.dtype, self.cache_format
        )

    # ------------------------------------------------------------------ positions

    def positions(
        self, input_ids: torch.Tensor, token_types: torch.Tensor, grids: tuple[PieceGrid, ...]
    ) -> PromptPositions:
        """Rotary positions of the prompt ``input_ids`` (1, n) with ``token_types`` (1, n) (0 text,
        1 image, 2 video) about items of ``grids``, as ``generate()`` computes them; a prompt
        without items counts 0, 1, 2, ..."""
        length = input_ids.shape[1]
        if not grids:
            return PromptPositions(rope=torch.arange(length).expand(3, length), rope_offset=0)

        def grids_of(modality: str) -> torch.Tensor | None:
            chosen = [grid for kind, grid in grids if kind == modality]
            return torch.tensor(chosen) if chosen else None

        rope, deltas = self.model.model.get_rope_index(
            input_ids,
            mm_token_type_ids=token_types,
            image_grid_thw=grids_of("image"),
            video_grid_thw=grids_of("video"),
            attention_mask=torch.ones_like(input_ids),
        )
        return PromptPositions(rope=rope[:, 0], rope_offset=int(deltas.reshape(-1)[0]))

    # ------------------------------------------------------------------ passes

    def prefill(
        self, cache: StaticKVCache, start: int, input_ids: torch.Tensor, rope: torch.Tensor, vision: VisionRows | None,
        *, logits: bool = True,
    ) -> torch.Tensor | None:
        """Run the prompt tail ``input_ids`` (1, n), whose first token goes to cache position
        ``start``, at rotary positions ``rope`` (3, n), and return the last token's logits
        (1, vocab) float32, or None without ``logits`` (the output head skipped). ``vision``
        features replace the embeddings of the tokens it marks."""
        count = input_ids.shape[1]
        device = self.device
        embeds = self.embed(input_ids)
        vision_mask: torch.Tensor | None = None
        vision_rows: torch.Tensor | None = None
        deepstack: list[torch.Tensor] = []
        if vision is not None:
            vision_mask = vision.mask.to(device)
            # Found on the host's copy of the mask: nonzero() on the device's would wait for every
            # pass queued before it, and a Stop would wait with it.
            vision_rows = vision.mask[0].nonzero().squeeze(1).to(device)
            embeds = vision.placed_in(embeds)
            deepstack = [layer.to(device, non_blocking=True) for layer in vision.deepstack]
        cache.write_positions = torch.arange(start, start + count, device=device)
        cache.view_length = start + count
        mask = prefill_mask(start, count)
        hidden = self._prefill_stack(
            embeds, rope.to(device)[:, None, :], cache, mask, vision_mask, vision_rows, deepstack
        )
        return self.head(hidden[:, -1, :]) if logits else None

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        """The embeddings (1, n, hidden) on the device of token ``ids`` (1, n), on the host or the device."""
        return look_up(self.text.embed_tokens, ids, self.device)

    def text_prefill(
        self,
        cache: StaticKVCache,
        embeds: torch.Tensor,
        cache_positions: torch.Tensor,
        rope: torch.Tensor,
        last: torch.Tensor,
    ) -> torch.Tensor:
        """A prefill of text tokens, graph-safe: their embeddings ``embeds`` (1, n, hidden) at
        ``cache_positions`` (n,) with rotary positions ``rope`` (3, n), all on the device; attends
        over ``cache.view_length`` positions. Returns the final hidden state (1, hidden) of the token
        at index ``last`` (1,) of the n, which :meth:`head` turns into its logits."""
        cache.write_positions = cache_positions
        mask = causal_mask(cache.view_length, cache_positions, embeds.dtype)
        hidden = self._prefill_stack(embeds, rope[:, None, :], cache, mask, None, None, [])
        return hidden[0].index_select(0, last)

    def head(self, hidden: torch.Tensor) -> torch.Tensor:
        """The logits (1, vocab) float32 of a final hidden state ``hidden`` (1, hidden)."""
        return self.model.lm_head(hidden).float()

    def step(self, cache: StaticKVCache, embeds: torch.Tensor, cache_position: torch.Tensor, rope_position: torch.Tensor):
        """One decode step, graph-safe: the token whose embedding is ``embeds`` (1, 1, hidden) at
        ``cache_position`` (1,) with rotary position ``rope_position`` (1,) on every axis. Reads
        ``cache.view_length`` positions; returns logits (1, vocab) float32."""
        if self._kernels is not None:
            return self._kernel_step(cache, embeds, cache_position, rope_position)
        rope = rope_position.view(1, 1, 1).expand(3, 1, 1)
        cache.write_positions = cache_position
        mask = causal_mask(cache.view_length, cache_position, embeds.dtype)
        if self._dense is None:
            hidden = self._layers(embeds, rope, cache, mask, None, [])[:, -1, :]
        else:
            hidden = self._dense_stack(embeds.view(1, -1), self.text.rotary_emb(embeds, rope), cache, mask, project)
        return self.head(hidden)

    def _kernel_step(
        self, cache: StaticKVCache, embeds: torch.Tensor, cache_position: torch.Tensor, rope_position: torch.Tensor
    ) -> torch.Tensor:
        """:meth:`step` through the Triton kernels: six launches a layer, none reading more of the
        cache than ``cache_position`` has filled. Logits (1, vocab) float32."""
        kernels = self._kernels
        hidden = embeds.view(-1)
        hidden = kernel_step_stack(self._dense, kernels, hidden, self.text.rotary_emb, cache, cache_position, rope_position)
        norm = self.text.norm
        logits = kernels.rms_norm_linear(
            hidden, norm.weight, self.model.lm_head.weight, norm.variance_epsilon, out_dtype=torch.float32
        )
        return logits.view(1, -1)

    def _prefill_stack(
        self,
        embeds: torch.Tensor,
        rope: torch.Tensor,
        cache: StaticKVCache,
        mask: AttentionMask,
        vision_mask: torch.Tensor | None,
        vision_rows: torch.Tensor | None,
        deepstack: list[torch.Tensor],
    ) -> torch.Tensor:
        """The decoder stack of a prefill, :meth:`_layers`' arguments and result: through the dense
        layers where the model has them (:meth:`_dense_stack` with
        :func:`~framewise.core.decoding.dense_layers.prefill_product`), the deepstack features added
        at the vision tokens ``vision_rows`` (the indices where ``vision_mask`` is set) after the
        first layers as ``Qwen3VLTextModel._deepstack_process`` does; else through the model's own
        layers."""
        if self._dense is None:
            return self._layers(embeds, rope, cache, mask, vision_mask, deepstack)
        features = None
        if deepstack:
            assert vision_rows is not None
            features = RowAdditions(vision_rows, [layer.to(embeds.dtype) for layer in deepstack])
        hidden = self._dense_stack(
            embeds[0], self.text.rotary_emb(embeds, rope), cache, mask, prefill_product,
            additions=features, hooked=self.text.layers,
        )
        return hidden[None]

    def _dense_stack(
        self,
        hidden: torch.Tensor,
        position_embeddings: tuple[torch.Tensor, torch.Tensor],
        cache: StaticKVCache,
        mask: AttentionMask,
        product: Product,
        additions: RowAdditions | None = None,
        hooked: Sequence[torch.nn.Module] = (),
    ) -> torch.Tensor:
        """:func:`~framewise.core.decoding.dense_layers.dense_stack` over this model's dense layers,
        normed by its final norm: (n, hidden) in and out."""
        assert self._dense is not None
        norm = self.text.norm
        final_norm = (norm.weight, norm.variance_epsilon)
        return dense_stack(self._dense, hidden, position_embeddings, cache, mask, product, final_norm, additions, hooked)

    def _layers(
        self,
        embeds: torch.Tensor,
        rope: torch.Tensor,
        cache: StaticKVCache,
        mask: AttentionMask,
        vision_mask: torch.Tensor | None,
        deepstack: list[torch.Tensor],
    ) -> torch.Tensor:
        """The decoder stack on ``embeds`` (1, n, hidden) at rotary positions ``rope`` (3, 1, n);
        deepstack features are added at the ``vision_mask`` (1, n) positions after the first layers, as
        ``Qwen3VLTextModel.forward`` does. Returns the normed hidden states (1, n, hidden)."""
        position_embeddings = self.text.rotary_emb(embeds, rope)
        hidden = embeds
        with decoder_attention(self.config):
            for index, layer in enumerate(self.text.layers):
                hidden = layer(
                    hidden,
                    attention_mask=mask,
                    position_embeddings=position_embeddings,
                    **{self._cache_keyword: cache},
                )
                if index < len(deepstack):
                    hidden = self.text._deepstack_process(hidden, vision_mask, deepstack[index])
        return self.text.norm(hidden)
