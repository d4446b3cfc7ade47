"""Answers decoded over a state allocated once: prefill only what the state does not hold, in
chunks, then one token per step through the step graphs (or the same step run directly).

:class:`Decoder` owns the language model's state (a static KV cache, or a hybrid model's KV cache
and linear-layer states) and the graphs for the life of a loaded model. Per question it finds the
longest prefix of the new prompt the state holds for the same clip (the system text, the clip's
video tokens and time markers, the turns so far; for a hybrid state only at the points
:mod:`~framewise.core.decoding.prefix_reuse` keeps), prefills the rest, and decodes until an
end-of-answer token, ``max_new_tokens``, a stop request, or the end of the cache.

A prompt longer than twice ``prefill_chunk_tokens`` is prefilled in chunks of at most that many
tokens (:func:`prefill_chunks`), each through the same passes, the state carrying from one to the
next, so that its activations do not grow with the prompt; a stop request is checked before each
chunk. The cache's record of which tokens it holds
grows only after a chunk or step has written them, so a stopped, cancelled or failed answer
leaves it naming exactly what the state holds, and the next question reuses that.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch

from framewise.core.decoding.defs import LanguageModel, VisionRows
from framewise.core.decoding.kv_cache import StaticKVCache
from framewise.core.decoding.prefill_graphs import CLIP_TOKEN_BUCKETS, PrefillGraphs
from framewise.core.decoding.prefix_reuse import SNAPSHOTS, prefix_keeper
from framewise.core.decoding.pruned_positions import UnprunedPrompt, prompt_positions
from framewise.core.decoding.step_graphs import ProgressCallback, StepGraphs, context_buckets
from framewise.core.encoding.defs import EncodedItem
from framewise.core.errors import FramewiseError, SettingsError
from framewise.core.graph_capture import GraphCapture
from framewise.core.seam import FamilyLimits, PieceGrid, VisionSpan
from framewise.core.settings import (
    FIELD_WORDS,
    PREFILL_CHUNK_TOKENS,
    AppSettings,
    ContextNeed,
    context_needed,
    largest_clip_pixels,
)

# Share of the free device memory the state may take; the rest is left for activations.
CACHE_MEMORY_SHARE = 0.8
# Context lengths are rounded up to this many positions: attention kernels want aligned rows.
CONTEXT_ALIGNMENT = 64


@dataclass(frozen=True)
class Prompt:
    """A prompt to answer: ``input_ids`` and the family's ``token_types`` (1, n) int64 on the CPU;
    ``spans``, where the encoded ``items`` go (none for a text-only prompt), and ``grids``, each
    item's ``(modality, grid_thw)``; ``owner``, the object that identifies the items (cache
    entries are re-used only for the same owner); ``unpruned``, for a prompt whose video tokens
    were pruned, the prompt it was cut from (its rotary positions come from that one)."""

    input_ids: torch.Tensor
    token_types: torch.Tensor
    spans: tuple[VisionSpan, ...] = ()
    grids: tuple[PieceGrid, ...] = ()
    items: tuple[EncodedItem, ...] = ()
    owner: Any = None
    unpruned: UnprunedPrompt | None = None

    @property
    def clip_end(self) -> int:
        """Where the prompt's clip prefix ends: the index past its last vision token (0 without
        any). What comes before is the same for every question about these items."""
        return max((span.end for span in self.spans), default=0)

    def vision_rows(self, start: int, stop: int | None = None, *, pin: bool = False) -> VisionRows | None:
        """The features of the tokens ``start .. stop - 1`` (to the prompt's end when ``stop`` is
        None), or ``None`` when no span reaches into them. With ``pin``, rows gathered from the
        host's memory (a long clip's features wait there) are gathered into pinned memory, which a
        pass copies to the device without waiting for the passes queued before it.

        Raises ValueError when a span points outside the prompt or past its item's features.
        """
        length = self.input_ids.shape[1]
        stop = length if stop is None else stop
        placed = sorted((span for span in self.spans if span.end > start and span.start < stop), key=lambda s: s.start)
        if not placed:
            return None
        mask = torch.zeros(1, stop - start, dtype=torch.bool)
        embeds, deepstack = [], []
        for span in placed:
            if span.item >= len(self.items) or span.end > length:
                raise ValueError(f"{span} points outside the prompt ({length} tokens, {len(self.items)} items)")
            item = self.items[span.item]
            first, end = max(span.start, start), min(span.end, stop)  # the span's tokens in the run
            rows = slice(span.row + first - span.start, span.row + end - span.start)
            if span.row + span.length > item.embeds.shape[0]:
                raise ValueError(f"{span} reads past item {span.item}'s {item.embeds.shape[0]} feature rows")
            mask[0, first - start : end - start] = True
            embeds.append(item.embeds[rows])
            deepstack.append([layer[rows] for layer in item.deepstack])
        return VisionRows(
            mask=mask,
            embeds=_joined(embeds, pin),
            deepstack=tuple(_joined(layers, pin) for layers in zip(*deepstack)),
        )


def _joined(rows: Sequence[torch.Tensor], pin: bool) -> torch.Tensor:
    """``rows`` (k_i, hidden) joined into one (sum k_i, hidden) tensor where they lie, in pinned
    memory when ``pin`` and they lie in the host's."""
    first = rows[0]
    if not (pin and first.device.type == "cpu"):
        return torch.cat(rows)
    joined = torch.empty((sum(part.shape[0] for part in rows), *first.shape[1:]), dtype=first.dtype, pin_memory=True)
    return torch.cat(rows, out=joined)


