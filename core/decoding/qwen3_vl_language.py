"""Qwen3-VL's language model, run pass by pass over a :class:`StaticKVCache`.

Everything the decoder needs to know about Qwen3-VL lives here: where the vision features go
in the prompt (the video pad positions, with their deepstack features added after the first
layers), the 3-D rotary positions (the model's own ``get_rope_index`` over the whole prompt, so
they agree with ``generate()``), and the offset that carries them on past the prompt: a token
generated at cache position ``p`` has rotary position ``p + rope_offset`` on all three axes.

The decoder layers, rotary embedding, norm and head are the model's own modules, called the way
``Qwen3VLTextModel.forward`` calls them; only the cache and the attention function are Framewise's.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

import torch

from framewise.core.decoding.attention import decoder_attention, prefill_mask, step_mask
from framewise.core.decoding.kv_cache import StaticKVCache
from framewise.core.encoder import EncodedItem
from framewise.core.processing import VIDEO_TOKEN


@dataclass(frozen=True)
class PromptPositions:
    """Rotary positions of a whole prompt: ``rope`` (3, n) int64 (temporal, height, width) and the
    offset of every later token: position ``p`` in the cache has rotary position ``p + rope_offset``."""

    rope: torch.Tensor
    rope_offset: int


class Qwen3VLLanguageModel:
    """The language half of a ``Qwen3VLForConditionalGeneration`` (or its MoE sibling)."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model
        self.text = model.model.language_model
        self.config = model.config.text_config
        parameter = next(self.text.parameters())
        self.device = parameter.device
        self.dtype = parameter.dtype
        layer_parameters = inspect.signature(self.text.layers[0].forward).parameters
        # transformers renamed the layers' cache argument after 5.17.
        self._cache_keyword = "cache" if "cache" in layer_parameters else "past_key_values"

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

    # ------------------------------------------------------------------ positions

    def positions(
        self, input_ids: torch.Tensor, token_types: torch.Tensor, video_grid_thw: tuple[int, int, int] | None
    ) -> PromptPositions:
        """Rotary positions of the prompt ``input_ids`` (1, n) with ``token_types`` (1, n) (0 text,
        2 video), as ``generate()`` computes them; a prompt without a clip counts 0, 1, 2, ..."""
        length = input_ids.shape[1]
        if video_grid_thw is None:
            return PromptPositions(rope=torch.arange(length).expand(3, length), rope_offset=0)
        rope, deltas = self.model.model.get_rope_index(
            input_ids,
            mm_token_type_ids=token_types,
            video_grid_thw=torch.tensor([video_grid_thw]),
            attention_mask=torch.ones_like(input_ids),
        )
        return PromptPositions(rope=rope[:, 0], rope_offset=int(deltas.reshape(-1)[0]))

    # ------------------------------------------------------------------ passes

    def prefill(
        self,
        cache: StaticKVCache,
        start: int,
        input_ids: torch.Tensor,
        token_types: torch.Tensor,
        rope: torch.Tensor,
        video: EncodedItem | None,
        video_rows_before: int,
    ) -> torch.Tensor:
        """Run the prompt tail ``input_ids`` (1, n), whose first token goes to cache position
        ``start``, and return the last token's logits (1, vocab) float32.

        ``token_types`` (1, n) and ``rope`` (3, n) are the tail's; ``video`` holds the clip's
        features, of which the tail's video pads take the rows from ``video_rows_before`` on.
        """
        count = input_ids.shape[1]
        device = self.device
        input_ids = input_ids.to(device)
        embeds = self.text.embed_tokens(input_ids)
        video_mask = (token_types == VIDEO_TOKEN).to(device)
        deepstack: list[torch.Tensor] = []
        video_rows = int(video_mask.sum())
        if video_rows:
            if video is None:
                raise ValueError("the prompt has video pads but no clip features were given")
            rows = slice(video_rows_before, video_rows_before + video_rows)
            features = video.embeds[rows].to(device, embeds.dtype)
            embeds = embeds.masked_scatter(video_mask[..., None], features)
            deepstack = [layer[rows] for layer in video.deepstack]
        cache.write_positions = torch.arange(start, start + count, device=device)
        cache.view_length = start + count
        mask = prefill_mask(start, count, device, embeds.dtype)
        hidden = self._layers(embeds, rope.to(device)[:, None, :], cache, mask, video_mask, deepstack)
        return self.model.lm_head(hidden[:, -1, :]).float()

    def step(self, cache: StaticKVCache, token: torch.Tensor, cache_position: torch.Tensor, rope_position: torch.Tensor):
        """One decode step, graph-safe: ``token`` (1, 1) int64 at ``cache_position`` (1,) with
        rotary position ``rope_position`` (1,) on every axis. Reads ``cache.view_length`` positions;
        returns logits (1, vocab) float32."""
        embeds = self.text.embed_tokens(token)
        rope = rope_position.view(1, 1, 1).expand(3, 1, 1)
        cache.write_positions = cache_position
        mask = step_mask(cache.view_length, cache_position, embeds.dtype)
        hidden = self._layers(embeds, rope, cache, mask, None, [])
        return self.model.lm_head(hidden[:, -1, :]).float()

    def _layers(
        self,
        embeds: torch.Tensor,
        rope: torch.Tensor,
        cache: StaticKVCache,
        mask: torch.Tensor | None,
        video_mask: torch.Tensor | None,
        deepstack: list[torch.Tensor],
    ) -> torch.Tensor:
        """The decoder stack on ``embeds`` (1, n, hidden) at rotary positions ``rope`` (3, 1, n);
        deepstack features are added at the video positions after the first layers, as
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
                    hidden = self.text._deepstack_process(hidden, video_mask, deepstack[index])
        return self.text.norm(hidden)
