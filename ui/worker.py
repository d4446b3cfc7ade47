"""The engine's thread: a worker ``QObject`` that owns the engine, and the GUI-side host that drives it.

Every engine call runs on one ``QThread``. The GUI reaches the worker only through queued signals
(:class:`EngineHost`'s ``load``, ``open_clip``, ``ask``, ``apply_settings``, ``new_conversation``)
and hears back through ``EngineHost.event``, which carries the engine's plain event dataclasses.

The single exception is cancelling: :meth:`EngineHost.cancel` calls ``engine.cancel()`` directly
from the GUI thread, because the worker thread is busy with exactly the work being cancelled.
``Engine.cancel`` is documented as thread-safe; no other engine method is called off the worker
thread.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Callable, Protocol

from PySide6.QtCore import QObject, QThread, Signal, Slot

from framewise.core.errors import CancelledError, FramewiseError, describe_error
from framewise.core.events import Done, EncodeDone, EngineInfo, EventSink, Failed
from framewise.core.backends import same_backend
from framewise.core.settings import AppSettings

log = logging.getLogger(__name__)


class EngineLike(Protocol):
    """What the window needs of ``core.engine.Engine`` (kept as a protocol so ``ui`` never imports torch)."""

    def load(self) -> None: ...
    def apply_settings(self, settings: AppSettings) -> None: ...
    def open_clip(self, path: str) -> EncodeDone: ...
    def ask(self, question: str) -> Done: ...
    def cancel(self) -> None: ...
    def new_conversation(self) -> None: ...
    def info(self) -> EngineInfo: ...
    def open_clip_path(self) -> Path | None: ...


EngineFactory = Callable[[AppSettings, EventSink], EngineLike]


def failure_from_exception(error: BaseException) -> Failed:
    """Turn any exception raised by engine work into a :class:`Failed` event (core's one mapping)."""
    report = describe_error(error)
    return Failed(report.kind, report.message, report.field)


class EngineWorker(QObject):
    """Owns the engine and runs its calls on the thread it was moved to.

    Requests that can be cancelled (``open_clip``, ``ask``) carry a sequence number; a request
    whose number is at or below the last cancelled one is dropped before it starts, so Stop also
    clears work still waiting in the queue.
    """

    event = Signal(object)
    operation_started = Signal(str)
    operation_finished = Signal(str, bool)

    def __init__(self, engine_factory: EngineFactory, settings: AppSettings) -> None:
        super().__init__()
        self._engine_factory = engine_factory
        self._settings = settings
        self._engine: EngineLike | None = None
        self._loaded = False
        self._lock = threading.Lock()
        self._cancelled_through = 0
        self._running: int | None = None  # the sequence number of the cancellable request in the engine

    def cancel_through(self, sequence: int) -> None:
        """Cancel the running request and every queued one numbered up to ``sequence``. Any thread."""
        with self._lock:
            self._cancelled_through = max(self._cancelled_through, sequence)
            running = self._running is not None and self._running <= sequence
            engine = self._engine
        # The engine keeps a cancel that arrives between requests for the next one, so it is told
        # only about a request it runs; queued ones are dropped here.
        if engine is not None and running:
            engine.cancel()

    @Slot()
    def load(self) -> None:
        self._run("load", self._load)

    @Slot(object)
    def apply_settings(self, settings: AppSettings) -> None:
        def apply() -> None:
            if self._engine is None or not self._loaded:
                self._settings = settings
                self._load()
                return
            if not same_backend(self._settings, settings):
                self._switch_backend(settings)  # the old engine stays until the new one has loaded
                return
            self._engine.apply_settings(settings)  # all or nothing: on failure the engine is as it was
            self._settings = settings
            self.event.emit(self._engine.info())

        self._run("apply_settings", apply)

    @Slot(int, str)
    def open_clip(self, sequence: int, path: str) -> None:
        self._run_unless_cancelled(sequence, "open_clip", lambda: self._require_engine().open_clip(path))

    @Slot(int, str)
    def ask(self, sequence: int, question: str) -> None:
        self._run_unless_cancelled(sequence, "ask", lambda: self._require_engine().ask(question))

    @Slot()
    def new_conversation(self) -> None:
        if self._engine is not None:
            self._run("new_conversation", self._engine.new_conversation)

    @Slot()
    def release(self) -> None:
        """Drop the engine on its own thread (frees its GPU memory there) before the thread quits."""
        with self._lock:
            self._engine = None
        self._loaded = False

    def _load(self) -> None:
        self._loaded = False
        with self._lock:
            self._engine = None
        engine = self._engine_factory(self._settings, self.event.emit)
        with self._lock:
            self._engine = engine
        engine.load()
        self._loaded = True
        self.event.emit(engine.info())

    def _switch_backend(self, settings: AppSettings) -> None:
        """Answer on the backend ``settings`` name (this machine or a vLLM server) and re-open the
        clip there. The old engine and settings are kept until the new engine has loaded, so a
        server that cannot be reached leaves the window answering as before."""
        old_engine = self._engine
        clip_path = old_engine.open_clip_path() if old_engine is not None else None
        engine = self._engine_factory(settings, self.event.emit)
        engine.load()
        with self._lock:
            self._engine = engine
        self._settings = settings
        self._loaded = True
        self.event.emit(engine.info())
        if clip_path is not None:
            engine.open_clip(str(clip_path))

    def _require_engine(self) -> EngineLike:
        if self._engine is None or not self._loaded:
            raise FramewiseError(
                "The model is not loaded. Fix the model in Settings ▸ Model and press Apply."
            )
        return self._engine

    def _run_unless_cancelled(self, sequence: int, name: str, work: Callable[[], object]) -> None:
        with self._lock:
            cancelled = sequence <= self._cancelled_through
            if not cancelled:
                self._running = sequence
        if not cancelled:
            try:
                self._run(name, work)
            finally:
                with self._lock:
                    self._running = None
            return
        self.operation_started.emit(name)
        self.operation_finished.emit(name, False)

    def _run(self, name: str, work: Callable[[], object]) -> None:
        self.operation_started.emit(name)
        ok = False
        try:
            work()
            ok = True
        except CancelledError as error:
            self.event.emit(Failed("CancelledError", str(error) or "Cancelled."))
        except FramewiseError as error:
            log.warning("%s failed: %s", name, error)
            self.event.emit(failure_from_exception(error))
        except Exception as error:  # noqa: BLE001 - any failure must reach the window, not kill the thread
            log.warning("%s failed", name)  # describe_error logs the traceback
            self.event.emit(failure_from_exception(error))
        finally:
            self.operation_finished.emit(name, ok)


class EngineHost(QObject):
    """The GUI thread's handle on the worker: starts its thread, forwards requests, shuts it down.

    ``event`` re-emits the worker's events in the GUI thread; ``operation_started`` and
    ``operation_finished`` say which request is running (``"load"``, ``"apply_settings"``,
    ``"open_clip"``, ``"ask"``, ``"new_conversation"``).
    """

    event = Signal(object)
    operation_started = Signal(str)
    operation_finished = Signal(str, bool)

    _load_requested = Signal()
    _apply_requested = Signal(object)
    _open_requested = Signal(int, str)
    _ask_requested = Signal(int, str)
    _new_conversation_requested = Signal()
    _release_requested = Signal()

    def __init__(self, engine_factory: EngineFactory, settings: AppSettings, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._sequence = 0
        self._thread = QThread()
        self._thread.setObjectName("framewise-engine")
        self._worker = EngineWorker(engine_factory, settings)
        self._worker.moveToThread(self._thread)
        self._worker.event.connect(self.event)
        self._worker.operation_started.connect(self.operation_started)
        self._worker.operation_finished.connect(self.operation_finished)
        self._load_requested.connect(self._worker.load)
        self._apply_requested.connect(self._worker.apply_settings)
        self._open_requested.connect(self._worker.open_clip)
        self._ask_requested.connect(self._worker.ask)
        self._new_conversation_requested.connect(self._worker.new_conversation)
        self._release_requested.connect(self._worker.release)
        self._thread.start()

    @property
    def thread(self) -> QThread:
        return self._thread

    def load(self) -> None:
        self._load_requested.emit()

    def apply_settings(self, settings: AppSettings) -> None:
        self._apply_requested.emit(settings)

    def open_clip(self, path: str) -> None:
        self._open_requested.emit(self._next_sequence(), path)

    def ask(self, question: str) -> None:
        self._ask_requested.emit(self._next_sequence(), question)

    def new_conversation(self) -> None:
        self._new_conversation_requested.emit()

    def cancel(self) -> None:
        """Stop the running clip encode or answer, and drop those still queued. Called on the GUI thread."""
        self._worker.cancel_through(self._sequence)

    def shutdown(self) -> None:
        """Cancel, let the worker drop the engine, quit the thread and wait for it."""
        if not self._thread.isRunning():
            return
        self.cancel()
        self._release_requested.emit()
        self._thread.quit()
        self._thread.wait()

    def _next_sequence(self) -> int:
        self._sequence += 1
        return self._sequence
