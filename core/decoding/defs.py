"""What the decoder asks of a model family's language model (:class:`LanguageModel`) and of the
state its passes carry (:class:`DecoderState`), and the plain types the two share, so that the
decoding machinery names no model's tensors."""

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

    def placed_in(self, embeds: torch.Tensor) -> torch.Tensor:
        """The run's token embeddings ``embeds`` (1, n, hidden) on the device with the feature rows
        in place of the tokens ``mask`` marks (the deepstack features aside). The rows are copied
        without blocking: gathered into pinned memory, they go without waiting for queued passes."""
        device = embeds.device
        rows = self.embeds.to(device, embeds.dtype, non_blocking=True)
        return embeds.masked_scatter(self.mask.to(device)[..., None], rows)


class DecoderState(Protocol):
    """What a language model's passes carry from one to the next, allocated once for a maximum
    context: a :class:`StaticKVCache` (the keys and values of a model's attention layers, and the
    record of which tokens, computed for which items, the whole state holds), or a state that holds
    one beside other layers' states (a hybrid model's linear layers), which cannot be cut back to
    a shorter prefix as the keys and values can.
    """

    @property
    def kv(self) -> StaticKVCache:
        """The keys and values, with ``tokens``, ``owner``, ``view_length`` and ``write_positions``."""
        ...

    @property
    def nbytes(self) -> int:
        """Device memory the state takes."""
        ...

    def reset(self) -> None:
        """Empty the state: no positions held, any other layers' states as before the first token."""
        ...


class LanguageModel(Protocol):
    """A language model the decoder runs pass by pass over a :class:`DecoderState` it makes.

    Sizes: ``layers``, ``kv_heads``, ``head_dim`` (the shape of the state's KV cache),
    ``vocab_size`` and ``max_positions``; the weights' ``device`` and ``dtype``.
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
    def vision_in_embeddings(self) -> bool:
        """Whether a pass's vision features go into its input embeddings alone (none added inside
        the layers), so that :meth:`text_prefill` can take a pass with features in its embeddings."""
        ...

    @property
    def step_description(self) -> str:
        """How a decode step runs, in a few words (shown with the decoder's state)."""
        ...

    def disable_step_kernels(self) -> None:
        """Run later decode steps without the hand-written kernels."""
        ...

    def new_state(self, max_tokens: int) -> DecoderState:
        """A zeroed state for ``max_tokens`` positions on the model's device."""
        ...

    def state_bytes(self, max_tokens: int) -> int:
        """Device memory :meth:`new_state` takes for ``max_tokens`` positions (0 allowed: the part
        that does not grow with the context)."""
        ...

    def positions(
        self, input_ids: torch.Tensor, token_types: torch.Tensor, grids: tuple[PieceGrid, ...]
    ) -> PromptPositions:
        """Rotary positions of the prompt ``input_ids`` (1, n) with the family's ``token_types``
        (1, n), whose vision items have ``grids`` ((modality, grid_thw) each, in item order)."""
        ...

    def prefill(
        self, state: DecoderState, start: int, input_ids: torch.Tensor, rope: torch.Tensor, vision: VisionRows | None,
        *, logits: bool = True,
    ) -> torch.Tensor | None:
        """Run the prompt tail ``input_ids`` (1, n) from cache position ``start`` at rotary
        positions ``rope`` (axes, n), ``vision`` features in place of the tokens it marks, over a
        ``state`` that holds exactly the ``start`` tokens before it; the last token's logits
        (1, vocab) float32, or None without ``logits`` (a pass before a prompt's last, whose
        logits nobody reads: the output head is skipped). A long prompt comes in several such
        passes, one after the other."""
        ...

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        """The input embeddings (1, n, hidden) on the model's device of token ``ids`` (1, n) int64,
        on the host or the device; outside any graph (the table may be kept on the host)."""
        ...

    def text_prefill(
        self,
        state: DecoderState,
        embeds: torch.Tensor,
        cache_positions: torch.Tensor,
        rope: torch.Tensor,
        last: torch.Tensor,
    ) -> torch.Tensor:
        """A graph-safe prefill of text tokens, their embeddings ``embeds`` (1, n, hidden) (from
        :meth:`embed`), at ``cache_positions`` (n,) with rotary positions ``rope`` (axes, n),
        reading ``state.kv.view_length`` positions; the final hidden state (1, hidden) of the token
        at index ``last`` (1,), which :meth:`head` turns into its logits (outside the graph, and
        only for a pass whose logits are read). The tokens after ``last`` are padding: they must
        leave no trace in the state but their cache entries past the end."""
        ...

    def head(self, hidden: torch.Tensor) -> torch.Tensor:
        """The logits (1, vocab) float32 of a final hidden state ``hidden`` (1, hidden) from
        :meth:`text_prefill`."""
        ...

    def step(
        self, state: DecoderState, embeds: torch.Tensor, cache_position: torch.Tensor, rope_position: torch.Tensor
    ) -> torch.Tensor:
        """One graph-safe decode step of the token whose embedding is ``embeds`` (1, 1, hidden) (from
        :meth:`embed`), reading ``state.kv.view_length`` positions; logits (1, vocab) float32."""
        ...
