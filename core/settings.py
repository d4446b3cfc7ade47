"""Framewise's settings: one validated object shared by the GUI, the CLI and the engine.

Settings are frozen dataclasses grouped in sections. ``AppSettings.validate(limits)`` raises a
:class:`~framewise.core.errors.SettingsError` naming the offending field (``section.name``) with a message
that says what to change. ``to_dict``/``from_dict`` give a plain JSON-able form for persistence.

Bounds that come from the model (frame counts, pixel budgets, budget multiples) are read from a
:class:`~framewise.core.seam.FamilyLimits` the caller passes: the loaded model's, or those of the
family the chosen checkpoint's config.json names. Where no family is known yet (``None``: a source
that cannot be read), the checks that need one are skipped, and the backend makes them once it
knows the family; no family is ever assumed.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import math
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from framewise.core.errors import SettingsError
from framewise.core.seam import FamilyLimits

GRAPH_SAFE_ATTENTION_BACKENDS = ("triton", "varlen", "flash_attn", "sdpa_masked")
"""The vision encoder's attention backends that run inside a CUDA graph
(:mod:`framewise.core.encoding.attention_backends` implements them)."""
ATTENTION_BACKENDS = ("auto", *GRAPH_SAFE_ATTENTION_BACKENDS, "eager")
"""Every choice of ``encoder.attention_backend``: ``auto`` picks one; ``eager`` is the tower's own."""
BACKENDS = ("local", "vllm")
SECRET_FIELDS = frozenset({"backend.api_key"})
"""Fields never written by ``to_dict`` nor read back by ``from_dict``."""
# How messages name a field other than the one they are about, in the window's words; the CLI
# puts the flag that sets the field in their place.
FIELD_WORDS = {
    "sampling.max_pixels": "sampling max pixels",
    "sampling.max_frames": "sampling max frames",
    "generation.max_new_tokens": "max new tokens",
}
RENAMED_FIELDS = {"encoder.max_frames_per_batch": "encoder.max_frame_pairs_per_batch"}
"""Earlier names of fields: ``from_dict`` reads a value saved under one when the current name is absent."""
"""``local``: this machine's engine; ``vllm``: a vLLM server's OpenAI-compatible API."""
OPENAI_ENDPOINTS = ("/v1/chat/completions", "/v1/completions", "/v1/models")
"""Endpoints people paste from a client's configuration; the setting wants the server's root."""
DEVICES = ("auto", "cpu", "cuda")
DTYPES = ("auto", "float32", "bfloat16", "float16", "fp8")
KV_CACHE_DTYPES = ("auto", "fp8")
"""Every choice of ``decoding.kv_cache_dtype``: ``auto`` keeps keys and values in the activations'
dtype, the other in e4m3 with a scale per token and head, about half the bytes."""
DEMO_MODEL = "demo"
MAX_MIN_BUCKET = 1 << 16  # the first decode bucket; every step of a short answer reads this much cache
# Tokens of one prefill pass: the prefill's activations grow with it, not with the prompt. At
# Qwen3-VL-8B's shapes in bf16 a pass holds about 145 KiB per token at its peak (computed: the
# residual stream and its normed copy, 8 KiB each; the gate/up product, 48 KiB; silu(gate) and its
# product with up, 24 KiB each; the chunk's vision features with three deepstack rows, 32 KiB).
# Measured on an H100 before chunking (a fresh process, 768 frames, 14.5k prompt tokens, FP8: 11.7
# GiB after load, 16.2 GiB at the peak), the whole prefill added 4.5 GiB, 310 KiB a token with the
# allocator's slack. Attention over the cache adds for a moment, per layer, the keys and values
# repeated per query head (16 KiB per cached position) and the additive mask (2 bytes per chunk
# token per cached position). At 1,024 tokens after a 14.5k-token clip that is 0.4 to 0.6 GiB,
# inside the 0.8 GiB that keeps that run's peak within 1.07x its steady state; and a pass holds
# about 16 TFLOP of products at the 8B, so reading its weights once per pass costs little.
# A prompt of at most twice this runs in one pass (at most twice one pass's activations): each pass
# reads every weight and costs the host its launches, and on an H100 the 8B's first question about
# a 32-frame clip (1,133 tokens) took 62 ms in three passes, against 36 ms in one pass for the tree
# before chunking (ee9e39c), in the same run.
PREFILL_CHUNK_TOKENS = 1024
# Shorter chunks read every weight again too often for the products to stay compute-bound.
MIN_PREFILL_CHUNK_TOKENS = 256
FAST_MODES = ("auto", "on", "off")
# Fast mode's automatic threshold. From 6.4 minutes on, 2 frames per second already reach the
# 768-frame cap, so a longer clip means more decoding for no more frames; exact reading of a
# 1080p H.264 clip costs about 15 s per 10 minutes on a 2-core machine (a full decode runs about
# 1,250 frames/s). At 10 minutes and 768 frames, fast mode's frame is at most 0.39 s from its
# target, less than the 0.5 s between frames at the default rate.
FAST_MODE_AUTO_ABOVE_S = 600.0
PRUNING_WORDS = ("off", "auto")
"""The words ``sampling.pruning`` takes besides a rate."""
# Automatic pruning's threshold: the most video tokens a clip of Qwen3-VL's released preprocessing
# holds (768 frames within 24,576 merge blocks; two blocks, one of each frame of a pair, are one
# token). Clips up to that size are what the model was made for, and their prefill is short (652 ms
# for 14,519 prompt tokens of the 8B on an H200); past it, the prompt and its KV cache grow with
# the frames, which pruning is for.
AUTO_PRUNING_ABOVE_TOKENS = 12_288
# Automatic pruning's rate. On 32 held-out clips the demo model answered 90.8 % correctly at 0.5
# against 98.5 % unpruned, and 74.8 % at 0.75 (``python -m training.evaluate --n 32 --pruning``).
AUTO_PRUNING_RATE = 0.5
_PRUNING_RULE = "use off, auto, or a rate: the share of video tokens dropped, at least 0 and below 1 (e.g. 0.5)"


