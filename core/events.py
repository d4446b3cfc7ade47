"""Events the engine emits while it loads, encodes and answers.

Events are frozen dataclasses of plain data (numbers, strings, small numpy images; no tensors) so the GUI can
pass them across threads and the CLI can print them as JSON.

Every event carries ``request_id``: the id of the request it belongs to (loading the model, opening a
clip, asking, applying settings, starting a new conversation). The engine stamps it on every event it
sends while it serves that request, so a listener never has to infer ownership from the order of
events. :data:`NO_REQUEST` (0) marks an event not yet stamped: the parts below the engine (model
loading, graph capture, the encoders) build events without knowing the request.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterator, Literal, TypeVar, Union

import numpy as np

from framewise.core.memory_plan import HeldMemory
from framewise.core.seam import FamilyLimits
from framewise.core.wording import plural

NO_REQUEST = 0

RATE_MIN_TOKENS = 8
"""From this many tokens on, an answer's speed is shown as tokens per second; below, its count and
time. The rate is measured over the gaps after the first token, so under 8 tokens it rests on at
most six gaps, and one uneven step (the first after the prefill, a pause of the process) sways it
more than it tells: a 2-token answer, one gap, read 922.4 tokens/s."""

RequestKind = Literal["load", "open_clip", "add_clip", "look_closer", "ask", "apply_settings", "new_conversation"]
RequestOutcome = Literal["done", "cancelled", "failed"]
ResetReason = Literal["new_clip", "resampled", "asked"]
"""Why the conversation was emptied: a clip was opened (``new_clip``), new sampling or model settings
re-sampled the open clip (``resampled``), or a person asked for a new conversation (``asked``)."""


def _request_id() -> Any:
    """The ``request_id`` field every event ends with (keyword-only, so positional fields stay as they were)."""
    return field(default=NO_REQUEST, kw_only=True)


@dataclass(frozen=True)
class RequestStarted:
    """The engine started serving request ``request_id`` of ``kind``."""

    kind: RequestKind
    request_id: int = _request_id()


@dataclass(frozen=True)
class RequestFinished:
    """Request ``request_id`` ended; a ``failed`` one was preceded by a :class:`Failed` event of the same id.

    ``outcome`` is ``cancelled`` also for a request dropped before it started (Stop pressed while it waited).
    """

    kind: RequestKind
    outcome: RequestOutcome
    request_id: int = _request_id()

    @property
    def ok(self) -> bool:
        return self.outcome == "done"


@dataclass(frozen=True)
class ConversationReset:
    """The engine emptied its conversation record; later questions start afresh about ``clip_name``.

    ``clip_name`` / ``path`` name the open clip (``None`` when there is none; ``path`` is ``""`` for
    frames given directly).
    """

    reason: ResetReason
    clip_name: str | None
    path: str | None
    request_id: int = _request_id()


@dataclass(frozen=True)
class Progress:
    """Long work advancing: ``stage`` is e.g. ``"load"``, ``"capture"``, ``"decode"``, ``"encode"``."""

    stage: str
    current: int
    total: int
    message: str
    request_id: int = _request_id()


@dataclass(frozen=True)
class Token:
    """A piece of streamed answer text."""

    text: str
    request_id: int = _request_id()


@dataclass(frozen=True)
class AnswerSpeed:
    """How fast the answer being written is decoded, measured up to now.

    ``tokens_so_far`` counts the tokens generated so far; ``tokens_per_second_so_far`` is the decode
    speed over them, by the definition of :attr:`AnswerStats.tokens_per_second` (see
    :func:`framewise.core.metrics.decode_rate`). Sent while the answer streams, from the second token
    on and a few times a second at most; the answer's :class:`Done` carries the final figure.
    """

    tokens_so_far: int
    tokens_per_second_so_far: float
    request_id: int = _request_id()


@dataclass(frozen=True)
class ChunkStats:
    """One pass of the vision encoder: a graph replay or an eager forward.

    ``chunk_index`` numbers the passes of one request from 0.

    ``frames`` counts the sampled frames the pass encoded: the frame repeated to complete a clip's
    last frame pair and the padding rows of a graph's budget are not frames (their cost is in
    ``encode_ms``). ``budget`` is the captured graph's token budget (``None`` for eager);
    ``padding_fraction`` is the share of the budget's rows that held no real patch.
    """

    chunk_index: int
    items: int
    frames: int
    patches: int
    budget: int | None
    padding_fraction: float
    encode_ms: float
    graph_hit: bool
    fallback_reason: str | None = None
    request_id: int = _request_id()

    @property
    def ms_per_frame(self) -> float:
        """The pass's time per sampled frame (see :mod:`framewise.core.metrics` for the one denominator)."""
        return self.encode_ms / self.frames


