"""Video token pruning on the GPU: bf16 merged tokens at the 8B's width on the card keep exactly the
tokens the CPU keeps for the same values, and the kept rows are cut from features on the card."""

from __future__ import annotations

import math

import pytest
import torch

from framewise.core.encoding.defs import EncodedItem
from framewise.core.encoding.pruning import prune_encoded, retained_mask

pytestmark = pytest.mark.gpu

PAIRS, ROWS, COLUMNS, HIDDEN = 64, 4, 7, 4096


def turned_clip() -> torch.Tensor:
    """(PAIRS*ROWS*COLUMNS, HIDDEN) bf16 tokens, each later token the one before it turned by its
    own angle, the angles chosen so that no two dissimilarities lie within 1e-3 of each other
    (far above what bf16 rounding and either device's sums can move them)."""
    generator = torch.Generator().manual_seed(0)
    places = ROWS * COLUMNS
    targets = torch.linspace(0.01, 1.9, (PAIRS - 1) * places)[torch.randperm((PAIRS - 1) * places, generator=generator)]
    slices = [torch.randn(places, HIDDEN, generator=generator, dtype=torch.float64)]
    for index in range(1, PAIRS):
        before = slices[-1]
        turn = torch.randn(places, HIDDEN, generator=generator, dtype=torch.float64)
        turn -= (turn * before).sum(-1, keepdim=True) / (before * before).sum(-1, keepdim=True) * before
        turn *= before.norm(dim=-1, keepdim=True) / turn.norm(dim=-1, keepdim=True)
        cosine = 1 - targets[(index - 1) * places : index * places].double()
        slices.append(cosine[:, None] * before + torch.sqrt(1 - cosine**2)[:, None] * turn)
    return torch.cat(slices).bfloat16()


@pytest.mark.parametrize("rate", [0.5, 0.75, 0.9])
def test_the_card_keeps_the_tokens_the_cpu_keeps(rate: float) -> None:
    embeds = turned_clip()
    grid = (PAIRS, ROWS, COLUMNS)
    on_cpu = retained_mask(embeds, grid, rate)
    on_card = retained_mask(embeds.cuda(), grid, rate)
    assert on_card.mask.device.type == "cpu"
    assert torch.equal(on_card.mask, on_cpu.mask)
    assert on_card.kept == max(ROWS * COLUMNS, math.floor(PAIRS * ROWS * COLUMNS * (1 - rate)))


def test_the_kept_rows_are_cut_from_features_on_the_card() -> None:
    embeds = turned_clip().cuda()
    item = EncodedItem(embeds=embeds, deepstack=(embeds * 2, embeds * 3))
    retention = retained_mask(embeds, (PAIRS, ROWS, COLUMNS), 0.75)
    pruned = prune_encoded(item, retention)
    rows = retention.mask.nonzero().flatten().cuda()
    assert pruned.embeds.device == embeds.device
    assert torch.equal(pruned.embeds, embeds[rows])
    assert all(torch.equal(layer, source[rows]) for layer, source in zip(pruned.deepstack, item.deepstack, strict=True))
    assert prune_encoded(item, retained_mask(embeds, (PAIRS, ROWS, COLUMNS), 0.0)) is item
