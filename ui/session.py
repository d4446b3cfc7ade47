"""The window's state, without Qt: the open clip, the request running, the conversation, the numbers.

:class:`Session` is the one owner of what the window shows. It sends requests through a
:class:`RequestPort` (the worker's :class:`~framewise.ui.worker.EngineHost` in the application,
a recorder in tests): each is a call on the engine's one API,
:class:`~framewise.core.backends.base.AnsweringBackend`, that the port runs in the background. It follows the engine's events in :meth:`Session.handle`, and tells a
:class:`SessionListener` (the window) what to redraw. Nothing is inferred from the order of events:
every event carries the id of its request, and the engine says when and why it emptied the
conversation (:class:`~framewise.core.events.ConversationReset`).

What a request only *shows* — progress, sampled frames, encoder passes, tokens, the answer's speed
so far — is dropped once the session no longer waits for that request (an open superseded by a
later one, an answer whose turn has ended). What changes the engine's record — a clip committed,
the conversation emptied — is always followed, so the window never disagrees with the engine.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from framewise.core.backends.base import BackendCall
from framewise.core.clip_times import ConversationItem, time_clip_names
from framewise.core.events import (
    NO_REQUEST,
    AnswerSpeed,
    AnswerStats,
    ChunkStats,
    ClipSampled,
    ConversationReset,
    Done,
    EncodeDone,
    EncoderMetrics,
    EngineInfo,
    Failed,
    FramesRead,
    Progress,
    RequestFinished,
    RequestKind,
    RequestStarted,
    Token,
)
from framewise.core.settings import AppSettings
from framewise.core.conversation import Conversation, Turn

STAGE_NAMES = {
    "load": "Loading the model",
    "capture": "Capturing CUDA graphs",
    "decode": "Decoding",
    "encode": "Encoding",
}
# Stages whose ``current`` counts the steps finished before the one ``message`` names (the others,
# such as decoding, count seconds of video and say so in their message).
_STEP_STAGES = frozenset({"load", "capture"})
_FAILURE_PREFIX: dict[RequestKind, str] = {
    "load": "Could not load the model",
    "apply_settings": "Could not apply the settings",
    "new_conversation": "Could not start a new conversation",
    "add_clip": "Could not add it to the conversation",
    "look_closer": "Could not look closer",
}


def progress_text(progress: Progress) -> str:
    """The status line for ``progress``: its message, with "(k of N)" for the step under way when the
    stage counts steps, e.g. "Capturing encoder graph for 4096 patches (2 of 5)"."""
    if not progress.message:
        return f"{STAGE_NAMES.get(progress.stage, progress.stage.capitalize())}…"
    if progress.stage in _STEP_STAGES and 1 < progress.total and progress.current < progress.total:
        return f"{progress.message} ({progress.current + 1} of {progress.total})"
    return progress.message


class RequestPort(Protocol):
    """Where the session sends requests; each returns the id the request's events will carry.

    :meth:`submit` runs any call on the loaded engine (a new kind of request needs nothing more of
    the port); :meth:`load` and :meth:`apply_settings` also decide which engine answers.
    """

    def load(self) -> int: ...
    def apply_settings(self, settings: AppSettings) -> int: ...
    def submit(self, kind: RequestKind, call: BackendCall, cancellable: bool = False) -> int: ...
    def cancel(self) -> None: ...


class SessionListener:
    """What the window implements to render the session. Every method does nothing unless overridden."""

    def state_changed(self) -> None:
        """What can be done now changed: a request started or ended, an answer started or ended."""

    def status_changed(self, text: str) -> None:
        """A one-line account of what is happening, for the status bar."""

    def error_raised(self, text: str, settings_can_help: bool = False) -> None:
        """Something failed that a person should see until it is fixed or dismissed; ``settings_can_help``
        when a change in Settings may fix it (a model that did not load), not when it cannot (a bad clip)."""

    def error_cleared(self) -> None:
        """What failed works now (a clip opened, a model loaded)."""

    def progress_changed(self, current: int, total: int) -> None:
        """Long work advanced; ``total`` 0 means the amount is not known."""

    def progress_ended(self) -> None:
        """The request that reported progress ended."""

    def engine_changed(self, info: EngineInfo) -> None:
        """The engine loaded a model or changed its encoder."""

    def settings_applied(self, settings: AppSettings) -> None:
        """The engine applied ``settings`` (a person's choice): they are the session's now, to be kept."""

    def settings_refused(self, settings: AppSettings, failure: Failed | None) -> None:
        """The engine could not apply ``settings`` and is as it was; ``failure`` says why (and which field)."""

    def fell_back_to_defaults(self, saved: AppSettings, failure: Failed | None) -> None:
        """The ``saved`` settings did not load at start; the session runs on the defaults (not to be saved)."""

    def clip_shown(self, clip: ClipSampled | None) -> None:
        """The clip to show: one being opened, or the open one (again, after a failed open)."""

    def frames_read(self, frames: FramesRead) -> None:
        """Frames of the clip being opened were read; they may be shown before the clip is ready
        (:meth:`clip_shown` follows with every frame)."""

    def clip_opened(self, path: str) -> None:
        """A clip a person opened was encoded: the engine's questions are about it now."""

    def clip_changed(self, clip: ClipSampled) -> None:
        """The engine's open clip changed (opened, re-sampled by new settings, or re-opened to resume)."""

    def conversation_reset(self, conversation: Conversation, notice: str | None) -> None:
        """The engine emptied its conversation; ``notice`` says why, for the transcript."""

    def turn_started(self, turn: Turn) -> None:
        """A question was sent; its answer will stream into ``turn``."""

    def token_received(self, turn: Turn, text: str) -> None:
        """``text`` was added to ``turn.answer``."""

    def answer_speed(self, turn: Turn, speed: AnswerSpeed) -> None:
        """The answer streaming into ``turn`` is decoded at ``speed`` so far; :meth:`answer_stats` gives
        the final figures when it ends."""

    def turn_finished(self, turn: Turn) -> None:
        """``turn`` ended: done, stopped or failed (its ``status`` says which)."""

    def encoder_pass(self, chunk: ChunkStats, run_label: str) -> None:
        """One encoder pass of the encode labelled ``run_label`` (``chunk.chunk_index`` 0 starts an encode)."""

    def metrics_changed(self, metrics: EncoderMetrics) -> None:
        """New encoder numbers over the run (hits per item, latency percentiles)."""

    def item_added(self, clip: ClipSampled, done: EncodeDone) -> None:
        """A clip, picture or closer look at a span joined the conversation (``done.span`` says which span)."""

    def clip_encoded(self, done: EncodeDone) -> None:
        """A clip finished encoding."""

    def answer_stats(self, stats: AnswerStats) -> None:
        """What the last answer cost."""


class Session:
    """The window's state machine: requests out through ``port``, events in through :meth:`handle`.

    ``settings`` are the applied settings: new ones become the session's only once the engine has
    applied them (settings apply as a transaction). Read-only state for the window: :attr:`info`,
    :attr:`clip` (the engine's open clip), :attr:`conversation`, :attr:`metrics`, :attr:`operation`
    and the ``can_*`` properties.
    """

    def __init__(self, port: RequestPort, settings: AppSettings, listener: SessionListener | None = None) -> None:
        self.port = port
        self.settings = settings
        self.listener = listener or SessionListener()
        self.info: EngineInfo | None = None
        self.clip: ClipSampled | None = None
        self.added: list[tuple[ClipSampled, EncodeDone]] = []  # items added to the conversation, in order
        self.conversation = Conversation()
        self.metrics: EncoderMetrics | None = None
        self._running: RequestStarted | None = None
        self._opens: dict[int, str] = {}  # open_clip requests sent and not finished: id -> path
        self._adds: set[int] = set()  # add_clip and look_closer requests sent and not finished
        self._latest_open: int | None = None
        self._sampled: dict[int, ClipSampled] = {}  # clips sampled by requests not finished yet
        # Items that new settings sampled again after the opened clip, waiting for their EncodeDone.
        self._sampled_again: dict[int, ClipSampled] = {}
        self._answering: tuple[int, Turn] | None = None
        self._applying: dict[int, AppSettings | None] = {}  # None: the fallback to the defaults at start
        self._resuming: int | None = None  # the open that re-opens a kept conversation's clip
        self._asked_reset: int | None = None  # the new-conversation request the session has already followed
        self.stale_clip: str | None = None  # a kept conversation's clip that is no longer there
        self._failures: dict[int, Failed] = {}
        self._shown: ClipSampled | None = None

    # -- state ------------------------------------------------------------------------------

    @property
    def operation(self) -> RequestKind | None:
        """The request the engine is serving now, or ``None`` when it is idle."""
        return self._running.kind if self._running else None

    @property
    def opening_clip(self) -> bool:
        """True from asking to open a clip until the engine has encoded it (or failed to)."""
        return self._latest_open is not None

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
        if self.clip is None:
            return "Open a clip first: drop one on the window or use File ▸ Open (Ctrl+O)"
        if self.stale_clip is not None:
            return f"This conversation's clip is no longer at {self.stale_clip}; open a clip to ask about it"
        if self.engine_busy:
            return "Wait for the clip to finish encoding"
        if self.answering:
            return "Wait for the answer, or press Stop (Esc)"
        return None

    @property
    def can_ask(self) -> bool:
        return self.ask_blocker is None

    @property
    def can_stop(self) -> bool:
        return self.answering or self.operation in ("open_clip", "add_clip", "look_closer")

    @property
    def can_export(self) -> bool:
        return bool(self.conversation.turns)

    @property
    def can_start_new_conversation(self) -> bool:
        return not self.answering

    @property
    def shown_clip(self) -> ClipSampled | None:
        """The clip being opened (once sampled), else the one new settings are re-sampling, else the open one."""
        for request_id in self._reading_shown_requests():
            if request_id in self._sampled:
                return self._sampled[request_id]
        return self.clip

    def _reading_shown_requests(self) -> list[int]:
        """The requests whose clip the window shows once it is read: the latest open, and new
        settings re-sampling the open clip."""
        candidates = [self._latest_open]
        if self._running is not None and self._running.kind == "apply_settings":
            candidates.append(self._running.request_id)
        return [request_id for request_id in candidates if request_id is not None]

    # -- requests ---------------------------------------------------------------------------

    def start(self) -> None:
        """Load the model named by the settings."""
        self.listener.status_changed("Loading the model…")
        self.port.load()

    def open_clip(self, path: str) -> None:
        """Open ``path``; an open still under way is superseded (its progress is no longer shown)."""
        request_id = self.port.submit(
            "open_clip", lambda backend, rid: backend.open_clip(path, request_id=rid), cancellable=True
        )
        self._opens[request_id] = path
        self._latest_open = request_id
        self.listener.status_changed(f"Opening {Path(path).name}…")
        self._refresh_clip()
        self.listener.state_changed()

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

    def _add(self, kind: RequestKind, call: BackendCall, status: str) -> bool:
        if self.engine_busy or self.answering:
            return False
        self._adds.add(self.port.submit(kind, call, cancellable=True))
        self.listener.status_changed(status)
        self.listener.state_changed()
        return True

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
        self._answering = (request_id, turn)
        self.listener.turn_started(turn)
        self.listener.state_changed()
        return True

    def resume(self, conversation: Conversation) -> bool:
        """Show a kept ``conversation`` and open its clip again when the file is still there (returns
        whether it is being opened). The model starts without the earlier answers; until the clip is
        open again, or when it is gone, the conversation can be read and exported, not continued."""
        self.conversation = conversation
        path = conversation.clip_path
        if path and Path(path).is_file():
            self.stale_clip = None
            self.open_clip(path)
            self._resuming = self._latest_open
            return True
        self.stale_clip = path or "(no clip)"
        self.listener.state_changed()
        return False

    def stop(self) -> None:
        """Cancel the answer being written or the clip being opened, and what waits behind them."""
        if self.operation in ("ask", "open_clip") or self.answering:
            self.listener.status_changed("Stopping…")
            self.port.cancel()

    def new_conversation(self) -> None:
        """Start afresh about the open clip: the engine forgets the conversation before it serves any
        later question, so the session empties its record at once and takes the engine's
        ConversationReset for this request as the confirmation."""
        if not self.can_start_new_conversation:
            return
        self._asked_reset = self.port.submit(
            "new_conversation", lambda backend, rid: backend.new_conversation(request_id=rid)
        )
        clip = self.clip
        path = None if clip is None else clip.path
        self._on_reset(ConversationReset("asked", clip.clip_name if clip else None, path))

    def apply_settings(self, settings: AppSettings) -> bool:
        """Send ``settings`` to the engine unless they are the applied ones; returns whether they were sent.

        They become :attr:`settings` when the engine has applied them (:meth:`SessionListener.settings_applied`);
        when it cannot, it is as it was and :meth:`SessionListener.settings_refused` says why.
        """
        if settings == self.settings:
            return False
        self._applying[self.port.apply_settings(settings)] = settings
        self.listener.status_changed("Applying the settings…")
        return True

    # -- events -----------------------------------------------------------------------------

    def handle(self, event: object) -> None:
        """Follow one event from the engine (any event type; unknown ones are ignored)."""
        handler = _HANDLERS.get(type(event))
        if handler is not None:
            handler(self, event)

    def _on_started(self, started: RequestStarted) -> None:
        self._running = started
        self.listener.state_changed()

    def _on_finished(self, finished: RequestFinished) -> None:
        request_id = finished.request_id
        self._running = None
        failure = self._failures.pop(request_id, None)
        self.listener.progress_ended()
        path = self._opens.pop(request_id, None)
        self._adds.discard(request_id)
        if self._resuming == request_id:
            self._resuming = None
            if not finished.ok:  # the kept conversation stays readable, but cannot go on
                self.stale_clip = self.conversation.clip_path
        if self._latest_open == request_id:
            self._latest_open = None
            if finished.ok and path is not None:
                self.listener.error_cleared()
                self.listener.clip_opened(path)
        self._sampled.pop(request_id, None)
        self._sampled_again.pop(request_id, None)
        self._refresh_clip()
        if self._answering is not None and self._answering[0] == request_id:
            turn = self._answering[1]
            self._answering = None
            if turn.status in ("waiting", "streaming"):  # no Done: dropped before it started, or cut short
                turn.status = "stopped"
                self.listener.turn_finished(turn)
        elif finished.outcome == "cancelled":
            self.listener.status_changed("Cancelled.")
        elif finished.kind in ("load", "apply_settings") and finished.ok:
            self.listener.status_changed(f"Ready: {model_text(self.info)}" if self.info else "Ready")
        if finished.kind == "apply_settings":
            self._finish_applying(request_id, finished.ok, failure)
        elif finished.kind == "load" and finished.outcome == "failed" and self.settings != AppSettings():
            self._fall_back_to_defaults(failure)
        self.listener.state_changed()

    def _finish_applying(self, request_id: int, ok: bool, failure: Failed | None) -> None:
        settings = self._applying.pop(request_id, None)
        if settings is None:  # not the session's, or the fallback to the defaults: nothing to keep
            return
        if ok:
            self.settings = settings
            self.listener.settings_applied(settings)
        else:
            self.listener.settings_refused(settings, failure)

    def _fall_back_to_defaults(self, failure: Failed | None) -> None:
        """The saved settings did not load at start: run on the defaults (the demo model), which are not
        saved over them, and say which setting failed."""
        saved, self.settings = self.settings, AppSettings()
        self.listener.fell_back_to_defaults(saved, failure)
        self._applying[self.port.apply_settings(self.settings)] = None

    def _on_failed(self, failed: Failed) -> None:
        running = self._running
        if running is None or running.request_id != failed.request_id:
            return  # not the request being served: nothing of it is on screen any more
        self._failures[failed.request_id] = failed
        turn = self._answer_turn(failed.request_id)
        if turn is not None:
            turn.status = "failed"
            turn.error = failed.message
            self.listener.turn_finished(turn)
            self.listener.status_changed(f"The question failed: {failed.message}")
            return
        if running.kind == "open_clip":
            if self._is_superseded(failed.request_id):
                return
            prefix = f"Could not open {Path(self._opens.get(failed.request_id, '')).name}"
        else:
            prefix = _FAILURE_PREFIX.get(running.kind, "Something went wrong")
        self.listener.error_raised(f"{prefix}: {failed.message}", settings_can_help=running.kind in _FAILURE_PREFIX)

    def _on_progress(self, progress: Progress) -> None:
        if self._is_superseded(progress.request_id):
            return
        self.listener.progress_changed(progress.current, progress.total)
        self.listener.status_changed(progress_text(progress))

    def _on_token(self, token: Token) -> None:
        turn = self._answer_turn(token.request_id)
        if turn is None:
            return
        turn.status = "streaming"
        turn.answer += token.text
        self.listener.token_received(turn, token.text)

    def _on_speed(self, speed: AnswerSpeed) -> None:
        turn = self._answer_turn(speed.request_id)
        if turn is not None:
            self.listener.answer_speed(turn, speed)

    def _on_done(self, done: Done) -> None:
        turn = self._answer_turn(done.request_id)
        if turn is None:
            return
        turn.answer = done.text
        turn.stats = done.stats
        if turn.saw:  # several items: say which of them each time the answer mentions belongs to
            turn.time_clips = time_clip_names(done.text, self.conversation_items())
        turn.status = "stopped" if done.stats.cancelled else "done"
        self.listener.answer_stats(done.stats)
        self.listener.turn_finished(turn)
        self.listener.status_changed("Stopped." if done.stats.cancelled else "Answered.")
        self.listener.state_changed()

    def _on_clip_sampled(self, clip: ClipSampled) -> None:
        if self._samples_again(clip.request_id):
            self._sampled_again[clip.request_id] = clip
            return
        self._sampled[clip.request_id] = clip
        self._refresh_clip()

    def _samples_again(self, request_id: int) -> bool:
        """New settings being applied by ``request_id`` have re-sampled the opened clip already, so
        what they sample now is an item of the conversation added after it."""
        running = self._running
        return (
            running is not None
            and running.request_id == request_id
            and running.kind == "apply_settings"
            and request_id in self._sampled
        )

    def _on_frames_read(self, frames: FramesRead) -> None:
        if frames.request_id in self._reading_shown_requests() and not self._samples_again(frames.request_id):
            self.listener.frames_read(frames)

    def _on_chunk(self, chunk: ChunkStats) -> None:
        if self._is_superseded(chunk.request_id):
            return
        sampled = self._sampled_again.get(chunk.request_id) or self._sampled.get(chunk.request_id)
        label = sampled.clip_name if sampled else f"question {len(self.conversation.turns)}"
        self.listener.encoder_pass(chunk, label)

    def _on_metrics(self, metrics: EncoderMetrics) -> None:
        self.metrics = metrics
        self.listener.metrics_changed(metrics)

    def _on_encode_done(self, done: EncodeDone) -> None:
        if self._is_superseded(done.request_id):
            return
        sampled = self._sampled.get(done.request_id)
        again = self._sampled_again.pop(done.request_id, None)
        if again is not None:
            sampled = again
        elif done.request_id not in self._adds:
            sampled = None
        if sampled is not None and self.clip is not None:
            self.added.append((sampled, done))
            self.listener.item_added(sampled, done)
        self.listener.clip_encoded(done)
        self.listener.status_changed(
            f"{done.clip_name}: {done.frames} frames encoded in {done.encode_ms:.0f} ms "
            f"({done.ms_per_frame:.2f} ms per frame). Ask away."
        )

    def _on_reset(self, reset: ConversationReset) -> None:
        if reset.request_id != NO_REQUEST and reset.request_id == self._asked_reset:
            self._asked_reset = None
            return  # followed when the person asked for it
        clip = self._sampled.get(reset.request_id) if reset.reason != "asked" else None
        if reset.reason != "asked":
            self.added = []  # opening or re-sampling replaces every item
        if clip is not None:
            self.clip = clip
            self.listener.clip_changed(clip)
        if reset.request_id != self._resuming:  # a resumed conversation stays on screen
            self.stale_clip = None
            timestamps = self.clip.timestamps if self.clip else ()
            self.conversation = Conversation(reset.clip_name, reset.path, timestamps=timestamps)
            self.listener.conversation_reset(self.conversation, _reset_notice(reset))
        self._refresh_clip()
        self.listener.state_changed()

    def _on_engine_info(self, info: EngineInfo) -> None:
        self.info = info
        self.listener.engine_changed(info)
        if self.operation in ("load", "apply_settings"):
            self.listener.error_cleared()

    # -- helpers ----------------------------------------------------------------------------

    def _answer_turn(self, request_id: int) -> Turn | None:
        """The turn answering request ``request_id`` while it is still open, else ``None``."""
        if self._answering is None or self._answering[0] != request_id:
            return None
        turn = self._answering[1]
        return turn if turn.status in ("waiting", "streaming") else None

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

    def _is_superseded(self, request_id: int) -> bool:
        """An open the session sent, followed by a later open."""
        return request_id in self._opens and request_id != self._latest_open

    def _refresh_clip(self) -> None:
        shown = self.shown_clip
        if shown is not self._shown:
            self._shown = shown
            self.listener.clip_shown(shown)


_HANDLERS = {
    RequestStarted: Session._on_started,
    RequestFinished: Session._on_finished,
    Failed: Session._on_failed,
    Progress: Session._on_progress,
    Token: Session._on_token,
    AnswerSpeed: Session._on_speed,
    Done: Session._on_done,
    ClipSampled: Session._on_clip_sampled,
    FramesRead: Session._on_frames_read,
    ChunkStats: Session._on_chunk,
    EncoderMetrics: Session._on_metrics,
    EncodeDone: Session._on_encode_done,
    ConversationReset: Session._on_reset,
    EngineInfo: Session._on_engine_info,
}


def _reset_notice(reset: ConversationReset) -> str | None:
    if reset.clip_name is None:
        return None
    if reset.reason == "resampled":
        return f"The new settings read {reset.clip_name} again; the conversation starts afresh"
    return f"Asking about {reset.clip_name}"


def model_text(info: EngineInfo) -> str:
    """The model's name, with its label when it has one (the demo model does)."""
    return f"{info.model_name} ({info.model_label})" if info.model_label else info.model_name


def held_memory_text(info: EngineInfo) -> str:
    """What the loaded model holds, for Settings ▸ Model ("" where it is not loaded here)."""
    held = info.held_memory
    return f"Loaded now, {info.model_name} holds {held.describe()}." if held else ""


def engine_text(info: EngineInfo, model: str) -> str:
    """``model`` (a name for it), the device, the weights' dtype (where the model is loaded here) and
    the encoder: "demo · cpu · fp8 · eager (no CUDA graphs)"."""
    dtype = [] if info.server is not None else [info.weight_dtype or info.dtype]
    return " · ".join([model, info.device, *dtype, encoder_text(info)])


def encoder_text(info: EngineInfo) -> str:
    """The encoder in a few words."""
    if info.server is not None:
        return "encoder on the vLLM server"
    return info.encoder_name if info.graphs_enabled else "eager (no CUDA graphs)"