@dataclass(frozen=True)
class ClipSampled:
    """A clip was opened and its frames sampled; ``thumbnails`` are small RGB previews, one per frame.

    ``thumbnails``: uint8 arrays of shape (h, w, 3); ``timestamps`` are seconds from the clip's start.
    ``kind`` is ``"image"`` for a still picture (one thumbnail, no timeline), else ``"video"``.
    ``sampling_mode``: ``"exact"`` or ``"fast"`` (see :class:`~framewise.core.settings.SamplingSettings`).
    """

    clip_name: str
    path: str
    timestamps: tuple[float, ...]
    thumbnails: tuple[np.ndarray, ...]
    width: int
    height: int
    duration_s: float
    kind: str = "video"
    sampling_mode: str = "exact"
    request_id: int = _request_id()


@dataclass(frozen=True)
class FramesRead:
    """Frames of a clip still being read, sent as they arrive so a window can show them before the
    clip is ready; :class:`ClipSampled` follows with every frame.

    ``indices`` are the frames' places among the clip's ``total`` sampled frames (they may come out
    of order: several decoders read at once); ``timestamps`` their times in seconds and
    ``thumbnails`` their small RGB previews, (h, w, 3) uint8, as :class:`ClipSampled`'s.
    """

    clip_name: str
    total: int
    indices: tuple[int, ...]
    timestamps: tuple[float, ...]
    thumbnails: tuple[np.ndarray, ...]
    request_id: int = _request_id()


@dataclass(frozen=True)
class EncodeDone:
    """A clip was decoded, preprocessed and encoded; follow-up questions reuse its features.

    ``frames`` are the sampled frames; ``ms_per_frame`` and ``graph_hit`` (every pass of the clip was
    a graph replay) are the clip's numbers as :class:`~framewise.core.metrics.EncoderMetricsAccumulator`
    computed them. ``sampling_mode`` is how the frames were taken (``"exact"`` or ``"fast"``).
    ``kind`` is ``"image"`` for a still picture (one image item), else ``"video"``; ``span`` is the
    (start, end) seconds a closer look sampled (``None``: the whole clip); ``duration_s`` the length
    of the clip read (0 for a picture, and where it is not known); ``damage`` what of the file could
    not be read, for a person (``None``: all of it).

    ``video_tokens_before`` and ``video_tokens_after`` count the item's vision tokens in the
    language model's prompt before and after pruning (a picture's, which are never pruned, too;
    equal when nothing was pruned; for an item encoded elsewhere, those sent). ``kept_per_frame``
    gives, for each sampled frame, the share of its slice's tokens that pruning kept, in [0, 1];
    empty when no pruning ran.
    """

    clip_name: str
    frames: int
    patches: int
    timestamps: tuple[float, ...]
    decode_ms: float
    preprocess_ms: float
    encode_ms: float
    ms_per_frame: float
    graph_hit: bool
    sampling_mode: str = "exact"
    chunks: tuple[ChunkStats, ...] = field(default_factory=tuple)
    kind: str = "video"
    span: tuple[float, float] | None = None
    duration_s: float = 0.0
    damage: str | None = None
    video_tokens_before: int = 0
    video_tokens_after: int = 0
    kept_per_frame: tuple[float, ...] = ()
    request_id: int = _request_id()

    @property
    def pruned(self) -> bool:
        """Whether pruning dropped any of the item's tokens."""
        return self.video_tokens_after < self.video_tokens_before

    def tokens_text(self) -> str:
        """The item's vision tokens for a person: ``"3,072 video tokens"``, or when pruned
        ``"12,288 → 3,072 video tokens"`` (``"tokens"`` for a picture)."""
        noun = "tokens" if self.kind == "image" else "video tokens"
        if self.pruned:
            return f"{self.video_tokens_before:,} → {self.video_tokens_after:,} {noun}"
        return f"{self.video_tokens_after:,} {noun}"