@dataclass(frozen=True)
class ModelSettings:
    """Which checkpoint to run, and where.

    ``source`` is ``"demo"`` (the bundled demo model), a local folder, or a Hugging Face repo id
    found in the local cache.

    ``dtype`` is the activations' (``auto``: bfloat16 on a GPU that has it, else float32) or a
    weight format's. On a CPU that multiplies bfloat16 natively, ``auto`` and a weight format also
    run the vision tower in bfloat16 (:mod:`framewise.core.encoding.cpu_forms`); ``float32`` keeps
    every part in float32.
    """

    source: str = DEMO_MODEL
    device: str = "auto"
    dtype: str = "auto"

    def validate(self) -> None:
        if not self.source.strip():
            raise SettingsError("model.source", "name a model: 'demo', a checkpoint folder or a cached repo id")
        _require_choice("model.device", self.device, DEVICES)
        _require_choice("model.dtype", self.dtype, DTYPES)


@dataclass(frozen=True)
class SamplingSettings:
    """How frames are taken from a clip and how large they may be.

    ``max_pixels`` bounds the whole sampled clip (frames x height x width), as the model's own
    preprocessing does, so longer clips get smaller frames.

    ``fast_mode``: ``"off"`` takes the frame on screen at each target time, resized by the model's
    own resampler; ``"on"`` takes the decodable frame nearest each target (a keyframe, or the first
    frame after one) when it is within half the sampling interval, else the earliest frame that
    near, scaled by the decoder, with its true timestamp; ``"auto"`` is on for clips longer than ``FAST_MODE_AUTO_ABOVE_S`` (10 minutes).

    ``pruning``: after the vision encoder, drop the video tokens that barely change from the frame
    pair before (:mod:`framewise.core.encoding.pruning`): ``"off"``; a rate, the share dropped, at
    least 0 and below 1 (``"0.5"``); or ``"auto"``, :data:`AUTO_PRUNING_RATE` for a clip of more than
    :data:`AUTO_PRUNING_ABOVE_TOKENS` video tokens and none for shorter ones
    (:meth:`pruning_rate`). Off by default: it costs answers (see :data:`AUTO_PRUNING_RATE`).
    """

    fps: float = 2.0
    min_frames: int = 4
    max_frames: int = 32
    max_pixels: int = 32 * 256 * 256
    min_pixels_per_frame: int = 64 * 64
    fast_mode: str = "auto"
    pruning: str = "off"

    def __post_init__(self) -> None:
        # One spelling per setting ("0.50" and " 0.5" are "0.5"), so equal settings compare equal.
        object.__setattr__(self, "pruning", _pruning_text(self.pruning))  # frozen: set once, here

    def pruning_rate(self, video_tokens: int) -> float:
        """The share of a clip's ``video_tokens`` that pruning drops: 0 when off, the rate set, or
        under ``"auto"`` :data:`AUTO_PRUNING_RATE` for a clip of more than :data:`AUTO_PRUNING_ABOVE_TOKENS`."""
        if self.pruning == "off":
            return 0.0
        if self.pruning == "auto":
            return AUTO_PRUNING_RATE if video_tokens > AUTO_PRUNING_ABOVE_TOKENS else 0.0
        return float(self.pruning)

    def validate(self, limits: FamilyLimits | None) -> None:
        """Raise SettingsError for the first invalid field. ``limits``: the model family's; ``None``
        (no family known yet) skips the frame-count multiple and the family's frame and pixel bounds."""
        _require_choice("sampling.fast_mode", self.fast_mode, FAST_MODES)
        if self.pruning not in PRUNING_WORDS:
            check_pruning_rate(_rate_of(self.pruning))
        if not (0.05 <= self.fps <= 60):
            raise SettingsError("sampling.fps", "use a sampling rate between 0.05 and 60 frames per second")
        per_slice = limits.frames_per_slice if limits else 1
        if self.min_frames < per_slice or self.min_frames % per_slice:
            rule = f" ({limits.frames_rule()})" if limits else ""
            raise SettingsError(
                "sampling.min_frames", f"use {_multiple_words(per_slice)} of at least {per_slice}{rule}"
            )
        if self.max_frames < self.min_frames or self.max_frames % per_slice:
            raise SettingsError(
                "sampling.max_frames", f"use {_multiple_words(per_slice)} of at least min frames ({self.min_frames})"
            )
        if limits is not None:
            self._check_family_bounds(limits)
        self._check_frames_fit_pixels(limits)

    def _check_frames_fit_pixels(self, limits: FamilyLimits | None) -> None:
        """``max_pixels`` is shared out among the frames, so the most frames must each get at
        least ``min_pixels_per_frame`` of it (more frames mean smaller frames, down to that)."""
        needed = self.max_frames * self.min_pixels_per_frame
        if self.max_pixels >= needed:
            return
        per_slice = limits.frames_per_slice if limits else 1
        fitting = self.max_pixels // self.min_pixels_per_frame // per_slice * per_slice
        fewer = ""
        if fitting >= self.min_frames:
            fewer = f", or lower {FIELD_WORDS['sampling.max_frames']} to at most {fitting:,}"
        tokens = f" ({limits.video_tokens(needed):,} video tokens)" if limits else ""
        raise SettingsError(
            "sampling.max_pixels",
            f"{self.max_frames:,} frames of at least {self.min_pixels_per_frame:,} pixels each (min pixels per "
            f"frame) need at least {needed:,}{tokens}, not {self.max_pixels:,}; raise it{fewer}",
        )

    def _check_family_bounds(self, limits: FamilyLimits) -> None:
        """The bounds of the model family: its most frames, one merge block a frame, its largest clip."""
        if self.max_frames > limits.max_frames:
            raise SettingsError(
                "sampling.max_frames", f"{limits.name} takes at most {limits.max_frames:,} frames; lower max frames"
            )
        side = limits.block_side
        if self.min_pixels_per_frame < limits.block_pixels:
            raise SettingsError(
                "sampling.min_pixels_per_frame", f"use at least {limits.block_pixels} pixels (one {side}x{side} block)"
            )
        if self.max_pixels > limits.max_clip_pixels:
            raise SettingsError(
                "sampling.max_pixels",
                f"use at most {limits.max_clip_pixels:,} ({limits.name}'s largest clip: "
                f"{limits.max_clip_blocks:,} blocks of {side}x{side} pixels, "
                f"{limits.video_tokens(limits.max_clip_pixels):,} video tokens); lower max pixels",
            )


