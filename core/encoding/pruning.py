"""Pruning a clip's video tokens where nothing moves (Efficient Video Sampling, arXiv 2510.14624).

It runs after the vision tower, on its merged tokens, so the tower (and its CUDA graphs) sees every
patch. A clip's merged tokens are laid out as ``grid = (t, h, w)``: ``t`` slices (frame pairs) of
``h * w`` tokens each, row ``(i * h + y) * w + x`` the token at place ``(y, x)`` of slice ``i``.

The rule, at a pruning rate ``q`` in [0, 1):

- the first slice is kept whole;
- every token of a later slice scores its dissimilarity to the token at the same place one slice
  before: ``1 - cos(a, b)`` of the two merged embeddings (in float32; a token equal to the one
  before scores exactly 0);
- the clip keeps ``max(h * w, int(t * h * w * (1 - q)))`` tokens in all (:func:`kept_token_count`:
  the whole clip, first slice included, is the total the rate applies to; ``int`` truncates the
  double-precision product, as vLLM's ``compute_retained_tokens_count`` does, so the same clip at
  the same rate keeps as many tokens here as on a vLLM server);
- the tokens of later slices are ranked across the whole clip (not per slice) by dissimilarity,
  highest first, equal scores in row order, and the first ``kept - h * w`` are kept.

Kept tokens keep their original places; the prompt writes each slice's own kept count after its
time marker, and the language model's positions are those of the unpruned prompt
(:mod:`framewise.core.decoding.pruned_positions`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from framewise.core.encoding.defs import EncodedItem
from framewise.core.settings import check_pruning_rate

# Tokens of later slices whose dissimilarity is computed in float32 at once: bounds the float32
# copy a long clip's bf16 embeddings would otherwise need whole.
_SCORE_ROWS = 4096
# Below this product of norms a token counts as zero (its cosine 0, as torch's cosine_similarity has it).
_EPS = 1e-8


@dataclass(frozen=True)
class Retention:
    """Which merged tokens of one clip a pruning keeps.

    ``mask``: (t*h*w,) bool on the CPU, in the clip's row order, True for a kept token;
    ``grid``: the clip's (t, h, w) in merged tokens.
    """

    mask: torch.Tensor
    grid: tuple[int, int, int]

    @classmethod
    def keep_all(cls, grid: tuple[int, int, int]) -> Retention:
        """Every token of a clip of ``grid`` kept."""
        t, h, w = grid
        return cls(torch.ones(t * h * w, dtype=torch.bool), grid)

    @property
    def kept_per_slice(self) -> tuple[int, ...]:
        """Tokens kept in each of the t slices, in order."""
        t, h, w = self.grid
        return tuple(self.mask.view(t, h * w).sum(dim=1).tolist())

    @property
    def kept(self) -> int:
        """Tokens kept in all."""
        return int(self.mask.sum())

    @property
    def total(self) -> int:
        """Tokens of the clip before pruning."""
        return self.mask.numel()

    @property
    def prunes(self) -> bool:
        """Whether any token is dropped."""
        return self.kept < self.total

    def kept_per_frame(self, frames: int, frames_per_slice: int) -> tuple[float, ...]:
        """For each of a clip's ``frames`` sampled frames, the share of its slice's tokens kept
        (slice ``i`` holds frames ``i * frames_per_slice`` on; a last slice may hold fewer)."""
        t, h, w = self.grid
        if frames <= 0 or -(-frames // frames_per_slice) != t:
            raise ValueError(f"{frames} frames for a clip of {t} slices of {frames_per_slice} frames")
        shares = [kept / (h * w) for kept in self.kept_per_slice]
        return tuple(shares[index // frames_per_slice] for index in range(frames))


def kept_token_count(grid: tuple[int, int, int], rate: float) -> int:
    """Tokens a clip of ``grid`` (t, h, w) merged tokens keeps at pruning ``rate``: its first slice
    whole, and in all ``int(t*h*w * (1 - rate))`` (the product in double precision, truncated)."""
    check_pruning_rate(rate)
    t, h, w = grid
    return max(h * w, int(t * h * w * (1 - rate)))


def retained_mask(embeds: torch.Tensor, grid: tuple[int, int, int], rate: float) -> Retention:
    """The tokens of a clip that pruning at ``rate`` keeps (see the module's rule).

    ``embeds``: (t*h*w, hidden) the clip's merged tokens in row order, any float dtype, on any
    device; ``grid``: (t, h, w) in merged tokens. At rate 0 every token is kept and nothing is
    computed. Raises ValueError when ``embeds`` does not have the grid's rows.
    """
    t, h, w = grid
    if embeds.dim() != 2 or embeds.shape[0] != t * h * w:
        raise ValueError(f"embeddings of shape {tuple(embeds.shape)} are not the {t * h * w} rows of grid {grid}")
    keep = kept_token_count(grid, rate)
    if keep == t * h * w:
        return Retention.keep_all(grid)
    scores = _dissimilarity(embeds.view(t, h * w, -1)).flatten()
    # A stable sort keeps equal scores in row order, so ties go to the earlier token.
    chosen = torch.sort(scores, descending=True, stable=True).indices[: keep - h * w]
    later = torch.zeros(scores.numel(), dtype=torch.bool, device=scores.device)
    later[chosen] = True
    mask = torch.cat([torch.ones(h * w, dtype=torch.bool), later.cpu()])
    return Retention(mask, grid)


def _dissimilarity(slices: torch.Tensor) -> torch.Tensor:
    """``1 - cos`` of every token of slices 1.. (t, n, hidden) with the token at its place one slice
    before: (t-1, n) float32, computed a bounded number of rows at a time.

    The cosine is ``a.b / sqrt(|a|^2 |b|^2)``, the dot product and both squared norms summed alike,
    so a token equal to the one before it scores exactly 0 and such tokens rank by position.
    """
    t, n, _ = slices.shape
    step = max(1, _SCORE_ROWS // max(n, 1))
    parts = []
    for start in range(0, t - 1, step):
        end = min(start + step, t - 1)  # scores slices start+1 .. end
        later, earlier = slices[start + 1 : end + 1].float(), slices[start:end].float()
        dot = (later * earlier).sum(dim=-1)
        norms = (later * later).sum(dim=-1) * (earlier * earlier).sum(dim=-1)
        parts.append(1 - dot / norms.clamp_min(_EPS * _EPS).sqrt())
    return torch.cat(parts) if parts else slices.new_zeros((0, n), dtype=torch.float32)


def prune_encoded(item: EncodedItem, retention: Retention) -> EncodedItem:
    """``item``'s kept rows: its merged tokens (tokens, hidden) and every deepstack layer alike cut
    to the (kept, hidden) rows ``retention`` keeps, in order. ``item`` itself when it keeps all."""
    if item.embeds.shape[0] != retention.total:
        raise ValueError(f"{item.embeds.shape[0]} feature rows, but the retention covers {retention.total}")
    if not retention.prunes:
        return item
    mask = retention.mask.to(item.embeds.device)
    return EncodedItem(embeds=item.embeds[mask], deepstack=tuple(layer[mask] for layer in item.deepstack))
