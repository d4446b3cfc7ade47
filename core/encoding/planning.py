"""Planning the vision encoder's passes: which items go through which captured graph.

Pure Python (no torch), so it is cheap and can be tested exhaustively. An item's rows are
``grid_thw[0]`` slices of ``h * w`` patches, and the tower attends within one slice only (a
frame pair, for Qwen3-VL), so an item can be cut between slices without changing the result. A
*piece* is a run of consecutive slices of one item; a *batch* is one pass of the tower over some
pieces, either a replay of the graph with the smallest budget that holds it, or an eager forward
with a reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from framewise.core.errors import SettingsError
from framewise.core.seam import FamilyLimits
from framewise.core.settings import EncoderSettings

SUPPORTED_MODALITIES = ("image", "video")


@dataclass(frozen=True)
class PlanItem:
    """What the planner needs of one item: its modality and ``grid_thw`` (temporal patches, rows, cols)."""

    modality: str
    grid_thw: tuple[int, int, int]

    @property
    def patches_per_slice(self) -> int:
        """Patches in one temporal patch (one attention sequence)."""
        return self.grid_thw[1] * self.grid_thw[2]


@dataclass(frozen=True)
class BatchLimits:
    """What one graph can hold: the captured budgets (ascending), items and attention sequences per
    pass. Every budget is a multiple of ``budget_multiple`` (whole merge blocks of the model family)."""

    budgets: tuple[int, ...]
    max_items: int
    max_sequences: int
    budget_multiple: int

    @classmethod
    def from_settings(cls, settings: EncoderSettings, limits: FamilyLimits) -> BatchLimits:
        """The limits ``settings`` give the graphs of a model family of ``limits``."""
        return cls(
            budgets=settings.token_budgets(limits),
            max_items=settings.max_items_per_batch,
            max_sequences=settings.max_frame_pairs_per_batch,
            budget_multiple=limits.budget_multiple,
        )

    def __post_init__(self) -> None:
        if not self.budgets or list(self.budgets) != sorted(set(self.budgets)):
            raise SettingsError("encoder.budgets", f"need distinct ascending budgets, got {self.budgets}")
        multiple = self.budget_multiple
        if any(budget <= 0 or budget % multiple for budget in self.budgets):
            raise SettingsError(
                "encoder.budgets", f"every budget must be a positive multiple of {multiple} (whole merge blocks)"
            )
        if self.max_items < 1 or self.max_sequences < self.max_items:
            raise SettingsError(
                "encoder.max_frame_pairs_per_batch", "need at least one item per batch and max frame pairs >= max items"
            )

    @property
    def max_budget(self) -> int:
        return self.budgets[-1]

    def smallest_budget(self, patches: int) -> int:
        """The smallest budget that holds ``patches`` rows; callers keep ``patches <= max_budget``."""
        return next(budget for budget in self.budgets if budget >= patches)


@dataclass(frozen=True)
class Piece:
    """Temporal patches ``first .. first + count - 1`` of item ``item`` (index in the request)."""

    item: int
    first: int
    count: int
    patches_per_slice: int

    @property
    def patches(self) -> int:
        return self.count * self.patches_per_slice


@dataclass(frozen=True)
class Batch:
    """One pass of the tower. ``budget`` is ``None`` for an eager pass, which then has a ``fallback_reason``."""

    pieces: tuple[Piece, ...]
    budget: int | None
    fallback_reason: str | None = None

    @property
    def patches(self) -> int:
        return sum(piece.patches for piece in self.pieces)

    @property
    def sequences(self) -> int:
        """Attention sequences: one per temporal patch of every piece."""
        return sum(piece.count for piece in self.pieces)

    @property
    def padding_fraction(self) -> float:
        return 0.0 if self.budget is None else (self.budget - self.patches) / self.budget


def plan_batches(items: Sequence[PlanItem], limits: BatchLimits) -> list[Batch]:
    """Pack ``items`` in order into graph batches, or eager batches where no graph can hold them.

    Items are packed greedily, the batches in the items' order; an item that does not fit the open
    batch but would fit an empty one starts a new batch rather than being cut. An item larger than
    one batch is cut between temporal patches, its pieces in order. Each graph batch gets the
    smallest budget that holds it.
    """
    batches: list[Batch] = []
    open_pieces: list[Piece] = []

    def close_open_batch() -> None:
        if open_pieces:
            patches = sum(piece.patches for piece in open_pieces)
            batches.append(Batch(pieces=tuple(open_pieces), budget=limits.smallest_budget(patches)))
            open_pieces.clear()

    for index, item in enumerate(items):
        reason = _eager_reason(item, limits)
        if reason is not None:
            close_open_batch()  # the batches stay in the items' order
            whole = Piece(index, 0, item.grid_thw[0], item.patches_per_slice)
            batches.append(Batch(pieces=(whole,), budget=None, fallback_reason=reason))
            continue
        slices, per_slice = item.grid_thw[0], item.patches_per_slice
        fits_empty_batch = slices * per_slice <= limits.max_budget and slices <= limits.max_sequences
        first = 0
        while first < slices:
            room = _room_in_slices(open_pieces, per_slice, limits)
            remaining = slices - first
            if room == 0 or (room < remaining and fits_empty_batch and open_pieces):
                close_open_batch()
                continue
            count = min(room, remaining)
            open_pieces.append(Piece(index, first, count, per_slice))
            first += count
    close_open_batch()
    return batches


def _eager_reason(item: PlanItem, limits: BatchLimits) -> str | None:
    """Why ``item`` cannot go through a graph, or ``None`` when it can."""
    if item.modality not in SUPPORTED_MODALITIES:
        return f"modality {item.modality!r} has no captured graph"
    _, h, w = item.grid_thw
    if item.patches_per_slice > limits.max_budget:
        what = "the image" if item.modality == "image" else "one frame pair"
        return (
            f"{what} has {item.patches_per_slice} patches ({h}x{w}), more than the largest budget "
            f"({limits.max_budget}); raise the max budget to run it through a graph"
        )
    return None


def _room_in_slices(open_pieces: Sequence[Piece], per_slice: int, limits: BatchLimits) -> int:
    """How many temporal patches of ``per_slice`` patches still fit the open batch."""
    if len(open_pieces) >= limits.max_items:
        return 0
    used_patches = sum(piece.patches for piece in open_pieces)
    used_sequences = sum(piece.count for piece in open_pieces)
    return min((limits.max_budget - used_patches) // per_slice, limits.max_sequences - used_sequences)
