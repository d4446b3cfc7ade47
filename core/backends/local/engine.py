"""The question-answering engine: a clip and a question in, a streamed answer out.

:class:`Engine` is a plain object with a blocking API. It reports what it does through an
:data:`~framewise.core.events.EventSink`; the CLI runs it on the main thread, the GUI on a worker thread.
Only :meth:`Engine.cancel` may be called from another thread.

Each public call is one request: every event sent while serving it carries its id (the caller's
``request_id``, or a new one), so listeners route events without inferring from their order. The
engine keeps the one conversation record (:attr:`Engine.turns`) and announces every time it
empties it, with the reason, as a :class:`~framewise.core.events.ConversationReset`.

A cancel applies to the request that is running, or, when none is, to the next one that starts:
a cancel that arrives just before a call begins is never lost. It is consumed when that request
ends. Cancelling reaches every stage: reading the clip, preprocessing, every vision-tower block of
every encoder pass, every decoder layer of the prefill and every generated token.

:meth:`Engine.apply_settings` is a transaction (:class:`~framewise.core.backends.local.settings_transaction.SettingsTransaction`):
when any part of the switch fails, the engine keeps the model, encoder, decoder, clip and
conversation it had, and the error says what failed.

A clip is encoded once, when it is opened; every question about it reuses the vision features.
Answers are decoded by :class:`~framewise.core.decoding.Decoder` over a static KV cache allocated
at load, with decode steps through CUDA graphs on a GPU; a follow-up question prefills only what
the cache does not already hold. The model loader hands the engine the model family's adapter,
which the vision encoder is built on; the same adapter can inject the features into transformers'
own ``generate()`` for one call (the demo model's training and the tests use it).
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import torch

from framewise.core.backends.base import BackendBase, closer_look_summary
from framewise.core.decoding import Decoded, Decoder, Prompt, SamplingRule, context_for
from framewise.core.encoding.defs import EncodedItem, VisionEncoder, VisionItem
from framewise.core.encoding.manager import make_vision_encoder
from framewise.core.encoding.planning import BatchLimits, PlanItem, plan_batches
from framewise.core.errors import CancelledError, ContextFullError, FramewiseError, QuestionTooLongError
from framewise.core.events import (
    AnswerStats,
    ChunkStats,
    DecoderInfo,
    DecoderStats,
    Done,
    EncodeDone,
    EngineInfo,
    EventSink,
    Progress,
    ResetReason,
    Token,
    ignore_events,
)
from framewise.core.families.base import PreparedVideo, PromptInputs
from framewise.core.held_memory import recording_growth, weight_shares
from framewise.core.loading import LoadedModel, check_memory_fits, load_model, pick_device
from framewise.core.memory_plan import HeldMemory
from framewise.core.metrics import DecodeSpeedMeter, EncoderMetricsAccumulator, decode_rate, percentile
from framewise.core.model_source import family_limits_of
from framewise.core.seam import DecodedAnswer, FamilyLimits
from framewise.core.settings import FEWER_ITEMS_ADVICE, SENTENCE_QUESTION_TOKENS, AppSettings, ContextNeed
from framewise.core.backends.local.settings_transaction import SettingsTransaction
from framewise.core.video import ReadProgress, SampledClip, SampledFrames, sample_clip
from framewise.core.video.feed import ChunkFeed, FrameChunk
from framewise.core.video.still import StillImage, read_still
from framewise.core.video.read_report import reading_events
from framewise.core.video.thumbnails import clip_sampled
from framewise.core.wording import plural


@dataclass(frozen=True)
class EncodedClip:
    """A clip sampled, preprocessed and encoded: everything a question about it needs.

    ``path`` is the file it was read from (``None`` for frames given directly). A clip has
    ``video``; a still picture has ``image`` instead (one image item, no times).
    """

    path: Path | None
    video: PreparedVideo | None
    features: EncodedItem
    summary: EncodeDone
    image: VisionItem | None = None

    @property
    def kind(self) -> str:
        """``"image"`` or ``"video"``."""
        return "image" if self.image is not None else "video"


class _TokenStreamer:
    """Turns generated token ids into :class:`Token` events of decoded text, and the speed so far
    into :class:`~framewise.core.events.AnswerSpeed` events.

    The whole answer is re-decoded each step and only the new suffix is sent, so tokens that
    split a multi-byte character are held back until the character is complete.
    """

    def __init__(self, tokenizer: Any, sink: EventSink) -> None:
        self.tokenizer = tokenizer
        self.sink = sink
        self.token_ids: list[int] = []
        self.text = ""
        self.speed = DecodeSpeedMeter()

    def put(self, token_id: int) -> None:
        """Take the next generated token."""
        speed = self.speed.add()
        if speed is not None:
            self.sink(speed)
        self.token_ids.append(token_id)
        text = self.tokenizer.decode(self.token_ids, skip_special_tokens=True)
        if text.endswith("\ufffd"):
            return
        if len(text) > len(self.text):
            self.sink(Token(text[len(self.text):]))
        self.text = text

    def end(self) -> None:
        text = self.tokenizer.decode(self.token_ids, skip_special_tokens=True)
        if len(text) > len(self.text):
            self.sink(Token(text[len(self.text):]))
        self.text = text


class Engine(BackendBase[EncodedClip]):
    """Loads a vision-language model, encodes clips once, answers questions about them as a stream.

    Usage::

        engine = Engine(settings, sink=print)
        engine.load()
        engine.open_clip("clip.mp4")
        engine.ask("What color is the square?")

    Every public method takes an optional ``request_id``; the events it sends carry it (a caller that
    passes ids passes them on every call). Without one, a call gets the next id of the engine's own,
    except that a call made while serving a request is part of that request.

    :meth:`new_conversation` keeps the decoder's KV entries of the prompt's part that does not
    depend on the conversation (system text and clip); everything after it is prefilled anew.
    """

    def __init__(self, settings: AppSettings | None = None, sink: EventSink = ignore_events) -> None:
        self.loaded: LoadedModel | None = None  # before the base checks the settings (_limits_for reads it)
        super().__init__(settings, sink)
        self.encoder: VisionEncoder | None = None
        self.decoder: Decoder | None = None
        self.metrics = EncoderMetricsAccumulator()
        self.graphs_reason = ""
        # What each build step ("weights", "encoder", "decoder") added to the reserved CUDA memory.
        self.reserved_by_step: dict[str, int] = {}
        self._cancel_lock = threading.Lock()  # a cancel and the end of a request do not interleave
        self._ended_through = 0  # the highest request id that has ended
        self._request_depth = 0

    # ----------------------------------------------------------------- lifecycle

    def load(self, request_id: int | None = None) -> EngineInfo:
        """Load the model named by the settings, build its vision encoder and its decoder (capturing
        the encoder's graphs, then the decode step graphs, on CUDA)."""
        with self._requests.serving(request_id):
            with self._request():
                self.load_weights()
                self.build_encoder()
                self.build_decoder()
                info = self.info()
            return self._emit(info)

    def apply_settings(self, settings: AppSettings, request_id: int | None = None) -> EngineInfo | None:
        """Switch to new settings, redoing only what they change, all or nothing.

        A new model is loaded beside the old one (when that runs out of memory, the old one is
        released first and, should the new one still fail, loaded again) and re-encodes the open
        clip; new encoder settings re-capture the graphs; new sampling settings re-sample and
        re-encode the open clip (emptying the conversation, with reason ``resampled``) and every
        item added to it (clips and closer looks re-sampled, pictures encoded again); a new
        context length or decoding setting re-allocates the KV cache and re-captures the decode
        graphs. Returns the new :class:`EngineInfo`, which is also sent, when the model, encoder or
        decoder changed. On any failure the engine is as it was before the call (settings, model,
        encoder, decoder, clip, conversation) and the error is raised.
        """
        settings.validate(self._limits_for(settings))
        if self.loaded is None:
            self.settings = settings
            return None
        with self._requests.serving(request_id):
            with self._request():
                info = SettingsTransaction(
                    self, settings, reopen_clip=self._open_clip, sample_again=self._sample_again
                ).run()
            return None if info is None else self._emit(info)

    def _limits_for(self, settings: AppSettings) -> FamilyLimits | None:
        """The family limits ``settings`` are checked against: the loaded checkpoint's while they keep
        its source, else those of the family the chosen source's config.json names (no weights are
        read), else ``None`` (it cannot be read yet: loading it then says why)."""
        loaded = self.loaded
        if loaded is not None and settings.model.source == self.settings.model.source:
            return loaded.limits
        return family_limits_of(settings.model.source)

    def info(self) -> EngineInfo:
        """What the engine runs on now."""
        loaded = self._require_model()
        encoder = self.encoder
        report = encoder.report if encoder else None
        return EngineInfo(
            device=_device_description(loaded.device),
            device_kind=loaded.device.type,
            dtype=str(loaded.dtype).removeprefix("torch."),
            weight_dtype=loaded.weight_format.weight_dtype,
            model_name=loaded.name,
            model_label=loaded.label,
            encoder_name=encoder.name if encoder else "none",
            graphs_enabled=encoder is not None and encoder.captured,
            graphs_reason=self.graphs_reason,
            attention_backends=tuple(loaded.adapter.attention_backends()),
            graph_budgets=encoder.budgets if encoder else (),
            capture_seconds=report.seconds if report else None,
            graph_memory_mb=report.graph_memory_bytes / 2**20 if report else None,
            decoder=self._decoder_info(),
            limits=loaded.limits,
            held_memory=self._held_memory(loaded),
        )

    def _held_memory(self, loaded: LoadedModel) -> HeldMemory:
        """What the model, its encoder and its decoder hold, as measured when they were built."""
        report = self.encoder.report if self.encoder else None
        decoder = self.decoder
        decode_graphs = 0
        if decoder is not None and decoder.graphs_enabled:
            decode_graphs = decoder.steps.graph_memory_bytes + decoder.prefills.graph_memory_bytes
        steps = ("weights", "encoder", "decoder")
        measured = all(step in self.reserved_by_step for step in steps)
        return HeldMemory(
            weights=weight_shares(loaded.model, loaded.family.vision_tower(loaded.model)),
            kv_cache=decoder.cache.nbytes if decoder else 0,
            encoder_graphs=report.graph_memory_bytes if report else 0,
            decode_graphs=decode_graphs,
            reserved=sum(self.reserved_by_step[step] for step in steps) if measured else None,
        )

    def _decoder_info(self) -> DecoderInfo | None:
        decoder = self.decoder
        if decoder is None:
            return None
        steps = decoder.steps
        return DecoderInfo(
            graphs_enabled=decoder.graphs_enabled,
            graphs_reason=decoder.graphs_reason,
            context_tokens=decoder.max_tokens,
            buckets=steps.buckets,
            kv_cache_mb=decoder.cache.nbytes / 2**20,
            capture_seconds=steps.capture_seconds if decoder.graphs_enabled else None,
            graph_memory_mb=steps.graph_memory_bytes / 2**20 if decoder.graphs_enabled else None,
        )

    def cancel(self, request_id: int | None = None) -> None:
        """Stop the running request at its next checkpoint (within a vision block, a decoder layer
        or a token), or, when none is running, the next one as it starts. Safe from any thread.

        With ``request_id``, a cancel of a request that has already ended is ignored, so a Stop
        that arrives just as an answer finishes cannot stop the question after it.
        """
        with self._cancel_lock:
            if request_id is not None and request_id <= self._ended_through:
                return
            self._cancel.set()

    # ----------------------------------------------------------------- clips

    def _open_clip(self, path: Path, reason: ResetReason | None) -> EncodeDone:
        """Sample, preprocess and encode ``path`` and make it the only open item; ``reason`` is why
        the conversation empties (``None``: it is being put back).

        Emits Progress (decode, encode), FramesRead while reading, ClipSampled, one ChunkStats per
        encoder pass, EncoderMetrics, ConversationReset and EncodeDone.
        """
        self._require_model()
        with self._request():
            return self._keep(self._read_and_encode(path), reason)

    def _add_clip(self, path: Path, span: tuple[float, float] | None) -> EncodeDone:
        """Sample (its ``span`` only, densely, when given), preprocess and encode ``path`` and add it
        to the conversation (no reset); the events are :meth:`_open_clip`'s but for ConversationReset."""
        self._require_model()
        with self._request():
            clip = self._read_and_encode(path, span)
            self._check_items_fit([*self.clips, clip])
            self.added.append(clip)
            self._emit(Progress("encode", 1, 1, f"{clip.summary.clip_name} is added to the conversation"))
            return self._emit(clip.summary)

    def _read_and_encode(self, path: Path, span: tuple[float, float] | None = None) -> EncodedClip:
        """``path`` read (a still picture as an image, anything else sampled as a clip, or only its
        ``span`` (start, end) seconds) and encoded."""
        self._raise_if_cancelled()
        self._emit(Progress("decode", 0, 1, f"Reading {path.name}"))
        started = time.perf_counter()
        still = read_still(path) if span is None else None
        if still is not None:
            return self._encode_image(still, path.name, path, (time.perf_counter() - started) * 1e3)
        sampled, clip = self._stream_clip(path, span, started)
        if span is None:
            return clip
        return dataclasses.replace(clip, summary=closer_look_summary(clip.summary, span, sampled.info.duration_s))

    def _stream_clip(
        self, path: Path, span: tuple[float, float] | None, started: float
    ) -> tuple[SampledClip, EncodedClip]:
        """Sample the clip at ``path`` (its ``span`` only, when given) and encode it as it is read.

        A reading thread samples the clip while this thread preprocesses and encodes it, chunk by
        chunk (the encoder's own passes) as the frames arrive, so the clip is ready one pass
        after its last frame is read. ``started`` is when reading began (perf_counter seconds).
        """
        loaded = self._require_model()
        sampling = self.settings.sampling
        feed = ChunkFeed(self._chunk_frames)
        reading = _Reading(
            lambda on_progress: sample_clip(
                path,
                sampling,
                loaded.family.frame_sizing(sampling, loaded.limits),
                should_cancel=self._cancel.is_set,
                on_progress=on_progress,
                sink=feed,
                span=span,
            ),
            feed,
            path.name,
        )
        report = lambda: self._emit_read_progress(path.name, reading, feed, started)  # noqa: E731
        try:
            encoded = self._encode_chunks(feed.chunks(idle=report), report)
        finally:
            feed.close()
            reading.join()
        sampled = reading.result()
        decode_ms = (reading.finished - started) * 1e3  # the reading alone; encoding overlapped it
        joined = _Encoded(loaded.family.join_videos(encoded.videos), encoded.features(), encoded.chunks, encoded.preprocess_ms)
        return sampled, self._finish_clip(joined, SampledFrames.read(sampled, path, decode_ms))

    def _chunk_frames(self, count: int, size: tuple[int, int]) -> list[int]:
        """Frames per encoder pass for a clip of ``count`` frames of ``size`` = (h, w): the passes
        the encoder's planner makes for it (each a whole number of slices)."""
        limits = self._require_model().limits
        per_slice = limits.frames_per_slice
        slices = -(-count // per_slice)
        grid = (slices, size[0] // limits.patch_size, size[1] // limits.patch_size)
        plan = plan_batches([PlanItem("video", grid)], BatchLimits.from_settings(self.settings.encoder, limits))
        frames = [sum(piece.count for piece in batch.pieces) * per_slice for batch in plan]
        frames[-1] -= slices * per_slice - count
        return frames

    def _encode_chunks(self, chunks: Iterator[FrameChunk], report: Callable[[], None]) -> _EncodedParts:
        """Preprocess and encode each chunk of frames as it comes (one encoder pass each)."""
        loaded = self._require_model()
        encoder = self._require_encoder()
        parts = _EncodedParts()
        for chunk in chunks:
            self._raise_if_cancelled()
            started = time.perf_counter()
            video = loaded.family.preprocess_video(chunk.frames, chunk.times, loaded.limits)
            parts.preprocess_ms += (time.perf_counter() - started) * 1e3
            self._raise_if_cancelled()
            with self._cancel_points(loaded.family.cancel_points(loaded.model).vision):
                output = encoder.encode([video.item])
            parts.add(video, output.items[0], output.chunks)
            report()
        return parts

    def _emit_read_progress(self, name: str, reading: _Reading, feed: ChunkFeed, started: float) -> None:
        """Report how far reading has got, and the thumbnails of the frames read since the last report."""
        for event in reading_events(name, reading.take_progress(), feed.arrivals, time.perf_counter() - started):
            self._emit(event)

    def _use_frames(self, sampled: SampledFrames) -> EncodeDone:
        """Encode frames sampled elsewhere, as :meth:`open_clip` does after decoding.

        The frames are already at the model family's frame size (sides whole merge blocks).
        Settings changes cannot re-sample such a clip.
        """
        self._require_model()
        with self._request():
            return self._keep(self._encode_frames(sampled), "new_clip")

    def _encode_frames(self, sampled: SampledFrames) -> EncodedClip:
        """Preprocess and encode sampled frames (T, H, W, 3) uint8 in one go, as a clip."""
        loaded = self._require_model()
        started = time.perf_counter()
        timestamps = sampled.timestamps
        video = loaded.family.preprocess_video(sampled.frames, timestamps, loaded.limits)
        preprocess_ms = (time.perf_counter() - started) * 1e3
        self._raise_if_cancelled()

        self._emit(Progress("encode", 0, 1, f"Encoding {len(timestamps)} frames"))
        with self._cancel_points(loaded.family.cancel_points(loaded.model).vision):
            output = self._require_encoder().encode([video.item])
        encoded = _Encoded(video, output.items[0], tuple(output.chunks), preprocess_ms)
        return self._finish_clip(encoded, sampled)

    def _finish_clip(self, encoded: _Encoded, sampled: SampledFrames) -> EncodedClip:
        """The encoded clip, reported: its frames (T, H, W, 3) uint8 for the strip, one ChunkStats
        per pass, the metrics and the summary."""
        self._raise_if_cancelled()  # a cancel during the last pass still keeps the previous clip
        self._emit(clip_sampled(sampled))
        summary = self._report_encoded(encoded.video.item, encoded.chunks, sampled, encoded.preprocess_ms)
        return EncodedClip(path=sampled.path, video=encoded.video, features=encoded.features, summary=summary)

    def _encode_image(self, still: StillImage, name: str, path: Path, decode_ms: float) -> EncodedClip:
        """Preprocess and encode a still picture as one image item (no times)."""
        loaded = self._require_model()
        info = still.info
        picture = SampledFrames(
            still.pixels[None], (0.0,), name, path, decode_ms, (info.width, info.height, 0.0), damage=still.damage
        )
        self._emit(clip_sampled(picture, kind="image"))
        self._raise_if_cancelled()
        started = time.perf_counter()
        item = loaded.family.preprocess_image(still.pixels, loaded.limits)
        preprocess_ms = (time.perf_counter() - started) * 1e3
        self._raise_if_cancelled()
        self._emit(Progress("encode", 0, 1, "Encoding the picture"))
        with self._cancel_points(loaded.family.cancel_points(loaded.model).vision):
            output = self._require_encoder().encode([item])
        self._raise_if_cancelled()  # a cancel during the last pass still keeps the previous clip
        summary = self._report_encoded(item, output.chunks, picture, preprocess_ms)
        return EncodedClip(path=path, video=None, image=item, features=output.items[0], summary=summary)

    def _report_encoded(
        self, item: VisionItem, chunks: Sequence[ChunkStats], sampled: SampledFrames, preprocess_ms: float
    ) -> EncodeDone:
        """Send one ChunkStats per encoder pass of ``item`` (numbered) and the encoder metrics; the
        item's summary."""
        stamped = tuple(
            self._requests.stamp(dataclasses.replace(chunk, chunk_index=index)) for index, chunk in enumerate(chunks)
        )
        for chunk in stamped:
            self._emit(chunk)
        metrics = self._emit(self.metrics.add_item(stamped))
        assert metrics.last_item_ms_per_frame is not None and metrics.last_item_hit is not None
        return self._requests.stamp(
            EncodeDone(
                clip_name=sampled.name,
                frames=len(sampled.timestamps),
                patches=item.patches,
                timestamps=tuple(sampled.timestamps),
                decode_ms=sampled.decode_ms,
                preprocess_ms=preprocess_ms,
                encode_ms=sum(chunk.encode_ms for chunk in stamped),
                ms_per_frame=metrics.last_item_ms_per_frame,
                graph_hit=metrics.last_item_hit,
                sampling_mode=sampled.mode,
                chunks=stamped,
                kind=item.modality,
                duration_s=sampled.size_and_duration[2],
                damage=sampled.damage,
            )
        )

    def _keep(self, clip: EncodedClip, reason: ResetReason | None) -> EncodeDone:
        """Make ``clip`` the open one and, unless ``reason`` is ``None``, start its conversation afresh."""
        self._make_open(clip, reason)
        self._emit(Progress("encode", 1, 1, f"{clip.summary.clip_name} is ready"))
        return self._emit(clip.summary)

    # ----------------------------------------------------------------- questions

    def _ask(self, question: str) -> Done:
        loaded = self._require_model()
        with self._request():
            started = time.perf_counter()
            items = self._prompt_items()
            inputs = self._build_prompt(question, items, self.turns)
            self._check_prompt_fits(inputs, question, items)
            streamer = _TokenStreamer(loaded.tokenizer, self._emit)
            try:
                # Inside the prefill (until the first token); the token loop checks between tokens.
                prefilling = lambda: streamer.speed.first_token_time is None  # noqa: E731
                with self._cancel_points(loaded.family.cancel_points(loaded.model).language, while_=prefilling):
                    decoded = self._decode(inputs, items, streamer)
            except CancelledError:  # before the first token: during the prefill, or before it began
                decoded = Decoded(prompt_tokens=int(inputs.input_ids.shape[1]), stop_reason="cancelled")
            streamer.end()
            finished = time.perf_counter()

        cancelled = decoded.stop_reason == "cancelled"
        text = streamer.text.strip()
        if not cancelled:
            self.turns.append((question, _decoded_answer(text, decoded.token_ids, loaded)))
        stats = self._answer_stats(started, finished, streamer, decoded)
        return self._emit(Done(text=text, stats=stats, kept=not cancelled))

    def _prompt_items(self, items: Sequence[EncodedClip] | None = None) -> list[EncodedClip]:
        """``items`` (by default the open ones) in the order the family's prompt numbers them: clips
        first, then pictures."""
        return sorted(self.clips if items is None else items, key=lambda item: item.kind == "image")

    def _build_prompt(
        self, question: str, items: Sequence[EncodedClip], history: Sequence[tuple[str, str]] = ()
    ) -> PromptInputs:
        """The family's prompt for ``question`` about ``items`` (in prompt order) after ``history``."""
        loaded = self._require_model()
        return loaded.family.build_prompt(
            loaded.tokenizer,
            question,
            videos=[item.video for item in items if item.video is not None],
            images=[item.image for item in items if item.image is not None],
            history=history,
            limits=loaded.limits,
        )

    def _check_prompt_fits(self, inputs: PromptInputs, question: str, items: Sequence[EncodedClip]) -> None:
        """Refuse, before any of it runs, a prompt that leaves the decoder's context no room for one
        answer, saying whether the question itself (with the open ``items``) or the conversation
        grown around it is too long (QuestionTooLongError), in :class:`ContextNeed`'s words."""
        context = self._require_decoder().max_tokens
        prompt_tokens = int(inputs.input_ids.shape[1])
        if prompt_tokens + self.settings.generation.max_new_tokens <= context:
            return
        need = self._context_need(question, items, prompt_tokens)
        if need.earlier and dataclasses.replace(need, earlier=0).fits(context):
            raise QuestionTooLongError(
                f"With this question the context must hold {need.describe()}, more than its {context:,}. "
                "Start a new conversation (File ▸ New Conversation) and ask again."
            )
        room = need.room_for_question(context)
        advice = f"Shorten the question to at most {room:,} tokens." if room >= SENTENCE_QUESTION_TOKENS else FEWER_ITEMS_ADVICE
        raise QuestionTooLongError(
            f"This question is {need.question:,} tokens, and with it the context must hold {need.describe()}, "
            f"more than its {context:,}. {advice}"
        )

    def _check_items_fit(self, items: list[EncodedClip]) -> None:
        """Refuse the last of ``items`` (the open ones, then the one being added) when with it they
        leave the decoder's context no room for the shortest question and one answer: said as it is
        added (ContextFullError), not at the next question, and the open items stay as they were."""
        context = self._require_decoder().max_tokens
        ordered = self._prompt_items(items)
        shortest = "?"
        prompt_tokens = int(self._build_prompt(shortest, ordered).input_ids.shape[1])
        if prompt_tokens + self.settings.generation.max_new_tokens <= context:
            return
        need = self._context_need(shortest, ordered, prompt_tokens)
        raise ContextFullError(
            f"With {items[-1].summary.clip_name} the items leave no room for a question: even the shortest needs "
            f"{need.describe()}, more than the context's {context:,}. The conversation goes on with the "
            f"{plural(len(items) - 1, 'item')} it had. {FEWER_ITEMS_ADVICE}"
        )

    def _context_need(self, question: str, items: Sequence[EncodedClip], prompt_tokens: int) -> ContextNeed:
        """The ``prompt_tokens`` of ``question`` about ``items`` after the conversation so far, part by part."""
        alone = int(self._build_prompt(question, items).input_ids.shape[1])
        text_only = int(self._build_prompt(question, []).input_ids.shape[1])
        question_tokens = len(self._require_model().tokenizer.encode(question, add_special_tokens=False))
        return ContextNeed(
            items=alone - text_only,
            question=question_tokens,
            answer=self.settings.generation.max_new_tokens,
            template=text_only - question_tokens,
            earlier=prompt_tokens - alone,
            items_words=_items_words(items),
        )

    def _decode(self, inputs: PromptInputs, items: Sequence[EncodedClip], streamer: _TokenStreamer) -> Decoded:
        """Decode the answer to ``inputs`` with the features of ``items`` (in prompt order), streaming
        through ``streamer``."""
        loaded = self._require_model()
        decoder = self._require_decoder()
        prompt = Prompt(
            input_ids=inputs.input_ids,
            token_types=inputs.token_types,
            spans=inputs.spans,
            grids=inputs.grids,
            items=tuple(item.features for item in items),
            # Items are only ever added or all replaced, so the newest one names the whole set.
            owner=self.clips[-1] if self.clips else None,
        )
        generation = self.settings.generation
        rule = SamplingRule(
            max_new_tokens=generation.max_new_tokens,
            temperature=generation.temperature,
            eos_token_ids=_eos_token_ids(loaded),
        )
        return decoder.answer(prompt, rule, streamer.put, self._cancel.is_set)

    def _answer_stats(
        self, started: float, finished: float, streamer: _TokenStreamer, decoded: Decoded
    ) -> AnswerStats:
        loaded = self._require_model()
        new_tokens = len(decoded.token_ids)
        first = streamer.speed.first_token_time or finished
        gpu_memory_mb = None
        if loaded.device.type == "cuda":
            gpu_memory_mb = torch.cuda.max_memory_allocated(loaded.device) / 2**20
        return AnswerStats(
            time_to_first_token_ms=(first - started) * 1e3,
            new_tokens=new_tokens,
            tokens_per_second=decode_rate(new_tokens, first, finished),
            cancelled=decoded.stop_reason == "cancelled",
            gpu_memory_mb=gpu_memory_mb,
            decoder=self._decoder_stats(decoded),
        )

    def _decoder_stats(self, decoded: Decoded) -> DecoderStats:
        decoder = self._require_decoder()
        steps = sorted(decoded.step_ms)
        mean = sum(steps) / len(steps) if steps else None
        return DecoderStats(
            graphs_enabled=decoder.graphs_enabled,
            graph_steps=decoded.graph_steps,
            eager_steps=decoded.eager_steps,
            prompt_tokens=decoded.prompt_tokens,
            prefix_tokens_reused=decoded.prefix_tokens_reused,
            prefill_tokens=decoded.prompt_tokens - decoded.prefix_tokens_reused,
            prefill_ms=decoded.prefill_ms,
            tokens_per_second=1e3 / mean if mean else 0.0,
            ms_per_token_mean=mean,
            ms_per_token_p99=percentile(steps, 99),
            context_tokens=decoder.max_tokens,
            stop_reason=decoded.stop_reason,
        )

    # ----------------------------------------------------------------- parts (the settings transaction swaps them)

    def load_weights(self) -> None:
        """Load the model the settings name (its encoder and decoder are built separately), after
        checking that its memory estimate fits the device."""
        check_memory_fits(self.settings)
        device = pick_device(self.settings.model.device)
        with recording_growth(device, self.reserved_by_step, "weights"):
            self.loaded = load_model(self.settings.model, progress=self._emit)

    def build_encoder(self) -> None:
        """Replace the encoder: the old one gives back its graphs and the tower's attention first."""
        loaded = self._require_model()
        self._drop_encoder()
        with recording_growth(loaded.device, self.reserved_by_step, "encoder"):
            self.encoder, self.graphs_reason = make_vision_encoder(
                loaded.adapter, self.settings.encoder, progress=self._emit, limits=loaded.limits
            )

    def _drop_encoder(self) -> None:
        if self.encoder is not None:
            self.encoder.clear()
        self.encoder = None

    def build_decoder(self) -> None:
        """Allocate the KV cache for the settings' context and capture the decode step graphs."""
        loaded = self._require_model()
        if self.decoder is not None:
            self.decoder.close()
        self.decoder = None
        with recording_growth(loaded.device, self.reserved_by_step, "decoder"):
            language = loaded.adapter.language_model()
            decoding = self.settings.decoding
            self.decoder = Decoder(
                language,
                context_for(self.settings, language, loaded.limits),
                decoding.min_bucket,
                use_graphs=decoding.use_graphs,
                progress=self._emit,
            )

    def release_model(self) -> None:
        """Drop the model with its encoder and decoder, giving their memory back."""
        if self.decoder is not None:
            self.decoder.close()
        self.decoder = None
        self._drop_encoder()
        self.loaded = None
        self.free_cached_memory()

    def free_cached_memory(self) -> None:
        """Hand the memory cached by dropped tensors back to the device."""
        if torch.cuda.is_available():
            torch.cuda.empty_cache()

    # ----------------------------------------------------------------- helpers

    def _require_model(self) -> LoadedModel:
        if self.loaded is None:
            raise FramewiseError("The model is not loaded yet; wait for loading to finish.")
        return self.loaded

    def _require_decoder(self) -> Decoder:
        if self.decoder is None:
            raise FramewiseError("The decoder is not ready; wait for loading to finish.")
        return self.decoder

    def _require_encoder(self) -> VisionEncoder:
        if self.encoder is None:
            raise FramewiseError("The vision encoder is not ready; wait for loading to finish.")
        return self.encoder

    def _raise_if_cancelled(self) -> None:
        if self._cancel.is_set():
            raise CancelledError("Cancelled.")

    @contextmanager
    def _request(self) -> Iterator[None]:
        """One request (calls inside it, like apply_settings re-opening the clip, are part of it);
        a cancel is consumed when the outermost request ends."""
        self._request_depth += 1
        try:
            yield
        finally:
            self._request_depth -= 1
            if self._request_depth == 0:
                with self._cancel_lock:
                    self._cancel.clear()
                    self._ended_through = max(self._ended_through, self._requests.current)

    @contextmanager
    def _cancel_points(
        self, modules: Sequence[torch.nn.Module], while_: Callable[[], bool] = lambda: True
    ) -> Iterator[None]:
        """Raise CancelledError before the next of ``modules`` runs once a cancel arrives (and
        ``while_()`` holds).

        Hooks run only where Python calls the modules (eager passes, the prefill), not inside a
        CUDA-graph replay, which is short; the engine checks again after each such stage.
        """
        def check(module: torch.nn.Module, args: Any) -> None:
            if while_():
                self._raise_if_cancelled()

        handles = [module.register_forward_pre_hook(check) for module in modules]
        try:
            yield
        finally:
            for handle in handles:
                handle.remove()


@dataclass(frozen=True)
class _Encoded:
    """A clip preprocessed and encoded: its ``video``, the tower's ``features``, one ChunkStats
    per pass and the milliseconds spent preprocessing."""

    video: PreparedVideo
    features: EncodedItem
    chunks: tuple[ChunkStats, ...]
    preprocess_ms: float


@dataclass
class _EncodedParts:
    """The chunks of a clip encoded so far, in order."""

    videos: list[PreparedVideo] = dataclasses.field(default_factory=list)
    items: list[EncodedItem] = dataclasses.field(default_factory=list)
    chunks: tuple[ChunkStats, ...] = ()
    preprocess_ms: float = 0.0

    def add(self, video: PreparedVideo, features: EncodedItem, chunks: Sequence[ChunkStats]) -> None:
        self.videos.append(video)
        self.items.append(features)
        self.chunks += tuple(chunks)

    def features(self) -> EncodedItem:
        """The clip's features: each output's rows (tokens, hidden), chunk after chunk."""
        if len(self.items) == 1:
            return self.items[0]
        return EncodedItem(
            embeds=torch.cat([item.embeds for item in self.items]),
            deepstack=tuple(torch.cat(layers) for layers in zip(*(item.deepstack for item in self.items), strict=True)),
        )


class _Reading:
    """``read(on_progress)`` on a thread of its own; its latest progress is kept for the
    encoding thread to report, and the feed is ended however the read ends."""

    def __init__(self, read: Callable[[Callable[[ReadProgress], None]], SampledClip], feed: ChunkFeed, name: str) -> None:
        self._progress: ReadProgress | None = None
        self._outcome: SampledClip | BaseException | None = None
        self.finished = 0.0  # time.perf_counter() when the read ended

        def run() -> None:
            try:
                self._outcome = read(self._keep_progress)
            except BaseException as error:  # handed to the encoding thread by result()
                self._outcome = error
            finally:
                self.finished = time.perf_counter()
                feed.end()

        self._thread = threading.Thread(target=run, name=f"framewise-read {name}", daemon=True)
        self._thread.start()

    def _keep_progress(self, progress: ReadProgress) -> None:
        self._progress = progress

    def take_progress(self) -> ReadProgress | None:
        """The progress reported since the last call, if any."""
        progress, self._progress = self._progress, None
        return progress

    def join(self) -> None:
        self._thread.join()

    def result(self) -> SampledClip:
        """The sampled clip, or the error the read raised."""
        if isinstance(self._outcome, BaseException):
            raise self._outcome
        assert self._outcome is not None, "join() before result()"
        return self._outcome


def _items_words(items: Sequence[EncodedClip]) -> str:
    """What a question's items are, in a context message's words."""
    if len(items) == 1:
        return f"the {'picture' if items[0].kind == 'image' else 'clip'} {items[0].summary.clip_name}"
    return f"the {len(items)} open items" if items else "no clip"


def _decoded_answer(text: str, token_ids: Sequence[int], loaded: LoadedModel) -> DecodedAnswer:
    """The answer ``text`` with the ids it was decoded from, less the end-of-answer token the
    decoder never feeds back (the chat layout closes the turn with its own)."""
    ids = list(token_ids)
    if ids and ids[-1] in _eos_token_ids(loaded):
        ids.pop()
    return DecodedAnswer(text, ids)


def _eos_token_ids(loaded: LoadedModel) -> frozenset[int]:
    """The ids that end an answer, from the model's generation config (as ``generate()`` reads them)."""
    eos = loaded.model.generation_config.eos_token_id
    if eos is None:
        eos = loaded.tokenizer.eos_token_id
    return frozenset(eos if isinstance(eos, (list, tuple)) else [eos] if eos is not None else [])


def _device_description(device: torch.device) -> str:
    if device.type == "cuda":
        return f"cuda ({torch.cuda.get_device_name(device)})"
    return device.type
