"""The window's state, without Qt: the open clip, the requests under way, the conversation, the numbers.

:class:`Session` is the one owner of what the window shows. It sends requests through a
:class:`RequestPort` (the worker's :class:`~framewise.ui.worker.EngineHost` in the application,
a recorder in tests): each is a call on the engine's one API,
:class:`~framewise.core.backends.base.AnsweringBackend`, that the port runs in the background. Each
request sent gets its own handler object (:mod:`framewise.ui.requests`), kept by id until the
request finishes; :meth:`Session.handle` hands every event to the handler of its request. Widgets
hear what changed through :attr:`Session.signals` (:class:`~framewise.ui.session_signals.SessionSignals`),
each connecting the channels it cares about. Nothing is inferred from the order of events: every
event carries the id of its request, and the engine says when and why it emptied the conversation
(:class:`~framewise.core.events.ConversationReset`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from framewise.core.backends.base import BackendCall
from framewise.core.clip_times import ConversationItem
from framewise.core.conversation import Conversation, Turn
from framewise.core.events import (
    NO_REQUEST,
    ClipSampled,
    ConversationReset,
    EncodeDone,
    EncoderMetrics,
    EngineInfo,
    Failed,
    RequestFinished,
    RequestKind,
    RequestStarted,
)
from framewise.core.settings import AppSettings
from framewise.core.wording import plural
from framewise.ui.requests import (
    AddRequest,
    ApplySettingsRequest,
    AskRequest,
    LoadRequest,
    NewConversationRequest,
    OpenClipRequest,
    Request,
)
from framewise.ui.session_signals import SessionSignals


class RequestPort(Protocol):
    """Where the session sends requests; each returns the id the request's events will carry.

    :meth:`submit` runs any call on the loaded engine (a new kind of request needs nothing more of
    the port); :meth:`load` and :meth:`apply_settings` also decide which engine answers.
    """

    def load(self) -> int: ...
    def apply_settings(self, settings: AppSettings) -> int: ...
    def submit(self, kind: RequestKind, call: BackendCall, cancellable: bool = False) -> int: ...
    def cancel(self) -> None: ...


class Session:
    """The window's state machine: requests out through ``port``, events in through :meth:`handle`,
    news out through :attr:`signals`.

    ``settings`` are the applied settings: new ones become the session's only once the engine has
    applied them (settings apply as a transaction). Read-only state for the window: :attr:`info`,
    :attr:`clip` (the engine's open clip), :attr:`added`, :attr:`conversation`, :attr:`metrics`,
    :attr:`operation` and the ``can_*`` properties.
    """

    def __init__(self, port: RequestPort, settings: AppSettings) -> None:
        self.port = port
        self.settings = settings
        self.signals = SessionSignals()
        self.info: EngineInfo | None = None
        self.clip: ClipSampled | None = None
        self.added: list[tuple[ClipSampled, EncodeDone]] = []  # items added to the conversation, in order
        self.clip_summary: EncodeDone | None = None  # what encoding the open clip reported
        self.conversation = Conversation()
        self.metrics: EncoderMetrics | None = None
        self.stale_clip: str | None = None  # a kept conversation's clip that is no longer there
        self._requests: dict[int, Request] = {}  # by id, from sending (or starting) until finished
        self._running: Request | None = None

    # -- state ------------------------------------------------------------------------------

    @property
    def operation(self) -> RequestKind | None:
        """The request the engine is serving now, or ``None`` when it is idle."""
        return self._running.kind if self._running else None

    @property
    def opening_clip(self) -> bool:
        """True from asking to open a clip until the engine has encoded it (or failed to)."""
        return any(isinstance(request, OpenClipRequest) and request.wanted for request in self._requests.values())

    @property
    def answering(self) -> bool:
        """True from sending a question until its answer ends."""
        return self.conversation.current is not None

    @property
    def engine_busy(self) -> bool:
        """The engine is loading, applying settings or opening a clip (a question would wait)."""
        return self.operation in ("load", "apply_settings", "open_clip", "add_clip", "look_closer") or self.opening_clip

    @property
    def ask_blocker(self) -> str | None:
        """Why a question cannot be asked now, or ``None`` when it can."""
        if self.answering:
            return "Wait for the answer, or press Stop (Esc)"
        if self.stop_target is not None:
            return f"Wait, or press Stop (Esc) to stop {self.stop_target}"
        if self.clip is None:
            return "Open a clip first: drop one on the window or use File ▸ Open (Ctrl+O)"
        if self.stale_clip is not None:
            return f"This conversation's clip is no longer at {self.stale_clip}; open a clip to ask about it"
        if self.engine_busy:
            return "Wait for the clip to finish encoding"
        return None

    @property
    def can_ask(self) -> bool:
        return self.ask_blocker is None

    @property
    def stop_target(self) -> str | None:
        """What Stop ends now, to follow "Stop" ("the answer", "reading the clip"), or ``None`` when
        nothing it can end runs or waits (loading the model and applying settings run to their end)."""
        if self.answering:
            return "the answer"
        if self.opening_clip or self.operation == "open_clip":
            return "reading the clip"
        if self.operation in ("add_clip", "look_closer"):
            return "adding to the conversation"
        return None

    @property
    def can_stop(self) -> bool:
        return self.stop_target is not None

    @property
    def can_export(self) -> bool:
        return bool(self.conversation.turns)

    @property
    def can_start_new_conversation(self) -> bool:
        return not self.answering

    # -- requests ---------------------------------------------------------------------------

    def start(self) -> None:
        """Load the model named by the settings."""
        self.signals.status_changed.emit("Loading the model…")
        self._track(LoadRequest(self, self.port.load()))

    def open_clip(self, path: str) -> None:
        """Open ``path``; an open still under way is superseded (its progress is no longer shown)."""
        self._open(path, resuming=False)

    def add_clip(self, path: str) -> bool:
        """Add the clip or picture at ``path`` to the conversation (with no clip open, open it);
        False when the engine is busy."""
        if self.clip is None:
            self.open_clip(path)
            return True
        return self._add(
            "add_clip", lambda backend, rid: backend.add_clip(path, request_id=rid), f"Adding {Path(path).name}…"
        )

    def look_closer(self, start_s: float, end_s: float, item: int = 0) -> bool:
        """Sample ``start_s``..``end_s`` of item ``item`` (0: the opened clip, then the added ones)
        densely and add it to the conversation; False when there is no such clip or the engine is busy."""
        items = [self.clip, *(clip for clip, _ in self.added)] if self.clip else []
        if not 0 <= item < len(items) or items[item].kind == "image":
            return False
        return self._add(
            "look_closer",
            lambda backend, rid: backend.look_closer(start_s, end_s, item, request_id=rid),
            f"Looking closer at {start_s:.1f}–{end_s:.1f} s…",
        )

    def ask(self, question: str) -> bool:
        """Send ``question`` (a follow-up when the conversation has turns); False when it cannot be asked now."""
        if not self.can_ask:
            return False
        info = self.info
        turn = Turn(
            question=question,
            model_name=info.model_name if info else self.settings.model.source,
            model_label=info.model_label if info else None,
            saw=self._items_seen(),
        )
        self.conversation.turns.append(turn)
        request_id = self.port.submit("ask", lambda backend, rid: backend.ask(question, request_id=rid), cancellable=True)
        self._track(AskRequest(self, request_id, turn))
        self.signals.turn_started.emit(turn)
        self.signals.state_changed.emit()
        return True

    def resume(self, conversation: Conversation) -> bool:
        """Show a kept ``conversation`` and open its clip again when the file is still there (returns
        whether it is being opened). The model starts without the earlier answers; until the clip is
        open again, or when it is gone, the conversation can be read and exported, not continued."""
        self.conversation = conversation
        path = conversation.clip_path
        if path and Path(path).is_file():
            self.stale_clip = None
            self._open(path, resuming=True)
            return True
        self.stale_clip = path or "(no clip)"
        self.signals.state_changed.emit()
        return False

    def stop(self) -> None:
        """Cancel the answer being written, the clip being read or the item being added, and what
        waits behind them."""
        if self.can_stop:
            self.signals.status_changed.emit("Stopping…")
            self.port.cancel()

    def new_conversation(self) -> None:
        """Start afresh about the open clip: the engine forgets the conversation before it serves any
        later question, so the session empties its record at once and takes the engine's
        ConversationReset for this request as the confirmation."""
        if not self.can_start_new_conversation:
            return
        request_id = self.port.submit("new_conversation", lambda backend, rid: backend.new_conversation(request_id=rid))
        self._track(NewConversationRequest(self, request_id))
        clip = self.clip
        self.follow_reset(ConversationReset("asked", clip.clip_name if clip else None, clip.path if clip else None), None)

    def apply_settings(self, settings: AppSettings) -> bool:
        """Send ``settings`` to the engine unless they are the applied ones; returns whether they were sent.

        They become :attr:`settings` when the engine has applied them (``signals.settings_applied``);
        when it cannot, it is as it was and ``signals.settings_refused`` says why.
        """
        if settings == self.settings:
            return False
        self._track(ApplySettingsRequest(self, self.port.apply_settings(settings), settings))
        self.signals.status_changed.emit("Applying the settings…")
        return True

    def fall_back_to_defaults(self, failure: Failed | None) -> None:
        """The saved settings did not load at start: run on the defaults (the demo model), which are not
        saved over them, and say which setting failed."""
        saved, self.settings = self.settings, AppSettings()
        self.signals.fell_back_to_defaults.emit(saved, failure)
        self._track(ApplySettingsRequest(self, self.port.apply_settings(self.settings), self.settings, keep=False))

    def _open(self, path: str, resuming: bool) -> None:
        for request in self._requests.values():
            if isinstance(request, OpenClipRequest):
                request.superseded = True
        request_id = self.port.submit(
            "open_clip", lambda backend, rid: backend.open_clip(path, request_id=rid), cancellable=True
        )
        self._track(OpenClipRequest(self, request_id, path, resuming))
        self.signals.status_changed.emit(f"Opening {Path(path).name}…")
        self.signals.state_changed.emit()

    def _add(self, kind: RequestKind, call: BackendCall, status: str) -> bool:
        if self.engine_busy or self.answering:
            return False
        self._track(AddRequest(self, self.port.submit(kind, call, cancellable=True), kind))
        self.signals.status_changed.emit(status)
        self.signals.state_changed.emit()
        return True

    def _track(self, request: Request) -> None:
        self._requests[request.request_id] = request

    # -- events -----------------------------------------------------------------------------

    def handle(self, event: object) -> None:
        """Follow one event from the engine (any event type; unknown ones are ignored)."""
        own = _SESSION_EVENTS.get(type(event))
        if own is not None:
            own(self, event)
            return
        request = self._requests.get(getattr(event, "request_id", NO_REQUEST))
        if request is not None:
            request.follow(event)

    def _on_started(self, started: RequestStarted) -> None:
        request = self._requests.get(started.request_id)
        if request is None:  # sent by another part of the window: followed from here on
            request = self._requests[started.request_id] = Request(self, started.request_id, started.kind)
        self._running = request
        self.signals.state_changed.emit()

    def _on_finished(self, finished: RequestFinished) -> None:
        self._running = None
        self.signals.progress_ended.emit()
        request = self._requests.pop(finished.request_id, None)
        if request is not None:
            request.finish(finished)
        self.signals.state_changed.emit()

    def _on_failed(self, failed: Failed) -> None:
        if self._running is not None and self._running.request_id == failed.request_id:
            self._running.on_failed(failed)  # a failure of a request no longer served is no longer on screen

    def _on_reset(self, reset: ConversationReset) -> None:
        request = self._requests.get(reset.request_id)
        if request is not None:
            request.on_reset(reset)
        else:
            self.follow_reset(reset, None)

    def _on_metrics(self, metrics: EncoderMetrics) -> None:
        self.metrics = metrics
        self.signals.metrics_changed.emit(metrics)

    def _on_engine_info(self, info: EngineInfo) -> None:
        self.info = info
        self.signals.engine_changed.emit(info)
        if self.operation in ("load", "apply_settings"):
            self.signals.error_cleared.emit()

    # -- what the requests hand back ----------------------------------------------------------

    def follow_reset(self, reset: ConversationReset, clip: ClipSampled | None, keep_conversation: bool = False) -> None:
        """The engine emptied its conversation (always followed: the engine's record changed). ``clip``
        is the clip it opened or sampled again, now the open one; a resumed conversation
        (``keep_conversation``) stays on screen."""
        if reset.reason != "asked":
            self.added = []  # opening or re-sampling replaces every item
        if clip is not None:
            self.clip, self.clip_summary = clip, None  # its summary follows the reset
            self.signals.clip_changed.emit(clip)
        if not keep_conversation:
            self.stale_clip = None
            timestamps = self.clip.timestamps if self.clip else ()
            self.conversation = Conversation(reset.clip_name, reset.path, timestamps=timestamps)
            self.signals.conversation_reset.emit(self.conversation, _reset_notice(reset))
        self.signals.state_changed.emit()

    def encoded(self, done: EncodeDone, item: ClipSampled | None) -> None:
        """A clip finished encoding; ``item`` is what it adds to the conversation (``None``: nothing)."""
        if item is not None and self.clip is not None:
            self.added.append((item, done))
            self.signals.item_added.emit(item, done)
        elif item is None:
            self.clip_summary = done
        self.signals.clip_encoded.emit(done)
        self.signals.status_changed.emit(
            f"{done.clip_name}: {plural(done.frames, 'frame')} encoded in {done.encode_ms:.0f} ms "
            f"({done.ms_per_frame:.2f} ms per frame). Ask away."
        )

    # -- helpers ----------------------------------------------------------------------------

    def summary_of(self, clip: ClipSampled | None) -> EncodeDone | None:
        """What encoding ``clip`` (the open clip or an added item) reported; ``None`` before it is encoded."""
        if clip is not None and clip is self.clip:
            return self.clip_summary
        return next((done for item, done in self.added if item is clip), None)

    def conversation_items(self) -> list[ConversationItem]:
        """The items of the conversation, in the order of their tabs: the opened clip, then those added."""
        if self.clip is None:
            return []
        opened = ConversationItem.of(self.clip.clip_name, self.clip.kind, self.clip.duration_s)
        added = [ConversationItem.of(done.clip_name, clip.kind, clip.duration_s, done.span) for clip, done in self.added]
        return [opened, *added]

    def _items_seen(self) -> tuple[str, ...]:
        """The names of the items a question sent now is about, when there are several."""
        if not self.added or self.clip is None:
            return ()
        return (self.clip.clip_name, *(done.clip_name for _, done in self.added))


_SESSION_EVENTS = {
    RequestStarted: Session._on_started,
    RequestFinished: Session._on_finished,
    Failed: Session._on_failed,
    ConversationReset: Session._on_reset,
    EncoderMetrics: Session._on_metrics,
    EngineInfo: Session._on_engine_info,
}


def _reset_notice(reset: ConversationReset) -> str | None:
    if reset.clip_name is None:
        return None
    if reset.reason == "resampled":
        return f"The new settings read {reset.clip_name} again; the conversation starts afresh"
    return f"Asking about {reset.clip_name}"
