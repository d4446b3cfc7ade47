"""One object per request the window's session sends: each follows its own events and ends itself.

As Anki's ``CollectionOp`` wraps one background operation and hands its result to a callback, a
:class:`Request` is made when :class:`~framewise.ui.session.Session` sends a request, kept by the id
the port gave it until the engine's ``RequestFinished`` of that id, and handed every event of that
id. What a request only *shows* (progress, frames being read, encoder passes, tokens) it emits while
it is still wanted; what changes the engine's record (a clip committed, the conversation emptied) it
always hands back to the session, so the window never disagrees with the engine. A request the
session did not send (another part of the window used the port) is followed from its
``RequestStarted`` by a plain :class:`Request`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from framewise.core.clip_times import ConversationItem, time_clip_names
from framewise.core.conversation import Conversation, Turn
from framewise.core.events import (
    AnswerSpeed,
    ChunkStats,
    ClipSampled,
    ConversationReset,
    Done,
    EncodeDone,
    EngineInfo,
    Failed,
    Progress,
    RequestFinished,
    RequestKind,
    Token,
)
from framewise.core.settings import AppSettings
from framewise.ui.session_signals import SessionSignals
from framewise.ui.wording import model_text, progress_text


class SendingSession(Protocol):
    """What a request reads and hands back to the session that sent it
    (:class:`framewise.ui.session.Session`, which imports this module)."""

    settings: AppSettings
    signals: SessionSignals
    info: EngineInfo | None
    conversation: Conversation
    stale_clip: str | None

    def fall_back_to_defaults(self, failure: Failed | None) -> None: ...

    def follow_reset(
        self, reset: ConversationReset, clip: ClipSampled | None, keep_conversation: bool = False
    ) -> None: ...

    def encoded(self, done: EncodeDone, item: ClipSampled | None) -> None: ...

    def conversation_items(self) -> list[ConversationItem]: ...

# The requests whose failure Settings may fix, and how the error banner says which failed.
_FAILURE_PREFIX: dict[RequestKind, str] = {
    "load": "Could not load the model",
    "apply_settings": "Could not apply the settings",
    "new_conversation": "Could not start a new conversation",
    "add_clip": "Could not add it to the conversation",
    "look_closer": "Could not look closer",
}
# The handler method each event of a request goes to.
_FOLLOWERS: dict[type, str] = {
    Progress: "on_progress",
    ClipSampled: "on_clip_sampled",
    ChunkStats: "on_chunk",
    EncodeDone: "on_encode_done",
    Token: "on_token",
    AnswerSpeed: "on_speed",
    Done: "on_done",
}


class Request:
    """Request ``request_id`` of ``kind``: what every kind does unless it says otherwise."""

    def __init__(self, session: SendingSession, request_id: int, kind: RequestKind) -> None:
        self.session = session
        self.request_id = request_id
        self.kind = kind
        self.sampled: ClipSampled | None = None  # the (first) clip this request sampled
        self.failure: Failed | None = None

    @property
    def wanted(self) -> bool:
        """Whether what this request only shows is still shown (an open superseded by a later one is not)."""
        return True

    def follow(self, event: object) -> None:
        """Hand ``event`` (one of this request's) to its handler method; other events are not a request's own."""
        name = _FOLLOWERS.get(type(event))
        if name is not None:
            getattr(self, name)(event)

    def run_label(self) -> str:
        """What the encoder plot calls this request's encode."""
        if self.sampled is not None:
            return self.sampled.clip_name
        return f"question {len(self.session.conversation.turns)}"

    def on_progress(self, progress: Progress) -> None:
        if self.wanted:
            self.session.signals.progress_changed.emit(progress.current, progress.total)
            self.session.signals.status_changed.emit(progress_text(progress))

    def on_clip_sampled(self, clip: ClipSampled) -> None:
        """The clip is read; it is shown when the engine makes it the open one (the window shows one clip
        at a time: the open one, until the conversation is about another)."""
        self.sampled = clip

    def on_chunk(self, chunk: ChunkStats) -> None:
        if self.wanted:
            self.session.signals.encoder_pass.emit(chunk, self.run_label())

    def on_encode_done(self, done: EncodeDone) -> None:
        if self.wanted:
            self.session.encoded(done, self.added_item())

    def added_item(self) -> ClipSampled | None:
        """The item that the clip just encoded adds to the conversation (``None``: it adds none)."""
        return None

    def on_reset(self, reset: ConversationReset) -> None:
        self.session.follow_reset(reset, self.sampled if reset.reason != "asked" else None)

    def on_token(self, token: Token) -> None:
        """Only a question's answer streams tokens."""

    def on_speed(self, speed: AnswerSpeed) -> None:
        """Only a question's answer has a speed."""

    def on_done(self, done: Done) -> None:
        """Only a question ends with an answer."""

    def on_failed(self, failed: Failed) -> None:
        self.failure = failed
        if self.wanted:
            self.session.signals.error_raised.emit(f"{self.failure_prefix()}: {failed.message}", self.kind in _FAILURE_PREFIX)

    def failure_prefix(self) -> str:
        return _FAILURE_PREFIX.get(self.kind, "Something went wrong")

    def finish(self, finished: RequestFinished) -> None:
        """The engine ended this request: say how in the status bar."""
        signals, info = self.session.signals, self.session.info
        if finished.outcome == "cancelled":
            signals.status_changed.emit("Cancelled.")
        elif finished.kind in ("load", "apply_settings") and finished.ok:
            signals.status_changed.emit(f"Ready: {model_text(info)}" if info else "Ready")


class LoadRequest(Request):
    """Loading the model named by the settings at start; saved settings that fail fall back to the defaults."""

    def __init__(self, session: SendingSession, request_id: int) -> None:
        super().__init__(session, request_id, "load")

    def finish(self, finished: RequestFinished) -> None:
        super().finish(finished)
        if finished.outcome == "failed" and self.session.settings != AppSettings():
            self.session.fall_back_to_defaults(self.failure)


class ApplySettingsRequest(Request):
    """New ``settings``: the session's once the engine applied them (kept unless ``keep`` is False, as
    the fallback to the defaults at start is not). They may re-sample the open clip, shown once the
    engine has made it the open one again, then the added items, each added again when encoded."""

    def __init__(self, session: SendingSession, request_id: int, settings: AppSettings, keep: bool = True) -> None:
        super().__init__(session, request_id, "apply_settings")
        self.settings = settings
        self.keep = keep
        self.sampled_again: ClipSampled | None = None  # an added item re-sampled, until it is encoded

    def run_label(self) -> str:
        clip = self.sampled_again or self.sampled
        return clip.clip_name if clip is not None else super().run_label()

    def on_clip_sampled(self, clip: ClipSampled) -> None:
        if self.sampled is None:  # the open clip comes first, then the items added to the conversation
            super().on_clip_sampled(clip)
        else:
            self.sampled_again = clip

    def added_item(self) -> ClipSampled | None:
        item, self.sampled_again = self.sampled_again, None
        return item

    def finish(self, finished: RequestFinished) -> None:
        super().finish(finished)
        if not self.keep:
            return
        if finished.ok:
            self.session.settings = self.settings
            self.session.signals.settings_applied.emit(self.settings)
        else:
            self.session.signals.settings_refused.emit(self.settings, self.failure)


class OpenClipRequest(Request):
    """Opening ``path``: its progress and encoder passes shown until a later open supersedes it, the
    clip once the engine has opened it; a ``resuming`` open re-opens a kept conversation's clip, which
    stays on screen."""

    def __init__(self, session: SendingSession, request_id: int, path: str, resuming: bool = False) -> None:
        super().__init__(session, request_id, "open_clip")
        self.path = path
        self.resuming = resuming
        self.superseded = False

    @property
    def wanted(self) -> bool:
        return not self.superseded

    def failure_prefix(self) -> str:
        return f"Could not open {Path(self.path).name}"

    def on_reset(self, reset: ConversationReset) -> None:
        self.session.follow_reset(reset, self.sampled, keep_conversation=self.resuming)

    def finish(self, finished: RequestFinished) -> None:
        if self.resuming and not finished.ok:  # the kept conversation stays readable, but cannot go on
            self.session.stale_clip = self.session.conversation.clip_path
        if self.wanted and finished.ok:
            self.session.signals.error_cleared.emit()
            self.session.signals.clip_opened.emit(self.path)
        super().finish(finished)


class AddRequest(Request):
    """Adding a clip or picture (``add_clip``) or a closer look at a span (``look_closer``) to the conversation."""

    def added_item(self) -> ClipSampled | None:
        return self.sampled


class NewConversationRequest(Request):
    """Starting afresh: the session empties its record when it sends this, so the engine's reset only confirms it."""

    def __init__(self, session: SendingSession, request_id: int) -> None:
        super().__init__(session, request_id, "new_conversation")

    def on_reset(self, reset: ConversationReset) -> None:
        """Followed already, when the person asked for it."""


class AskRequest(Request):
    """A question: its answer streams into ``turn`` until the engine is done, stops, or fails."""

    def __init__(self, session: SendingSession, request_id: int, turn: Turn) -> None:
        super().__init__(session, request_id, "ask")
        self.turn = turn

    @property
    def open_turn(self) -> Turn | None:
        """The turn while its answer has not ended, else ``None`` (what comes later is not shown)."""
        return self.turn if self.turn.status in ("waiting", "streaming") else None

    def on_token(self, token: Token) -> None:
        turn = self.open_turn
        text = token.text if turn is None or turn.answer else token.text.lstrip()  # the answer, as Done gives it
        if turn is not None and text:
            turn.status = "streaming"
            turn.answer += text
            self.session.signals.token_received.emit(turn, text)

    def on_speed(self, speed: AnswerSpeed) -> None:
        if self.open_turn is not None:
            self.session.signals.answer_speed.emit(self.turn, speed)

    def on_done(self, done: Done) -> None:
        turn = self.open_turn
        if turn is None:
            return
        turn.answer = done.text
        turn.stats = done.stats
        if turn.saw:  # several items: say which of them each time the answer mentions belongs to
            turn.time_clips = time_clip_names(done.text, self.session.conversation_items())
        turn.status = "stopped" if done.stats.cancelled else "done"
        signals = self.session.signals
        signals.answer_stats.emit(done.stats)
        signals.turn_finished.emit(turn)
        signals.status_changed.emit("Stopped." if done.stats.cancelled else "Answered.")
        signals.state_changed.emit()

    def on_failed(self, failed: Failed) -> None:
        turn = self.open_turn
        if turn is None:
            super().on_failed(failed)
            return
        self.failure = failed
        turn.status = "failed"
        turn.error = failed.message
        self.session.signals.turn_finished.emit(turn)
        self.session.signals.status_changed.emit(f"The question failed: {failed.message}")

    def finish(self, finished: RequestFinished) -> None:
        turn = self.open_turn
        if turn is not None:  # no Done: dropped before it started, or cut short
            turn.status = "stopped"
            self.session.signals.turn_finished.emit(turn)
