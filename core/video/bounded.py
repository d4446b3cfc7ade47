"""Reading a clip on a worker thread, bounded by a budget that follows the work.

The caller's thread only waits, polls ``should_cancel`` and reports progress, so it returns on
time even when the worker is stuck inside a decoder call. The worker reports how far into the
video it is; each further second of video must be reached within ``per_video_second_s`` of the
last, so a stalled read stops quickly while a long, valid clip is never refused for its length.

A worker told to stop ends at its next check. One stuck inside a native call cannot be ended
from Python: it is recorded (:func:`stuck_reads`), logged, keeps its file open until the call
returns, and no new read of that file starts while it is stuck.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from framewise.core.errors import CancelledError, DecodeTimeoutError, ReaderStuckError

log = logging.getLogger(__name__)

POLL_S = 0.02
PROGRESS_EVERY_S = 0.5  # a read shorter than this reports no progress
STOP_GRACE_S = 0.25  # how long a stopped worker may take to end before it counts as stuck
MAX_STUCK_READS = 4

Stage = Literal["open", "scan", "decode"]


@dataclass(frozen=True)
class ReadBudget:
    """How long reading may take: ``start_s`` to open the file and get through its first second
    of video (a network drive may be slow), then ``per_video_second_s`` for each further second,
    counted from the last one reached. A pass over the clip starts afresh with ``start_s``."""

    start_s: float = 30.0
    per_video_second_s: float = 10.0


@dataclass(frozen=True)
class ReadProgress:
    """How far reading has got: ``seconds`` of video passed in ``stage`` (``scan``: the packet
    pass that measures the clip; ``decode``: the pass that takes the frames), of ``total_s``
    seconds when known."""

    stage: Stage
    seconds: float
    total_s: float | None = None


class Stopped(Exception):
    """The caller gave up on the worker (budget spent or cancel); the worker just ends."""


class Guard:
    """Shared by the caller and the workers; each worker calls :meth:`check` once per packet.

    Several decoders may read one clip at once, each from its own place: each one's position
    counts on its own (a decoder that passes a whole second of video extends the deadline), and
    the progress is the video they have passed together. While a reading thread hands a frame on
    to a consumer that is behind (:meth:`handing_on`), the budget does not run: it is the file's.
    """

    def __init__(self, budget: ReadBudget) -> None:
        self.budget = budget
        self.stop = threading.Event()
        self.progress = ReadProgress("open", 0.0)
        self.started = time.monotonic()
        self.deadline = self.started + budget.start_s
        self._lock = threading.Lock()
        self._spans: dict[int, _Span] = {}  # per reading thread
        self._handing_on = 0  # reading threads waiting for the consumer of their frames

    def begin(self, stage: Stage, total_s: float | None = None) -> None:
        """A new pass over the clip: its position starts at 0 and it gets ``start_s`` to begin."""
        with self._lock:
            self.progress = ReadProgress(stage, 0.0, total_s)
            self._spans = {threading.get_ident(): _Span(0.0, 0.0, 1.0)}
            self.deadline = time.monotonic() + self.budget.start_s

    def check(self, position_s: float | None = None) -> None:
        """Raise :class:`Stopped` when the caller gave up or the budget is spent; ``position_s``
        is how far into the video (seconds) the calling thread's decoder has got."""
        if self.stop.is_set():
            raise Stopped
        if position_s is not None:
            self._advance(position_s)
        if self.expired():
            raise Stopped

    @contextmanager
    def handing_on(self) -> Iterator[None]:
        """A reading thread hands a kept frame on, and may wait for its consumer (the encoder, when
        it is behind the reading): the deadline does not run meanwhile, and a frame handed on is
        progress, so it starts afresh with ``per_video_second_s`` after."""
        with self._lock:
            self._handing_on += 1
        try:
            yield
        finally:
            with self._lock:
                self._handing_on -= 1
                self.deadline = max(self.deadline, time.monotonic() + self.budget.per_video_second_s)

    def seconds_left(self) -> float:
        return max(self.deadline - time.monotonic(), 0.001)

    def expired(self) -> bool:
        return not self._handing_on and time.monotonic() > self.deadline

    def _advance(self, position_s: float) -> None:
        with self._lock:
            reader = threading.get_ident()
            span = self._spans.get(reader)
            if span is None:  # a decoder that starts where it is
                span = self._spans[reader] = _Span(position_s, position_s, math.floor(position_s) + 1.0)
            if position_s <= span.last_s:
                return
            span.last_s = position_s
            if position_s >= span.next_mark_s:
                span.next_mark_s = math.floor(position_s) + 1.0
                self.deadline = time.monotonic() + self.budget.per_video_second_s
            passed = sum(each.last_s - each.first_s for each in self._spans.values())
            self.progress = ReadProgress(self.progress.stage, passed, self.progress.total_s)


@dataclass
class _Span:
    """The video one decoder has passed: from ``first_s`` to ``last_s``; passing ``next_mark_s``
    extends the deadline."""

    first_s: float
    last_s: float
    next_mark_s: float


