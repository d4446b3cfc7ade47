"""Frames handed on in chunks while a clip is still being read.

A reader puts each kept frame into a :class:`ChunkFeed` as soon as it is converted (parallel
decoders put theirs out of order); the feed gathers them in target order and, each time the
frames of the next chunk are all there, queues that chunk for the consumer (the engine's thread,
which preprocesses and encodes it). The queue holds at most ``max_chunks`` chunks: a reader that
gets that far ahead waits, so the frames waiting to be encoded are bounded by the chunks in
flight, not by the clip's length.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from framewise.core.errors import CancelledError

WAIT_S = 0.05  # how often a waiting reader or consumer looks up from the queue


@dataclass(frozen=True)
class FrameChunk:
    """Frames ``first .. first + len(times) - 1`` of the clip: ``frames`` (n, h, w, 3) uint8 and
    their ``times`` (n,) in seconds."""

    first: int
    frames: np.ndarray
    times: tuple[float, ...]


class FrameArrivals:
    """The frames put while a clip is read, kept for whoever reports them (a :class:`FrameSink`
    of its own, or part of a :class:`ChunkFeed`); safe to put into from several reader threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._count: int | None = None
        self._put: set[int] = set()
        self._arrived: list[tuple[int, np.ndarray, float]] = []  # put since the last take_arrived()

    def start(self, count: int, size: tuple[int, int]) -> None:
        """``count`` frames are coming (``size`` (h, w) is the reader's business, not this one's)."""
        with self._lock:
            self._count = count

    def put(self, index: int, rgb: np.ndarray, time_s: float) -> None:
        """Frame ``index`` (h, w, 3) uint8, shown at ``time_s``; a frame put again is not kept again."""
        with self._lock:
            if index not in self._put:
                self._put.add(index)
                self._arrived.append((index, rgb, time_s))

    def take_arrived(self) -> list[tuple[int, np.ndarray, float]]:
        """The frames put since the last call, in the order they came: (index, (h, w, 3) uint8, time)."""
        with self._lock:
            arrived, self._arrived = self._arrived, []
        return arrived

    def reading(self) -> bool:
        """Whether frames may still come: the clip's count unknown yet, or some not put."""
        with self._lock:
            return self._count is None or len(self._put) < self._count

    @property
    def frames_read(self) -> tuple[int, int | None]:
        """(frames read so far, the clip's frames; None until :meth:`start`)."""
        with self._lock:
            return len(self._put), self._count


class ChunkFeed:
    """Gathers frames put by reader threads into chunks and queues them for one consumer.

    ``chunk_sizes(count, size)`` gives the frames per chunk, in order, for a clip of ``count``
    frames of ``size`` = (h, w); the reader calls :meth:`start` with those once it knows them.
    """

    def __init__(self, chunk_sizes: Callable[[int, tuple[int, int]], Sequence[int]], max_chunks: int = 2) -> None:
        self._chunk_sizes = chunk_sizes
        self._ready: queue.Queue[FrameChunk | None] = queue.Queue(maxsize=max_chunks)
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._bounds: list[int] = []  # the first frame of each chunk, then the frame count
        self._next_chunk = 0
        self._waiting: dict[int, tuple[np.ndarray, float]] = {}
        self.arrivals = FrameArrivals()  # its own lock: a put holds _lock while it waits on the consumer

    def start(self, count: int, size: tuple[int, int]) -> None:
        """The clip has ``count`` frames of ``size``; chunks are cut as ``chunk_sizes`` says."""
        bounds = [0]
        for frames in self._chunk_sizes(count, size):
            bounds.append(bounds[-1] + frames)
        assert bounds[-1] == count, f"chunks of {bounds[-1]} frames for a clip of {count}"
        with self._lock:
            self._bounds = bounds
        self.arrivals.start(count, size)

    def put(self, index: int, rgb: np.ndarray, time_s: float) -> None:
        """Frame ``index`` of the clip, (h, w, 3) uint8, shown at ``time_s``. A frame put again
        (a filled gap) keeps its first value. Waits while the queue is full; raises
        :class:`CancelledError` once the consumer has closed the feed."""
        with self._lock:  # held while queueing too, so chunks reach the queue in clip order
            self.arrivals.put(index, rgb, time_s)
            if index >= self._first_waiting():
                self._waiting.setdefault(index, (rgb, time_s))
            for chunk in self._complete_chunks():
                self._queue(chunk)

    def end(self) -> None:
        """Reading is over (done or failed): the consumer's iteration ends after what is queued."""
        self._queue(None)

    def close(self) -> None:
        """The consumer stops: readers waiting on a full queue give up."""
        self._closed.set()

    def chunks(self, idle: Callable[[], None] = lambda: None) -> Iterator[FrameChunk]:
        """The chunks in clip order until :meth:`end`; ``idle`` runs every :data:`WAIT_S` while
        none is ready (the consumer's chance to report progress or notice a cancel)."""
        while True:
            try:
                chunk = self._ready.get(timeout=WAIT_S)
            except queue.Empty:
                idle()
                continue
            if chunk is None:
                return
            yield chunk

    @property
    def queued(self) -> int:
        """Chunks read but not yet taken by the consumer."""
        return self._ready.qsize()

    def _first_waiting(self) -> int:
        return self._bounds[self._next_chunk] if self._next_chunk < len(self._bounds) else 0

    def _complete_chunks(self) -> list[FrameChunk]:
        """Take every chunk, in order, whose frames have all been put (under the lock)."""
        chunks = []
        while self._next_chunk + 1 < len(self._bounds):
            first, stop = self._bounds[self._next_chunk], self._bounds[self._next_chunk + 1]
            if any(index not in self._waiting for index in range(first, stop)):
                break
            taken = [self._waiting.pop(index) for index in range(first, stop)]
            chunks.append(FrameChunk(first, np.stack([rgb for rgb, _ in taken]), tuple(t for _, t in taken)))
            self._next_chunk += 1
        return chunks

    def _queue(self, chunk: FrameChunk | None) -> None:
        while not self._closed.is_set():
            try:
                self._ready.put(chunk, timeout=WAIT_S)
                return
            except queue.Full:
                continue
        if chunk is not None:
            raise CancelledError("Cancelled.")