@dataclass(frozen=True)
class EncoderSettings:
    """How the vision encoder runs: CUDA-graph token budgets, batch limits, attention backend.

    A token budget is the number of patch rows one captured graph processes. Budgets are either
    the explicit list ``budgets`` or a geometric series from ``min_budget`` to ``max_budget``
    with ratio ``budget_ratio`` (the max always included). ``max_frame_pairs_per_batch`` counts
    attention sequences: an image is one, a video is one per frame pair. ``fuse_kernels`` captures
    a compiled forward whose elementwise work is fused (compiled on the first start, then cached
    on disk); off, the graphs replay the tower's own kernels.
    """

    use_graphs: bool = True
    fuse_kernels: bool = True
    attention_backend: str = "auto"
    budgets: tuple[int, ...] = ()
    min_budget: int = 256
    max_budget: int = 16384
    budget_ratio: float = 1.1
    max_items_per_batch: int = 8
    max_frame_pairs_per_batch: int = 64

    def token_budgets(self, limits: FamilyLimits) -> tuple[int, ...]:
        """The budgets graphs are captured for, ascending; each a multiple of ``limits.budget_multiple``."""
        if self.budgets:
            return tuple(sorted(set(self.budgets)))
        return geometric_budgets(self.min_budget, self.max_budget, self.budget_ratio, limits.budget_multiple)

    def validate(self, limits: FamilyLimits | None) -> None:
        """Raise SettingsError for the first invalid field. ``limits``: the model family's; ``None``
        (no family known yet) skips what depends on it: the budgets' multiple and bound, and the
        checks of the batch limits against the budgets the family's multiple makes."""
        _require_choice("encoder.attention_backend", self.attention_backend, ATTENTION_BACKENDS)
        self._check_budget_fields(limits)
        if self.max_items_per_batch < 1:
            raise SettingsError("encoder.max_items_per_batch", "use at least 1")
        if limits is not None:
            self._check_batches_fit(limits)
        if self.max_frame_pairs_per_batch < self.max_items_per_batch:
            raise SettingsError(
                "encoder.max_frame_pairs_per_batch",
                f"must be at least max items per batch ({self.max_items_per_batch})",
            )

    def _check_budget_fields(self, limits: FamilyLimits | None) -> None:
        """The budget list, or the series' range and ratio: positive, whole merge blocks of the
        family (any positive number while it is unknown), within its largest useful budget, and not
        too many graphs."""
        multiple, kind, why = _budget_rule(limits)
        if self.budgets:
            for budget in self.budgets:
                if budget <= 0 or budget % multiple:
                    raise SettingsError("encoder.budgets", f"{budget} is not a positive {kind}{why}")
                if limits is not None and budget > limits.max_budget:
                    raise SettingsError("encoder.budgets", f"{budget} is above {_budget_bound(limits)}")
        else:
            self._check_series_fields(limits)
        count = len(self.token_budgets(limits)) if limits else 0
        if count > 64:
            raise SettingsError("encoder.budget_ratio", f"{count} graphs is too many; raise the ratio or narrow the range")

    def _check_series_fields(self, limits: FamilyLimits | None) -> None:
        """The series' range and ratio (see :meth:`_check_budget_fields`)."""
        multiple, kind, why = _budget_rule(limits)
        if self.min_budget <= 0 or self.min_budget % multiple:
            raise SettingsError("encoder.min_budget", f"use a positive {kind}{why}")
        if self.max_budget < self.min_budget or self.max_budget % multiple:
            raise SettingsError("encoder.max_budget", f"use a {kind} that is at least min budget ({self.min_budget})")
        if limits is not None and self.max_budget > limits.max_budget:
            raise SettingsError("encoder.max_budget", f"lower it to at most {_budget_bound(limits)}")
        if not (1.01 <= self.budget_ratio <= 4.0):
            raise SettingsError("encoder.budget_ratio", "use a spacing ratio between 1.01 and 4")

    def _check_batches_fit(self, limits: FamilyLimits) -> None:
        """Each batch limit within the graphs the family's budgets make."""
        budgets = self.token_budgets(limits)
        if self.max_items_per_batch > budgets[0]:
            raise SettingsError(
                "encoder.max_items_per_batch",
                f"must not exceed the smallest budget ({budgets[0]}); lower it or raise the smallest budget",
            )
        most_sequences = budgets[-1] // limits.budget_multiple  # every image or frame pair holds at least one merge block
        if self.max_frame_pairs_per_batch > most_sequences:
            raise SettingsError(
                "encoder.max_frame_pairs_per_batch",
                f"lower it to at most {most_sequences}: no more frame pairs fit the largest budget ({budgets[-1]})",
            )


