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
positions, the index of the last real token) through views of its bucket's length and writes the
last real token's final hidden state into one buffer. The output head runs after the graph, only
for a pass whose logits are read (a first question's clip pass, cut at the clip's end, has none).
``direct`` runs the same padded pass without graphs (what a CPU test can check).

A language model whose vision features go into its input embeddings alone (no features added
inside the layers) can run a first question's clip pass the same way: its embeddings are the
tokens' with the features in place. That pass is longer than a follow-up and starts at the
cache's start, so for it there are larger token buckets (:data:`CLIP_TOKEN_BUCKETS`), each
captured once, over the fewest positions that hold it. A pass that fits one replays it; any other
runs op by op as before.
"""

from __future__ import annotations

import bisect
import functools
import time

import torch

from framewise.core.decoding.defs import DecoderState, LanguageModel, VisionRows
from framewise.core.decoding.step_graphs import ProgressCallback, report
from framewise.core.graph_capture import GraphCapture, memory_reserved

TOKEN_BUCKETS = (32, 64, 128, 256)
# A clip pass's buckets: multiples of 128, so a pass is padded by at most 127 tokens; up to 1,536,
# which holds a short clip's first pass (a longer one is bound by the GPU, not the host, and a
# larger bucket's activations would hold more of the shared pool).
CLIP_TOKEN_BUCKETS = tuple(range(384, 1536 + 1, 128))
# Token id the padding carries: any id computes; a fixed one keeps replays deterministic.
PAD_TOKEN = 0


class PrefillGraphs:
    """Prefills of up to ``token_buckets[-1]`` tokens of text over ``state``, through CUDA graphs
    unless ``direct``, and, with graphs, of up to ``clip_buckets[-1]`` tokens at the cache's start
    (a clip's pass, its features in the embeddings). A prefill whose padded tokens would pass the
    cache's end is not taken (:meth:`takes`), nor one of a clip bucket that no graph holds."""

    def __init__(
        self,
        language: LanguageModel,
        state: DecoderState,
        context_buckets: tuple[int, ...],
        *,
        direct: bool,
        token_buckets: tuple[int, ...] = TOKEN_BUCKETS,
        clip_buckets: tuple[int, ...] = (),
        progress: ProgressCallback | None = None,
        capture: GraphCapture | None = None,
    ) -> None:
        self.language = language
        self.state = state
        self.token_buckets = tuple(bucket for bucket in token_buckets if bucket <= state.kv.max_tokens)
        largest = self.token_buckets[-1] if self.token_buckets else 0
        self.clip_buckets = tuple(bucket for bucket in clip_buckets if largest < bucket <= state.kv.max_tokens)
        self._buckets = (*self.token_buckets, *self.clip_buckets)  # ascending: the clip buckets are larger
        self.context_buckets = context_buckets
        self.direct = direct
        longest = self._buckets[-1] if self._buckets else 0
        device = state.kv.device
        # The graphs' input is the tokens' embeddings: the table may be on the host, out of their reach.
        self.embeds = language.embed(torch.full((1, longest), PAD_TOKEN, dtype=torch.long))
        self._padding = language.embed(torch.tensor([[PAD_TOKEN]]))
        self.cache_positions = torch.zeros(longest, dtype=torch.long, device=device)
        self.rope = torch.zeros(language.rope_axes, longest, dtype=torch.long, device=device)
        self.last = torch.zeros(1, dtype=torch.long, device=device)
        self.hidden = torch.zeros(1, self.embeds.shape[-1], dtype=self.embeds.dtype, device=device)
        self._graphs: dict[tuple[int, int], torch.cuda.CUDAGraph] = {}
        self._progress = progress
        self.capture_seconds = 0.0
        self.graph_memory_bytes = 0
        if not direct:
            self._capture_all(capture or GraphCapture(device))

    def takes(self, start: int, count: int) -> bool:
        """Whether a prefill of ``count`` tokens from cache position ``start`` fits a token bucket
        (and, for a clip bucket, one of its graphs)."""
        buckets = self._buckets
        if not buckets or count > buckets[-1]:
            return False
        tokens = self._token_bucket(count)
        if start + tokens > self.state.kv.max_tokens:
            return False
        return tokens not in self.clip_buckets or (tokens, self._context(start + tokens)) in self._graphs

    def run(
        self, start: int, input_ids: torch.Tensor, rope: torch.Tensor, vision: VisionRows | None = None,
        *, logits: bool = True,
    ) -> tuple[torch.Tensor | None, bool]:
        """Prefill ``input_ids`` (1, n) from cache position ``start`` with rotary positions ``rope``
        (axes, n), on the CPU or the device, ``vision`` features in place of the embeddings of the
        tokens it marks (a language model whose features go into its embeddings alone); return the
        last token's logits (1, vocab) float32 (None without ``logits``: the output head is not
        run) and whether a graph ran. Only when :meth:`takes` says so."""
        count = input_ids.shape[1]
        tokens = self._token_bucket(count)
        context = self._context(start + tokens)
        embeds = self.language.embed(input_ids)
        self.embeds[:, :count].copy_(embeds if vision is None else vision.placed_in(embeds))
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
        return (self.language.head(self.hidden) if logits else None), graph is not None

    def clear(self) -> None:
        """Drop every graph (their pool memory is released when the last reference goes)."""
        self._graphs.clear()

    def _token_bucket(self, count: int) -> int:
        buckets = self._buckets
        return buckets[bisect.bisect_left(buckets, count)]

    def _context(self, end: int) -> int:
        """The context bucket that holds positions up to ``end``."""
        return self.context_buckets[bisect.bisect_left(self.context_buckets, end)]

    def _forward(self, tokens: int, context: int) -> None:
        self.state.kv.view_length = context
        self.hidden.copy_(
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
        """Every (token bucket, context bucket) a graph is captured for, largest first: a text
        bucket over every context that holds it, a clip bucket over the fewest."""
        shapes = [
            (tokens, context)
            for tokens in self.token_buckets
            for context in self.context_buckets
            if context >= tokens
        ]
        shapes += [(tokens, self._context(tokens)) for tokens in self.clip_buckets]
        return sorted(shapes, reverse=True)

    def _capture_all(self, capture: GraphCapture) -> None:
        device = self.state.kv.device
        memory_before = memory_reserved(device)
        started = time.perf_counter()
        shapes = self.shapes
        # One warm-up per token bucket, over its fewest positions (over more the same kernels run on
        # the same activation sizes and only attention reads more of the cache), all before any
        # capture, so that a warm-up's memory is never held beside the pool.
        fewest = {tokens: self._context(tokens) for tokens in self._buckets}
        capture.warm_before_capturing(functools.partial(self._warm_up, tokens, context) for tokens, context in fewest.items())
        for done, (tokens, context) in enumerate(shapes):
            message = f"Capturing prefill graph for {tokens} tokens over {context} positions"
            report(self._progress, done, len(shapes), message)
            self._place(tokens, context)
            self._graphs[(tokens, context)] = capture.capture(
                functools.partial(self._forward, tokens, context), warm_up=False
            )
        torch.cuda.synchronize(device)
        self.capture_seconds = time.perf_counter() - started
        self.graph_memory_bytes = max(0, memory_reserved(device) - memory_before)
        report(self._progress, len(shapes), len(shapes), f"Captured {len(shapes)} prefill graphs")
