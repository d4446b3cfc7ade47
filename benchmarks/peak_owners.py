"""What held the device's memory at its peak: the caching allocator's recorded history replayed.

``torch.cuda.memory._record_memory_history`` keeps every allocation and free, and every segment the
allocator reserved from the device or gave back, with the Python stack that caused it;
:func:`peak_owners` replays one stretch of that trace, finds the moment the memory allocated (or,
for segments, reserved) during it was highest, and groups what was live then by the code that
asked for it. Blocks from before the stretch are not in it: the figures are what the stretch added.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

# Frames from these folders name an owner; the rest (torch, transformers, the standard library) do not.
OWN_FOLDERS = ("/core/", "/benchmarks/", "/tests/")
# The trace's actions that take memory and those that give it back: blocks allocated; segments
# reserved (whole, or mapped piece by piece with expandable segments).
ALLOCATED = (("alloc",), ("free_completed",))
RESERVED = (("segment_alloc", "segment_map"), ("segment_free", "segment_unmap"))


def peak_owners(
    trace: Sequence[dict[str, Any]], top: int, actions: tuple[tuple[str, ...], tuple[str, ...]] = ALLOCATED
) -> dict[str, Any]:
    """The moment of the highest memory taken over ``trace`` (a device trace of
    ``torch.cuda.memory._snapshot()``: events with ``action``, ``addr``, ``size``, ``frames``) by
    ``actions`` (:data:`ALLOCATED` or :data:`RESERVED`: what takes, what gives back) and the
    ``top`` owners of what was live then: ``{"peak_bytes", "owners": [{"where", "bytes",
    "blocks"}]}``, ``peak_bytes`` counted from the trace's start, largest owner first."""
    take, give = actions
    peak, peak_at = _peak(trace, take, give)
    live: dict[int, dict[str, Any]] = {}
    for event in trace[: peak_at + 1]:
        if event["action"] in take:
            live[event["addr"]] = event
        elif event["action"] in give:
            live.pop(event["addr"], None)
    grouped: dict[str, list[int]] = {}
    for event in live.values():
        grouped.setdefault(owner(event.get("frames", ())), []).append(event["size"])
    ranked = sorted(grouped.items(), key=lambda item: -sum(item[1]))[:top]
    return {"peak_bytes": peak, "owners": [{"where": where, "bytes": sum(sizes), "blocks": len(sizes)} for where, sizes in ranked]}


def _peak(trace: Sequence[dict[str, Any]], take: tuple[str, ...], give: tuple[str, ...]) -> tuple[int, int]:
    """The highest bytes the ``take`` events hold over ``trace`` from its start, and the index of
    the event that reached it."""
    total = peak = 0
    peak_at = -1
    for index, event in enumerate(trace):
        if event["action"] in take:
            total += event["size"]
            if total > peak:
                peak, peak_at = total, index
        elif event["action"] in give:
            total -= event["size"]
    return peak, peak_at


def owner(frames: Sequence[dict[str, Any]]) -> str:
    """The innermost frame of the project's own code in ``frames`` (innermost first), as
    ``file:line function``; ``"elsewhere"`` when none is."""
    for frame in frames:
        filename = frame.get("filename", "")
        for folder in OWN_FOLDERS:
            if folder in filename:
                return f"{folder.strip('/')}/{filename.split(folder, 1)[1]}:{frame.get('line')} {frame.get('name')}"
    return "elsewhere"
