"""Rotary positions of a prompt whose video tokens were pruned.

Pruning (:mod:`framewise.core.encoding.pruning`) keeps every kept token at the place it had: a kept
video token and every text token after a clip have exactly the rotary position they had in the
unpruned prompt. So the positions of a pruned prompt are those the language model computes for the
unpruned one, with the pruned tokens' columns dropped; and since a token generated later sits
``pruned`` cache positions earlier than it would have, the rotary offset of later tokens grows by
that many.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from framewise.core.decoding.defs import LanguageModel, PromptPositions
from framewise.core.seam import PieceGrid


@dataclass(frozen=True)
class UnprunedPrompt:
    """The prompt a pruned prompt was cut from.

    ``input_ids`` and ``token_types`` (1, n) are the unpruned prompt's; ``kept`` (n,) bool marks the
    tokens the pruned prompt holds, in order (every text token, and the video tokens pruning kept).
    """

    input_ids: torch.Tensor
    token_types: torch.Tensor
    kept: torch.Tensor

    @property
    def pruned_tokens(self) -> int:
        """Tokens the pruned prompt lacks."""
        return int((~self.kept).sum())


def kept_positions(positions: PromptPositions, kept: torch.Tensor) -> PromptPositions:
    """``positions`` of an unpruned prompt of n tokens, cut to the tokens ``kept`` (n,) bool marks:
    rope (axes, kept) and the offset of later tokens, larger by the tokens dropped."""
    if kept.shape != (positions.rope.shape[1],):
        raise ValueError(f"a keep mask of shape {tuple(kept.shape)} for a prompt of {positions.rope.shape[1]} tokens")
    dropped = int((~kept).sum())
    return PromptPositions(rope=positions.rope[:, kept], rope_offset=positions.rope_offset + dropped)


def prompt_positions(
    language: LanguageModel,
    input_ids: torch.Tensor,
    token_types: torch.Tensor,
    grids: tuple[PieceGrid, ...],
    unpruned: UnprunedPrompt | None = None,
) -> PromptPositions:
    """Rotary positions of the prompt ``input_ids`` / ``token_types`` (1, n) about items of ``grids``:
    ``language``'s own, or, for a prompt cut from ``unpruned``, those of the unpruned prompt at the
    kept tokens (:func:`kept_positions`)."""
    if unpruned is None:
        return language.positions(input_ids, token_types, grids)
    if int(unpruned.kept.sum()) != input_ids.shape[1]:
        raise ValueError(f"{int(unpruned.kept.sum())} kept tokens for a prompt of {input_ids.shape[1]}")
    full = language.positions(unpruned.input_ids, unpruned.token_types, grids)
    return kept_positions(full, unpruned.kept)
