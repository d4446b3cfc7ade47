"""Video token pruning on the GPU: bf16 merged tokens at the 8B's width on the card keep exactly the
tokens the CPU keeps for the same values, and the kept rows are cut from features on the card; the
engine prunes after its encoder graphs, which replay exactly as they do with pruning off."""

from __future__ import annotations

import math

import pytest
import torch

from framewise.core.backends.local.engine import Engine
from framewise.core.encoding.defs import EncodedItem
from framewise.core.encoding.pruning import prune_encoded, retained_mask
from framewise.core.events import ChunkStats, Event
from framewise.core.settings import AppSettings
from tests.conftest import SAMPLE_CLIPS

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


def test_the_engines_graph_hits_and_passes_are_the_same_with_pruning_on() -> None:
    """The tower sees every patch whatever the rate: each clip's encoder passes (their budgets,
    patches and graph hits) and the run's hit counts with pruning at 0.75 are those with it off."""
    clips = sorted(SAMPLE_CLIPS.glob("*.mp4"))
    settings = (
        AppSettings()
        .replace("model", device="cuda")
        .replace("sampling", max_frames=32)
        .replace("encoder", min_budget=256, max_budget=4096)
    )

    def run(pruning: str) -> tuple[list[tuple], tuple[int, int, int], list[bool]]:
        events: list[Event] = []
        engine = Engine(settings.replace("sampling", pruning=pruning), sink=events.append)
        engine.load()
        pruned = [engine.open_clip(clip).pruned for clip in clips]
        chunks = [event for event in events if isinstance(event, ChunkStats)]
        passes = [(c.frames, c.patches, c.budget, c.padding_fraction, c.graph_hit) for c in chunks]
        metrics = engine.metrics.snapshot()
        return passes, (metrics.items, metrics.item_hits, metrics.passes), pruned

    plain_passes, plain_hits, plain_pruned = run("off")
    passes, hits, pruned = run("0.75")
    assert not any(plain_pruned) and all(pruned)
    assert passes == plain_passes and all(graph_hit for *_, graph_hit in passes)
    assert hits == plain_hits == (len(clips), len(clips), len(passes))
