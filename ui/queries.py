"""Background queries: a plain function run off the GUI thread, its result handed to a callback on it.

As Anki's ``QueryOp`` reads the collection in the background and hands the result to a success
callback, :meth:`QueryThread.run` runs ``call()`` on a thread of its own and calls
``on_result(result)`` on the GUI thread. The window asks it what it cannot ask on the GUI thread
without stalling it (the Settings dialog's memory estimate, which may import torch and read a
checkpoint's config; the model family's limits, read from that config). Queries never wait behind
the engine's work: the engine runs on another thread.
"""

from __future__ import annotations

import logging
from typing import Callable, Protocol, TypeVar

from PySide6.QtCore import QObject, QThread, Signal, Slot

log = logging.getLogger(__name__)

T = TypeVar("T")


class RunQuery(Protocol):
    """Runs ``call()`` off the GUI thread and hands its result to ``on_result`` on the GUI thread."""

    def __call__(self, call: Callable[[], T], on_result: Callable[[T], None]) -> None: ...


class _QueryWorker(QObject):
    """Runs each query on the thread it was moved to, one after another, in the order asked."""

    answered = Signal(object, object)

    @Slot(object, object)
    def run(self, call: Callable[[], object], on_result: Callable[[object], None]) -> None:
        try:
            result = call()
        except Exception:  # noqa: BLE001 - a failing query must not end the thread; its caller hears nothing
            log.exception("a background query failed")
            return
        self.answered.emit(on_result, result)


class QueryThread(QObject):
    """The GUI thread's handle on the query thread: :meth:`run` asks, :meth:`shutdown` ends it."""

    _asked = Signal(object, object)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._open = True
        self._thread = QThread()
        self._thread.setObjectName("framewise-queries")
        self._worker = _QueryWorker()
        self._worker.moveToThread(self._thread)
        self._asked.connect(self._worker.run)
        self._worker.answered.connect(self._answer)
        self._thread.start()

    def run(self, call: Callable[[], T], on_result: Callable[[T], None]) -> None:
        """Run ``call()`` on the query thread; ``on_result(result)`` follows on the GUI thread (not
        after :meth:`shutdown`, nor when ``call`` raised: that is logged)."""
        if self._open:
            self._asked.emit(call, on_result)

    def shutdown(self) -> None:
        """Let the query under way finish, drop those waiting and their results, and end the thread."""
        self._open = False
        self._thread.quit()
        self._thread.wait()

    @Slot(object, object)
    def _answer(self, on_result: Callable[[object], None], result: object) -> None:
        if self._open:
            on_result(result)


class LatestQuery:
    """Asks one kind of question through ``run_query`` again and again and hands on only the answer to
    the latest: an answer to an earlier question that comes back after a newer one was asked is stale."""

    def __init__(self, run_query: RunQuery) -> None:
        self._run_query = run_query
        self._asked = 0

    def ask(self, call: Callable[[], T], on_result: Callable[[T], None]) -> None:
        self._asked += 1
        asked = self._asked
        self._run_query(call, lambda result: on_result(result) if asked == self._asked else None)

    def forget(self) -> None:
        """Drop the answer still on its way (what it answers no longer matters)."""
        self._asked += 1
