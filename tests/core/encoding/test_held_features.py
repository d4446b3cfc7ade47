"""Where a clip's features wait for the decoder: the rule that moves a long clip's to the host."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from framewise.core.encoding.defs import EncodedItem
from framewise.core.encoding.held_features import DEVICE_FEATURE_BYTES, device_feature_bytes, joined, settled


@dataclasses.dataclass(frozen=True)
class Recorded(EncodedItem):
    """An item that says whether it was moved to the host (a CPU run has no device to move from)."""

    moved: bool = False

    def to_host(self) -> EncodedItem:
        return dataclasses.replace(self, moved=True)


def part(rows: int, hidden: int = 8, layers: int = 2, start: float = 0.0) -> Recorded:
    values = torch.arange(rows * hidden, dtype=torch.float32).view(rows, hidden) + start
    return Recorded(embeds=values, deepstack=tuple(values * (layer + 2) for layer in range(layers)))


def test_an_item_counts_the_bytes_of_every_output() -> None:
    item = EncodedItem(embeds=torch.zeros(3, 4, dtype=torch.bfloat16), deepstack=(torch.zeros(3, 4),))
    assert item.nbytes == 3 * 4 * 2 + 3 * 4 * 4


def test_a_short_clips_features_stay_where_they_are() -> None:
    parts = [part(4), part(4)]
    assert settled(parts) is parts
    assert device_feature_bytes(DEVICE_FEATURE_BYTES) == DEVICE_FEATURE_BYTES


def test_a_long_clips_features_all_go_to_the_host_once_together_they_pass_the_limit(monkeypatch) -> None:
    parts = [part(4), part(4)]
    monkeypatch.setattr("framewise.core.encoding.held_features.DEVICE_FEATURE_BYTES", parts[0].nbytes)
    moved = settled(parts)
    assert [item.moved for item in moved] == [True, True]
    assert all(torch.equal(a.embeds, b.embeds) for a, b in zip(moved, parts))
    assert device_feature_bytes(parts[0].nbytes + 1) == 0


def test_joined_parts_are_each_outputs_rows_in_order() -> None:
    first, second = part(3), part(5, start=1000.0)
    item = joined([first, second])
    assert torch.equal(item.embeds, torch.cat([first.embeds, second.embeds]))
    for layer, (a, b) in enumerate(zip(first.deepstack, second.deepstack)):
        assert torch.equal(item.deepstack[layer], torch.cat([a, b]))
    assert joined([first]) is first


def test_parts_with_different_layer_counts_do_not_join() -> None:
    with pytest.raises(ValueError):
        joined([part(2, layers=2), part(2, layers=1)])
