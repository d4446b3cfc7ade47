"""Answers from a vLLM server, over its OpenAI-compatible chat-completions API, streaming.

Framewise samples the clip itself, exactly as for the local engine (same frames, same
timestamps), and sends the frames inline: a remote server cannot read the person's files. vLLM
0.32 takes a video made of images as ONE ``video_url`` item whose URL is
``data:video/jpeg;base64,<frame 1>,<frame 2>,...`` (each frame's base64 after a single prefix;
every frame is opened with Pillow, so lossless PNG frames go inside that ``video/jpeg`` URL). The
frames' times travel as ``media_io_kwargs`` (``fps`` and ``frames_indices``: here milliseconds),
so the server writes the same ``<t.t seconds>`` markers as Framewise; that needs the server's
``--trust-request-mm-kwargs``. The server does not refuse more frames than it was sized for, so
Framewise's own ``sampling.max_frames`` is the cap.

The stream is read on a thread of its own; :meth:`VllmServerEngine.ask` waits on it in short
steps, so Stop closes the connection (the server then aborts the request) and returns at once.
Nothing is retried on its own: every failure becomes a :class:`~framewise.core.errors.ServerError`
that says what to change.
"""

from __future__ import annotations

import base64
import json
import logging
import queue
import re
import shlex
import socket
import ssl
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

import cv2
import httpx
import numpy as np
import openai

from framewise.core.backends.base import BackendBase
from framewise.core.errors import (
    CancelledError,
    FramewiseError,
    ServerAuthError,
    ServerError,
    ServerFailedError,
    ServerModelError,
    ServerRequestError,
    ServerStreamCutError,
    ServerTimeoutError,
    ServerTlsError,
    ServerUnreachableError,
)
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
from framewise.core.resources import asset_path
from framewise.core.processing import VisionGeometry, chat_messages, video_frame_sizing
from framewise.core.settings import DEMO_MODEL, AppSettings, BackendSettings, EncoderSettings, SamplingSettings
from framewise.core.video import sample_clip
from framewise.core.video.thumbnails import clip_sampled

log = logging.getLogger(__name__)

# How often ask() looks at the cancel flag while it waits for the next piece of the stream.
CANCEL_POLL_S = 0.05
# Prometheus counters of vLLM's multimodal cache (names without the _total suffix some versions add).
MM_CACHE_QUERIES = "vllm:mm_cache_queries"
MM_CACHE_HITS = "vllm:mm_cache_hits"
MS_PER_SECOND = 1000.0
# One sample line of Prometheus' text format: name, optional {labels}, value (a timestamp may follow).
_PROMETHEUS_SAMPLE = re.compile(r"^(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)(?:\{[^}]*\})?\s+(?P<value>\S+)")


@dataclass(frozen=True)
class RemoteClip:
    """A clip sampled here and made ready to send: ``video_url`` is the frames' data: URL,
    ``media_io_kwargs`` their times; ``summary`` what opening it cost."""

    path: Path | None
    video_url: str
    media_io_kwargs: dict[str, Any]
    summary: EncodeDone


