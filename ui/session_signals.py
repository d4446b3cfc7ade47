"""What the window's session tells the widgets, without Qt: one :class:`Channel` per kind of news.

Each widget connects the channels it cares about (``session.signals.clip_changed.connect(...)``), so
the window relays nothing: the session emits, every connected callable is called in the order it
was connected, on the thread that emitted (the GUI thread, where the session follows the engine).
"""

from __future__ import annotations

from typing import Callable, Generic, ParamSpec

from framewise.core.conversation import Conversation, Turn
from framewise.core.events import (
    AnswerSpeed,
    AnswerStats,
    ChunkStats,
    ClipSampled,
    EncodeDone,
    EncoderMetrics,
    EngineInfo,
    Failed,
)
from framewise.core.settings import AppSettings

P = ParamSpec("P")


class Channel(Generic[P]):
    """One kind of news: :meth:`emit` calls every connected callable with what it carries."""

    def __init__(self) -> None:
        self._slots: list[Callable[P, object]] = []

    def connect(self, slot: Callable[P, object]) -> None:
        self._slots.append(slot)

    def emit(self, *args: P.args, **kwargs: P.kwargs) -> None:
        for slot in list(self._slots):
            slot(*args, **kwargs)


class SessionSignals:
    """Every channel the session emits on, with what each carries."""

    def __init__(self) -> None:
        self.state_changed: Channel[[]] = Channel()
        """What can be done now changed: a request started or ended, an answer started or ended."""
        self.status_changed: Channel[[str]] = Channel()
        """A one-line account of what is happening, for the status bar."""
        self.error_raised: Channel[[str, bool]] = Channel()
        """``(text, settings_can_help)``: something failed that a person should see until it is fixed or
        dismissed; ``settings_can_help`` when a change in Settings may fix it (a model that did not
        load), not when it cannot (a bad clip)."""
        self.error_cleared: Channel[[]] = Channel()
        """What failed works now (a clip opened, a model loaded)."""
        self.progress_changed: Channel[[int, int]] = Channel()
        """``(current, total)``: long work advanced; ``total`` 0 means the amount is not known."""
        self.progress_ended: Channel[[]] = Channel()
        """The request that reported progress ended."""
        self.engine_changed: Channel[[EngineInfo]] = Channel()
        """The engine loaded a model or changed its encoder."""
        self.settings_applied: Channel[[AppSettings]] = Channel()
        """The engine applied these settings (a person's choice): they are the session's now, to be kept."""
        self.settings_refused: Channel[[AppSettings, Failed | None]] = Channel()
        """The engine could not apply these settings and is as it was; the failure says why (and which field)."""
        self.fell_back_to_defaults: Channel[[AppSettings, Failed | None]] = Channel()
        """The saved settings did not load at start; the session runs on the defaults (not to be saved)."""
        self.clip_opened: Channel[[str]] = Channel()
        """A clip a person opened (its path) was encoded: the engine's questions are about it now."""
        self.clip_changed: Channel[[ClipSampled]] = Channel()
        """The engine's open clip changed (opened, re-sampled by new settings, or re-opened to resume):
        the clip to show. The window shows one clip at a time: a clip being read is shown only once the
        engine has made it the open one, with :attr:`conversation_reset` right after it, so that the
        clip and the conversation change together (its progress is the status line's meanwhile)."""
        self.conversation_reset: Channel[[Conversation, str | None]] = Channel()
        """The engine emptied its conversation; the notice says why, for the transcript."""
        self.turn_started: Channel[[Turn]] = Channel()
        """A question was sent; its answer will stream into the turn."""
        self.token_received: Channel[[Turn, str]] = Channel()
        """The text was added to ``turn.answer``."""
        self.answer_speed: Channel[[Turn, AnswerSpeed]] = Channel()
        """The answer streaming into the turn is decoded at this speed so far; :attr:`answer_stats` gives
        the final figures when it ends."""
        self.turn_finished: Channel[[Turn]] = Channel()
        """The turn ended: done, stopped or failed (its ``status`` says which)."""
        self.encoder_pass: Channel[[ChunkStats, str]] = Channel()
        """One encoder pass of the encode with this label (``chunk.chunk_index`` 0 starts an encode)."""
        self.metrics_changed: Channel[[EncoderMetrics]] = Channel()
        """New encoder numbers over the run (hits per item, latency percentiles)."""
        self.item_added: Channel[[ClipSampled, EncodeDone]] = Channel()
        """A clip, picture or closer look at a span joined the conversation (``done.span`` says which span)."""
        self.clip_encoded: Channel[[EncodeDone]] = Channel()
        """A clip finished encoding."""
        self.answer_stats: Channel[[AnswerStats]] = Channel()
        """What the last answer cost."""