@dataclass(frozen=True)
class GenerationSettings:
    """How answers are generated. Temperature 0 means greedy decoding."""

    max_new_tokens: int = 128
    temperature: float = 0.0

    def validate(self) -> None:
        if not (1 <= self.max_new_tokens <= 8192):
            raise SettingsError("generation.max_new_tokens", "use between 1 and 8192 tokens")
        if not (0.0 <= self.temperature <= 2.0):
            raise SettingsError("generation.temperature", "use a temperature between 0 (greedy) and 2")


# Room the automatic context keeps for the questions of a conversation.
PROMPT_TEXT_TOKENS = 1024
# Per slice of frames, a time marker with the tokens around its vision block (8.5 on average for
# the sample clips in the demo model's tokenizer).
TOKENS_PER_SLICE_MARKER = 10
# The chat template's own tokens around a question and a clip: 8 role markers and 2 vision
# markers around the clip in the demo model's tokenizer (Qwen3-VL's template), with room to spare.
CHAT_TEMPLATE_TOKENS = 16
# The shortest question: what a context must hold besides the largest clip and one answer.
SHORTEST_QUESTION_TOKENS = 1
# A question of one sentence, about twenty words: 34 tokens in the demo model's tokenizer ("Which way
# does the square move, and how far does it go between the first and the last frame of the clip?").
# Where the context leaves a question less room than this, shortening it is no advice worth giving.
SENTENCE_QUESTION_TOKENS = 32
FEWER_ITEMS_ADVICE = (
    "Ask about fewer items or frames (Sampling ▸ max frames or max pixels; --max-frames, --max-pixels), "
    "or raise the context (Generation ▸ Max context; --max-context)."
)
"""What helps when the clips and pictures leave a question no room: fewer or smaller items, or more context."""
# Answers the automatic context holds: a first question and three follow-ups.
ANSWERS_IN_CONTEXT = 4
CONTEXT_ROUNDING = 256


