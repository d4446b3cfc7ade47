"""What the decoder asks of a model family's language model (:class:`LanguageModel`), and the plain
types the two share, so that the decoding machinery names no model's tensors."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import torch

from framewise.core.seam import PieceGrid

if TYPE_CHECKING:
    from framewise.core.decoding.kv_cache import StaticKVCache


@dataclass(frozen=True)
class PromptPositions:
    """Rotary positions of a whole prompt: ``rope`` (axes, n) int64 and the offset of every later
    token: position ``p`` in the cache has rotary position ``p + rope_offset`` on every axis."""

    rope: torch.Tensor
    rope_offset: int


@dataclass(frozen=True)
class VisionRows:
    """Encoded vision features placed in a run of n prompt tokens: ``mask`` (1, n) bool marks the
    tokens that take a feature row, ``embeds`` (k, hidden) holds those rows in token order (k true
    entries in ``mask``), ``deepstack`` one (k, hidden) tensor per extra feature layer."""

    mask: torch.Tensor
    embeds: torch.Tensor
    deepstack: tuple[torch.Tensor, ...]


class LanguageModel(Protocol):
    """A language model the decoder runs pass by pass over a :class:`StaticKVCache`.

    Sizes: ``layers``, ``kv_heads``, ``head_dim`` (the cache's shape), ``vocab_size`` and
    ``max_positions``; the weights' ``device`` and ``dtype``.
    """

    device: torch.device
    dtype: torch.dtype

    @property
    def layers(self) -> int: ...

    @property
    def kv_heads(self) -> int: ...

    @property
    def head_dim(self) -> int: ...

    @property
    def vocab_size(self) -> int: ...

    @property
    def max_positions(self) -> int: ...

    @property
    def rope_axes(self) -> int:
        """How many axes a token's rotary position has (1 for plain rotary, 3 for Qwen3-VL's)."""
        ...

    @property
    def step_kernels(self) -> bool:
        """Whether decode steps run through hand-written GPU kernels (which may fail to compile)."""
        ...

    @property
    def step_description(self) -> str:
        """How a decode step runs, in a few words (shown with the decoder's state)."""
        ...

    def disable_step_kernels(self) -> None:
        """Run later decode steps without the hand-written kernels."""
        ...

    def positions(
        self, input_ids: torch.Tensor, token_types: torch.Tensor, grids: tuple[PieceGrid, ...]
    ) -> PromptPositions:
        """Rotary positions of the prompt ``input_ids`` (1, n) with the family's ``token_types``
        (1, n), whose vision items have ``grids`` ((modality, grid_thw) each, in item order)."""
        ...

    def prefill(
        self, cache: StaticKVCache, start: int, input_ids: torch.Tensor, rope: torch.Tensor, vision: VisionRows | None
    ) -> torch.Tensor:
        """Run the prompt tail ``input_ids`` (1, n) from cache position ``start`` at rotary
        positions ``rope`` (axes, n), ``vision`` features in place of the tokens it marks; the
        last token's logits (1, vocab) float32."""
        ...

    def text_prefill(
        self,
        cache: StaticKVCache,
        input_ids: torch.Tensor,
        cache_positions: torch.Tensor,
        rope: torch.Tensor,
        last: torch.Tensor,
    ) -> torch.Tensor:
        """A graph-safe prefill of text tokens ``input_ids`` (1, n) at ``cache_positions`` (n,) with
        rotary positions ``rope`` (axes, n), reading ``cache.view_length`` positions; the logits
        (1, vocab) float32 of the token at index ``last`` (1,)."""
        ...

    def step(
        self, cache: StaticKVCache, token: torch.Tensor, cache_position: torch.Tensor, rope_position: torch.Tensor
    ) -> torch.Tensor:
        """One graph-safe decode step reading ``cache.view_length`` positions; logits (1, vocab) float32."""
        ...