@dataclass(frozen=True)
class StuckRead:
    """A read that was stopped but has not returned from a native call; it holds ``path`` open."""

    path: Path
    thread: threading.Thread
    stopped_at: float  # time.monotonic()


_stuck: dict[threading.Thread, StuckRead] = {}
_stuck_lock = threading.Lock()


def stuck_reads() -> tuple[StuckRead, ...]:
    """Reads still stuck inside a decoder call after they were stopped, oldest first."""
    with _stuck_lock:
        for thread in [thread for thread in _stuck if not thread.is_alive()]:
            del _stuck[thread]
        return tuple(sorted(_stuck.values(), key=lambda read: read.stopped_at))


def run_bounded(
    work: Callable[[Guard], Any],
    path: Path,
    budget: ReadBudget,
    should_cancel: Callable[[], bool] | None = None,
    on_progress: Callable[[ReadProgress], None] | None = None,
) -> Any:
    """Run ``work(guard)`` on a daemon thread; return its result or raise its error, a
    :class:`DecodeTimeoutError` when the budget runs out, or a :class:`CancelledError`.

    ``should_cancel`` is polled and ``on_progress`` called on the caller's thread. However the
    call ends (a KeyboardInterrupt included), the worker is told to stop.
    """
    cancelled = should_cancel or (lambda: False)
    if cancelled():
        raise CancelledError(f"Reading {path.name} was cancelled.")
    _refuse_if_stuck(path)
    guard = Guard(budget)
    outcome: dict[str, Any] = {}
    thread = threading.Thread(
        target=_work_on, args=(work, guard, outcome, path), name=f"framewise-decode {path.name}", daemon=True
    )
    thread.start()
    reported: tuple[ReadProgress | None, float] = (None, guard.started)
    try:
        while thread.is_alive():
            thread.join(POLL_S)
            if not thread.is_alive():
                break
            if cancelled():
                raise CancelledError(f"Reading {path.name} was cancelled.")
            if guard.expired():
                break
            if on_progress is not None and guard.progress != reported[0]:
                if time.monotonic() - reported[1] >= PROGRESS_EVERY_S:
                    reported = (guard.progress, time.monotonic())
                    on_progress(reported[0])
    finally:
        if thread.is_alive():
            guard.stop.set()
            _settle(thread, path)
    if "error" in outcome:
        raise outcome["error"]
    if "result" not in outcome:
        raise DecodeTimeoutError(_timeout_message(path, guard, stuck=thread.is_alive()))
    return outcome["result"]


def _work_on(work: Callable[[Guard], Any], guard: Guard, outcome: dict[str, Any], path: Path) -> None:
    try:
        outcome["result"] = work(guard)
    except Stopped:
        pass
    except BaseException as error:  # handed to the caller's thread as is
        outcome["error"] = error
    finally:
        with _stuck_lock:
            stuck = _stuck.pop(threading.current_thread(), None)
        if stuck is not None:
            log.info("reading %s returned %.1f s after it was stopped", path, time.monotonic() - stuck.stopped_at)


def _settle(thread: threading.Thread, path: Path) -> None:
    """Give a stopped worker a moment to end; one that does not is stuck in a native call."""
    thread.join(STOP_GRACE_S)
    if thread.is_alive():
        with _stuck_lock:
            _stuck[thread] = StuckRead(path=path, thread=thread, stopped_at=time.monotonic())
        log.warning(
            "reading %s was stopped but is still inside a decoder call; its thread holds the file open "
            "until that call returns (%d read(s) stuck)", path, len(stuck_reads())
        )


def _refuse_if_stuck(path: Path) -> None:
    """Refuse to start another read of a file whose earlier read is stuck, or any read when too
    many are stuck: each one holds a thread and an open file."""
    stuck = stuck_reads()
    for read in stuck:
        if read.path == path:
            read.thread.join(STOP_GRACE_S)
            if read.thread.is_alive():
                raise ReaderStuckError(
                    f"An earlier read of {path.name} is still stuck inside the decoder "
                    f"({time.monotonic() - read.stopped_at:.0f} s after it was stopped) and holds the file open, "
                    "so Framewise does not start another. If the file is on a network or removable drive, "
                    "check that it still answers; otherwise restart Framewise."
                )
    if len(stuck_reads()) >= MAX_STUCK_READS:
        raise ReaderStuckError(
            f"{MAX_STUCK_READS} earlier reads are still stuck inside the decoder, each holding its file open; "
            "restart Framewise to release them, then open the clip again."
        )


def _timeout_message(path: Path, guard: Guard, *, stuck: bool) -> str:
    progress, budget = guard.progress, guard.budget
    if progress.stage == "open" or progress.seconds < 1.0:
        where = "it did not get through its first second of video"
    else:
        where = f"it got {progress.seconds:.0f} s into the video, then no further"
    message = (
        f"Reading {path.name} stopped making progress: {where} in the time allowed "
        f"({budget.start_s:g} s to start, then {budget.per_video_second_s:g} s per second of video). "
        "The file may be damaged, or on a drive that stopped answering: check that it plays, "
        "or re-encode it (MP4, H.264) and try again."
    )
    if stuck:
        message += " The read is still stuck inside the decoder and holds the file open until it returns."
    return message