@dataclass(frozen=True)
class DecodingSettings:
    """How answers are decoded: a static KV cache of ``max_context_tokens`` positions, allocated
    at load, and one-token decode steps replayed through CUDA graphs (``use_graphs``), one per
    context-length bucket from ``min_bucket`` up, doubling.

    ``max_context_tokens`` 0 means automatic: the largest clip the sampling settings allow,
    the prompt text, and ``ANSWERS_IN_CONTEXT`` answers of ``max_new_tokens``.

    A prompt longer than twice ``prefill_chunk_tokens`` is prefilled in passes of at most that
    many tokens, so that the prefill's activations stay bounded whatever the clip's length
    (:data:`PREFILL_CHUNK_TOKENS` says how the default was chosen).

    ``kv_cache_dtype`` is how the cache holds keys and values (:data:`KV_CACHE_DTYPES`).
    """

    use_graphs: bool = True
    max_context_tokens: int = 0
    min_bucket: int = 256
    prefill_chunk_tokens: int = PREFILL_CHUNK_TOKENS
    kv_cache_dtype: str = "auto"

    def validate(self) -> None:
        _require_choice("decoding.kv_cache_dtype", self.kv_cache_dtype, KV_CACHE_DTYPES)
        if self.max_context_tokens < 0:
            raise SettingsError("decoding.max_context_tokens", "use 0 (automatic) or a positive number of tokens")
        if self.min_bucket < 16 or self.min_bucket & (self.min_bucket - 1):
            raise SettingsError("decoding.min_bucket", "use a power of two of at least 16")
        if self.min_bucket > MAX_MIN_BUCKET:
            raise SettingsError(
                "decoding.min_bucket", f"lower it to at most {MAX_MIN_BUCKET}: a short answer would read that much cache"
            )
        if self.max_context_tokens and self.min_bucket > self.max_context_tokens:
            raise SettingsError(
                "decoding.min_bucket", f"must not exceed the context ({self.max_context_tokens} tokens); lower it"
            )
        if self.prefill_chunk_tokens < MIN_PREFILL_CHUNK_TOKENS:
            raise SettingsError(
                "decoding.prefill_chunk_tokens",
                f"use at least {MIN_PREFILL_CHUNK_TOKENS}: shorter passes read every weight again too often",
            )


def clip_context_tokens(sampling: SamplingSettings, limits: FamilyLimits) -> int:
    """The most context one clip can take under ``sampling``: its video tokens and time markers."""
    slices = sampling.max_frames // limits.frames_per_slice
    return limits.video_tokens(sampling.max_pixels) + slices * TOKENS_PER_SLICE_MARKER


@dataclass(frozen=True)
class ContextNeed:
    """The context one question takes, in tokens, part by part: ``items`` (the clips and pictures
    with their time markers, which ``items_words`` names), ``question``, ``template`` (the chat
    template's own tokens), ``earlier`` (the conversation's turns before it) and ``answer`` (room
    for one answer of max new tokens).

    Every message about a context too small says its numbers through :meth:`describe`, so the
    checks before loading, at load and before each question agree.
    """

    items: int
    question: int
    answer: int
    template: int = CHAT_TEMPLATE_TOKENS
    earlier: int = 0
    items_words: str = "the largest clip the sampling settings allow"

    @property
    def total(self) -> int:
        return self.items + self.question + self.template + self.earlier + self.answer

    def fits(self, context_tokens: int) -> bool:
        return self.total <= context_tokens

    def room_for_question(self, context_tokens: int) -> int:
        """The longest question a context of ``context_tokens`` holds beside the other parts."""
        return max(context_tokens - (self.total - self.question), 0)

    def describe(self) -> str:
        """``"1,329 tokens: 1,184 for the largest clip …, 1 for the question, 16 for the chat template
        and 128 for one answer (max new tokens)"``."""
        parts = [f"{self.items:,} for {self.items_words}", f"{self.question:,} for the question"]
        parts.append(f"{self.template:,} for the chat template")
        if self.earlier:
            parts.append(f"{self.earlier:,} for the conversation so far")
        answer_words = f"{self.answer:,} for one answer ({FIELD_WORDS['generation.max_new_tokens']})"
        return f"{self.total:,} tokens: {', '.join(parts)} and {answer_words}"


