"""The wire to a vLLM server: its HTTP clients and the streamed chat completion.

The stream is read on a thread of its own and handed over through a queue, so the asking thread
can look at its cancel flag every ``CANCEL_POLL_S`` and Stop closes the connection at once (the
server then aborts the request). Nothing is retried on its own.
"""

from __future__ import annotations

import logging
import queue
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any, Iterator

import httpx
import openai

from framewise.core.backends.vllm.errors import answer_timeout_error, server_error
from framewise.core.errors import ServerStreamCutError, ServerTimeoutError
from framewise.core.settings import BackendSettings

log = logging.getLogger(__name__)

# How often the asking thread looks at the cancel flag while it waits for the next piece of the stream.
CANCEL_POLL_S = 0.05


def openai_client(backend: BackendSettings) -> openai.OpenAI:
    """The chat-completions client: TLS verified, no retries, no wait between chunks longer than the
    answer timeout (:func:`stream_chat` bounds the whole answer by it); it
    sends no ``Authorization`` header without a key (so a 401 can be told apart from a wrong key)."""
    timeout = httpx.Timeout(backend.answer_timeout_s, connect=backend.timeout_s)
    return openai.OpenAI(
        base_url=f"{backend.base_url()}/v1",
        api_key=backend.api_key,
        timeout=timeout,
        max_retries=0,
    )


def http_client(backend: BackendSettings) -> httpx.Client:
    """A client for the server's plain endpoints (/health, /v1/models, /metrics), TLS verified."""
    return httpx.Client(timeout=backend.timeout_s, verify=True, follow_redirects=False)


def auth_headers(backend: BackendSettings) -> dict[str, str]:
    """The ``Authorization`` header with the API key; none without a key."""
    return {"Authorization": f"Bearer {backend.api_key}"} if backend.api_key else {}


def get(client: httpx.Client, url: str, backend: BackendSettings) -> httpx.Response:
    """GET ``url`` with the API key; a failure to get any answer raises its :class:`ServerError`."""
    try:
        return client.get(url, headers=auth_headers(backend))
    except httpx.HTTPError as error:
        raise server_error(error, backend.server_model) from error


@dataclass(frozen=True)
class StreamPiece:
    """One chunk of the stream, or the note that Stop was pressed."""

    chunk: Any = None
    cancelled: bool = False


def stream_chat(
    client: openai.OpenAI, request: dict[str, Any], cancel: threading.Event, time_limit_s: float
) -> Iterator[StreamPiece]:
    """The chunks of a streamed chat completion, read on a thread of their own.

    Yields a cancelled piece, and stops, within ``CANCEL_POLL_S`` of ``cancel`` being set; the
    connection is then shut, which makes vLLM abort the request. The whole answer may take
    ``time_limit_s`` (the answer timeout): past it the connection is shut the same way and
    :class:`ServerAnswerTimeoutError` is raised. Raises :class:`ServerError` for a failure, and
    :class:`ServerStreamCutError` when the stream ends without a finish reason.
    """
    pieces: queue.Queue[tuple[str, Any]] = queue.Queue()
    reader = _StreamReader(client, request, pieces)
    threading.Thread(target=reader.run, name="framewise-vllm-stream", daemon=True).start()
    deadline = time.monotonic() + time_limit_s
    finished = False
    while True:
        if cancel.is_set():
            reader.abandon()
            yield StreamPiece(cancelled=True)
            return
        if time.monotonic() > deadline:
            reader.abandon()
            raise answer_timeout_error(time_limit_s)
        try:
            kind, item = pieces.get(timeout=CANCEL_POLL_S)
        except queue.Empty:
            continue
        if kind == "chunk":
            finished = finished or any(choice.finish_reason for choice in item.choices)
            yield StreamPiece(chunk=item)
        elif kind == "error":
            error = server_error(item, request["model"])
            raise (answer_timeout_error(time_limit_s) if isinstance(error, ServerTimeoutError) else error) from item
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
