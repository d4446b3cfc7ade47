"""The one answering API and the request plumbing every backend shares.

:class:`AnsweringBackend` is what the CLI, the window's worker, the window's session (through the
calls it submits) and the test fake hold. :class:`BackendBase` is written once for every
implementation: the public calls, the request id each event carries, cancelling
(:class:`~framewise.core.backends.cancel.CancelScope`), the conversation record and its resets,
the open clip's bookkeeping and how frames given directly are sized. A backend supplies only its
parts of a request (open, add, frames given directly, answer) and its lifecycle (load, settings,
info).

A new kind of request is a method here, on the protocol and on :class:`BackendBase`, written over
those parts, so no backend changes for it; its name joins
:data:`~framewise.core.events.RequestKind`, and the window's session sends it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Generic, Protocol, Sequence, TypeVar

import numpy as np

from framewise.core.backends.cancel import CancelScope
from framewise.core.errors import EmptyQuestionError, SpanError
from framewise.core.events import (
    ConversationReset,
    Done,
    E,
    EncodeDone,
    EngineInfo,
    EventSink,
    RequestScope,
    ResetReason,
    ignore_events,
)
from framewise.core.seam import FamilyLimits
from framewise.core.settings import AppSettings
from framewise.core.video import SampledFrames

Turns = list[tuple[str, str]]


class AnsweringBackend(Protocol):
    """A clip and questions in, streamed answers out.

    Only :meth:`cancel` may be called from another thread. ``turns`` holds the finished
    (question, answer) turns about the open clip: the one conversation record, whose every reset is
    sent as a ``ConversationReset``. :meth:`open_clip` replaces every open item; :meth:`add_clip`
    adds a clip or picture to the same conversation. Every event a call sends carries its
    ``request_id`` (a new one when ``None``).
    """

    settings: AppSettings
    turns: Turns

    def load(self, request_id: int | None = None) -> EngineInfo: ...
    def apply_settings(self, settings: AppSettings, request_id: int | None = None) -> EngineInfo | None: ...
    def info(self) -> EngineInfo: ...
    def open_clip(self, path: str | Path, request_id: int | None = None) -> EncodeDone: ...
    def add_clip(self, path: str | Path, request_id: int | None = None) -> EncodeDone: ...
    def look_closer(
        self, start_s: float, end_s: float, item: int = 0, request_id: int | None = None
    ) -> EncodeDone: ...
    def open_frames(
        self, frames: np.ndarray, timestamps: Sequence[float], name: str, request_id: int | None = None
    ) -> EncodeDone: ...
    def ask(self, question: str, request_id: int | None = None) -> Done: ...
    def cancel(self, request_id: int | None = None) -> None: ...
    def new_conversation(self, request_id: int | None = None) -> None: ...
    def open_clip_path(self) -> Path | None: ...


# One call on a backend, run in the background for a request: (backend, request_id) -> its result.
BackendCall = Callable[[AnsweringBackend, int], object]


class Emit(Protocol):
    """Sends an event as part of the request being served; returns it as sent (stamped with the
    request's id)."""

    def __call__(self, event: E) -> E: ...


class OpenClip(Protocol):
    """What every backend keeps of its open clip: the file (``None`` for frames given directly) and
    what opening it reported."""

    @property
    def path(self) -> Path | None: ...
    @property
    def summary(self) -> EncodeDone: ...


ClipT = TypeVar("ClipT", bound=OpenClip)


class BackendBase(ABC, Generic[ClipT]):
    """The plumbing :class:`AnsweringBackend` implementations share; ``ClipT`` is what each keeps of
    its open clip.

    A subclass serves each of its own public calls inside :meth:`_serving`, sends events through
    :meth:`_emit` and checks ``self._cancel`` (:class:`CancelScope`) as it works. Opening a clip,
    adding one, frames given directly and a question reach it, inside their request, as
    :meth:`_open_clip`, :meth:`_add_clip`, :meth:`_use_frames` and :meth:`_ask`.

    ``clip`` is the item that was opened; ``added`` the clips and pictures added to its
    conversation since, in order; :attr:`clips` all of them.
    """

    def __init__(self, settings: AppSettings | None = None, sink: EventSink = ignore_events) -> None:
        settings = settings or AppSettings()
        self.settings = settings.validate(self._limits_for(settings))
        self.sink = sink
        self.clip: ClipT | None = None
        self.added: list[ClipT] = []
        self.turns: Turns = []
        self._cancel = CancelScope()
        self._requests = RequestScope()

    @abstractmethod
    def _limits_for(self, settings: AppSettings) -> FamilyLimits | None:
        """The limits of the model family ``settings`` are for, which they are checked against;
        ``None`` when no family is known yet (the checks that need one are then skipped). Called
        before the subclass's own ``__init__`` has run."""

    def open_clip(self, path: str | Path, request_id: int | None = None) -> EncodeDone:
        """Sample the clip at ``path`` and make it the one later questions are about.

        A failure leaves the open clip and the conversation as they were.
        """
        with self._serving(request_id):
            return self._open_clip(Path(path), "new_clip")

    def add_clip(self, path: str | Path, request_id: int | None = None) -> EncodeDone:
        """Sample the clip or picture at ``path`` and add it to the conversation beside the open
        items (with none open, open it); the questions and answers so far are kept.

        A failure leaves the open items and the conversation as they were.
        """
        with self._serving(request_id):
            if self.clip is None:
                return self._open_clip(Path(path), "new_clip")
            return self._add_clip(Path(path), None)

    def look_closer(
        self, start_s: float, end_s: float, item: int = 0, request_id: int | None = None
    ) -> EncodeDone:
        """Sample the span ``start_s``..``end_s`` of the open clip number ``item`` (of :attr:`clips`)
        densely, with its real times, and add it to the conversation as a new item (see
        :meth:`add_clip`). The answers after it see the span; ``EncodeDone.span`` says which.

        Raises SpanError for a span outside the clip, a picture, or frames given directly.
        """
        with self._serving(request_id):
            clips = self.clips
            if not 0 <= item < len(clips):
                raise SpanError("Open a clip first, then select a span of its timeline to look closer at.")
            path, summary = clips[item].path, clips[item].summary
            if summary.kind == "image" or path is None:
                raise SpanError(
                    f"{summary.clip_name} has no timeline to look closer at "
                    f"({'a picture' if path else 'frames given directly'}); select a span of a clip opened from a file."
                )
            return self._add_clip(path, (start_s, end_s))

    @property
    def clips(self) -> list[ClipT]:
        """Every item of the conversation: the opened one, then those added, in order."""
        return ([self.clip] if self.clip is not None else []) + self.added

    def ask(self, question: str, request_id: int | None = None) -> Done:
        """Answer ``question`` about the open clip (or as plain text with none), streaming Token events.

        A cancelled answer ends early with ``stats.cancelled`` set and is not kept in the
        conversation; a completed one is (``Done.kept``), so follow-up questions see it.
        """
        with self._serving(request_id):
            question = question.strip()
            if not question:
                raise EmptyQuestionError()
            return self._ask(question)

    def open_clip_path(self) -> Path | None:
        """The file of the open clip (``None`` with no clip, or frames given directly)."""
        return self.clip.path if self.clip else None

    def new_conversation(self, request_id: int | None = None) -> None:
        """Forget earlier questions and answers; the open clip stays."""
        with self._serving(request_id):
            self._reset_conversation("asked")

    def open_frames(
        self, frames: np.ndarray, timestamps: Sequence[float], name: str, request_id: int | None = None
    ) -> EncodeDone:
        """Use frames sampled elsewhere, as :meth:`open_clip` does after decoding.

        ``frames``: (T, H, W, 3) uint8 RGB at a size the model takes; ``timestamps``: T seconds.
        Settings changes cannot re-sample such a clip.
        """
        with self._serving(request_id):
            return self._use_frames(SampledFrames.given(frames, timestamps, name))

    def cancel(self, request_id: int | None = None) -> None:
        """Stop request ``request_id`` (and those before it that have not ended) at its next check,
        or, without an id, the running request or the next one to start; see :mod:`.cancel`. Safe
        from any thread."""
        self._cancel.cancel(request_id)

    @abstractmethod
    def _open_clip(self, path: Path, reason: ResetReason) -> EncodeDone:
        """Open the clip at ``path`` in the request being served; ``reason`` is why the conversation empties."""

    @abstractmethod
    def _add_clip(self, path: Path, span: tuple[float, float] | None) -> EncodeDone:
        """Add the clip or picture at ``path`` (only the ``span`` (start, end) seconds of a clip,
        sampled densely, when given) to the conversation, in the request being served."""

    @abstractmethod
    def _ask(self, question: str) -> Done:
        """Answer ``question`` (stripped, not empty) in the request being served."""

    @abstractmethod
    def _use_frames(self, sampled: SampledFrames) -> EncodeDone:
        """Make frames given directly the open clip, in the request being served."""

    @contextmanager
    def _serving(self, request_id: int | None) -> Iterator[int]:
        """Serve request ``request_id`` (a new id when ``None``; inside a request, part of it): its
        events carry its id and its cancels reach it. Yields the id."""
        with self._requests.serving(request_id) as current, self._cancel.request(current):
            yield current

    def _emit(self, event: E) -> E:
        """Send ``event`` as part of the request being served; returns it as sent."""
        return self._requests.send(self.sink, event)

    def _sample_again(self, items: Sequence[ClipT]) -> EncodeDone:
        """Sample and encode ``items`` (the conversation's, from :attr:`clips`) anew after new settings:
        the first is opened again (the conversation starts afresh, reason ``resampled``), each other
        one added again in order, a closer look over its own span, a picture as a picture. Returns
        what opening the first reported."""
        opened, *added = items
        assert opened.path is not None, "frames given directly cannot be sampled again"
        done = self._open_clip(opened.path, "resampled")
        for item in added:
            assert item.path is not None, "only items read from a file are added"
            self._add_clip(item.path, item.summary.span)
        return done

    def _make_open(self, clip: ClipT, reason: ResetReason | None) -> None:
        """Make ``clip`` the open item. With a ``reason`` (why the conversation empties) it replaces
        every item and the conversation starts afresh; ``None`` puts it back, the rest kept."""
        self.clip = clip
        if reason is not None:
            self.added.clear()
            self._reset_conversation(reason)

    def _reset_conversation(self, reason: ResetReason) -> None:
        """Empty the conversation record and say so, with ``reason`` and the open clip."""
        self.turns.clear()
        clip = self.clip
        self._emit(
            ConversationReset(
                reason=reason,
                clip_name=clip.summary.clip_name if clip else None,
                path=None if clip is None else str(clip.path or ""),
            )
        )