@dataclass(frozen=True)
class SamplingRule:
    """How the next token is picked: greedy at temperature 0, else sampled from softmax(logits / T)."""

    max_new_tokens: int
    temperature: float = 0.0
    eos_token_ids: frozenset[int] = frozenset()


@dataclass
class Decoded:
    """What one answer produced and cost. ``step_ms`` holds the wall time of every decode step;
    ``prefill_chunks`` counts the prefill's passes; ``prefill_graph`` says whether the prefill
    replayed a prefill graph, and ``graph_passes`` counts the passes that did. An answer stopped
    during its prefill has no tokens."""

    token_ids: list[int] = field(default_factory=list)
    prompt_tokens: int = 0
    prefix_tokens_reused: int = 0
    prefill_ms: float = 0.0
    prefill_chunks: int = 0
    prefill_graph: bool = False
    graph_passes: int = 0
    graph_steps: int = 0
    eager_steps: int = 0
    step_ms: list[float] = field(default_factory=list)
    stop_reason: str = ""


class Decoder:
    """The state of ``language`` for ``max_tokens`` positions (rounded up to
    ``CONTEXT_ALIGNMENT``), its decode step graphs and its follow-up prefill graphs; a prefill
    longer than twice ``prefill_chunk_tokens`` tokens runs in chunks of at most that many.

    ``use_graphs`` asks for CUDA graphs; on a CPU, or when capture fails, steps run directly
    and :attr:`graphs_reason` says why.
    """

    def __init__(
        self,
        language: LanguageModel,
        max_tokens: int,
        min_bucket: int,
        *,
        use_graphs: bool,
        progress: ProgressCallback | None = None,
        prefill_chunk_tokens: int = PREFILL_CHUNK_TOKENS,
    ) -> None:
        if prefill_chunk_tokens < 1:
            raise ValueError(f"a prefill chunk of {prefill_chunk_tokens} tokens: use at least one")
        self.language = language
        self.prefill_chunk_tokens = prefill_chunk_tokens
        max_tokens = CONTEXT_ALIGNMENT * math.ceil(max_tokens / CONTEXT_ALIGNMENT)
        self.state = language.new_state(max_tokens)
        buckets = context_buckets(min(min_bucket, max_tokens), max_tokens)
        self.graphs_reason = ""
        self._rope_offset = 0
        # One memory pool for the step and the follow-up prefill graphs: only one runs at a time.
        self._graph_capture = GraphCapture(language.device) if use_graphs and language.device.type == "cuda" else None
        self.steps = self._build_steps(buckets, use_graphs, progress)
        self.prefills = self._build_prefills(buckets, progress)
        self.state.reset()  # capture ran passes over the empty state
        self._prefix = prefix_keeper(self.state)

    @property
    def cache(self) -> StaticKVCache:
        """The state's KV cache, with the record of the tokens the whole state holds."""
        return self.state.kv

    @property
    def graphs_enabled(self) -> bool:
        return not self.steps.direct

    @property
    def max_tokens(self) -> int:
        return self.cache.max_tokens

    @property
    def state_bytes(self) -> int:
        """Device memory of the state and the snapshots kept of it."""
        return self.state.nbytes + self._prefix.nbytes

    def close(self) -> None:
        """Release the graphs; the decoder must not be used afterwards."""
        self.steps.clear()
        self.prefills.clear()
        self.state.reset()

    def answer(
        self,
        prompt: Prompt,
        rule: SamplingRule,
        on_token: Callable[[int], None],
        should_stop: Callable[[], bool],
    ) -> Decoded:
        """Decode an answer to ``prompt``, calling ``on_token`` with every new token id as it comes.
        ``should_stop`` is asked before every prefill chunk and every decode step.

        Raises FramewiseError when the prompt alone does not fit the cache. Whatever a pass
        raises, the state is left holding a prefix its record names before it is raised on.
        """
        ids = prompt.input_ids[0].tolist()
        if len(ids) >= self.cache.max_tokens:
            raise FramewiseError(
                f"The conversation ({len(ids)} tokens) no longer fits the decoder's context of "
                f"{self.cache.max_tokens} tokens; start a new conversation, or raise max context "
                "(decoding.max_context_tokens) in the settings."
            )
        result = Decoded(prompt_tokens=len(ids))
        with torch.inference_mode():
            try:
                token = self._prefill(prompt, ids, result, rule, should_stop)
                if token is None:
                    result.stop_reason = "cancelled"
                    return result
                result.token_ids.append(int(token))
                on_token(result.token_ids[-1])
                self._decode(token, len(ids), prompt, result, rule, on_token, should_stop)
            except BaseException:
                self._prefix.recover()
                raise
        return result

    # ------------------------------------------------------------------ internals

    def _build_steps(self, buckets: tuple[int, ...], use_graphs: bool, progress: ProgressCallback | None) -> StepGraphs:
        device = self.language.device
        if not use_graphs:
            self.graphs_reason = "decode graphs are off in the decoding settings: steps run eagerly"
        elif device.type != "cuda":
            self.graphs_reason = "CUDA not available: decode steps run eagerly on the CPU"
        else:
            steps, failure = self._capture(buckets, progress)
            if steps is None and self.language.step_kernels:
                # The kernels did not compile or capture: the same step as torch ops may still.
                self.language.disable_step_kernels()
                steps, second_failure = self._capture(buckets, progress)
                failure = f"{failure}; as torch ops: {second_failure}" if steps is None else failure
                kernel_note = f" (the step kernels failed: {failure})"
            else:
                kernel_note = ""
            if steps is not None:
                self.graphs_reason = (
                    f"{len(buckets)} decode graphs captured in {steps.capture_seconds:.1f} s, "
                    f"holding {steps.graph_memory_bytes / 2**20:.0f} MiB; steps run "
                    f"{self.language.step_description}{kernel_note}"
                )
                return steps
            self.graphs_reason = f"capturing the decode graphs failed ({failure}): steps run eagerly"
        return StepGraphs(self.language, self.state, buckets, direct=True)

    def _build_prefills(self, buckets: tuple[int, ...], progress: ProgressCallback | None) -> PrefillGraphs:
        """Follow-up prefill graphs where the steps have graphs; the same padded passes run directly
        otherwise, or when their capture fails (the reason joins :attr:`graphs_reason`)."""
        if self.graphs_enabled:
            try:
                with torch.inference_mode():
                    clip_buckets = CLIP_TOKEN_BUCKETS if self.language.vision_in_embeddings else ()
                    prefills = PrefillGraphs(
                        self.language, self.state, buckets, direct=False, clip_buckets=clip_buckets,
                        progress=progress, capture=self._graph_capture,
                    )
            except Exception as error:  # out of memory, an op that cannot be captured
                torch.cuda.empty_cache()
                self.graphs_reason += (
                    f"; capturing the prefill graphs failed ({type(error).__name__}: {error}): "
                    "prefills run eagerly"
                )
            else:
                self.graphs_reason += (
                    f"; {len(prefills.shapes)} prefill graphs in {prefills.capture_seconds:.1f} s, "
                    f"holding {prefills.graph_memory_bytes / 2**20:.0f} MiB"
                )
                return prefills
        return PrefillGraphs(self.language, self.state, buckets, direct=True)

    def _capture(self, buckets: tuple[int, ...], progress: ProgressCallback | None) -> tuple[StepGraphs | None, str]:
        """The step graphs, or ``None`` and why capturing them failed."""
        try:
            with torch.inference_mode():
                steps = StepGraphs(
                    self.language, self.state, buckets, direct=False, progress=progress, capture=self._graph_capture
                )
                return steps, ""
        except Exception as error:  # out of memory, a kernel that does not compile, an op that cannot be captured
            torch.cuda.empty_cache()
            return None, f"{type(error).__name__}: {error}"

    def _prefill(
        self, prompt: Prompt, ids: list[int], result: Decoded, rule: SamplingRule, should_stop: Callable[[], bool]
    ) -> torch.Tensor | None:
        """Prefill what the state does not hold of ``prompt`` (token ``ids``), chunk by chunk; the
        first answer token (1,), or None when ``should_stop`` said so before a chunk."""
        clip_end = prompt.clip_end
        reused = self._prefix.resume(prompt.owner, ids, clip_end)
        result.prefix_tokens_reused = reused
        started = time.perf_counter()
        text_tail = reused >= clip_end and reused > 0
        rope = self._tail_rope(prompt, reused, text_tail)
        logits = None
        cut = clip_end if self._prefix.snapshots_clip else 0
        for start, stop in prefill_chunks(reused, len(ids), cut, self.prefill_chunk_tokens):
            if should_stop():
                return None
            chunk_rope = rope[:, start - reused : stop - reused]
            tail_ids = prompt.input_ids[:, start:stop]
            vision = prompt.vision_rows(start, stop, pin=self.language.device.type == "cuda")
            # A pass of text (a follow-up; a first question's after a clip its state is kept at), or
            # of a clip whose features the embeddings carry, goes through a prefill graph where one
            # holds it.
            graphable = vision is None or self.language.vision_in_embeddings
            # Only the prompt's last pass gives the logits of the answer's first token.
            read = stop == len(ids)
            if graphable and self.prefills.takes(start, stop - start):
                logits, result.prefill_graph = self.prefills.run(start, tail_ids, chunk_rope, vision, logits=read)
                result.graph_passes += result.prefill_graph
            else:
                logits = self.language.prefill(self.state, start, tail_ids, chunk_rope, vision, logits=read)
            self.cache.tokens.extend(ids[start:stop])
            self._prefix.chunk_done(stop, clip_end)
            result.prefill_chunks += 1
        assert logits is not None  # the last pass read them (at least one token is always left to prefill)
        token = _pick(logits, rule.temperature)
        token.item()  # waits for the passes
        result.prefill_ms = (time.perf_counter() - started) * 1e3
        return token.view(1)

    def _tail_rope(self, prompt: Prompt, reused: int, text_tail: bool) -> torch.Tensor:
        """Rotary positions (axes, n - reused) of the prompt's tokens from ``reused`` on."""
        length = prompt.input_ids.shape[1]
        if text_tail:
            # Text after the cached prefix counts on from it: position p has rotary position
            # p + the offset the prefix's prefill found, on every axis.
            return torch.arange(reused, length).expand(self.language.rope_axes, -1) + self._rope_offset
        positions = prompt_positions(self.language, prompt.input_ids, prompt.token_types, prompt.grids, prompt.unpruned)
        self._rope_offset = positions.rope_offset
        return positions.rope[:, reused:]

    def _decode(
        self,
        token: torch.Tensor,
        position: int,
        prompt: Prompt,
        result: Decoded,
        rule: SamplingRule,
        on_token: Callable[[int], None],
        should_stop: Callable[[], bool],
    ) -> None:
        cache = self.cache
        while True:
            last = result.token_ids[-1]
            if last in rule.eos_token_ids:
                result.stop_reason = "end of answer"
                return
            if len(result.token_ids) >= rule.max_new_tokens:
                result.stop_reason = "max new tokens"
                return
            if should_stop():
                result.stop_reason = "cancelled"
                return
            if position >= cache.max_tokens:
                result.stop_reason = "context full"
                return
            started = time.perf_counter()
            logits, graph_hit = self.steps.run(token, position, position + self._rope_offset)
            token = _pick(logits, rule.temperature)
            token_id = int(token)  # waits for the step
            cache.tokens.append(last)
            result.step_ms.append((time.perf_counter() - started) * 1e3)
            result.graph_steps += graph_hit
            result.eager_steps += not graph_hit
            result.token_ids.append(token_id)
            position += 1
            on_token(token_id)


