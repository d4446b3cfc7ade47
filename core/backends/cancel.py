"""Cancelling requests: the one scope the backends and the window's worker keep.

Requests are numbered in the order they are sent (the numbers grow), and one runs at a time. A
person's Stop reaches whatever of their work has not ended yet, and nothing they ask after it:

- ``cancel(n)`` cancels request ``n`` and every one numbered before it that has not ended: the one
  running, and those still waiting (the worker drops those before they start). It is used up when
  request ``n`` (or a later one) ends.
- A cancel of a request that has already ended is ignored, so a Stop that arrives just as an answer
  finishes cannot stop the question after it.
- A cancel that arrives before its request starts applies to it when it starts, so a Stop that
  arrives just before a call begins is never lost.
- ``cancel()`` without a number applies to the request running or, when none is, to the next one to
  start; it is used up when the outermost request ends.

A request served inside another (new settings re-opening the clip) is part of the outer one.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from framewise.core.errors import CancelledError
from framewise.core.events import NO_REQUEST


class CancelScope:
    """Which requests are cancelled, and whether the one running is. :meth:`cancel` may be called
    from any thread; :meth:`request` from the one thread that serves the requests."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # a cancel and the start or end of a request do not interleave
        self._running = threading.Event()  # set while the request running is cancelled
        self._current = NO_REQUEST
        self._depth = 0
        self._cancelled_through = NO_REQUEST
        self._ended_through = NO_REQUEST
        self._next_one = False  # a cancel without a number, for the request running or the next

    def cancel(self, request_id: int | None = None) -> int | None:
        """Cancel request ``request_id`` and those before it that have not ended (without one: the
        request running, or the next to start). Returns the number of the running request the cancel
        reached, ``None`` when it reached none (nothing runs, or it runs after ``request_id``)."""
        with self._lock:
            if request_id is None:
                self._next_one = True
            elif request_id > self._ended_through or request_id == self._current:
                self._cancelled_through = max(self._cancelled_through, request_id)
            if self._current == NO_REQUEST or not self._applies_to(self._current):
                return None
            self._running.set()
            return self._current

    @contextmanager
    def request(self, request_id: int) -> Iterator[None]:
        """Run request ``request_id`` for the duration of the block (inside a request already
        running, the block is part of that one). When the outermost request ends, a cancel without
        a number is used up, so is a cancel numbered up to this request, and later cancels of this
        request are ignored."""
        with self._lock:
            self._depth += 1
            if self._depth == 1:
                self._current = request_id
                if self._applies_to(request_id):
                    self._running.set()
        try:
            yield
        finally:
            with self._lock:
                self._depth -= 1
                if self._depth == 0:
                    self._ended_through = max(self._ended_through, self._current)
                    if self._cancelled_through <= self._ended_through:
                        self._cancelled_through = NO_REQUEST
                    self._current = NO_REQUEST
                    self._next_one = False
                    self._running.clear()

    def is_set(self) -> bool:
        """Whether the request running is cancelled."""
        return self._running.is_set()

    @property
    def flag(self) -> threading.Event:
        """An event set while the request running is cancelled, for code that waits on one."""
        return self._running

    def raise_if_cancelled(self) -> None:
        """Raise :class:`CancelledError` when the request running is cancelled."""
        if self._running.is_set():
            raise CancelledError("Cancelled.")

    def _applies_to(self, request_id: int) -> bool:
        return self._next_one or request_id <= self._cancelled_through