def context_needed(
    sampling: SamplingSettings,
    generation: GenerationSettings,
    question_tokens: int = SHORTEST_QUESTION_TOKENS,
    *,
    limits: FamilyLimits,
) -> ContextNeed:
    """What a question of ``question_tokens`` tokens about the largest clip ``sampling`` allows
    needs, with one answer; by default the shortest question, so the smallest usable context."""
    return ContextNeed(clip_context_tokens(sampling, limits), question_tokens, generation.max_new_tokens)


def largest_clip_pixels(
    context_tokens: int, sampling: SamplingSettings, generation: GenerationSettings, limits: FamilyLimits
) -> int:
    """The largest ``max_pixels`` whose clip, with one shortest question and one answer, fits a
    context of ``context_tokens`` at ``sampling``'s frame count (0 when not even its time markers fit)."""
    others = context_needed(sampling, generation, limits=limits).total - limits.video_tokens(sampling.max_pixels)
    return max(context_tokens - others, 0) * limits.pixels_per_video_token


def automatic_context_tokens(sampling: SamplingSettings, generation: GenerationSettings, limits: FamilyLimits) -> int:
    """The default context: the largest clip, the prompt text and ``ANSWERS_IN_CONTEXT`` answers."""
    tokens = clip_context_tokens(sampling, limits) + PROMPT_TEXT_TOKENS + ANSWERS_IN_CONTEXT * generation.max_new_tokens
    return CONTEXT_ROUNDING * math.ceil(tokens / CONTEXT_ROUNDING)


@dataclass(frozen=True)
class BackendSettings:
    """Where questions are answered: ``kind`` ``"local"`` (this machine) or ``"vllm"`` (a vLLM
    server at ``server_url``, e.g. ``http://127.0.0.1:8000``, serving ``server_model``; an empty
    ``server_model`` means the one model the server serves).

    ``timeout_s`` bounds connecting and the checks of ``/health`` and ``/v1/models``;
    ``answer_timeout_s`` the whole of one answer, from sending the question to its last piece (the
    server's encoding and prefill included). ``api_key`` is held for the running application only:
    :meth:`AppSettings.to_dict` leaves it out, so it never reaches a settings file, and its ``repr``
    hides it from logs. White space around the key (a pasted line break) is dropped when the
    settings are made; :meth:`validate` refuses a key an HTTP header cannot carry, without quoting it.
    """

    kind: str = "local"
    server_url: str = ""
    server_model: str = ""
    api_key: str = field(default="", repr=False)
    timeout_s: float = 10.0
    answer_timeout_s: float = 300.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "api_key", self.api_key.strip())  # frozen: set once, here

    def validate(self) -> None:
        _require_choice("backend.kind", self.kind, BACKENDS)
        if not (0.5 <= self.timeout_s <= 600):
            raise SettingsError("backend.timeout_s", "use a timeout between 0.5 and 600 seconds")
        if not (1 <= self.answer_timeout_s <= 3600):
            raise SettingsError("backend.answer_timeout_s", "use between 1 and 3600 seconds")
        if any(not (" " <= character <= "~") for character in self.api_key):
            raise SettingsError(
                "backend.api_key",
                "the API key holds a line break, a tab or a character outside plain ASCII, which an HTTP "
                "header cannot carry; give the key exactly as the server was started with it",
            )
        if self.kind != "vllm":
            return
        url = self.server_url.strip()
        if not url:
            raise SettingsError("backend.server_url", "give the server's address, e.g. http://127.0.0.1:8000")
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise SettingsError(
                "backend.server_url", f"{url!r} is not an http:// or https:// address, e.g. http://127.0.0.1:8000"
            )
        try:
            parts.port
        except ValueError as error:
            raise SettingsError("backend.server_url", f"{url!r} has an invalid port: {error}") from error
        if parts.query or parts.fragment:
            raise SettingsError("backend.server_url", "leave out the ?query and #fragment; give only the address")

    def base_url(self) -> str:
        """The server's address without a trailing ``/``, ``/v1`` or OpenAI endpoint
        (``/v1/chat/completions``, ``/v1/completions``, ``/v1/models``): each is accepted in the setting."""
        url = self.server_url.strip().rstrip("/")
        for endpoint in OPENAI_ENDPOINTS:
            if url.endswith(endpoint):
                url = url.removesuffix(endpoint)
                break
        return url.removesuffix("/v1").rstrip("/")

    def plain_http_warning(self) -> str | None:
        """The warning for a plain-http address to another machine, or ``None``."""
        if not self.is_plain_http_to_remote_host():
            return None
        return (
            f"{self.base_url()} is plain http to another machine: the frames, the questions, the answers and "
            "the API key travel unencrypted. Use https:// (for example behind a TLS proxy) unless the network is yours."
        )

    def is_plain_http_to_remote_host(self) -> bool:
        """True for an ``http://`` address whose host is not this machine (the key and frames travel unencrypted)."""
        parts = urlsplit(self.server_url.strip())
        return parts.scheme == "http" and not is_loopback_host(parts.hostname or "")


