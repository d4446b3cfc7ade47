"""Answers from a vLLM server, over its OpenAI-compatible chat-completions API, streaming.

Framewise samples the clip itself, exactly as for the local engine (same frames, same
timestamps), and sends the frames inline (:mod:`~framewise.core.backends.vllm.request`): a remote
server cannot read the person's files. The server is checked before the first question
(:mod:`~framewise.core.backends.vllm.check`); the answer streams over
:mod:`~framewise.core.backends.vllm.http`, and Stop closes the connection (the server then aborts
the request) and returns at once. Nothing is retried on its own: every failure becomes a
:class:`~framewise.core.errors.ServerError` that says what to change
(:mod:`~framewise.core.backends.vllm.errors`).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from pathlib import Path
from typing import Any

import openai

from framewise.core.backends.vllm.check import check_server, model_gone_error
from framewise.core.backends.vllm.http import StreamPiece, openai_client, stream_chat
from framewise.core.backends.vllm.metrics import read_mm_cache_counters
from framewise.core.backends.vllm.request import (
    RemoteClip,
    image_data_url,
    media_io_kwargs,
    openai_messages,
    request_media_io_kwargs,
    resize_with_opencv,
    video_data_url,
)
from framewise.core.backends.vllm.fit import check_fits_context, check_one_timeline, items_words
from framewise.core.backends.vllm.family import served_family
from framewise.core.backends.vllm.serve_command import with_serve_command
from framewise.core.backends.base import BackendBase
from framewise.core.backends.reading import FileRead, encode_done
from framewise.core.errors import FramewiseError, ModelLoadError, ServerModelError
from framewise.core.events import (
    AnswerStats,
    Done,
    EncodeDone,
    EngineInfo,
    EventSink,
    Progress,
    ResetReason,
    ServerInfo,
    ServerStats,
    Token,
    ignore_events,
)
from framewise.core.metrics import DecodeSpeedMeter, decode_rate
from framewise.core.model_source import DEMO_MODEL_DIR, MODEL_INFO_FILE, read_model_info
from framewise.core.seam import FamilyLimits
from framewise.core.settings import DEMO_MODEL, AppSettings
from framewise.core.video import SampledFrames, sample_clip
from framewise.core.video.feed import FrameArrivals
from framewise.core.video.thumbnails import clip_sampled

log = logging.getLogger(__name__)


class VllmServerEngine(BackendBase[RemoteClip]):
    """The engine's seam over a vLLM server: same calls, same events as :class:`~framewise.core.backends.local.engine.Engine`.

    ``load()`` checks the server (``/health``, ``/v1/models``, the model name); ``open_clip()``
    samples and packs the clip; ``ask()`` streams the answer with the conversation so far. As there,
    every public call takes an optional ``request_id`` that its events carry.
    """

    def __init__(self, settings: AppSettings, sink: EventSink = ignore_events) -> None:
        super().__init__(settings, sink)
        self.family = served_family()
        self.limits = self.family.limits
        self._server: ServerInfo | None = None
        self._client: openai.OpenAI | None = None
        self._noted: str | None = None  # the pruning note said last

    # ----------------------------------------------------------------- lifecycle

    def load(self, request_id: int | None = None) -> EngineInfo:
        """Contact the server and check that it serves the model; emits and returns :class:`EngineInfo`."""
        with self._serving(request_id):
            return self._load()

    def _load(self) -> EngineInfo:
        backend = self.settings.backend
        warning = backend.plain_http_warning()
        if warning:  # said before the first request leaves this machine
            log.warning("%s", warning)
            self._emit(Progress("load", 0, 1, f"Warning: {warning}"))
        self._emit(Progress("load", 0, 1, f"Contacting the vLLM server at {backend.base_url()}"))
        self._server = check_server(backend, self.settings.encoder, self.settings.sampling)
        self._client = openai_client(backend)
        self._emit(Progress("load", 1, 1, f"vLLM server ready: model {self._server.model}"))
        self._note_pruning()
        return self._emit(self.info())

    def _note_pruning(self) -> None:
        """Say once, as a warning, that the server prunes at its own rate, when the settings ask for
        pruning and the note differs from the one said last."""
        note = self._require_server().pruning_note
        if note is not None and note != self._noted:
            log.warning("%s", note)
            self._emit(Progress("load", 1, 1, f"Warning: {note}"))
        self._noted = note

    def apply_settings(self, settings: AppSettings, request_id: int | None = None) -> EngineInfo | None:
        """Take new settings; new sampling settings re-sample every clip of the conversation (a new
        server needs a new engine)."""
        with self._serving(request_id):
            return self._apply_settings(settings)

    def _limits_for(self, settings: AppSettings) -> FamilyLimits:
        """The served family's limits: settings are checked against them."""
        return served_family().limits

    def _apply_settings(self, settings: AppSettings) -> EngineInfo | None:
        settings.validate(self.limits)
        old, self.settings = self.settings, settings
        if self._server is None:
            return None
        if settings.backend != old.backend:
            raise FramewiseError("A different server needs a new connection; apply the Backend settings again.")
        # Pruning is the server's: the frames sent, and so the clips, stay as they were.
        resampled = dataclasses.replace(settings.sampling, pruning=old.sampling.pruning) != old.sampling
        if self.open_clip_path() and resampled:
            self._sample_again(self.clips)
        if settings.encoder != old.encoder or settings.sampling != old.sampling:
            self._server = with_serve_command(self._server, settings)
            self._note_pruning()
            return self._emit(self.info())
        return None

    def info(self) -> EngineInfo:
        """What answers: the server, its model, and that the vision encoder runs there."""
        server = self._require_server()
        return EngineInfo(
            device=f"vLLM server {server.url}",
            dtype="server's",
            model_name=server.model,
            model_label=_model_label(server),
            encoder_name="on the server",
            graphs_enabled=False,
            graphs_reason="the vision encoder runs on the vLLM server",
            attention_backends=(),
            server=server,
            device_kind="server",
        )

    # ----------------------------------------------------------------- clips

    def _open_clip(self, path: Path, reason: ResetReason) -> EncodeDone:
        """Sample the clip as the local engine does, pack its frames for the server and make it the
        only open item."""
        clip = self._read_and_pack(path)
        self._admit([clip])
        self._make_open(clip, reason)
        return self._ready(clip, "is ready (the server encodes it with the first question)")

    def _add_clip(self, path: Path, span: tuple[float, float] | None) -> EncodeDone:
        """Sample (its ``span`` only, when given) and pack the clip or picture at ``path`` and add it
        to the conversation, unless the server could not take it (:meth:`_admit`); the progress says
        what a question now sends, which the server must admit."""
        clip = self._read_and_pack(path, span)
        together = [*self.clips, clip]
        self._admit(together)
        self.added.append(clip)
        return self._ready(
            clip, f"is added to the conversation; a question now sends {items_words(together)} (the server's "
            "--limit-mm-per-prompt must admit them)"
        )

    def _read_and_pack(self, path: Path, span: tuple[float, float] | None = None) -> RemoteClip:
        """``path`` read (a still picture as an image, anything else sampled as a clip, or only its
        ``span`` (start, end) seconds) and packed."""
        self._require_server()
        read = FileRead(path, self._emit)
        picture = read.picture() if span is None else None
        if picture is not None:
            return self._pack_picture(picture)
        sampling = self.settings.sampling
        arrivals = FrameArrivals()
        sizing = self.family.frame_sizing(sampling, self.limits, resize=resize_with_opencv)
        sampled = read.whole_clip(
            lambda on_progress: sample_clip(
                path, sampling, sizing, should_cancel=self._cancel.is_set, on_progress=on_progress, sink=arrivals, span=span
            ),
            arrivals,
        )
        return self._pack(sampled, span)

    def _pack_picture(self, picture: SampledFrames) -> RemoteClip:
        """Pack a still picture (one frame (1, H, W, 3) uint8 RGB) for the server as one image."""
        self._emit(clip_sampled(picture, kind="image"))
        started = time.perf_counter()
        url = image_data_url(picture.frames[0])
        width, height, _ = picture.size_and_duration
        patches = width * height // self.limits.patch_pixels  # before the server resizes it
        summary = encode_done(
            picture,
            patches=patches,
            video_tokens=patches // self.limits.merge_area,
            preprocess_ms=(time.perf_counter() - started) * 1e3,
            kind="image",
        )
        return RemoteClip(path=picture.path, url=url, media_io_kwargs={}, summary=summary, kind="image")

    def _ready(self, clip: RemoteClip, words: str) -> EncodeDone:
        self._emit(Progress("encode", 1, 1, f"{clip.summary.clip_name} {words}"))
        return self._emit(clip.summary)

    def _use_frames(self, sampled: SampledFrames) -> EncodeDone:
        """Pack frames sampled elsewhere for the server."""
        self._require_server()
        clip = self._pack(sampled)
        self._admit([clip])
        self._make_open(clip, "new_clip")
        return self._ready(clip, "is ready (the server encodes it with the first question)")

    def _pack(self, sampled: SampledFrames, span: tuple[float, float] | None = None) -> RemoteClip:
        """Pack sampled frames (T, H, W, 3) uint8 for the server (a closer look over ``span``, when given)."""
        self._emit(clip_sampled(sampled))
        frames, timestamps = sampled.frames, sampled.timestamps
        started = time.perf_counter()
        url = video_data_url(frames)
        pack_ms = (time.perf_counter() - started) * 1e3
        self._cancel.raise_if_cancelled()
        # Patch rows as the local engine counts them: one per patch square of each slice of frames.
        slices = -(-frames.shape[0] // self.limits.frames_per_slice)
        patches = slices * int(frames.shape[1] * frames.shape[2]) // self.limits.patch_pixels
        summary = encode_done(
            sampled, patches=patches, video_tokens=patches // self.limits.merge_area, preprocess_ms=pack_ms, span=span
        )
        return RemoteClip(path=sampled.path, url=url, media_io_kwargs=media_io_kwargs(timestamps), summary=summary)

    # ----------------------------------------------------------------- questions

    def _ask(self, question: str) -> Done:
        """Stream the answer to ``question`` from the server, with the conversation so far."""
        server = self._require_server()
        self._admit(self.clips)
        messages = openai_messages(question, self.clips, self.turns)
        generation = self.settings.generation
        request: dict[str, Any] = {
            "model": server.model,
            "messages": messages,
            "max_tokens": generation.max_new_tokens,
            "temperature": generation.temperature,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        video_kwargs = request_media_io_kwargs(self.clips)
        if video_kwargs is not None:
            request["extra_body"] = {"media_io_kwargs": video_kwargs}
        started = time.perf_counter()
        answer = _StreamedAnswer()
        try:
            for piece in stream_chat(self._require_client(), request, self._cancel.flag, self.settings.backend.answer_timeout_s):
                answer.take(piece, self._emit)
        except ServerModelError as error:
            self._follow_a_renamed_model(error)
            raise
        finished = time.perf_counter()
        text = "".join(answer.pieces).strip()
        if not answer.cancelled:
            self.turns.append((question, text))
        stats = self._answer_stats(server, answer, started, finished)
        return self._emit(Done(text=text, stats=stats, kept=not answer.cancelled))

    def _answer_stats(self, server: ServerInfo, answer: _StreamedAnswer, started: float, finished: float) -> AnswerStats:
        usage = answer.usage or {}
        details = usage.get("prompt_tokens_details") or {}
        completion = usage.get("completion_tokens")
        new_tokens = completion if completion is not None else answer.speed.tokens
        first = answer.speed.first_token_time or finished
        queries, hits = read_mm_cache_counters(self.settings.backend)
        return AnswerStats(
            time_to_first_token_ms=(first - started) * 1e3,
            new_tokens=new_tokens,
            tokens_per_second=decode_rate(new_tokens, first, finished),
            cancelled=answer.cancelled,
            server=ServerStats(
                url=server.url,
                model=server.model,
                prompt_tokens=usage.get("prompt_tokens"),
                completion_tokens=completion,
                cached_prompt_tokens=details.get("cached_tokens"),
                finish_reason=answer.finish_reason,
                mm_cache_queries=queries,
                mm_cache_hits=hits,
            ),
        )

    # ----------------------------------------------------------------- helpers

    def _admit(self, clips: list[RemoteClip]) -> None:
        """Refuse ``clips`` (all the conversation would hold) when they cannot reach the server as the
        model's prompt lays them out, or cannot fit its context with one answer."""
        check_one_timeline(clips)
        check_fits_context(clips, self.settings.generation.max_new_tokens, self._require_server().max_model_len)

    def _follow_a_renamed_model(self, error: ServerModelError) -> None:
        """After the server said it does not serve the model it chose itself (none was named; a
        restart under another name): check it again, take the model it serves now (its new
        :class:`EngineInfo` is emitted) and raise the error that says so. A model the person named
        is theirs to change: nothing happens here."""
        if self.settings.backend.server_model.strip():
            return
        gone = self._require_server().model
        self._server = check_server(self.settings.backend, self.settings.encoder, self.settings.sampling)
        if self._server.model == gone:
            return
        self._emit(self.info())
        raise model_gone_error(self._server, gone) from error

    def _require_server(self) -> ServerInfo:
        if self._server is None:
            raise FramewiseError("The vLLM server has not been checked yet; wait for the connection to finish.")
        return self._server

    def _require_client(self) -> openai.OpenAI:
        if self._client is None:
            raise FramewiseError("The vLLM server has not been checked yet; wait for the connection to finish.")
        return self._client


class _StreamedAnswer:
    """The pieces of one streamed answer as they arrive, with how fast they came and how it ended.

    ``speed`` counts a token per chunk of text, as vLLM streams them.
    """

    def __init__(self) -> None:
        self.pieces: list[str] = []
        self.speed = DecodeSpeedMeter()
        self.finish_reason: str | None = None
        self.usage: dict[str, Any] | None = None
        self.cancelled = False

    def take(self, piece: StreamPiece, sink: EventSink) -> None:
        if piece.cancelled:
            self.cancelled = True
            return
        chunk = piece.chunk
        if chunk.usage is not None:
            self.usage = chunk.usage.model_dump()
        for choice in chunk.choices:
            text = choice.delta.content or ""
            if text:
                speed = self.speed.add()
                if speed is not None:
                    sink(speed)
                self.pieces.append(text)
                sink(Token(text))
            self.finish_reason = choice.finish_reason or self.finish_reason


def _model_label(server: ServerInfo) -> str | None:
    """The label of a Framewise model the server serves, so its answers are labelled here as on this
    machine: from the notes of the folder the server loaded it from, when that folder is on this
    machine (whatever the served name); else the bundled demo model's, when it is served under its
    name (``demo``, or its folder ``demo_model``); else ``None``."""
    folder = Path(server.model_source) if server.model_source else None
    if folder is None or not (folder / MODEL_INFO_FILE).is_file():
        if server.model != DEMO_MODEL and Path(server.model).name != "demo_model":
            return None
        folder = DEMO_MODEL_DIR
    try:
        label = read_model_info(folder).get("label")
    except ModelLoadError:
        return None
    return str(label) if label else None
