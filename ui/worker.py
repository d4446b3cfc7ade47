"""The engine's thread: a worker ``QObject`` that owns the engine, and the GUI-side host that drives it.

Every engine call runs on one ``QThread``. The GUI reaches the worker only through queued signals
and hears back through ``EngineHost.event``, which carries the engine's plain event dataclasses.
As Anki's ``CollectionOp`` runs any collection call in the background, :meth:`EngineHost.submit`
runs any call on the engine (an :class:`~framewise.core.backends.base.AnsweringBackend`) for a
request of a given kind, so a new kind of request needs no new method here. Only
:meth:`EngineHost.load` and :meth:`EngineHost.apply_settings` are the host's own: they decide which
engine answers (built by the factory, or swapped for another backend). Each of these returns the id
of the request it sent; each request is bracketed by a ``RequestStarted`` and a ``RequestFinished``
event, and every event in between carries its id.

The single exception is cancelling: :meth:`EngineHost.cancel` calls ``engine.cancel()`` directly
from the GUI thread, because the worker thread is busy with exactly the work being cancelled.
``Engine.cancel`` is documented as thread-safe; no other engine method is called off the worker
thread. The worker keeps the same :class:`~framewise.core.backends.cancel.CancelScope` as the
backends, over its queue: a Stop cancels the request running and drops the cancellable ones still
waiting.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from typing import Callable

from PySide6.QtCore import QObject, Qt, QThread, Signal, Slot

from framewise.core.backends import AnsweringBackend, BackendCall, same_backend
from framewise.core.backends.cancel import CancelScope
from framewise.core.errors import CancelledError, FramewiseError, describe_error
from framewise.core.events import (
    Event,
    EventSink,
    Failed,
    RequestFinished,
    RequestKind,
    RequestOutcome,
    RequestStarted,
    stamped,
)
from framewise.core.settings import AppSettings

log = logging.getLogger(__name__)


EngineFactory = Callable[[AppSettings, EventSink], AnsweringBackend]
# How long the GUI thread follows the engine's events in one turn of its event loop before it
# lets the loop paint, take input and fire timers: a burst of events (an encode's passes, a long
# clip's frames) is followed over several turns instead of freezing the window for all of it.
EVENTS_TURN_S = 0.010


def failure_from_exception(error: BaseException) -> Failed:
    """Turn any exception raised by engine work into a :class:`Failed` event (core's one mapping)."""
    report = describe_error(error)
    return Failed(report.kind, report.message, report.field)


class EngineWorker(QObject):
    """Owns the engine and runs its calls on the thread it was moved to.

    Every request carries the id the host gave it. Cancellable requests (opening a clip, an answer)
    whose id is at or below the last cancelled one are dropped before they start (they finish as
    ``cancelled``), so Stop also clears work still waiting in the queue.
    """

    event = Signal(object)

    def __init__(self, engine_factory: EngineFactory, settings: AppSettings) -> None:
        super().__init__()
        self._engine_factory = engine_factory
        self._settings = settings
        self._engine: AnsweringBackend | None = None
        self._loaded = False
        self._lock = threading.Lock()  # guards the engine a cancel reaches
        self._request_id = 0
        self._cancels = CancelScope()  # over the cancellable requests only

    def cancel_through(self, request_id: int) -> None:
        """Cancel the running request and every queued one numbered up to ``request_id``. Any thread."""
        running = self._cancels.cancel(request_id)
        with self._lock:
            engine = self._engine
        # The engine is told only about the request it runs, by id (should it have ended just now,
        # the engine ignores the cancel); queued ones are dropped here as they come up.
        if engine is not None and running is not None:
            engine.cancel(running)

    @Slot(int)
    def load(self, request_id: int) -> None:
        self._run(request_id, "load", lambda: self._load(request_id))

    @Slot(int, object)
    def apply_settings(self, request_id: int, settings: AppSettings) -> None:
        def apply() -> None:
            if self._engine is None or not self._loaded:
                self._settings = settings
                self._load(request_id)
                return
            if not same_backend(self._settings, settings):
                self._switch_backend(settings, request_id)  # the old engine stays until the new one has loaded
                return
            self._engine.apply_settings(settings, request_id=request_id)  # all or nothing: on failure as it was
            self._settings = settings

        self._run(request_id, "apply_settings", apply)

    @Slot(int, str, object, bool)
    def run_call(self, request_id: int, kind: RequestKind, call: BackendCall, cancellable: bool) -> None:
        """Run ``call`` on the loaded engine as request ``request_id`` of ``kind``."""
        def work() -> object:
            return call(self._require_engine(), request_id)

        run = self._run_unless_cancelled if cancellable else self._run
        run(request_id, kind, work)

    @Slot()
    def release(self) -> None:
        """Drop the engine on its own thread (frees its GPU memory there) before the thread quits."""
        with self._lock:
            self._engine = None
        self._loaded = False

    def _load(self, request_id: int) -> None:
        self._loaded = False
        with self._lock:
            self._engine = None
        engine = self._engine_factory(self._settings, self._send)
        with self._lock:
            self._engine = engine
        engine.load(request_id=request_id)
        self._loaded = True

    def _switch_backend(self, settings: AppSettings, request_id: int) -> None:
        """Answer on the backend ``settings`` name (this machine or a vLLM server) and re-open the
        clip there. The old engine and settings are kept until the new engine has loaded, so a
        server that cannot be reached leaves the window answering as before."""
        old_engine = self._engine
        clip_path = old_engine.open_clip_path() if old_engine is not None else None
        engine = self._engine_factory(settings, self._send)
        engine.load(request_id=request_id)
        with self._lock:
            self._engine = engine
        self._settings = settings
        self._loaded = True
        if clip_path is not None:
            engine.open_clip(clip_path, request_id=request_id)

    def _send(self, event: Event) -> None:
        """The engine's sink. The engine stamps its events; those the factory sends before the engine exists are stamped here."""
        self.event.emit(stamped(event, self._request_id))

    def _require_engine(self) -> AnsweringBackend:
        if self._engine is None or not self._loaded:
            raise FramewiseError(
                "The model is not loaded. Fix the model in Settings ▸ Model and press Apply."
            )
        return self._engine

    def _run_unless_cancelled(self, request_id: int, kind: RequestKind, work: Callable[[], object]) -> None:
        with self._cancels.request(request_id):
            if not self._cancels.is_set():
                self._run(request_id, kind, work)
                return
        self.event.emit(RequestStarted(kind, request_id=request_id))
        self.event.emit(RequestFinished(kind, "cancelled", request_id=request_id))

    def _run(self, request_id: int, kind: RequestKind, work: Callable[[], object]) -> None:
        self._request_id = request_id
        self.event.emit(RequestStarted(kind, request_id=request_id))
        outcome: RequestOutcome = "failed"
        try:
            work()
            outcome = "done"
        except CancelledError:
            outcome = "cancelled"
        except FramewiseError as error:
            log.warning("%s failed: %s", kind, error)
            self.event.emit(stamped(failure_from_exception(error), request_id))
        except Exception as error:  # noqa: BLE001 - any failure must reach the window, not kill the thread
            log.warning("%s failed", kind)  # describe_error logs the traceback
            self.event.emit(stamped(failure_from_exception(error), request_id))
        finally:
            self.event.emit(RequestFinished(kind, outcome, request_id=request_id))


class EventRelay(QObject):
    """Carries events from any thread to the GUI thread in bounded turns: :meth:`put` queues an
    event and posts one drain; the drain re-emits the queued events in order as :attr:`event` for
    up to :data:`EVENTS_TURN_S`, then posts itself again if some are left.

    A queued signal per event would let Qt deliver every event posted before a turn in that one
    turn, however long they take together."""

    event = Signal(object)
    _drain_requested = Signal()

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._waiting: deque[object] = deque()
        self._lock = threading.Lock()
        self._drain_posted = False
        self._drain_requested.connect(self._drain, Qt.ConnectionType.QueuedConnection)

    def put(self, event: object) -> None:
        """Queue ``event`` for the GUI thread. Any thread."""
        with self._lock:
            self._waiting.append(event)
            post, self._drain_posted = not self._drain_posted, True
        if post:
            self._drain_requested.emit()

    @Slot()
    def _drain(self) -> None:
        with self._lock:
            self._drain_posted = False  # an event put from now on posts a drain (a handler may open a nested loop)
        deadline = time.monotonic() + EVENTS_TURN_S
        while self._waiting:
            self.event.emit(self._waiting.popleft())
            if time.monotonic() >= deadline:
                break
        with self._lock:
            post = bool(self._waiting) and not self._drain_posted
            self._drain_posted = self._drain_posted or post
        if post:
            self._drain_requested.emit()


class EngineHost(QObject):
    """The GUI thread's handle on the worker: starts its thread, forwards requests, shuts it down.

    It is the window session's request port. Each request method returns the id its events will
    carry. ``event`` re-emits the worker's events in the GUI thread, ``RequestStarted`` /
    ``RequestFinished`` included, through an :class:`EventRelay`.
    """

    event = Signal(object)

    _load_requested = Signal(int)
    _apply_requested = Signal(int, object)
    _call_requested = Signal(int, str, object, bool)
    _release_requested = Signal()

    def __init__(self, engine_factory: EngineFactory, settings: AppSettings, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._request_id = 0
        self._thread = QThread()
        self._thread.setObjectName("framewise-engine")
        self._worker = EngineWorker(engine_factory, settings)
        self._worker.moveToThread(self._thread)
        self._relay = EventRelay(self)
        self._worker.event.connect(self._relay.put, Qt.ConnectionType.DirectConnection)
        self._relay.event.connect(self.event)
        self._load_requested.connect(self._worker.load)
        self._apply_requested.connect(self._worker.apply_settings)
        self._call_requested.connect(self._worker.run_call)
        self._release_requested.connect(self._worker.release)
        self._thread.start()

    @property
    def thread(self) -> QThread:
        return self._thread

    def load(self) -> int:
        request_id = self._next_request_id()
        self._load_requested.emit(request_id)
        return request_id

    def apply_settings(self, settings: AppSettings) -> int:
        request_id = self._next_request_id()
        self._apply_requested.emit(request_id, settings)
        return request_id

    def submit(self, kind: RequestKind, call: BackendCall, cancellable: bool = False) -> int:
        """Run ``call(engine, request_id)`` on the worker thread as a request of ``kind``; a
        ``cancellable`` one still queued when Stop is pressed is dropped."""
        request_id = self._next_request_id()
        self._call_requested.emit(request_id, kind, call, cancellable)
        return request_id

    def cancel(self) -> None:
        """Stop the running clip encode or answer, and drop those still queued. Called on the GUI thread."""
        self._worker.cancel_through(self._request_id)

    def shutdown(self) -> None:
        """Cancel, let the worker drop the engine, quit the thread and wait for it."""
        if not self._thread.isRunning():
            return
        self.cancel()
        self._release_requested.emit()
        self._thread.quit()
        self._thread.wait()

    def _next_request_id(self) -> int:
        self._request_id += 1
        return self._request_id
