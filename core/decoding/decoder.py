"""Answers decoded over a static KV cache: prefill only what the cache does not hold, then one
token per step through the step graphs (or the same step run directly).

:class:`Decoder` owns the cache and the graphs for the life of a loaded model. Per question it
finds the longest prefix of the new prompt the cache already holds for the same clip (the
system text, the clip's video tokens and time markers, the turns so far), prefills the rest,
and decodes until an end-of-answer token, ``max_new_tokens``, a stop request, or the end of the
cache. The cache's record of which tokens it holds is updated only after a pass has written
them, so a cancelled or failed answer leaves it consistent.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from framewise.core.decoding.defs import LanguageModel, VisionRows
from framewise.core.decoding.kv_cache import StaticKVCache
from framewise.core.decoding.prefill_graphs import PrefillGraphs
from framewise.core.decoding.pruned_positions import UnprunedPrompt, prompt_positions
from framewise.core.decoding.step_graphs import ProgressCallback, StepGraphs, context_buckets
from framewise.core.encoding.defs import EncodedItem
from framewise.core.errors import FramewiseError, SettingsError
from framewise.core.seam import FamilyLimits, PieceGrid, VisionSpan
from framewise.core.settings import AppSettings, context_needed

# Share of the free device memory the cache may take; the rest is left for activations.
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

    def vision_rows(self, start: int) -> VisionRows | None:
        """The features of the tokens from ``start`` on, or ``None`` when no span reaches past it.

        Raises ValueError when a span points outside the prompt or past its item's features.
        """
        length = self.input_ids.shape[1]
        placed = sorted((span for span in self.spans if span.end > start), key=lambda span: span.start)
        if not placed:
            return None
        mask = torch.zeros(1, length - start, dtype=torch.bool)
        embeds, deepstack = [], []
        for span in placed:
            if span.item >= len(self.items) or span.end > length:
                raise ValueError(f"{span} points outside the prompt ({length} tokens, {len(self.items)} items)")
            item = self.items[span.item]
            skipped = max(start - span.start, 0)  # tokens of the span the cache already holds
            rows = slice(span.row + skipped, span.row + span.length)
            if rows.stop > item.embeds.shape[0]:
                raise ValueError(f"{span} reads past item {span.item}'s {item.embeds.shape[0]} feature rows")
            mask[0, span.start + skipped - start : span.end - start] = True
            embeds.append(item.embeds[rows])
            deepstack.append([layer[rows] for layer in item.deepstack])
        return VisionRows(
            mask=mask,
            embeds=torch.cat(embeds),
            deepstack=tuple(torch.cat(layers) for layers in zip(*deepstack)),
        )


@dataclass(frozen=True)
class SamplingRule:
    """How the next token is picked: greedy at temperature 0, else sampled from softmax(logits / T)."""

    max_new_tokens: int
    temperature: float = 0.0
    eos_token_ids: frozenset[int] = frozenset()


@dataclass
class Decoded:
    """What one answer produced and cost. ``step_ms`` holds the wall time of every decode step;
    ``prefill_graph`` says whether the prefill replayed a follow-up prefill graph."""

    token_ids: list[int] = field(default_factory=list)
    prompt_tokens: int = 0
    prefix_tokens_reused: int = 0
    prefill_ms: float = 0.0
    prefill_graph: bool = False
    graph_steps: int = 0
    eager_steps: int = 0
    step_ms: list[float] = field(default_factory=list)
    stop_reason: str = ""


class Decoder:
    """A static KV cache of ``max_tokens`` positions (rounded up to ``CONTEXT_ALIGNMENT``) for
    ``language``, and its decode step graphs.

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
    ) -> None:
        self.language = language
        max_tokens = CONTEXT_ALIGNMENT * math.ceil(max_tokens / CONTEXT_ALIGNMENT)
        self.cache = StaticKVCache(
            language.layers, language.kv_heads, language.head_dim, max_tokens, language.dtype, language.device
        )
        buckets = context_buckets(min(min_bucket, max_tokens), max_tokens)
        self.graphs_reason = ""
        self._rope_offset = 0
        self.steps = self._build_steps(buckets, use_graphs, progress)
        self.prefills = self._build_prefills(buckets, progress)
        self.cache.forget()  # capture ran passes over the empty cache

    @property
    def graphs_enabled(self) -> bool:
        return not self.steps.direct

    @property
    def max_tokens(self) -> int:
        return self.cache.max_tokens

    def close(self) -> None:
        """Release the graphs; the decoder must not be used afterwards."""
        self.steps.clear()
        self.prefills.clear()
        self.cache.forget()

    def answer(
        self,
        prompt: Prompt,
        rule: SamplingRule,
        on_token: Callable[[int], None],
        should_stop: Callable[[], bool],
    ) -> Decoded:
        """Decode an answer to ``prompt``, calling ``on_token`` with every new token id as it comes.

        Raises FramewiseError when the prompt alone does not fit the cache.
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
            token = self._prefill(prompt, ids, result, rule)
            result.token_ids.append(int(token))
            on_token(result.token_ids[-1])
            self._decode(token, len(ids), prompt, result, rule, on_token, should_stop)
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
        return StepGraphs(self.language, self.cache, buckets, direct=True)

    def _build_prefills(self, buckets: tuple[int, ...], progress: ProgressCallback | None) -> PrefillGraphs:
        """Follow-up prefill graphs where the steps have graphs; the same padded passes run directly
        otherwise, or when their capture fails (the reason joins :attr:`graphs_reason`)."""
        if self.graphs_enabled:
            try:
                with torch.inference_mode():
                    prefills = PrefillGraphs(self.language, self.cache, buckets, direct=False, progress=progress)
            except Exception as error:  # out of memory, an op that cannot be captured
                torch.cuda.empty_cache()
                self.graphs_reason += (
                    f"; capturing the follow-up prefill graphs failed ({type(error).__name__}: {error}): "
                    "follow-ups prefill eagerly"
                )
            else:
                self.graphs_reason += (
                    f"; {len(prefills.shapes)} follow-up prefill graphs in {prefills.capture_seconds:.1f} s, "
                    f"holding {prefills.graph_memory_bytes / 2**20:.0f} MiB"
                )
                return prefills
        return PrefillGraphs(self.language, self.cache, buckets, direct=True)

    def _capture(self, buckets: tuple[int, ...], progress: ProgressCallback | None) -> tuple[StepGraphs | None, str]:
        """The step graphs, or ``None`` and why capturing them failed."""
        try:
            with torch.inference_mode():
                return StepGraphs(self.language, self.cache, buckets, direct=False, progress=progress), ""
        except Exception as error:  # out of memory, a kernel that does not compile, an op that cannot be captured
            torch.cuda.empty_cache()
            return None, f"{type(error).__name__}: {error}"

    def _prefill(self, prompt: Prompt, ids: list[int], result: Decoded, rule: SamplingRule) -> torch.Tensor:
        cache = self.cache
        reused = cache.reusable_prefix(prompt.owner, ids)
        cache.tokens = ids[:reused]
        cache.owner = prompt.owner
        started = time.perf_counter()
        vision = prompt.vision_rows(reused)
        text_tail = reused > 0 and vision is None
        if text_tail:
            # Text after the cached prefix counts on from it: position p has rotary position
            # p + the offset the prefix's prefill found, on every axis.
            tail_rope = torch.arange(reused, len(ids)).expand(self.language.rope_axes, -1) + self._rope_offset
        else:
            positions = prompt_positions(
                self.language, prompt.input_ids, prompt.token_types, prompt.grids, prompt.unpruned
            )
            self._rope_offset = positions.rope_offset
            tail_rope = positions.rope[:, reused:]
        tail_ids = prompt.input_ids[:, reused:]
        if text_tail and self.prefills.takes(reused, tail_ids.shape[1]):
            logits, result.prefill_graph = self.prefills.run(reused, tail_ids, tail_rope)
        else:
            logits = self.language.prefill(cache, reused, tail_ids, tail_rope, vision)
        token = _pick(logits, rule.temperature)
        token.item()  # waits for the pass
        cache.tokens = list(ids)
        result.prefix_tokens_reused = reused
        result.prefill_ms = (time.perf_counter() - started) * 1e3
        return token.view(1)

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


def _pick(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """The next token (1,) from ``logits`` (1, vocab) float32, as ``generate()`` picks it: argmax,
    or a draw from softmax(logits / temperature)."""
    if temperature > 0:
        probabilities = torch.softmax(logits / temperature, dim=-1)
        return torch.multinomial(probabilities, num_samples=1).view(1)
    return logits.argmax(dim=-1)


def context_for(settings: AppSettings, language: LanguageModel, limits: FamilyLimits) -> int:
    """The decoder's context length for ``settings`` on ``language``'s device (a model of the
    family ``limits``), checked against the model's position limit and the free memory. An
    explicit setting that does not fit is a SettingsError saying how far to lower it; the
    automatic length is capped at what fits."""
    requested = settings.context_tokens(limits)
    explicit = settings.decoding.max_context_tokens > 0
    per_token = StaticKVCache.bytes_needed(language.layers, language.kv_heads, language.head_dim, 1, language.dtype)
    free = free_memory_bytes(language.device)
    fits = min(language.max_positions, int(free * CACHE_MEMORY_SHARE // per_token))
    fits -= fits % CONTEXT_ALIGNMENT
    if requested <= fits:
        return requested
    needed = context_needed(settings.sampling, settings.generation, limits=limits)
    if explicit or not needed.fits(fits):
        advice = (
            f"lower it to at most {fits:,}, or lower sampling max pixels or max new tokens"
            if needed.fits(fits)
            else f"the context must hold {needed.describe()}: lower sampling max pixels or max new tokens"
        )
        raise SettingsError(
            "decoding.max_context_tokens",
            f"{requested:,} tokens need {requested * per_token / 2**30:.2f} GiB of KV cache, but "
            f"{free / 2**30:.2f} GiB is free on {language.device.type} (the model takes at most "
            f"{language.max_positions:,} positions); {advice}",
        )
    return fits


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
