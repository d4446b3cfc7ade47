"""The encoder's numbers, computed once: ms per frame, graph hits per item, latency percentiles.

One denominator. Every per-frame number in Framewise divides by the frames *sampled from the clip*
(1 for an image). The frame repeated to complete a clip's last frame pair, and the rows a graph's
token budget holds beyond the real patches, are padding: their cost is in the milliseconds, never
in the count. A pass's number is :attr:`ChunkStats.ms_per_frame <framewise.core.events.ChunkStats.ms_per_frame>`;
an item's is its passes' milliseconds over its sampled frames.

One hit count. A hit is counted per item (DESIGN §3): an image, or a clip however many passes it
took, is a hit when every one of its passes replayed a captured graph, a miss otherwise.

:class:`EncoderMetricsAccumulator` keeps these over the engine's run and hands out
:class:`~framewise.core.events.EncoderMetrics` snapshots, which the engine sends as events; the
window and the CLI only render them.

One decode speed. An answer's tokens per second count the tokens after the first over the time
since the first arrived (:func:`decode_rate`): the wait for the first token is the prefill, reported
as the time to first token. Both backends measure it with :class:`DecodeSpeedMeter`, live while
the answer streams and once more when it ends.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Callable, Iterable, Sequence

import numpy as np

from framewise.core.events import AnswerSpeed, ChunkStats, EncoderMetrics

LATENCY_WINDOW = 1000
"""Passes the percentiles look back over: enough for a steady p99, bounded for a long-running window."""


def percentile(values: Iterable[float], q: float) -> float | None:
    """Nearest-rank percentile ``q`` (0-100) of ``values``: the smallest value with at least q% at or below it.

    ``None`` when ``values`` is empty. (numpy's ``inverted_cdf`` method is the nearest-rank definition.)
    """
    array = np.fromiter(values, dtype=np.float64)
    if array.size == 0:
        return None
    return float(np.percentile(array, q, method="inverted_cdf"))


class EncoderMetricsAccumulator:
    """Per-item hits and misses, pass counts, and per-frame latency over a bounded window of passes."""

    def __init__(self, window_size: int = LATENCY_WINDOW) -> None:
        if window_size < 1:
            raise ValueError(f"the latency window must hold at least one pass, not {window_size}")
        self.window_size = window_size
        self._ms_per_frame: deque[float] = deque(maxlen=window_size)
        self._items = 0
        self._item_hits = 0
        self._passes = 0
        self._eager_passes = 0
        self._last_item_ms_per_frame: float | None = None
        self._last_item_hit: bool | None = None

    def add_item(self, chunks: Sequence[ChunkStats]) -> EncoderMetrics:
        """Record the passes of one item (all of them, in order) and return the snapshot after it.

        The item's ms per frame is its passes' total milliseconds over their total sampled frames.
        """
        if not chunks:
            raise ValueError("an encoded item has at least one encoder pass")
        self._items += 1
        self._last_item_hit = all(chunk.graph_hit for chunk in chunks)
        self._item_hits += self._last_item_hit
        self._passes += len(chunks)
        self._eager_passes += sum(not chunk.graph_hit for chunk in chunks)
        self._ms_per_frame.extend(chunk.ms_per_frame for chunk in chunks)
        self._last_item_ms_per_frame = sum(chunk.encode_ms for chunk in chunks) / sum(chunk.frames for chunk in chunks)
        return self.snapshot()

    def snapshot(self) -> EncoderMetrics:
        """The numbers so far, as the event the engine sends."""
        return EncoderMetrics(
            items=self._items,
            item_hits=self._item_hits,
            passes=self._passes,
            eager_passes=self._eager_passes,
            window=len(self._ms_per_frame),
            window_size=self.window_size,
            ms_per_frame_p50=percentile(self._ms_per_frame, 50),
            ms_per_frame_p99=percentile(self._ms_per_frame, 99),
            last_item_ms_per_frame=self._last_item_ms_per_frame,
            last_item_hit=self._last_item_hit,
        )


def decode_rate(tokens: int, first_token_time: float | None, now: float) -> float:
    """An answer's decode speed at ``now``: ``(tokens - 1) / (now - first_token_time)`` tokens per second.

    Times are seconds on one clock (``time.perf_counter``). 0.0 before a second token, and when no
    time has passed since the first.
    """
    if first_token_time is None or tokens < 2 or now <= first_token_time:
        return 0.0
    return (tokens - 1) / (now - first_token_time)


class DecodeSpeedMeter:
    """Counts one answer's tokens as they arrive and reports the decode speed so far.

    A report (an :class:`~framewise.core.events.AnswerSpeed`) is due from the second token on, once
    at least ``interval_s`` has passed since the first token or the last report: the window redraws
    a few times a second instead of once per token.
    """

    interval_s = 0.25

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self._clock = clock
        self.tokens = 0
        self.first_token_time: float | None = None
        self._reported_at: float | None = None

    def add(self) -> AnswerSpeed | None:
        """Count one token; returns the speed so far when a report is due, else ``None``."""
        now = self._clock()
        if self.first_token_time is None:
            self.first_token_time = now
        self.tokens += 1
        since = self.first_token_time if self._reported_at is None else self._reported_at
        if self.tokens < 2 or now - since < self.interval_s:
            return None
        self._reported_at = now
        return AnswerSpeed(self.tokens, decode_rate(self.tokens, self.first_token_time, now))
