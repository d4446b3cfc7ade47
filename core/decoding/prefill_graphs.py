"""A follow-up's text prefilled through CUDA graphs, one per token bucket and context bucket.

A follow-up question adds a few dozen text tokens after a conversation whose clip and earlier
turns the cache already holds. Run op by op, that prefill is bound by the host launching the
model's layers, not by the GPU (docs/benchmarks.md, "A follow-up's prefill"). Here the new tokens are
padded to a token bucket and the prefill replays a graph captured for that bucket and for the
context bucket holding its last position. The padding comes after the real tokens, so causal
attention keeps it out of their results; its cache entries lie past the conversation's end,
where each decode step writes its own position before it reads any (and a language model with
other layers' states leaves them as the last real token left them).

Every graph reads the same static buffers (the tokens' embeddings, cache positions, rotary
positions, the index of the last real token) through views of its bucket's length and writes one
logits buffer.
``direct`` runs the same padded pass without graphs (what a CPU test can check).
"""

from __future__ import annotations

import bisect
import functools
import time

import torch

from framewise.core.decoding.defs import DecoderState, LanguageModel
from framewise.core.decoding.step_graphs import ProgressCallback, report
from framewise.core.graph_capture import GraphCapture, memory_reserved

TOKEN_BUCKETS = (32, 64, 128, 256)
# Token id the padding carries: any id computes; a fixed one keeps replays deterministic.
PAD_TOKEN = 0


class PrefillGraphs:
    """Text prefills of up to ``token_buckets[-1]`` tokens over ``state``, through CUDA graphs unless
    ``direct``. A prefill whose padded tokens would pass the cache's end is not taken (:meth:`takes`)."""

    def __init__(
        self,
        language: LanguageModel,
        state: DecoderState,
        context_buckets: tuple[int, ...],
        *,
        direct: bool,
        token_buckets: tuple[int, ...] = TOKEN_BUCKETS,
        progress: ProgressCallback | None = None,
        capture: GraphCapture | None = None,
    ) -> None:
        self.language = language
        self.state = state
        self.token_buckets = tuple(bucket for bucket in token_buckets if bucket <= state.kv.max_tokens)
        self.context_buckets = context_buckets
        self.direct = direct
        longest = self.token_buckets[-1] if self.token_buckets else 0
        device = state.kv.device
        # The graphs' input is the tokens' embeddings: the table may be on the host, out of their reach.
        self.embeds = language.embed(torch.full((1, longest), PAD_TOKEN, dtype=torch.long))
        self._padding = language.embed(torch.tensor([[PAD_TOKEN]]))
        self.cache_positions = torch.zeros(longest, dtype=torch.long, device=device)
        self.rope = torch.zeros(language.rope_axes, longest, dtype=torch.long, device=device)
        self.last = torch.zeros(1, dtype=torch.long, device=device)
        self.logits = torch.zeros(1, language.vocab_size, dtype=torch.float32, device=device)
        self._graphs: dict[tuple[int, int], torch.cuda.CUDAGraph] = {}
        self._progress = progress
        self.capture_seconds = 0.0
        self.graph_memory_bytes = 0
        if not direct:
            self._capture_all(capture or GraphCapture(device))

    def takes(self, start: int, count: int) -> bool:
        """Whether a prefill of ``count`` tokens from cache position ``start`` fits a token bucket."""
        if not self.token_buckets or count > self.token_buckets[-1]:
            return False
        return start + self._token_bucket(count) <= self.state.kv.max_tokens

    def run(self, start: int, input_ids: torch.Tensor, rope: torch.Tensor) -> tuple[torch.Tensor, bool]:
        """Prefill ``input_ids`` (1, n) from cache position ``start`` with rotary positions ``rope``
        (axes, n), on the CPU or the device; return the last token's logits (1, vocab), a buffer the
        next call overwrites, and whether a graph ran. Only when :meth:`takes` says so."""
        count = input_ids.shape[1]
        tokens = self._token_bucket(count)
        context = self.context_buckets[bisect.bisect_left(self.context_buckets, start + tokens)]
        self.embeds[:, :count].copy_(self.language.embed(input_ids))
        self.embeds[:, count:tokens].copy_(self._padding.expand(1, tokens - count, -1))
        torch.arange(start, start + tokens, out=self.cache_positions[:tokens])
        self.rope[:, :count].copy_(rope)
        # The padding counts on from the last real token, as more text would.
        padding = torch.arange(1, tokens - count + 1, device=self.rope.device)
        self.rope[:, count:tokens].copy_(self.rope[:, count - 1 : count] + padding)
        self.last.fill_(count - 1)
        graph = self._graphs.get((tokens, context))
        if graph is None:
            self._forward(tokens, context)
        else:
            graph.replay()
        return self.logits, graph is not None

    def clear(self) -> None:
        """Drop every graph (their pool memory is released when the last reference goes)."""
        self._graphs.clear()

    def _token_bucket(self, count: int) -> int:
        return self.token_buckets[bisect.bisect_left(self.token_buckets, count)]

    def _forward(self, tokens: int, context: int) -> None:
        self.state.kv.view_length = context
        self.logits.copy_(
            self.language.text_prefill(
                self.state, self.embeds[:, :tokens], self.cache_positions[:tokens], self.rope[:, :tokens], self.last
            )
        )

    def _warm_up(self, tokens: int, context: int) -> None:
        self._place(tokens, context)
        self._forward(tokens, context)

    def _place(self, tokens: int, context: int) -> None:
        """Real-looking positions for a warm-up or capture of ``tokens`` over ``context``: the
        last ``tokens`` of the context."""
        torch.arange(context - tokens, context, out=self.cache_positions[:tokens])
        self.last.fill_(tokens - 1)

    @property
    def shapes(self) -> list[tuple[int, int]]:
        """Every (token bucket, context bucket) a prefill can need, largest first."""
        shapes = [
            (tokens, context)
            for tokens in self.token_buckets
            for context in self.context_buckets
            if context >= tokens
        ]
        return sorted(shapes, reverse=True)

    def _capture_all(self, capture: GraphCapture) -> None:
        device = self.state.kv.device
        memory_before = memory_reserved(device)
        started = time.perf_counter()
        shapes = self.shapes
        # One warm-up per token bucket, over its fewest positions (over more the same kernels run on
        # the same activation sizes and only attention reads more of the cache), all before any
        # capture, so that a warm-up's memory is never held beside the pool.
        fewest = {tokens: min(context for context in self.context_buckets if context >= tokens) for tokens in self.token_buckets}
        capture.warm_before_capturing(functools.partial(self._warm_up, tokens, context) for tokens, context in fewest.items())
        for done, (tokens, context) in enumerate(shapes):
            message = f"Capturing follow-up prefill graph for {tokens} tokens over {context} positions"
            report(self._progress, done, len(shapes), message)
            self._place(tokens, context)
            self._graphs[(tokens, context)] = capture.capture(
                functools.partial(self._forward, tokens, context), warm_up=False
            )
        torch.cuda.synchronize(device)
        self.capture_seconds = time.perf_counter() - started
        self.graph_memory_bytes = max(0, memory_reserved(device) - memory_before)
        report(self._progress, len(shapes), len(shapes), f"Captured {len(shapes)} follow-up prefill graphs")