def prefill_chunks(start: int, end: int, cut: int, size: int) -> list[tuple[int, int]]:
    """The (start, stop) token ranges a prefill of tokens ``start .. end - 1`` runs in, none across
    ``cut`` (0 for none): a stretch of at most twice ``size`` tokens in one pass, a longer one in
    ``ceil(n / size)`` passes of near-equal length, so that no pass is a small remainder.

    >>> prefill_chunks(0, 30, 12, 4)
    [(0, 4), (4, 8), (8, 12), (12, 15), (15, 19), (19, 22), (22, 26), (26, 30)]
    """
    bounds = [start, *([cut] if start < cut < end else []), end]
    ranges: list[tuple[int, int]] = []
    for begin, stop in zip(bounds, bounds[1:]):
        count = stop - begin
        passes = 1 if count <= 2 * size else math.ceil(count / size)
        edges = [begin + count * index // passes for index in range(passes + 1)]
        ranges.extend(zip(edges, edges[1:]))
    return ranges


def _pick(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """The next token (1,) from ``logits`` (1, vocab) float32, as ``generate()`` picks it: argmax,
    or a draw from softmax(logits / temperature)."""
    if temperature > 0:
        probabilities = torch.softmax(logits / temperature, dim=-1)
        return torch.multinomial(probabilities, num_samples=1).view(1)
    return logits.argmax(dim=-1)


def context_for(settings: AppSettings, language: LanguageModel, limits: FamilyLimits) -> int:
    """The decoder's context length for ``settings`` on ``language``'s device (a model of the
    family ``limits``), checked against the model's position limit and the free memory: its state
    grows by the same bytes each token, beside a fixed part (a hybrid model's linear-layer states)
    the decoder also holds in its snapshots. An explicit setting that does not fit is a
    SettingsError saying how far to lower it; the automatic length is capped at what fits."""
    requested = settings.context_tokens(limits)
    explicit = settings.decoding.max_context_tokens > 0
    fixed = language.state_bytes(0) * (1 + len(SNAPSHOTS))
    per_token = language.state_bytes(1) - language.state_bytes(0)
    free = free_memory_bytes(language.device)
    fits = min(language.max_positions, max(0, int((free * CACHE_MEMORY_SHARE - fixed) // per_token)))
    fits -= fits % CONTEXT_ALIGNMENT
    if requested <= fits:
        return requested
    needed = context_needed(settings.sampling, settings.generation, limits=limits)
    if not explicit and not needed.fits(fits):
        raise _clip_too_large(settings, needed, fits, language.max_positions, limits)
    if explicit or not needed.fits(fits):
        advice = (
            f"lower it to at most {fits:,}, or lower sampling max pixels or max new tokens"
            if needed.fits(fits)
            else f"the context must hold {needed.describe()}: lower sampling max pixels or max new tokens"
        )
        fixed_words = f" and {fixed / 2**20:,.0f} MiB of linear-layer states" if fixed else ""
        raise SettingsError(
            "decoding.max_context_tokens",
            f"{requested:,} tokens need {requested * per_token / 2**30:.2f} GiB of KV cache{fixed_words}, but "
            f"{free / 2**30:.2f} GiB is free on {language.device.type} (the model takes at most "
            f"{language.max_positions:,} positions); {advice}",
        )
    return fits


def _clip_too_large(
    settings: AppSettings, needed: ContextNeed, fits: int, max_positions: int, limits: FamilyLimits
) -> SettingsError:
    """The error for an automatic context that cannot hold one question about the largest clip the
    sampling settings allow: the clip must shrink, to a pixel budget the context holds."""
    within = largest_clip_pixels(fits, settings.sampling, settings.generation, limits)
    pixels, frames = FIELD_WORDS["sampling.max_pixels"], FIELD_WORDS["sampling.max_frames"]
    advice = (
        f"lower {pixels} to at most {within:,} ({limits.video_tokens(within):,} video tokens), or {frames}"
        if within
        else f"lower {frames}"
    )
    return SettingsError(
        "sampling.max_pixels",
        f"the context must hold {needed.describe()}, but {fits:,} tokens fit here (the model takes at most "
        f"{max_positions:,} positions, and the KV cache must fit the free memory); {advice}",
    )


def free_memory_bytes(device: torch.device) -> int:
    """Memory free for the cache now: the GPU's free memory, or the machine's available memory."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free)
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
