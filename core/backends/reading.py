"""The read flow both backends share, and the one summary of an item they opened.

:class:`FileRead` reads a file a backend is asked to open and reports it alike for both: "Reading
<name>" at once; a still picture is read whole (:meth:`FileRead.picture`); a clip is sampled on a
thread of its own while the backend's thread takes its frames (the local engine encodes them pass
by pass as they arrive; the vLLM backend waits for all of them) and reports, in between, how far
reading has got and the frames read so far (:meth:`FileRead.clip`, :meth:`FileRead.whole_clip`).
:func:`encode_done` is the :class:`~framewise.core.events.EncodeDone` every backend sends for an
item it opened.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from framewise.core.events import ChunkStats, EncodeDone, EncoderMetrics, EventSink, Progress
from framewise.core.video import ReadProgress, SampledClip, SampledFrames
from framewise.core.video.feed import WAIT_S, FrameArrivals
from framewise.core.video.read_report import reading_events
from framewise.core.video.still import read_still

T = TypeVar("T")

# Sample the clip, handing each progress report to the callable given; the frames go to the sink
# the sampling was set up with.
Sample = Callable[[Callable[[ReadProgress], None]], SampledClip]
# What the backend's thread does while the clip is read, given the report to send between its steps.
Take = Callable[[Callable[[], None]], T]


class FileRead:
    """Reading the file at ``path`` for a backend, whose events go to ``emit``."""

    def __init__(self, path: Path, emit: EventSink) -> None:
        self.path = path
        self._emit = emit
        emit(Progress("decode", 0, 1, f"Reading {path.name}"))
        self.started = time.perf_counter()

    def picture(self) -> SampledFrames | None:
        """The file as a still picture: one frame (1, H, W, 3) uint8 RGB at time 0, upright; ``None``
        when it is a clip (or a file only sampling it as a clip can say what is wrong with)."""
        still = read_still(self.path)
        if still is None:
            return None
        info = still.info
        return SampledFrames(
            still.pixels[None], (0.0,), self.path.name, self.path, self._ms_so_far(),
            (info.width, info.height, 0.0), damage=still.damage,
        )

    def clip(
        self, sample: Sample, arrivals: FrameArrivals, take: Take[T], ended: Callable[[], None]
    ) -> tuple[SampledFrames, T]:
        """Sample the clip on a reading thread while this thread runs ``take(report)``; ``report``
        sends how far reading has got and the frames ``arrivals`` (filled by the sampling's sink) got
        since the last report. ``ended`` runs on the reading thread however the read ends.

        Returns the frames read, with the time reading alone took, and what ``take`` returned.
        Raises what the read raised (``take``'s own error first).
        """
        reading = _Reading(sample, ended, self.path.name)

        def report() -> None:
            elapsed_s = time.perf_counter() - self.started
            for event in reading_events(self.path.name, reading.take_progress(), arrivals, elapsed_s):
                self._emit(event)

        try:
            taken = take(report)
        finally:
            reading.join()
        sampled = reading.result()
        decode_ms = (reading.finished - self.started) * 1e3  # the reading alone; what take did overlapped it
        return SampledFrames.read(sampled, self.path, decode_ms), taken

    def whole_clip(self, sample: Sample, arrivals: FrameArrivals) -> SampledFrames:
        """Sample the clip as :meth:`clip` does, reporting while this thread waits for its end."""
        done = threading.Event()

        def wait(report: Callable[[], None]) -> None:
            while not done.wait(WAIT_S):
                report()

        return self.clip(sample, arrivals, wait, done.set)[0]

    def _ms_so_far(self) -> float:
        return (time.perf_counter() - self.started) * 1e3


class _Reading:
    """``sample(on_progress)`` on a thread of its own; its latest progress is kept for the backend's
    thread to report, and ``ended`` runs however the read ends."""

    def __init__(self, sample: Sample, ended: Callable[[], None], name: str) -> None:
        self._progress: ReadProgress | None = None
        self._outcome: SampledClip | BaseException | None = None
        self.finished = 0.0  # time.perf_counter() when the read ended

        def run() -> None:
            try:
                self._outcome = sample(self._keep_progress)
            except BaseException as error:  # handed to the backend's thread by result()
                self._outcome = error
            finally:
                self.finished = time.perf_counter()
                ended()

        self._thread = threading.Thread(target=run, name=f"framewise-read {name}", daemon=True)
        self._thread.start()

    def _keep_progress(self, progress: ReadProgress) -> None:
        self._progress = progress

    def take_progress(self) -> ReadProgress | None:
        """The progress reported since the last call, if any."""
        progress, self._progress = self._progress, None
        return progress

    def join(self) -> None:
        self._thread.join()

    def result(self) -> SampledClip:
        """The sampled clip, or the error the read raised."""
        if isinstance(self._outcome, BaseException):
            raise self._outcome
        assert self._outcome is not None, "join() before result()"
        return self._outcome


def encode_done(
    sampled: SampledFrames,
    *,
    patches: int,
    video_tokens: int,
    preprocess_ms: float,
    kind: str = "video",
    span: tuple[float, float] | None = None,
    chunks: Sequence[ChunkStats] = (),
    metrics: EncoderMetrics | None = None,
    kept_tokens: int | None = None,
    kept_per_frame: Sequence[float] = (),
) -> EncodeDone:
    """What opening ``sampled`` (T frames) reported: its ``patches`` rows for the vision tower and
    the ``video_tokens`` they become, the ``preprocess_ms`` spent making them, the encoder's
    ``chunks`` (one per pass) and ``metrics`` after them (neither when the item is encoded
    elsewhere: its encoder numbers are then 0). After a pruning, ``kept_tokens`` of the tokens
    are left, ``kept_per_frame`` the share of each frame's (``None`` and empty: none was run).
    ``kind`` is ``"image"`` for a still picture; a closer look over ``span`` (start, end seconds)
    is named after the span as cut to the clip."""
    ms_per_frame, graph_hit = 0.0, False
    if metrics is not None:
        assert metrics.last_item_ms_per_frame is not None and metrics.last_item_hit is not None, "metrics without an item"
        ms_per_frame, graph_hit = metrics.last_item_ms_per_frame, metrics.last_item_hit
    summary = EncodeDone(
        clip_name=sampled.name,
        frames=len(sampled.timestamps),
        patches=patches,
        timestamps=tuple(sampled.timestamps),
        decode_ms=sampled.decode_ms,
        preprocess_ms=preprocess_ms,
        encode_ms=sum(chunk.encode_ms for chunk in chunks),
        ms_per_frame=ms_per_frame,
        graph_hit=graph_hit,
        sampling_mode=sampled.mode,
        chunks=tuple(chunks),
        kind=kind,
        duration_s=sampled.size_and_duration[2],
        damage=sampled.damage,
        video_tokens_before=video_tokens,
        video_tokens_after=video_tokens if kept_tokens is None else kept_tokens,
        kept_per_frame=tuple(kept_per_frame),
    )
    if span is None:
        return summary
    start, end = max(span[0], 0.0), min(span[1], summary.duration_s)
    return dataclasses.replace(summary, clip_name=f"{summary.clip_name} {start:.1f}–{end:.1f} s", span=(start, end))