class VllmServerEngine(BackendBase[RemoteClip]):
    """The engine's seam over a vLLM server: same calls, same events as :class:`~framewise.core.engine.Engine`.

    ``load()`` checks the server (``/health``, ``/v1/models``, the model name); ``open_clip()``
    samples and packs the clip; ``ask()`` streams the answer with the conversation so far. As there,
    every public call takes an optional ``request_id`` that its events carry.
    """

    def __init__(self, settings: AppSettings, sink: EventSink = ignore_events) -> None:
        super().__init__(settings, sink)
        self._server: ServerInfo | None = None
        self._client: openai.OpenAI | None = None

    # ----------------------------------------------------------------- lifecycle

    def load(self, request_id: int | None = None) -> EngineInfo:
        """Contact the server and check that it serves the model; emits and returns :class:`EngineInfo`."""
        with self._requests.serving(request_id):
            return self._load()

    def _load(self) -> EngineInfo:
        backend = self.settings.backend
        warning = backend.plain_http_warning()
        if warning:  # said before the first request leaves this machine
            log.warning("%s", warning)
            self._emit(Progress("load", 0, 1, f"Warning: {warning}"))
        self._emit(Progress("load", 0, 1, f"Contacting the vLLM server at {backend.base_url()}"))
        self._server = check_server(backend, self.settings.encoder, self.settings.sampling)
        self._client = _openai_client(backend)
        self._emit(Progress("load", 1, 1, f"vLLM server ready: model {self._server.model}"))
        return self._emit(self.info())

    def apply_settings(self, settings: AppSettings, request_id: int | None = None) -> EngineInfo | None:
        """Take new settings; new sampling settings re-sample the open clip (a new server needs a new engine)."""
        with self._requests.serving(request_id):
            return self._apply_settings(settings)

    def _apply_settings(self, settings: AppSettings) -> EngineInfo | None:
        settings.validate()
        old, self.settings = self.settings, settings
        if self._server is None:
            return None
        if settings.backend != old.backend:
            raise FramewiseError("A different server needs a new connection; apply the Backend settings again.")
        path = self.open_clip_path()
        if path and settings.sampling != old.sampling:
            self._open_clip(path, "resampled")
        if settings.encoder != old.encoder or settings.sampling != old.sampling:
            self._server = _with_serve_command(self._server, settings)
            return self._emit(self.info())
        return None

    def info(self) -> EngineInfo:
        """What answers: the server, its model, and that the vision encoder runs there."""
        server = self._require_server()
        return EngineInfo(
            device=f"vLLM server {server.url}",
            dtype="server's",
            model_name=server.model,
            model_label=_model_label(server.model),
            encoder_name="on the server",
            graphs_enabled=False,
            graphs_reason="the vision encoder runs on the vLLM server",
            attention_backends=(),
            server=server,
            device_kind="server",
        )

    def cancel(self, request_id: int | None = None) -> None:
        """Stop the running work at its next check (within ``CANCEL_POLL_S``). Safe from any thread.

        Each request starts with the flag cleared, so a cancel of one that has ended stops nothing
        (``request_id`` is accepted for the seam's sake)."""
        self._cancel.set()

    # ----------------------------------------------------------------- clips

    def _open_clip(self, path: Path, reason: ResetReason) -> EncodeDone:
        """Sample the clip as the local engine does and pack its frames for the server."""
        self._require_server()
        self._cancel.clear()
        self._emit(Progress("decode", 0, 1, f"Reading {path.name}"))
        started = time.perf_counter()
        sampling = self.settings.sampling
        sampled = sample_clip(
            path, sampling, video_frame_sizing(sampling, VisionGeometry()), should_cancel=self._cancel.is_set
        )
        decode_ms = (time.perf_counter() - started) * 1e3
        info = sampled.info
        return self._pack(
            sampled.frames,
            sampled.timestamps,
            path.name,
            path,
            decode_ms,
            (info.width, info.height, info.duration_s),
            reason,
        )

    def _use_frames(
        self, frames: np.ndarray, timestamps: Sequence[float], name: str, size_and_duration: tuple[int, int, float]
    ) -> EncodeDone:
        """Pack frames (T, H, W, 3) uint8 RGB sampled elsewhere for the server."""
        self._require_server()
        self._cancel.clear()
        return self._pack(frames, timestamps, name, None, 0.0, size_and_duration, "new_clip")

    def _pack(
        self,
        frames: np.ndarray,
        timestamps: Sequence[float],
        name: str,
        path: Path | None,
        decode_ms: float,
        size_and_duration: tuple[int, int, float],
        reason: ResetReason,
    ) -> EncodeDone:
        """Pack sampled frames (T, H, W, 3) uint8 for the server and make them the open clip."""
        self._emit(clip_sampled(name, path, frames, timestamps, size_and_duration))
        started = time.perf_counter()
        url = video_data_url(frames)
        pack_ms = (time.perf_counter() - started) * 1e3
        if self._cancel.is_set():
            raise CancelledError("Cancelled.")
        geometry = VisionGeometry()
        # Patch rows as the local engine counts them: one per 16x16 square of each frame pair.
        pairs = -(-frames.shape[0] // geometry.temporal_patch_size)
        patches = pairs * int(frames.shape[1] * frames.shape[2]) // (geometry.patch_size**2)
        summary = EncodeDone(
            clip_name=name,
            frames=len(timestamps),
            patches=patches,
            timestamps=tuple(timestamps),
            decode_ms=decode_ms,
            preprocess_ms=pack_ms,
            encode_ms=0.0,
            ms_per_frame=0.0,
            graph_hit=False,
        )
        self.clip = RemoteClip(path=path, video_url=url, media_io_kwargs=media_io_kwargs(timestamps), summary=summary)
        self._reset_conversation(reason)
        self._emit(Progress("encode", 1, 1, f"{name} is ready (the server encodes it with the first question)"))
        return self._emit(summary)

    # ----------------------------------------------------------------- questions

    def _ask(self, question: str) -> Done:
        """Stream the answer to ``question`` from the server, with the conversation so far."""
        server = self._require_server()
        self._cancel.clear()
        messages = openai_messages(question, self.clip, self.turns)
        generation = self.settings.generation
        request: dict[str, Any] = {
            "model": server.model,
            "messages": messages,
            "max_tokens": generation.max_new_tokens,
            "temperature": generation.temperature,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if self.clip is not None:
            request["extra_body"] = {"media_io_kwargs": self.clip.media_io_kwargs}
        started = time.perf_counter()
        answer = _StreamedAnswer()
        for piece in _stream(self._require_client(), request, self._cancel):
            answer.take(piece, self._emit)
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

    def take(self, piece: _Piece, sink: EventSink) -> None:
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


@dataclass(frozen=True)
class _Piece:
    """One chunk of the stream, or the note that Stop was pressed."""

    chunk: Any = None
    cancelled: bool = False


def _stream(client: openai.OpenAI, request: dict[str, Any], cancel: threading.Event) -> Iterator[_Piece]:
    """The chunks of a streamed chat completion, read on a thread of their own.

    Yields a cancelled piece, and stops, within ``CANCEL_POLL_S`` of ``cancel`` being set; the
    connection is then shut, which makes vLLM abort the request. Raises :class:`ServerError`
    for a failure, and :class:`ServerStreamCutError` when the stream ends without a finish reason.
    """
    pieces: queue.Queue[tuple[str, Any]] = queue.Queue()
    reader = _StreamReader(client, request, pieces)
    threading.Thread(target=reader.run, name="framewise-vllm-stream", daemon=True).start()
    finished = False
    while True:
        if cancel.is_set():
            reader.abandon()
            yield _Piece(cancelled=True)
            return
        try:
            kind, item = pieces.get(timeout=CANCEL_POLL_S)
        except queue.Empty:
            continue
        if kind == "chunk":
            finished = finished or any(choice.finish_reason for choice in item.choices)
            yield _Piece(chunk=item)
        elif kind == "error":
            raise server_error(item, request["model"]) from item
        else:
            if not finished:
                raise ServerStreamCutError(
                    "The server's answer stopped before it was complete (the connection closed mid-answer). "
                    "The conversation is kept; ask again, and check the server's log if it happens again."
                )
            return


class _StreamReader:
    """Runs the blocking request and its iteration, handing chunks to a queue."""

    def __init__(self, client: openai.OpenAI, request: dict[str, Any], pieces: queue.Queue[tuple[str, Any]]) -> None:
        self.client = client
        self.request = request
        self.pieces = pieces
        self._lock = threading.Lock()
        self._stream: Any = None
        self._abandoned = False

    def run(self) -> None:
        try:
            stream = self.client.chat.completions.create(**self.request)
            with self._lock:
                self._stream = stream
                abandoned = self._abandoned
            if abandoned:
                _shut(stream)
                return
            for chunk in stream:
                self.pieces.put(("chunk", chunk))
            self.pieces.put(("end", None))
        except Exception as error:  # noqa: BLE001 - handed to the asking thread, which maps it
            with self._lock:
                abandoned = self._abandoned
            if not abandoned:
                self.pieces.put(("error", error))

    def abandon(self) -> None:
        """Stop reading: shut the connection now if it is open, else as soon as it opens."""
        with self._lock:
            self._abandoned = True
            stream = self._stream
        if stream is not None:
            _shut(stream)


def _shut(stream: Any) -> None:
    """Close a streaming response from any thread: shutting the socket wakes a blocked read."""
    response = getattr(stream, "response", None)
    network = response.extensions.get("network_stream") if response is not None else None
    sock = network.get_extra_info("socket") if network is not None else None
    if isinstance(sock, socket.socket):
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass  # already closed by the other side
    try:
        stream.close()
    except Exception:  # noqa: BLE001 - closing an abandoned stream may race the reading thread
        log.debug("closing an abandoned stream failed", exc_info=True)


# --------------------------------------------------------------------- the request's parts


def video_data_url(frames: np.ndarray) -> str:
    """Frames (T, H, W, 3) uint8 RGB as one ``data:video/jpeg;base64,...`` URL of lossless PNG frames."""
    encoded = []
    for frame in frames:
        ok, png = cv2.imencode(".png", np.ascontiguousarray(frame[..., ::-1]))
        if not ok:
            raise FramewiseError("A sampled frame could not be encoded as PNG for the server.")
        encoded.append(base64.b64encode(png.tobytes()).decode("ascii"))
    return "data:video/jpeg;base64," + ",".join(encoded)


def media_io_kwargs(timestamps: Sequence[float]) -> dict[str, Any]:
    """The frames' times for vLLM: a 1000 fps source whose frame indices are the milliseconds.

    vLLM computes each frame's time as ``frames_indices[i] / fps`` and marks each frame pair with
    the mean of its two times, as Framewise does.
    """
    indices = [round(float(t) * MS_PER_SECOND) for t in timestamps]
    return {
        "video": {"fps": MS_PER_SECOND, "frames_indices": indices, "total_num_frames": (max(indices) + 1) if indices else 0}
    }


def openai_messages(question: str, clip: RemoteClip | None, history: Sequence[tuple[str, str]]) -> list[dict[str, Any]]:
    """The conversation in the chat-completions form: the clip opens the first user turn (as
    :func:`~framewise.core.processing.chat_messages` lays it out), then the earlier turns, then ``question``."""
    messages = chat_messages(question, video=clip is not None, history=history)
    for message in messages:
        if isinstance(message["content"], list):
            message["content"] = [
                {"type": "video_url", "video_url": {"url": clip.video_url}} if part["type"] == "video" else part
                for part in message["content"]
                if clip is not None or part["type"] != "video"
            ]
    return messages


# --------------------------------------------------------------------- checking the server


def check_server(backend: BackendSettings, encoder: EncoderSettings, sampling: SamplingSettings) -> ServerInfo:
    """Ask the server whether it is up (``/health``) and what it serves (``/v1/models``).

    Returns the server's description with the model to use: ``backend.server_model``, or the one
    model the server serves when that is empty. Raises a :class:`ServerError` that says what to change.
    """
    base = backend.base_url()
    with _http_client(backend) as client:
        health = _get(client, f"{base}/health", backend)
        if health.status_code != 200:
            raise ServerFailedError(
                f"The server at {base} is not healthy (GET /health answered {health.status_code}); "
                "wait for it to finish starting, or check its log."
            )
        models = _get(client, f"{base}/v1/models", backend)
        _raise_for_status(models, backend.server_model or "")
        served = _served_models(models, base)
        version = _server_version(client, base, backend)
    model = _chosen_model(backend, tuple(served), base)
    return ServerInfo(
        url=base,
        model=model,
        served_models=tuple(served),
        max_model_len=served[model],
        version=version,
        serve_command=vllm_serve_command(model, encoder, sampling),
        plain_http_warning=backend.plain_http_warning(),
    )


def _served_models(response: httpx.Response, base: str) -> dict[str, int | None]:
    try:
        data = response.json()["data"]
        return {str(entry["id"]): entry.get("max_model_len") for entry in data}
    except (ValueError, KeyError, TypeError) as error:
        raise ServerFailedError(
            f"{base}/v1/models did not answer as an OpenAI-compatible server does; check the address "
            "(it should be the server's root, e.g. http://127.0.0.1:8000)."
        ) from error


def _chosen_model(backend: BackendSettings, served: tuple[str, ...], base: str) -> str:
    wanted = backend.server_model.strip()
    if not served:
        raise ServerModelError(f"The server at {base} serves no model.")
    if not wanted:
        if len(served) > 1:
            raise ServerModelError(
                f"The server at {base} serves several models ({', '.join(served)}); name one as the server model."
            )
        return served[0]
    if wanted not in served:
        raise ServerModelError(
            f"The server at {base} does not serve {wanted!r}; it serves {', '.join(served)}. "
            "Change the server model to one of those (vLLM's --served-model-name)."
        )
    return wanted


def _server_version(client: httpx.Client, base: str, backend: BackendSettings) -> str | None:
    try:
        response = client.get(f"{base}/version", headers=_auth_headers(backend))
        return str(response.json().get("version")) if response.status_code == 200 else None
    except (httpx.HTTPError, ValueError, AttributeError):
        return None


def read_mm_cache_counters(backend: BackendSettings) -> tuple[float | None, float | None]:
    """The server's multimodal cache (queries, hits) totals from ``/metrics``; ``None`` where absent."""
    try:
        with _http_client(backend) as client:
            response = client.get(f"{backend.base_url()}/metrics", headers=_auth_headers(backend))
    except httpx.HTTPError:
        return None, None
    if response.status_code != 200:
        return None, None
    totals = prometheus_totals(response.text, (MM_CACHE_QUERIES, MM_CACHE_HITS))
    return totals.get(MM_CACHE_QUERIES), totals.get(MM_CACHE_HITS)


def prometheus_totals(text: str, names: Sequence[str]) -> dict[str, float]:
    """The sum over label sets of each counter in ``names`` (with or without ``_total``) in
    Prometheus' text format; counters that do not appear are left out."""
    totals: dict[str, float] = {}
    for line in text.splitlines():
        sample = _PROMETHEUS_SAMPLE.match(line)
        if sample is None:
            continue
        name = sample["name"].removesuffix("_total")
        if name in names:
            try:
                totals[name] = totals.get(name, 0.0) + float(sample["value"])
            except ValueError:
                continue
    return totals


# --------------------------------------------------------------------- the serve command


def vllm_serve_command(model: str, encoder: EncoderSettings, sampling: SamplingSettings) -> str:
    """A command line that starts vLLM (0.32) serving ``model`` for Framewise, with the server's
    encoder CUDA graphs sized like Framewise's encoder settings.

    Framewise's budgets count patch rows; vLLM's ``encoder_cudagraph_token_budgets`` count merged
    output tokens (2x2 patches each), so each budget is divided by 4. Items per batch carry over;
    frames per batch counts attention sequences (one per frame pair) in both. Per-request frame
    times need ``--trust-request-mm-kwargs``; ``num_frames -1`` keeps every frame sent (vLLM's
    default silently keeps 32).
    """
    merge_area = VisionGeometry().merge_area
    budgets = [budget // merge_area for budget in encoder.token_budgets()]
    compilation = {
        "cudagraph_mm_encoder": True,
        "encoder_cudagraph_token_budgets": budgets,
        "encoder_cudagraph_max_vision_items_per_batch": min(encoder.max_items_per_batch, budgets[0]),
        "encoder_cudagraph_max_frames_per_batch": encoder.max_frames_per_batch,
    }
    arguments = [
        "python", "-m", "vllm.entrypoints.openai.api_server",
        "--model", model,
        "--trust-request-mm-kwargs",
        "--limit-mm-per-prompt", json.dumps({"image": 0, "video": {"count": 1, "num_frames": sampling.max_frames}}),
        "--media-io-kwargs", json.dumps({"video": {"num_frames": -1}}),
        "--compilation-config", json.dumps(compilation, separators=(",", ":")),
    ]
    return shlex.join(arguments)


def _with_serve_command(server: ServerInfo, settings: AppSettings) -> ServerInfo:
    from dataclasses import replace

    return replace(server, serve_command=vllm_serve_command(server.model, settings.encoder, settings.sampling))


# --------------------------------------------------------------------- HTTP and its failures


def _openai_client(backend: BackendSettings) -> openai.OpenAI:
    """The chat-completions client: TLS verified, no retries, the answer timeout between chunks."""
    timeout = httpx.Timeout(backend.answer_timeout_s, connect=backend.timeout_s)
    return openai.OpenAI(
        base_url=f"{backend.base_url()}/v1",
        api_key=backend.api_key or "EMPTY",
        timeout=timeout,
        max_retries=0,
    )


def _http_client(backend: BackendSettings) -> httpx.Client:
    """A client for the server's plain endpoints (/health, /v1/models, /metrics), TLS verified."""
    return httpx.Client(timeout=backend.timeout_s, verify=True, follow_redirects=False)


def _auth_headers(backend: BackendSettings) -> dict[str, str]:
    return {"Authorization": f"Bearer {backend.api_key}"} if backend.api_key else {}


def _get(client: httpx.Client, url: str, backend: BackendSettings) -> httpx.Response:
    try:
        return client.get(url, headers=_auth_headers(backend))
    except httpx.HTTPError as error:
        raise server_error(error, backend.server_model) from error


def _raise_for_status(response: httpx.Response, model: str) -> None:
    if response.status_code >= 400:
        raise status_error(response.status_code, _error_message(response), model, str(response.url))


def _error_message(response: httpx.Response) -> str:
    """The server's own message from an error body: vLLM's ``{"error": {"message": ...}}`` or ``{"error": "..."}``."""
    try:
        body = response.json()
    except ValueError:
        return response.text.strip()[:300]
    return _message_from_body(body) or response.text.strip()[:300]


def _message_from_body(body: Any) -> str | None:
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict):
            return str(error.get("message") or "") or None
        if isinstance(error, str):
            return error
        if isinstance(body.get("message"), str):
            return body["message"]
    return None


def server_error(error: BaseException, model: str) -> ServerError:
    """The :class:`ServerError` for an exception of the HTTP layer (httpx) or of the openai client."""
    if isinstance(error, ServerError):
        return error
    if isinstance(error, openai.APIStatusError):
        message = _message_from_body(error.body) or error.message
        return status_error(error.status_code, message, model, str(error.request.url))
    if isinstance(error, (openai.APITimeoutError, httpx.TimeoutException)):
        return ServerTimeoutError(
            "The vLLM server did not answer in time. It may be busy or still starting; raise the timeout "
            "in Settings ▸ Backend (--server-timeout), or check the server."
        )
    cause = error.__cause__ if isinstance(error, openai.APIConnectionError) and error.__cause__ else error
    if _is_tls_failure(cause):
        return ServerTlsError(
            f"The TLS connection to the server failed ({_first_line(cause)}). If the server speaks plain http, "
            "use an http:// address; otherwise give it a certificate this machine trusts (verification stays on)."
        )
    if isinstance(cause, (httpx.RemoteProtocolError, httpx.ReadError)) or (
        isinstance(error, openai.APIConnectionError) and isinstance(cause, httpx.StreamError)
    ):
        return ServerStreamCutError(
            f"The connection to the server broke ({_first_line(cause)}). The conversation is kept; ask again, "
            "and check the server's log if it happens again."
        )
    if isinstance(cause, (httpx.ConnectError, httpx.NetworkError, openai.APIConnectionError, OSError)):
        return ServerUnreachableError(
            f"Cannot reach a server at that address ({_first_line(cause)}). Start the vLLM server, or correct "
            "the address in Settings ▸ Backend (--server)."
        )
    return ServerFailedError(f"The vLLM server's answer could not be read ({type(error).__name__}: {_first_line(error)}).")


def status_error(status: int, message: str, model: str, url: str) -> ServerError:
    """The :class:`ServerError` for an HTTP error status, quoting the server's own ``message``."""
    if status in (401, 403):
        what = "refused the API key" if status == 401 else "does not allow this API key to do that"
        return ServerAuthError(
            f"The server {what} ({status}: {message}). Give the key the server was started with "
            "(vLLM's --api-key) in Settings ▸ Backend, or FRAMEWISE_SERVER_API_KEY for the command line."
        )
    if status == 404:
        if "/v1/chat" in url or "model" in message.lower():
            return ServerModelError(f"The server does not serve the model {model!r} ({message}). Change the server model.")
        return ServerFailedError(f"{url} does not exist (404): the address is not a vLLM server's root; check it.")
    if status == 400:
        return ServerRequestError(f"The server refused the request: {message}")
    if status >= 500:
        return ServerFailedError(f"The server failed ({status}: {message}). Check the server's log; then ask again.")
    return ServerFailedError(f"The server answered {status}: {message}")


def _is_tls_failure(error: BaseException | None) -> bool:
    while error is not None:
        if isinstance(error, ssl.SSLError) or "SSL" in type(error).__name__ or "CERTIFICATE_VERIFY" in str(error):
            return True
        if isinstance(error, httpx.ConnectError) and "ssl" in str(error).lower():
            return True
        error = error.__cause__ or error.__context__
    return False


def _first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0][:200]


def _model_label(model: str) -> str | None:
    """The bundled demo model's label when the server serves it under its name (``demo``, or its
    folder ``demo_model``), so its answers are labelled as a demo model's here too; else ``None``."""
    if model != DEMO_MODEL and Path(model).name != "demo_model":
        return None
    info = json.loads((asset_path("demo_model") / "framewise.json").read_text(encoding="utf-8"))
    return str(info.get("label") or "Demo model")