@dataclass(frozen=True)
class EncoderMetrics:
    """The encoder's numbers over the engine's run so far, computed once in core; widgets only render them.

    Hits are counted per item (an image, or a clip however many passes it took): an item is a hit
    when every one of its passes replayed a graph. ``ms_per_frame_p50`` / ``_p99`` are nearest-rank
    percentiles of the per-pass ms per sampled frame over the last ``window`` passes (at most
    ``window_size``); ``None`` before the first pass. ``last_item_*`` describe the item recorded last.
    """

    items: int
    item_hits: int
    passes: int
    eager_passes: int
    window: int
    window_size: int
    ms_per_frame_p50: float | None
    ms_per_frame_p99: float | None
    last_item_ms_per_frame: float | None
    last_item_hit: bool | None
    request_id: int = _request_id()

    @property
    def item_misses(self) -> int:
        return self.items - self.item_hits

    @property
    def hit_rate(self) -> float | None:
        """Share of items that went through graphs only; ``None`` before the first item."""
        return self.item_hits / self.items if self.items else None


@dataclass(frozen=True)
class DecoderStats:
    """How one answer was decoded.

    ``graph_steps``/``eager_steps`` count decode steps that replayed a CUDA graph or ran eagerly
    (the hits and misses); ``prefix_tokens_reused`` of the ``prompt_tokens`` were already in the
    KV cache, so the prefill ran over the rest (``prefill_tokens``) in ``prefill_ms``.
    ``ms_per_token_*`` are over the decode steps after the first token.
    """

    graphs_enabled: bool
    graph_steps: int
    eager_steps: int
    prompt_tokens: int
    prefix_tokens_reused: int
    prefill_tokens: int
    prefill_ms: float
    tokens_per_second: float
    ms_per_token_mean: float | None
    ms_per_token_p99: float | None
    context_tokens: int
    stop_reason: str

    def summary(self) -> str:
        """One line for a person: graph hits and misses, the prefill, the reused prefix, the speed
        (the mean step's time instead below :data:`RATE_MIN_TOKENS` tokens)."""
        return (
            f"graph steps {self.graph_steps}, eager steps {self.eager_steps}, "
            f"prefill {self.prefill_tokens} tokens in {self.prefill_ms:.0f} ms, "
            f"{self.prefix_tokens_reused} of {self.prompt_tokens} prompt tokens reused, {self._step_speed()}"
        )

    def _step_speed(self) -> str:
        steps = self.graph_steps + self.eager_steps
        if steps + 1 >= RATE_MIN_TOKENS:  # the first token comes from the prefill, not a step
            return f"{self.tokens_per_second:.1f} tokens/s"
        if self.ms_per_token_mean is None:
            return "no decode step"
        return f"{plural(steps, 'decode step')} of {self.ms_per_token_mean:.1f} ms"


@dataclass(frozen=True)
class ServerStats:
    """What a vLLM server reported about one answer.

    ``prompt_tokens``/``completion_tokens``/``cached_prompt_tokens`` come from the response's
    ``usage`` (``None`` when the server sent none); ``mm_cache_queries``/``mm_cache_hits`` are the
    server's multimodal cache counters from its Prometheus ``/metrics`` read after the answer
    (totals since the server started; ``None`` where it does not publish them).
    """

    url: str
    model: str
    prompt_tokens: int | None
    completion_tokens: int | None
    cached_prompt_tokens: int | None
    finish_reason: str | None
    mm_cache_queries: float | None = None
    mm_cache_hits: float | None = None

    def summary(self) -> str:
        """One line for a person: tokens in and out, the prefix cache and the multimodal cache."""
        parts = [
            f"prompt {_count(self.prompt_tokens)} tokens"
            + (f" ({self.cached_prompt_tokens} cached)" if self.cached_prompt_tokens else ""),
            f"completion {_count(self.completion_tokens)} tokens",
        ]
        if self.mm_cache_queries is not None:
            parts.append(f"multimodal cache {self.mm_cache_hits or 0:.0f} hits of {self.mm_cache_queries:.0f} queries")
        return ", ".join(parts)


