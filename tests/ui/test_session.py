"""The window's session object, headless: plain pytest, no Qt, no widgets.

Events are built by hand (as the engine sends them) so each rule is tested on its own: events
route by request id, a superseded or finished request's late events are not shown, and the
conversation empties only when the engine says so, for the reason it gives. The last tests drive
the session with the fake engine synchronously to check that the window's record is the engine's.
"""

from __future__ import annotations

import ast
import itertools
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import pytest

from framewise.core.backends.base import BackendCall
from framewise.core.errors import CancelledError, FramewiseError
from framewise.core.events import (
    AnswerSpeed,
    AnswerStats,
    ChunkStats,
    ClipSampled,
    ConversationReset,
    Done,
    EncodeDone,
    EngineInfo,
    Failed,
    FramesRead,
    Progress,
    RequestFinished,
    RequestKind,
    RequestStarted,
    Token,
)
from framewise.core.conversation import Conversation, Turn
from framewise.core.settings import AppSettings
from framewise.ui.session import Session
from framewise.ui.session_signals import SessionSignals
from tests.conftest import REPO_ROOT
from tests.ui.fake_engine import FakeEngine

INFO = EngineInfo("cpu", "float32", "demo", "Demo model", "eager", False, "no CUDA", ("eager",))


@dataclass
class RecordingPort:
    """Records requests and hands out ids as the worker's host does."""

    sent: list[tuple[RequestKind, object]] = field(default_factory=list)
    cancels: int = 0

    def _send(self, kind: RequestKind, argument: object = None) -> int:
        self.sent.append((kind, argument))
        return len(self.sent)

    def load(self) -> int:
        return self._send("load")

    def apply_settings(self, settings: AppSettings) -> int:
        return self._send("apply_settings", settings)

    def submit(self, kind: RequestKind, call: BackendCall, cancellable: bool = False) -> int:
        return self._send(kind, (call, cancellable))

    def cancel(self) -> None:
        self.cancels += 1


