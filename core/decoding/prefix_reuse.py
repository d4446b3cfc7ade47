"""Which prefix of a new prompt the decoder state already holds, and how it is kept right when a
pass stops, fails or is cancelled.

A KV cache can be cut back: keeping its first ``p`` positions leaves the state after ``p``
tokens, so any common prefix with the new prompt is reused (:class:`CutBackPrefix`). A hybrid
state's linear layers have absorbed every token they saw and cannot be cut back, so it is reused
only where its states are known (:class:`SnapshotPrefix`): the live state, when the new prompt
extends exactly the tokens it holds, or a snapshot whose tokens begin the new prompt. Three
snapshots are kept, each allocated once:

- ``clip``: after the clip prefix (the system text and the vision spans, before the first
  question), for a new conversation about the same items or an edited first question;
- ``turn``: at the start of the current turn, the prefix it continued from (the conversation so
  far), for a stopped answer followed by another question, or an edited last question;
- ``chunk``: after the last prefill chunk that completed (after the whole prompt once the answer
  has begun), where a pass that fails or is cancelled inside a chunk or a decode step returns to.

In both, the cache's record of its tokens grows only after a pass has written them, so whatever
stops a pass, the record names exactly what the state holds.
"""

from __future__ import annotations

from typing import Any, Protocol, Sequence

from framewise.core.decoding.defs import DecoderState
from framewise.core.decoding.hybrid_state import HybridState
from framewise.core.decoding.kv_cache import StaticKVCache

# The snapshots a hybrid state keeps beside itself, each a copy of its linear layers' states.
SNAPSHOTS = ("clip", "turn", "chunk")


class PrefixKeeper(Protocol):
    """How a decoder state is reused from prompt to prompt and brought back after a failed pass."""

    snapshots_clip: bool
    """Whether the keeper snapshots the state at the clip prefix's end, so that a prefill pass
    must end there."""

    @property
    def nbytes(self) -> int:
        """Device memory the keeper holds beside the state (its snapshots)."""
        ...

    def resume(self, owner: Any, ids: Sequence[int], clip_end: int) -> int:
        """Make the state hold the longest prefix of ``ids`` (computed for ``owner``) it can, leaving
        at least the last token to prefill; return that prefix's length. ``clip_end`` is where the
        prompt's clip prefix ends (0 when it has none)."""
        ...

    def chunk_done(self, end: int, clip_end: int) -> None:
        """The state now holds the prompt's first ``end`` tokens."""
        ...

    def recover(self) -> None:
        """After a pass that raised: bring the state back to a prefix its record names exactly."""
        ...


class CutBackPrefix:
    """A KV cache: the longest common prefix with what it holds, for the same owner."""

    nbytes = 0
    snapshots_clip = False

    def __init__(self, cache: StaticKVCache) -> None:
        self.cache = cache

    def resume(self, owner: Any, ids: Sequence[int], clip_end: int) -> int:
        reused = self.cache.reusable_prefix(owner, ids)
        self.cache.tokens = list(ids[:reused])
        self.cache.owner = owner
        return reused

    def chunk_done(self, end: int, clip_end: int) -> None:
        """Nothing to keep: positions past the record are written over by the next pass."""

    def recover(self) -> None:
        """Nothing to do: entries a failed pass wrote lie past the record."""


class SnapshotPrefix:
    """A hybrid state, reused from the live state or one of its snapshots (see the module docstring)."""

    snapshots_clip = True

    def __init__(self, state: HybridState) -> None:
        self.state = state
        state.reset()
        # Allocated once; each holds the empty state until it is first taken.
        self._slots = {name: state.snapshot() for name in SNAPSHOTS}

    @property
    def nbytes(self) -> int:
        snapshots = self._slots.values()
        return sum(tensor.numel() * tensor.element_size() for s in snapshots for tensor in (*s.conv, *s.recurrent))

    def resume(self, owner: Any, ids: Sequence[int], clip_end: int) -> int:
        kv = self.state.kv
        limit = len(ids) - 1
        live = len(kv.tokens) if owner is kv.owner and _begins(ids, kv.tokens, limit) else -1
        usable = [
            snapshot for snapshot in self._slots.values()
            if snapshot.owner is owner and _begins(ids, snapshot.tokens, limit) and self.state.restorable(snapshot)
        ]
        best = max(usable, key=lambda snapshot: snapshot.length, default=None)
        if best is not None and best.length > live:
            self.state.restore(best)
        elif live < 0:
            self.state.reset()
            kv.owner = owner
        self._take("turn")
        if clip_end and len(kv.tokens) == clip_end:
            self._take("clip")
        return len(kv.tokens)

    def chunk_done(self, end: int, clip_end: int) -> None:
        self._take("chunk")
        if end == clip_end:
            self._take("clip")

    def recover(self) -> None:
        usable = [snapshot for snapshot in self._slots.values() if self.state.restorable(snapshot)]
        latest = max(usable, key=lambda snapshot: snapshot.length, default=None)
        if latest is None:
            self.state.reset()
        else:
            self.state.restore(latest)

    def _take(self, name: str) -> None:
        """Copy the state into the snapshot ``name``, unless that one already holds the same prefix."""
        slot = self._slots[name]
        kv = self.state.kv
        if slot.owner is not kv.owner or slot.tokens != tuple(kv.tokens):
            self._slots[name] = self.state.snapshot(into=slot)


def prefix_keeper(state: DecoderState) -> PrefixKeeper:
    """The keeper for ``state``: snapshots for a hybrid state, the common prefix for a KV cache."""
    if isinstance(state, HybridState):
        return SnapshotPrefix(state)
    return CutBackPrefix(state.kv)


def _begins(ids: Sequence[int], prefix: Sequence[int], limit: int) -> bool:
    """Whether ``prefix`` is at most ``limit`` tokens long and the first tokens of ``ids``."""
    return len(prefix) <= limit and tuple(ids[: len(prefix)]) == tuple(prefix)