def _count(value: int | None) -> str:
    return "?" if value is None else str(value)


@dataclass(frozen=True)
class AnswerStats:
    """What generating one answer cost (the clip's own costs are in its :class:`EncodeDone`).
    ``tokens_per_second`` is the decode speed after the first token
    (:func:`framewise.core.metrics.decode_rate`). ``server`` is set for an answer from a vLLM server."""

    time_to_first_token_ms: float
    new_tokens: int
    tokens_per_second: float
    cancelled: bool
    gpu_memory_mb: float | None = None
    decoder: DecoderStats | None = None
    server: ServerStats | None = None

    def speed_text(self) -> str:
        """The answer's speed and the tokens it covers, "41.2 tokens/s (96 tokens)", from
        :data:`RATE_MIN_TOKENS` tokens on; below, the count and the time from the question to the last
        token, "2 tokens in 140 ms" (just "1 token": its time is the first token's)."""
        if self.new_tokens >= RATE_MIN_TOKENS and self.tokens_per_second > 0:
            return f"{self.tokens_per_second:.1f} tokens/s ({plural(self.new_tokens, 'token')})"
        if self.new_tokens < 2:
            return plural(self.new_tokens, "token")
        return f"{plural(self.new_tokens, 'token')} in {self.answer_ms():.0f} ms"

    def answer_ms(self) -> float:
        """Milliseconds from the question to the last token: the first token's wait, then the decode."""
        decode_s = (self.new_tokens - 1) / self.tokens_per_second if self.tokens_per_second > 0 else 0.0
        return self.time_to_first_token_ms + decode_s * 1e3


@dataclass(frozen=True)
class Done:
    """An answer is complete (or was cancelled; ``stats.cancelled`` says which).

    ``kept`` says whether the engine added the question and answer to its conversation record
    (a cancelled answer is not kept, so follow-up questions do not see it).
    """

    text: str
    stats: AnswerStats
    kept: bool
    request_id: int = _request_id()


@dataclass(frozen=True)
class Failed:
    """Work failed; ``kind`` is the error's class name, ``message`` is for a person, ``field`` the
    setting (``section.name``) the failure is about, when there is one."""

    kind: str
    message: str
    field: str | None = None
    request_id: int = _request_id()


@dataclass(frozen=True)
class DecoderInfo:
    """The answer decoder: its KV cache's context length and memory, how the cache holds keys and
    values (``kv_cache_dtype``, in words) and what one token of context takes in it
    (``kv_bytes_per_token``), and whether decode steps run through CUDA graphs (one per
    context-length bucket), with the reason when not."""

    graphs_enabled: bool
    graphs_reason: str
    context_tokens: int
    buckets: tuple[int, ...]
    kv_cache_mb: float
    capture_seconds: float | None = None
    graph_memory_mb: float | None = None
    kv_cache_dtype: str = ""
    kv_bytes_per_token: int = 0

    def kv_cache_words(self) -> str:
        """``"bfloat16, 144 KiB a token"``: the cache's layout and a token's share of it."""
        return f"{self.kv_cache_dtype}, {self.kv_bytes_per_token / 1024:.4g} KiB a token"


@dataclass(frozen=True)
class ServerInfo:
    """The vLLM server answering the questions: its address, the model used, every model it
    serves, its version (``None`` when it does not say) and the command line that starts such a
    server with its encoder CUDA graphs sized like Framewise's encoder settings. ``model_source``
    is where the server loaded the model from (vLLM's ``root``: a folder or a hub id), ``None``
    when it does not say. ``pruning_note`` says, when pruning is set, that the server prunes at its
    own rate (``None``: pruning is off)."""

    url: str
    model: str
    served_models: tuple[str, ...]
    max_model_len: int | None
    version: str | None
    serve_command: str
    plain_http_warning: str | None = None
    model_source: str | None = None
    pruning_note: str | None = None


