"""Events the engine emits while it loads, encodes and answers.

Events are frozen dataclasses of plain data (numbers, strings, small numpy images; no tensors) so the GUI can
pass them across threads and the CLI can print them as JSON.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Union

import numpy as np


@dataclass(frozen=True)
class Progress:
    """Long work advancing: ``stage`` is e.g. ``"load"``, ``"capture"``, ``"decode"``, ``"encode"``."""

    stage: str
    current: int
    total: int
    message: str


@dataclass(frozen=True)
class Token:
    """A piece of streamed answer text."""

    text: str


@dataclass(frozen=True)
class ChunkStats:
    """One pass of the vision encoder: a graph replay or an eager forward.

    ``chunk_index`` numbers the passes of one request from 0.

    ``budget`` is the captured graph's token budget (``None`` for eager); ``padding_fraction``
    is the share of the budget's rows that held no real patch.
    """

    chunk_index: int
    items: int
    frames: int
    patches: int
    budget: int | None
    padding_fraction: float
    encode_ms: float
    ms_per_frame: float
    graph_hit: bool
    fallback_reason: str | None = None


@dataclass(frozen=True)
class ClipSampled:
    """A clip was opened and its frames sampled; ``thumbnails`` are small RGB previews, one per frame.

    ``thumbnails``: uint8 arrays of shape (h, w, 3); ``timestamps`` are seconds from the clip's start.
    """

    clip_name: str
    path: str
    timestamps: tuple[float, ...]
    thumbnails: tuple[np.ndarray, ...]
    width: int
    height: int
    duration_s: float


@dataclass(frozen=True)
class EncodeDone:
    """A clip was decoded, preprocessed and encoded; follow-up questions reuse its features."""

    clip_name: str
    frames: int
    patches: int
    timestamps: tuple[float, ...]
    decode_ms: float
    preprocess_ms: float
    encode_ms: float
    ms_per_frame: float
    graph_hits: int
    graph_misses: int
    chunks: tuple[ChunkStats, ...] = field(default_factory=tuple)


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
        """One line for a person: graph hits and misses, the prefill, the reused prefix, the speed."""
        return (
            f"graph steps {self.graph_steps}, eager steps {self.eager_steps}, "
            f"prefill {self.prefill_tokens} tokens in {self.prefill_ms:.0f} ms, "
            f"{self.prefix_tokens_reused} of {self.prompt_tokens} prompt tokens reused, "
            f"{self.tokens_per_second:.1f} tokens/s"
        )


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
    """What one question cost. ``server`` is set for an answer from a vLLM server."""

    frames: int
    patches: int
    preprocess_ms: float
    encode_ms: float
    ms_per_frame: float
    time_to_first_token_ms: float
    new_tokens: int
    tokens_per_second: float
    cancelled: bool
    gpu_memory_mb: float | None = None
    decoder: DecoderStats | None = None
    server: ServerStats | None = None


@dataclass(frozen=True)
class Done:
    """An answer is complete (or was cancelled; ``stats.cancelled`` says which)."""

    text: str
    stats: AnswerStats


@dataclass(frozen=True)
class Failed:
    """Work failed; ``kind`` is the error's class name, ``message`` is for a person, ``field`` the
    setting (``section.name``) the failure is about, when there is one."""

    kind: str
    message: str
    field: str | None = None


@dataclass(frozen=True)
class DecoderInfo:
    """The answer decoder: its KV cache's context length and memory, and whether decode steps run
    through CUDA graphs (one per context-length bucket), with the reason when not."""

    graphs_enabled: bool
    graphs_reason: str
    context_tokens: int
    buckets: tuple[int, ...]
    kv_cache_mb: float
    capture_seconds: float | None = None
    graph_memory_mb: float | None = None


@dataclass(frozen=True)
class ServerInfo:
    """The vLLM server answering the questions: its address, the model used, every model it
    serves, its version (``None`` when it does not say) and the command line that starts such a
    server with its encoder CUDA graphs sized like Framewise's encoder settings."""

    url: str
    model: str
    served_models: tuple[str, ...]
    max_model_len: int | None
    version: str | None
    serve_command: str
    plain_http_warning: str | None = None


@dataclass(frozen=True)
class EngineInfo:
    """What the engine runs on, for ``framewise info``, the About box and the window's banners.

    ``server`` is set when a vLLM server answers (the vision encoder then runs there).
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


Event = Union[Progress, Token, ChunkStats, ClipSampled, EncodeDone, Done, Failed, EngineInfo]
EventSink = Callable[[Event], None]


def ignore_events(event: Event) -> None:
    """An :data:`EventSink` that drops everything."""