def is_loopback_host(host: str) -> bool:
    """True for ``localhost`` and loopback addresses (127.0.0.0/8, ::1)."""
    if host.lower() in ("localhost", "localhost.localdomain") or host.lower().endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class AppSettings:
    """All of Framewise's settings."""

    model: ModelSettings = field(default_factory=ModelSettings)
    sampling: SamplingSettings = field(default_factory=SamplingSettings)
    encoder: EncoderSettings = field(default_factory=EncoderSettings)
    generation: GenerationSettings = field(default_factory=GenerationSettings)
    decoding: DecodingSettings = field(default_factory=DecodingSettings)
    backend: BackendSettings = field(default_factory=BackendSettings)

    def validate(self, limits: FamilyLimits | None) -> AppSettings:
        """Raise :class:`SettingsError` for the first invalid field; return ``self`` when valid.

        ``limits``: those of the model family the settings are for (the loaded model's, or the one
        the chosen checkpoint names); ``None`` when no family is known yet, which skips every check
        that needs one (the family's frame, pixel and budget bounds, the context's room for a clip)."""
        self.model.validate()
        self.sampling.validate(limits)
        self.encoder.validate(limits)
        self.generation.validate()
        # Before the decoding section's own checks: a context too short for any question is what a
        # person set (--max-context 1), not the internal bucket size that then exceeds it.
        needed = context_needed(self.sampling, self.generation, limits=limits) if limits else None
        if needed and self.decoding.max_context_tokens > 0 and not needed.fits(self.decoding.max_context_tokens):
            raise SettingsError(
                "decoding.max_context_tokens",
                f"{self.decoding.max_context_tokens:,} tokens cannot hold one question: the context must hold "
                f"{needed.describe()}; raise it, use 0 (automatic), or lower {FIELD_WORDS['sampling.max_pixels']} "
                f"or {FIELD_WORDS['generation.max_new_tokens']}",
            )
        for section in (self.decoding, self.backend):
            section.validate()
        return self

    def context_tokens(self, limits: FamilyLimits) -> int:
        """The decoder's context length: the setting, or the automatic one for the family of
        ``limits`` when it is 0."""
        if self.decoding.max_context_tokens:
            return self.decoding.max_context_tokens
        return automatic_context_tokens(self.sampling, self.generation, limits)

    def check_question_fits(self, question_tokens: int, limits: FamilyLimits | None) -> None:
        """Raise SettingsError (on max context) when a question of ``question_tokens`` tokens
        cannot fit the context beside the largest clip the sampling settings allow for the family of
        ``limits``, the chat template and one answer (:func:`context_needed`): a bound checked before
        the model loads. With ``limits`` ``None`` (no family known yet, so no clip size) nothing is
        checked here: the decoder checks the prompt it is given.
        """
        if limits is None:
            return
        context = self.context_tokens(limits)
        needed = context_needed(self.sampling, self.generation, question_tokens, limits=limits)
        if needed.fits(context):
            return
        room = needed.room_for_question(context)
        raise_context = f"raise the context (now {context:,}) to at least {needed.total:,} tokens"
        advice = (
            f"shorten the question to at most {room:,} tokens, or {raise_context}"
            if room >= SHORTEST_QUESTION_TOKENS
            else f"{raise_context}, or lower {FIELD_WORDS['sampling.max_pixels']} or "
            f"{FIELD_WORDS['generation.max_new_tokens']}"
        )
        raise SettingsError(
            "decoding.max_context_tokens",
            f"the question is {question_tokens:,} tokens, and with it the context must hold {needed.describe()}; "
            f"{advice}",
        )

    def replace(self, section: str, **changes: Any) -> AppSettings:
        """A copy with fields of one section changed, e.g. ``replace("encoder", use_graphs=False)``."""
        current = getattr(self, section)
        return dataclasses.replace(self, **{section: dataclasses.replace(current, **changes)})

    def to_dict(self) -> dict[str, dict[str, Any]]:
        """Every section as plain JSON-able values, without secrets (the backend's API key)."""
        data = {
            name: {key: (list(value) if isinstance(value, tuple) else value) for key, value in section.items()}
            for name, section in dataclasses.asdict(self).items()
        }
        for secret in SECRET_FIELDS:
            section, name = secret.split(".")
            data[section].pop(name)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AppSettings:
        """Build settings from :meth:`to_dict`'s form; unknown keys are ignored, missing ones default,
        and values saved under a field's earlier name (:data:`RENAMED_FIELDS`) are kept.

        Raises :class:`SettingsError` when a value has the wrong type.
        """
        sections = {}
        for section_field in dataclasses.fields(cls):
            section_type = section_field.default_factory  # type: ignore[misc]
            values = _under_current_names(section_field.name, data.get(section_field.name) or {})
            sections[section_field.name] = _section_from_dict(section_field.name, section_type, values)
        return cls(**sections)