@dataclass(frozen=True)
class EngineInfo:
    """What the engine runs on, for ``framewise info``, the About box and the window's banners.

    ``device`` describes the device for people ("cuda (NVIDIA H200)"); ``device_kind`` is what code
    tests: the torch device type the model runs on (``cpu``, ``cuda``, ``mps``), or ``server`` when
    a vLLM server answers. ``server`` is set then (the vision encoder runs there). ``limits`` are
    the loaded model family's (the settings dialog sizes its steps and hints by them); ``None`` where
    the model is not loaded here. ``held_memory`` is what the loaded model holds, measured as it was
    built (``None`` where the model is not loaded here). ``dtype`` is the activations'; where the
    language model's linear weights are in another (a quantized weight format's), ``weight_dtype``
    names it.

    Sent once per change: when a model is loaded and when new settings change the model or the encoder.
    """

    device: str
    dtype: str
    model_name: str
    model_label: str | None
    encoder_name: str
    graphs_enabled: bool
    graphs_reason: str
    attention_backends: tuple[str, ...]
    graph_budgets: tuple[int, ...] = ()
    capture_seconds: float | None = None
    graph_memory_mb: float | None = None
    decoder: DecoderInfo | None = None
    server: ServerInfo | None = None
    device_kind: str = "cpu"
    limits: FamilyLimits | None = None
    held_memory: HeldMemory | None = None
    weight_dtype: str | None = None
    request_id: int = _request_id()

    @property
    def on_cpu(self) -> bool:
        """The model runs on this machine's CPU (no CUDA graphs, no GPU memory to report)."""
        return self.device_kind == "cpu"

    @property
    def precision(self) -> str:
        """The dtypes in a few words: ``"<weight_dtype> weights, bfloat16 activations"``, or ``"bfloat16"``."""
        return f"{self.weight_dtype} weights, {self.dtype} activations" if self.weight_dtype else self.dtype


Event = Union[
    RequestStarted,
    RequestFinished,
    ConversationReset,
    Progress,
    Token,
    AnswerSpeed,
    ChunkStats,
    ClipSampled,
    FramesRead,
    EncodeDone,
    EncoderMetrics,
    Done,
    Failed,
    EngineInfo,
]
EventSink = Callable[[Event], None]


def ignore_events(event: Event) -> None:
    """An :data:`EventSink` that drops everything."""


E = TypeVar("E", bound=Event)


def stamped(event: E, request_id: int) -> E:
    """``event`` as part of request ``request_id`` (a copy; events are frozen)."""
    return event if event.request_id == request_id else replace(event, request_id=request_id)


class RequestScope:
    """The request an engine is serving, and the ids it gives requests that come without one.

    A call made while a request is being served (``apply_settings`` re-opening the clip, say) is
    part of that request. A new id is above every id served so far, so ids grow in the order requests
    come, given or not (a cancel relies on it). Not thread-safe: an engine serves one request at a time.
    """

    def __init__(self) -> None:
        self._highest = NO_REQUEST
        self.current = NO_REQUEST

    @contextmanager
    def serving(self, request_id: int | None) -> Iterator[int]:
        """Serve request ``request_id`` (a new id when ``None``) for the duration of the block."""
        if self.current != NO_REQUEST and request_id is None:
            yield self.current
            return
        self.current = request_id if request_id is not None else self._highest + 1
        self._highest = max(self._highest, self.current)
        try:
            yield self.current
        finally:
            self.current = NO_REQUEST

    def stamp(self, event: E) -> E:
        """``event`` as part of the request being served."""
        return stamped(event, self.current)

    def send(self, sink: EventSink, event: E) -> E:
        """Send ``event`` to ``sink`` as part of the request being served; returns it as sent."""
        event = self.stamp(event)
        sink(event)
        return event