class CallRecorder:
    """Stands in for the engine: records each call the session submits, with its arguments."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[object, ...], dict[str, object]]] = []

    def __getattr__(self, name: str) -> Callable[..., None]:
        return lambda *args, **kwargs: self.calls.append((name, args, kwargs))


class Recorder:
    """Keeps what the session told the window to show, connected to its signals as a widget is."""

    def __init__(self) -> None:
        self.shown: list[str] = []  # the clips shown, each when it became the open one
        self.passes: list[tuple[int, str]] = []
        self.notices: list[str | None] = []
        self.errors: list[str] = []
        self.statuses: list[str] = []
        self.opened: list[str] = []
        self.finished_turns: list[str] = []
        self.speeds: list[tuple[str, int]] = []
        self.applied: list[AppSettings] = []
        self.refused: list[tuple[AppSettings, Failed | None]] = []
        self.fell_back: list[tuple[AppSettings, Failed | None]] = []

    def follow(self, signals: SessionSignals) -> None:
        signals.settings_applied.connect(self.applied.append)
        signals.settings_refused.connect(lambda settings, failure: self.refused.append((settings, failure)))
        signals.fell_back_to_defaults.connect(lambda saved, failure: self.fell_back.append((saved, failure)))
        signals.clip_changed.connect(lambda clip: self.shown.append(clip.clip_name))
        signals.encoder_pass.connect(lambda chunk, label: self.passes.append((chunk.request_id, label)))
        signals.conversation_reset.connect(lambda conversation, notice: self.notices.append(notice))
        signals.error_raised.connect(lambda text, settings_can_help: self.errors.append(text))
        signals.status_changed.connect(self.statuses.append)
        signals.clip_opened.connect(self.opened.append)
        signals.turn_finished.connect(lambda turn: self.finished_turns.append(turn.status))
        signals.answer_speed.connect(lambda turn, speed: self.speeds.append((turn.question, speed.tokens_so_far)))


def sampled(name: str, request_id: int) -> ClipSampled:
    frame = np.zeros((4, 4, 3), np.uint8)
    return ClipSampled(name, f"/clips/{name}", (0.0, 0.5), (frame, frame), 4, 4, 1.0, request_id=request_id)


def chunk(request_id: int, index: int = 0) -> ChunkStats:
    return ChunkStats(index, 1, 2, 64, None, 0.0, 4.0, False, "no CUDA", request_id=request_id)


def encoded(name: str, request_id: int) -> EncodeDone:
    return EncodeDone(name, 2, 64, (0.0, 0.5), 1.0, 1.0, 4.0, 2.0, False, request_id=request_id)


def open_events(name: str, request_id: int, reason: str = "new_clip") -> list[object]:
    """What the engine sends for a successful open, between RequestStarted and RequestFinished."""
    return [
        Progress("decode", 0, 1, f"Reading {name}", request_id=request_id),
        sampled(name, request_id),
        chunk(request_id),
        ConversationReset(reason, name, f"/clips/{name}", request_id=request_id),  # type: ignore[arg-type]
        encoded(name, request_id),
    ]


def serve(session: Session, kind: RequestKind, request_id: int, events: list[object], outcome: str = "done") -> None:
    session.handle(RequestStarted(kind, request_id=request_id))
    for event in events:
        session.handle(event)
    session.handle(RequestFinished(kind, outcome, request_id=request_id))  # type: ignore[arg-type]


@pytest.fixture
def port() -> RecordingPort:
    return RecordingPort()


@pytest.fixture
def view() -> Recorder:
    return Recorder()


@pytest.fixture
def session(port: RecordingPort, view: Recorder) -> Session:
    session = Session(port, AppSettings())
    view.follow(session.signals)
    session.start()
    serve(session, "load", 1, [INFO])
    return session


def open_clip(session: Session, name: str) -> int:
    session.open_clip(f"/clips/{name}")
    request_id = len(session.port.sent)  # type: ignore[attr-defined]
    serve(session, "open_clip", request_id, open_events(name, request_id))
    return request_id


def ask(session: Session, question: str, answer: str) -> int:
    assert session.ask(question)
    request_id = len(session.port.sent)  # type: ignore[attr-defined]
    serve(
        session, "ask", request_id,
        [Token(answer, request_id=request_id), Done(answer, AnswerStats(5.0, 3, 10.0, False), kept=True, request_id=request_id)],
    )
    return request_id


QT_FREE = ("session", "requests", "session_signals", "wording")  # the session and the modules it is made of


@pytest.mark.parametrize("module", QT_FREE)
def test_the_session_imports_no_qt(module: str) -> None:
    """Only the standard library, core (which the layering test keeps Qt-free) and the session's other
    Qt-free modules; ``framewise.ui``'s own ``__init__`` loads Qt for its emit guard, which the session
    does not need."""
    tree = ast.parse((REPO_ROOT / "ui" / f"{module}.py").read_text(encoding="utf-8"))
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    imported |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    allowed = {f"framewise.ui.{name}" for name in QT_FREE}
    assert imported and all(
        name == "__future__" or name in sys.stdlib_module_names or name.startswith("framewise.core.") or name in allowed
        for name in imported
    ), imported


def test_an_opened_clip_is_committed_when_the_engine_resets_the_conversation(session: Session, view: Recorder) -> None:
    session.open_clip("/clips/a.mp4")
    assert session.opening_clip and not session.can_ask
    request_id = len(session.port.sent)  # type: ignore[attr-defined]
    session.handle(RequestStarted("open_clip", request_id=request_id))
    session.handle(FramesRead("a.mp4", 2, (0,), (0.0,), (np.zeros((4, 4, 3), np.uint8),), request_id=request_id))
    session.handle(sampled("a.mp4", request_id))
    assert view.shown == [] and session.clip is None, "not shown while it is read and encoded"
    session.handle(chunk(request_id))
    assert view.passes == [(request_id, "a.mp4")]
    session.handle(ConversationReset("new_clip", "a.mp4", "/clips/a.mp4", request_id=request_id))
    assert session.clip is not None and session.clip.clip_name == "a.mp4"
    assert session.conversation.clip_name == "a.mp4" and view.notices == ["Asking about a.mp4"]
    session.handle(RequestFinished("open_clip", "done", request_id=request_id))
    assert view.opened == ["/clips/a.mp4"] and session.can_ask


def test_a_superseded_open_is_not_shown_but_its_commit_is_followed(session: Session, view: Recorder) -> None:
    session.open_clip("/clips/a.mp4")
    session.open_clip("/clips/b.mp4")
    first, second = 2, 3
    progress, frames, encoder_pass, reset, done = open_events("a.mp4", first)
    statuses = len(view.statuses)
    session.handle(RequestStarted("open_clip", request_id=first))
    for event in (progress, frames, encoder_pass, done):
        session.handle(event)
    assert view.shown == [], "the superseded clip's frames are not shown while it encodes"
    assert view.passes == [], "nor its encoder passes"
    assert len(view.statuses) == statuses, "nor its progress or summary"
    session.handle(reset)
    session.handle(RequestFinished("open_clip", "done", request_id=first))
    assert session.clip.clip_name == "a.mp4", "but the engine opened it, so it is the open clip"
    assert session.conversation.clip_name == "a.mp4" and view.opened == []
    assert session.opening_clip, "b.mp4 is still being opened"

    serve(session, "open_clip", second, open_events("b.mp4", second))
    assert session.clip.clip_name == "b.mp4" and view.shown[-1] == "b.mp4"
    assert view.passes == [(second, "b.mp4")]
    assert view.opened == ["/clips/b.mp4"] and not session.opening_clip


def test_one_clip_at_a_time_a_clip_being_read_is_shown_when_it_is_opened_and_a_stopped_one_never(
    session: Session, view: Recorder
) -> None:
    """The clip, its strip and the conversation change together, when the engine commits the new clip;
    a read that is stopped leaves the open clip on screen, nothing of the other (issue 44, item 2)."""
    open_clip(session, "a.mp4")
    assert view.shown == ["a.mp4"]
    session.open_clip("/clips/long.mp4")
    request_id = len(session.port.sent)  # type: ignore[attr-defined]
    session.handle(RequestStarted("open_clip", request_id=request_id))
    session.handle(FramesRead("long.mp4", 4, (0,), (0.5,), (np.zeros((4, 4, 3), np.uint8),), request_id=request_id))
    session.handle(sampled("long.mp4", request_id))
    session.stop()
    session.handle(RequestFinished("open_clip", "cancelled", request_id=request_id))
    assert view.shown == ["a.mp4"] and session.clip.clip_name == "a.mp4"

    assert session.apply_settings(AppSettings().replace("sampling", max_frames=6))  # reads a.mp4 again
    request_id = len(session.port.sent)  # type: ignore[attr-defined]
    session.handle(RequestStarted("apply_settings", request_id=request_id))
    again = sampled("a.mp4", request_id)
    session.handle(again)
    assert view.shown == ["a.mp4"] and session.clip is not again, "shown with the conversation it starts"
    session.handle(ConversationReset("resampled", "a.mp4", "/clips/a.mp4", request_id=request_id))
    assert view.shown == ["a.mp4", "a.mp4"] and session.clip is again


def test_a_failed_open_keeps_the_clip_and_the_conversation(session: Session, view: Recorder) -> None:
    open_clip(session, "a.mp4")
    ask(session, "What moves?", "A square.")
    session.open_clip("/clips/junk.mp4")
    request_id = len(session.port.sent)  # type: ignore[attr-defined]
    serve(session, "open_clip", request_id, [Failed("UnreadableClipError", "not a video", request_id=request_id)], "failed")
    assert view.errors == ["Could not open junk.mp4: not a video"]
    assert session.clip.clip_name == "a.mp4" and view.shown[-1] == "a.mp4"
    assert [turn.question for turn in session.conversation.turns] == ["What moves?"]
    assert "/clips/junk.mp4" not in view.opened


def test_tokens_and_done_route_to_the_turn_of_their_request(session: Session) -> None:
    open_clip(session, "a.mp4")
    assert session.ask("What moves?")
    request_id = len(session.port.sent)  # type: ignore[attr-defined]
    turn = session.conversation.turns[-1]
    session.handle(RequestStarted("ask", request_id=request_id))
    session.handle(Token("stray", request_id=request_id + 7))
    session.handle(Token("A square", request_id=request_id))
    assert turn.answer == "A square" and turn.status == "streaming"
    session.handle(Done("A square.", AnswerStats(5.0, 3, 10.0, False), kept=True, request_id=request_id))
    session.handle(Token(" late", request_id=request_id))
    session.handle(Failed("RuntimeError", "late failure", request_id=request_id))
    session.handle(RequestFinished("ask", "done", request_id=request_id))
    assert (turn.answer, turn.status, turn.error) == ("A square.", "done", None), "events after Done are ignored"


def test_the_speed_so_far_reaches_the_window_only_while_its_answer_streams(session: Session, view: Recorder) -> None:
    open_clip(session, "a.mp4")
    assert session.ask("What moves?")
    request_id = len(session.port.sent)  # type: ignore[attr-defined]
    session.handle(RequestStarted("ask", request_id=request_id))
    session.handle(AnswerSpeed(2, 40.0, request_id=request_id + 7))
    session.handle(Token("A", request_id=request_id))
    session.handle(AnswerSpeed(2, 40.0, request_id=request_id))
    session.handle(AnswerSpeed(5, 42.0, request_id=request_id))
    assert view.speeds == [("What moves?", 2), ("What moves?", 5)]
    session.handle(Done("A square.", AnswerStats(5.0, 6, 41.0, False), kept=True, request_id=request_id))
    session.handle(AnswerSpeed(6, 41.0, request_id=request_id))
    assert view.speeds == [("What moves?", 2), ("What moves?", 5)], "nothing after the answer ended"


def test_an_ask_dropped_before_it_started_ends_its_turn_as_stopped(session: Session, port: RecordingPort, view: Recorder) -> None:
    open_clip(session, "a.mp4")
    assert session.ask("Anything?")
    request_id = len(port.sent)
    session.stop()
    assert port.cancels == 1
    serve(session, "ask", request_id, [], outcome="cancelled")
    assert session.conversation.turns[-1].status == "stopped" and view.finished_turns == ["stopped"]
    assert session.can_ask


def test_a_failed_answer_marks_its_turn_and_the_next_question_goes_out(session: Session) -> None:
    open_clip(session, "a.mp4")
    assert session.ask("What moves?")
    request_id = len(session.port.sent)  # type: ignore[attr-defined]
    serve(session, "ask", request_id, [Failed("OutOfMemoryError", "Out of memory.", request_id=request_id)], "failed")
    turn = session.conversation.turns[-1]
    assert turn.status == "failed" and turn.error == "Out of memory."
    ask(session, "Again?", "Yes.")
    assert [t.status for t in session.conversation.turns] == ["failed", "done"]


def test_no_question_without_a_clip_and_the_blocker_says_why(session: Session, port: RecordingPort) -> None:
    assert not session.ask("Anything?") and port.sent == [("load", None)]
    assert session.ask_blocker.startswith("Open a clip first")
    open_clip(session, "a.mp4")
    assert session.ask_blocker is None
    session.open_clip("/clips/b.mp4")
    assert session.ask_blocker == "Wait, or press Stop (Esc) to stop reading the clip"


@pytest.mark.parametrize("kind", ["open_clip", "add_clip", "look_closer"])
def test_stop_ends_a_clip_being_read_or_added_as_it_ends_an_answer(
    session: Session, port: RecordingPort, kind: RequestKind
) -> None:
    """Reading a long clip can take minutes: Stop (the button and Esc) must end it, and say so (issue 44, item 1)."""
    open_clip(session, "a.mp4")
    assert not session.can_stop and session.stop_target is None
    {"open_clip": lambda: session.open_clip("/clips/long.mp4"),
     "add_clip": lambda: session.add_clip("/clips/long.mp4"),
     "look_closer": lambda: session.look_closer(0.0, 0.5)}[kind]()
    request_id = len(port.sent)
    session.handle(RequestStarted(kind, request_id=request_id))
    assert session.can_stop
    assert session.ask_blocker == f"Wait, or press Stop (Esc) to stop {session.stop_target}"
    session.stop()
    assert port.cancels == 1
    session.handle(RequestFinished(kind, "cancelled", request_id=request_id))
    assert not session.can_stop and session.can_ask and session.clip.clip_name == "a.mp4"


def test_an_open_waiting_behind_other_work_can_be_stopped_before_it_starts(session: Session, port: RecordingPort) -> None:
    session.open_clip("/clips/long.mp4")
    assert session.operation is None and session.stop_target == "reading the clip"
    session.stop()
    assert port.cancels == 1


def test_a_resumed_conversation_stays_on_screen_when_its_clip_opens_again(session: Session, view: Recorder, tmp_path: Path) -> None:
    clip = tmp_path / "kept.mp4"
    clip.write_bytes(b"a clip")
    kept = Conversation("kept.mp4", str(clip), turns=[Turn("What moved?", "demo", None, answer="A square.", status="done")])
    assert session.resume(kept)
    request_id = len(session.port.sent)  # type: ignore[attr-defined]
    serve(session, "open_clip", request_id, open_events("kept.mp4", request_id))
    assert session.conversation is kept and session.clip.clip_name == "kept.mp4" and view.notices == []
    assert session.can_ask

    gone = Conversation("gone.mp4", str(tmp_path / "gone.mp4"))
    assert not session.resume(gone)
    assert session.conversation is gone and session.ask_blocker.startswith("This conversation's clip is no longer at")
    open_clip(session, "b.mp4")
    assert session.stale_clip is None and session.conversation.clip_name == "b.mp4" and session.can_ask


def test_each_request_is_one_engine_call_carrying_its_id(session: Session, port: RecordingPort) -> None:
    """The session's requests are calls on the engine's one API, run by the port with the id it gave."""
    open_clip(session, "a.mp4")
    ask(session, "What moves?", "A square.")
    session.new_conversation()
    engine = CallRecorder()
    submitted = []
    for request_id, (kind, (call, cancellable)) in enumerate(port.sent[1:], start=2):  # after the load
        call(engine, request_id)  # type: ignore[arg-type]
        submitted.append((kind, cancellable))
    assert submitted == [("open_clip", True), ("ask", True), ("new_conversation", False)], "Stop drops only opens and answers"
    assert engine.calls == [
        ("open_clip", ("/clips/a.mp4",), {"request_id": 2}),
        ("ask", ("What moves?",), {"request_id": 3}),
        ("new_conversation", (), {"request_id": 4}),
    ]


def test_a_failure_of_a_request_not_running_is_ignored(session: Session, view: Recorder) -> None:
    session.handle(Failed("ModelLoadError", "old news", request_id=1))
    assert view.errors == []


def test_a_new_conversation_starts_at_once_and_the_engines_reset_confirms_it(session: Session, view: Recorder) -> None:
    open_clip(session, "a.mp4")
    ask(session, "What moves?", "A square.")
    session.new_conversation()
    assert session.conversation.turns == [] and session.conversation.clip_name == "a.mp4"
    assert view.notices[-1] == "Asking about a.mp4"
    fresh = session.conversation
    request_id = len(session.port.sent)  # type: ignore[attr-defined]
    assert session.ask("Right after?"), "the engine serves it after it has forgotten the conversation"
    serve(session, "new_conversation", request_id, [ConversationReset("asked", "a.mp4", "/clips/a.mp4", request_id=request_id)])
    assert session.conversation is fresh and [t.question for t in fresh.turns] == ["Right after?"]
    assert len(view.notices) == 2, "the confirmation does not start another conversation"


def test_the_conversation_empties_only_when_the_engine_says_so(session: Session, view: Recorder) -> None:
    open_clip(session, "a.mp4")
    ask(session, "What moves?", "A square.")
    session.handle(RequestStarted("ask", request_id=99))
    session.handle(RequestFinished("ask", "done", request_id=99))
    assert len(session.conversation.turns) == 1, "an answer the session did not ask for changes nothing"
    serve(session, "new_conversation", 98, [ConversationReset("asked", "a.mp4", "/clips/a.mp4", request_id=98)])
    assert session.conversation.turns == [] and view.notices[-1] == "Asking about a.mp4"


def test_re_sampling_by_new_settings_says_why_the_conversation_restarted(session: Session, view: Recorder) -> None:
    open_clip(session, "a.mp4")
    ask(session, "What moves?", "A square.")
    settings = AppSettings().replace("sampling", max_frames=6)
    assert session.apply_settings(settings)
    assert session.settings == AppSettings(), "settings are the session's once the engine has applied them"
    request_id = len(session.port.sent)  # type: ignore[attr-defined]
    serve(session, "apply_settings", request_id, open_events("a.mp4", request_id, reason="resampled"))
    assert session.settings == settings and view.applied == [settings] and session.conversation.turns == []
    assert view.notices[-1] == "The new settings read a.mp4 again; the conversation starts afresh"
    assert view.passes[-1] == (request_id, "a.mp4")
    assert not session.apply_settings(settings), "the applied settings are not sent again"


def test_each_item_keeps_what_encoding_it_reported_and_a_new_clip_waits_for_its_own(session: Session) -> None:
    first = open_clip(session, "a.mp4")
    opened = session.clip
    assert session.summary_of(opened) is not None and session.summary_of(opened).request_id == first
    session.add_clip("/clips/b.mp4")
    added = len(session.port.sent)  # type: ignore[attr-defined]
    serve(session, "add_clip", added, [sampled("b.mp4", added), encoded("b.mp4", added)])
    item = session.added[0][0]
    assert session.summary_of(item).clip_name == "b.mp4" and session.summary_of(opened).clip_name == "a.mp4"
    assert session.summary_of(sampled("c.mp4", 99)) is None

    session.open_clip("/clips/c.mp4")
    second = len(session.port.sent)  # type: ignore[attr-defined]
    session.handle(RequestStarted("open_clip", request_id=second))
    *before_done, done = open_events("c.mp4", second)
    for event in before_done:
        session.handle(event)
    assert session.clip.clip_name == "c.mp4" and session.summary_of(session.clip) is None, "not a's summary"
    session.handle(done)
    assert session.summary_of(session.clip) == done


def test_refused_settings_change_nothing_and_say_which_field(session: Session, view: Recorder) -> None:
    wanted = AppSettings().replace("model", source="/nowhere")
    session.apply_settings(wanted)
    request_id = len(session.port.sent)  # type: ignore[attr-defined]
    failure = Failed("ModelLoadError", "no model", field="model.source", request_id=request_id)
    serve(session, "apply_settings", request_id, [failure], "failed")
    assert session.settings == AppSettings() and view.applied == []
    assert view.refused == [(wanted, failure)]


def test_saved_settings_that_fail_at_start_fall_back_to_the_defaults(port: RecordingPort, view: Recorder) -> None:
    saved = AppSettings().replace("model", source="/moved-away")
    session = Session(port, saved)
    view.follow(session.signals)
    session.start()
    failure = Failed("ModelLoadError", "gone", field="model.source", request_id=1)
    serve(session, "load", 1, [failure], "failed")
    assert view.fell_back == [(saved, failure)] and session.settings == AppSettings()
    assert port.sent[-1] == ("apply_settings", AppSettings())
    serve(session, "apply_settings", 2, [INFO])
    assert view.applied == [], "the fallback is not kept over the saved settings"
    assert session.info == INFO and session.operation is None


def test_failures_name_the_request_they_belong_to(session: Session, view: Recorder) -> None:
    session.apply_settings(AppSettings().replace("model", source="/nowhere"))
    request_id = len(session.port.sent)  # type: ignore[attr-defined]
    serve(session, "apply_settings", request_id, [Failed("ModelLoadError", "no model", request_id=request_id)], "failed")
    assert view.errors == ["Could not apply the settings: no model"]


class QueuedPort:
    """Queues each request and, on :meth:`drain`, runs them on the fake engine in order, bracketed as the worker does."""

    def __init__(self, settings: AppSettings) -> None:
        self.session: Session | None = None
        self.engine = FakeEngine(settings, self._send)
        self._queue: list[tuple[int, RequestKind, Callable[[int], object]]] = []
        self._ids = itertools.count(1)

    def drain(self) -> None:
        while self._queue:
            request_id, kind, work = self._queue.pop(0)
            self._run(request_id, kind, work)

    def _send(self, event: object) -> None:
        assert self.session is not None
        self.session.handle(event)

    def _queue_request(self, kind: RequestKind, work: Callable[[int], object]) -> int:
        request_id = next(self._ids)
        self._queue.append((request_id, kind, work))
        return request_id

    def _run(self, request_id: int, kind: RequestKind, work: Callable[[int], object]) -> None:
        self._send(RequestStarted(kind, request_id=request_id))
        outcome = "done"
        try:
            work(request_id)
        except CancelledError:
            outcome = "cancelled"
        except FramewiseError as error:
            self._send(Failed(type(error).__name__, str(error), request_id=request_id))
            outcome = "failed"
        self._send(RequestFinished(kind, outcome, request_id=request_id))  # type: ignore[arg-type]

    def load(self) -> int:
        return self._queue_request("load", lambda rid: self.engine.load(request_id=rid))

    def apply_settings(self, settings: AppSettings) -> int:
        return self._queue_request("apply_settings", lambda rid: self.engine.apply_settings(settings, request_id=rid))

    def submit(self, kind: RequestKind, call: BackendCall, cancellable: bool = False) -> int:
        return self._queue_request(kind, lambda rid: call(self.engine, rid))

    def cancel(self) -> None:
        self.engine.cancel()


def test_the_window_record_is_the_engines_through_clips_questions_and_settings(sample_clip: Path, tmp_path: Path) -> None:
    port = QueuedPort(AppSettings())
    session = port.session = Session(port, AppSettings())

    def kept() -> list[tuple[str, str]]:
        return [(turn.question, turn.answer) for turn in session.conversation.turns if turn.status == "done"]

    def then(action: Callable[[], object]) -> None:
        action()
        port.drain()

    then(session.start)
    assert session.info is not None and session.operation is None
    then(lambda: session.open_clip(str(sample_clip)))
    then(lambda: session.ask("What moves?"))
    then(lambda: session.ask("And then?"))
    assert port.engine.turns == kept() and len(kept()) == 2

    then(lambda: session.open_clip(str(tmp_path / "missing.mp4")))
    assert port.engine.turns == kept() and len(kept()) == 2, "a failed open changes neither record"

    then(lambda: session.apply_settings(AppSettings().replace("sampling", max_frames=8)))
    assert port.engine.turns == kept() == [], "re-sampled: both start afresh"
    assert len(session.clip.timestamps) == 8
    then(lambda: session.ask("What now?"))
    assert port.engine.turns == kept() and len(kept()) == 1
    then(session.new_conversation)
    assert port.engine.turns == kept() == [] and session.clip.path == str(sample_clip)


def test_an_answer_streams_without_the_space_its_first_token_starts_with(session: Session) -> None:
    """A picture's answer began " not move" while it streamed (issue 44, item 8)."""
    open_clip(session, "a.mp4")
    received: list[str] = []
    session.signals.token_received.connect(lambda turn, text: received.append(text))
    assert session.ask("What color?")
    request_id = len(session.port.sent)  # type: ignore[attr-defined]
    session.handle(RequestStarted("ask", request_id=request_id))
    for piece in (" ", " not", " move"):
        session.handle(Token(piece, request_id=request_id))
    assert session.conversation.turns[-1].answer == "not move" and received == ["not", " move"]


def test_a_picture_encoded_is_one_frame_not_one_frames(session: Session, view: Recorder) -> None:
    session.open_clip("/clips/a.png")
    request_id = len(session.port.sent)  # type: ignore[attr-defined]
    picture = EncodeDone("a.png", 1, 64, (0.0,), 1.0, 1.0, 4.0, 4.0, False, request_id=request_id)
    serve(session, "open_clip", request_id, [sampled("a.png", request_id), picture])
    assert any(status.startswith("a.png: 1 frame encoded in 4 ms") for status in view.statuses), view.statuses