def check_pruning_rate(rate: float) -> None:
    """Raise SettingsError (on ``sampling.pruning``) unless ``rate`` is a pruning rate: a number at
    least 0 and below 1."""
    if not (isinstance(rate, (int, float)) and math.isfinite(rate) and 0 <= rate < 1):
        raise SettingsError("sampling.pruning", f"{_PRUNING_RULE}; got {rate!r}")


def _rate_of(text: str) -> float:
    """The rate ``sampling.pruning`` holds as text; SettingsError when it is not a number."""
    try:
        return float(text)
    except ValueError:
        raise SettingsError("sampling.pruning", f"{_PRUNING_RULE}; got {text!r}") from None


def _pruning_text(value: object) -> str:
    """``sampling.pruning`` in its one spelling: a word in lower case, a rate as Python writes the
    float (``"0.5"``); anything else as given, for :meth:`SamplingSettings.validate` to refuse."""
    text = str(value).strip().lower()
    if text in PRUNING_WORDS:
        return text
    try:
        return repr(float(text))
    except ValueError:
        return text


def geometric_budgets(min_budget: int, max_budget: int, ratio: float, multiple: int) -> tuple[int, ...]:
    """Token budgets from ``min_budget`` to ``max_budget`` spaced by ``ratio``, rounded up to
    multiples of ``multiple``.

    >>> geometric_budgets(256, 1024, 2.0, 4)
    (256, 512, 1024)
    """
    budgets = []
    value = float(min_budget)
    while value < max_budget:
        budgets.append(min(max_budget, multiple * math.ceil(value / multiple)))
        value *= ratio
    budgets.append(max_budget)
    return tuple(sorted(set(budgets)))


def _budget_rule(limits: FamilyLimits | None) -> tuple[int, str, str]:
    """What every budget is a multiple of, that rule in words, and why: whole merge blocks of the
    family, or any positive number while no family is known."""
    if limits is None:
        return 1, "number", ""
    merge = limits.merge_size
    return limits.budget_multiple, f"multiple of {limits.budget_multiple}", f" (the {merge}x{merge} patch merge)"


def _budget_bound(limits: FamilyLimits) -> str:
    return f"{limits.max_budget:,}, the patches of the largest clip {limits.name} takes (a larger graph is never used)"


def _multiple_words(multiple: int) -> str:
    if multiple == 1:
        return "a whole number"
    return "an even number" if multiple == 2 else f"a multiple of {multiple}"


def _require_choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise SettingsError(name, f"{value!r} is not one of {', '.join(choices)}")


def _under_current_names(section_name: str, values: dict[str, Any]) -> dict[str, Any]:
    """``values`` of one section with each field saved under an earlier name moved to its current one."""
    values = dict(values)
    for old, new in RENAMED_FIELDS.items():
        old_section, old_name = old.split(".")
        new_name = new.split(".")[1]
        if old_section == section_name and old_name in values:
            value = values.pop(old_name)
            values.setdefault(new_name, value)
    return values


def _section_from_dict(section_name: str, section_type: type, values: dict[str, Any]) -> Any:
    defaults = section_type()
    kwargs = {}
    for item in dataclasses.fields(section_type):
        if item.name not in values or f"{section_name}.{item.name}" in SECRET_FIELDS:
            continue
        default = getattr(defaults, item.name)
        kwargs[item.name] = _coerce(f"{section_name}.{item.name}", values[item.name], default)
    return section_type(**kwargs)


def _coerce(name: str, value: Any, default: Any) -> Any:
    """Convert a stored value to the type of the field's default, or raise SettingsError."""
    try:
        if isinstance(default, bool):
            if isinstance(value, str):
                return value.strip().lower() in ("1", "true", "yes", "on")
            return bool(value)
        if isinstance(default, tuple):
            if isinstance(value, str):
                value = [part for part in value.replace(",", " ").split() if part]
            return tuple(int(part) for part in value)
        return type(default)(value)
    except (TypeError, ValueError) as error:
        raise SettingsError(name, f"{value!r} is not a valid {type(default).__name__}") from error
