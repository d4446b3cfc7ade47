"""The tower probe: its linear classifier reads a property that tokens carry and not one they lack."""

from __future__ import annotations

import torch

from training.probe_tower import probe_accuracy


def test_probe_reads_a_property_the_tokens_carry_and_not_one_they_lack() -> None:
    generator = torch.Generator().manual_seed(0)
    labels = torch.randint(0, 4, (800,), generator=generator)
    directions = torch.randn(4, 32, generator=generator)
    tokens = directions[labels] + 0.3 * torch.randn(800, 32, generator=generator)
    train, test = slice(0, 600), slice(600, 800)
    assert probe_accuracy(tokens[train], labels[train], tokens[test], labels[test]) > 0.95
    shuffled = labels[torch.randperm(800, generator=generator)]
    assert probe_accuracy(tokens[train], shuffled[train], tokens[test], shuffled[test]) < 0.45
