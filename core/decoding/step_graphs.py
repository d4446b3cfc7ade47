"""The one-token decode step, captured as one CUDA graph per context-length bucket.

A bucket is the number of cache positions a step reads. Every graph reads the same three static
input buffers (the token's embedding, its cache position and its rotary position), writes the
token's keys and values into the cache at that position (and moves any other layers' states on by
the token), attends over the bucket's leading positions only, and copies the logits into one
static output buffer. Graphs are captured largest bucket first into one memory pool, which the
decoder shares with its follow-up prefill graphs (a step and a prefill never run at once).
``direct`` runs the same step on the same buffers without a graph: the CPU's path, and the
fallback when capture fails.
"""

from __future__ import annotations

import bisect
import functools
import time
from typing import Callable

import torch

from framewise.core.decoding.defs import DecoderState, LanguageModel
from framewise.core.events import Progress
from framewise.core.graph_capture import GraphCapture, memory_reserved

ProgressCallback = Callable[[Progress], None]


def context_buckets(min_bucket: int, max_tokens: int) -> tuple[int, ...]:
    """Bucket lengths from ``min_bucket`` doubling up to ``max_tokens``, which is always the last.

    >>> context_buckets(256, 1400)
    (256, 512, 1024, 1400)
    """
    buckets = []
    length = min_bucket
    while length < max_tokens:
        buckets.append(length)
        length *= 2
    buckets.append(max_tokens)
    return tuple(buckets)


class StepGraphs:
    """The decode step for each bucket of ``state``'s cache, through CUDA graphs unless ``direct``."""

    def __init__(
        self,
        language: LanguageModel,
        state: DecoderState,
        buckets: tuple[int, ...],
        *,
        direct: bool,
        progress: ProgressCallback | None = None,
        capture: GraphCapture | None = None,
    ) -> None:
        self.language = language
        self.state = state
        self.buckets = buckets
        self.direct = direct
        device = state.kv.device
        # The graph's input is the token's embedding: the table may be on the host, out of its reach.
        self.embeds = language.embed(torch.zeros(1, 1, dtype=torch.long))
        self.cache_position = torch.zeros(1, dtype=torch.long, device=device)
        self.rope_position = torch.zeros(1, dtype=torch.long, device=device)
        self.logits = torch.zeros(1, language.vocab_size, dtype=torch.float32, device=device)
        self._graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self._progress = progress
        self.capture_seconds = 0.0
        self.graph_memory_bytes = 0
        if not direct:
            self._capture_all(capture or GraphCapture(device))

    def bucket_for(self, length: int) -> int:
        """The smallest bucket that holds ``length`` positions (the caller keeps it within the cache)."""
        return self.buckets[bisect.bisect_left(self.buckets, length)]

    def run(self, token: torch.Tensor, position: int, rope_position: int) -> tuple[torch.Tensor, bool]:
        """Decode ``token`` (1,) at cache ``position``; return the logits buffer (1, vocab) and
        whether a graph ran. The buffer is overwritten by the next call."""
        self.embeds.copy_(self.language.embed(token.view(1, 1)))
        self.cache_position.fill_(position)
        self.rope_position.fill_(rope_position)
        bucket = self.bucket_for(position + 1)
        graph = self._graphs.get(bucket)
        if graph is None:
            self._forward(bucket)
        else:
            graph.replay()
        return self.logits, graph is not None

    def clear(self) -> None:
        """Drop every graph (their pool memory is released when the last reference goes)."""
        self._graphs.clear()

    def _forward(self, bucket: int) -> None:
        self.state.kv.view_length = bucket
        self.logits.copy_(self.language.step(self.state, self.embeds, self.cache_position, self.rope_position))

    def _capture_all(self, capture: GraphCapture) -> None:
        device = self.state.kv.device
        memory_before = memory_reserved(device)
        started = time.perf_counter()
        ordered = sorted(self.buckets, reverse=True)
        # Every bucket warmed before any is captured: a warm-up's memory (over a long context in an
        # 8-bit cache, a layer's keys and values read back in bf16) is then never held beside the pool.
        capture.warm_before_capturing(functools.partial(self._forward, bucket) for bucket in reversed(ordered))
        for done, bucket in enumerate(ordered):
            report(self._progress, done, len(ordered), f"Capturing decode step graph for {bucket} positions")
            self._graphs[bucket] = capture.capture(lambda: self._forward(bucket), warm_up=False)
        torch.cuda.synchronize(device)
        self.capture_seconds = time.perf_counter() - started
        self.graph_memory_bytes = max(0, memory_reserved(device) - memory_before)
        report(self._progress, len(ordered), len(ordered), f"Captured {len(ordered)} decode step graphs")


def report(progress: ProgressCallback | None, current: int, total: int, message: str) -> None:
    """Send a capture ``Progress`` event to ``progress``, if there is one."""
    if progress is not None:
        progress(Progress(stage="capture", current=current, total=total, message=message))
