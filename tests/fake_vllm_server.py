"""A small stand-in for a vLLM server on 127.0.0.1, for the failures a real one cannot be made to show.

It speaks the parts of the OpenAI-compatible API Framewise uses (``/health``, ``/v1/models``,
``/version``, ``/metrics``, streamed ``/v1/chat/completions`` with chunked transfer encoding) and
can be told to answer a status and body, to cut the stream mid-answer, or to stall. Like vLLM, it
refuses a video of more frames than the request lets it keep, and more videos or pictures a
question than its ``limits`` admit (vLLM's ``--limit-mm-per-prompt``). It binds a
free port (or the one it is given), records every chat request's JSON body, and shuts itself down after ``lifetime_s``
even if a test forgets to stop it.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Behaviour:
    """What the fake server does. ``chat_status`` other than 200 answers ``chat_body`` at once;
    ``cut_after`` pieces of ``pieces`` are sent before the connection is dropped; ``stall_s``
    waits that long before the first piece (a disconnect during the wait is recorded)."""

    models: tuple[str, ...] = ("demo",)
    roots: dict[str, str] = field(default_factory=dict)  # served name -> where vLLM loaded it from
    health_status: int = 200
    models_status: int = 200
    models_body: Any = None
    api_key: str | None = None
    chat_status: int = 200
    chat_body: Any = None
    pieces: tuple[str, ...] = ("red", "")
    cut_after: int | None = None
    stall_s: float = 0.0
    piece_delay_s: float = 0.0
    limits: dict[str, int] = field(default_factory=dict)  # "video"/"image" -> most items a question
    metrics: str = (
        'vllm:mm_cache_queries_total{engine="0",model_name="demo"} 2.0\n'
        'vllm:mm_cache_hits_total{engine="0",model_name="demo"} 1.0\n'
    )
    chat_requests: list[dict[str, Any]] = field(default_factory=list)
    disconnects: list[float] = field(default_factory=list)


class FakeVllmServer:
    """``with FakeVllmServer(Behaviour(...)) as server: server.url`` — stopped on exit or after ``lifetime_s``."""

    def __init__(self, behaviour: Behaviour | None = None, lifetime_s: float = 60.0, port: int = 0) -> None:
        self.behaviour = behaviour or Behaviour()
        handler = type("Handler", (_Handler,), {"behaviour": self.behaviour})
        self._server = ThreadingHTTPServer(("127.0.0.1", port), handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._timer = threading.Timer(lifetime_s, self.stop)
        self._timer.daemon = True

    def __enter__(self) -> FakeVllmServer:
        self._thread.start()
        self._timer.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._timer.cancel()
        self._server.shutdown()
        self._server.server_close()


# vLLM's default for how many of a video's frames it keeps.
DEFAULT_NUM_FRAMES = 32


def _frames_refusal(request: dict[str, Any]) -> str | None:
    """vLLM 0.32's refusal of a video with more frames than the request's ``num_frames`` (32 when
    the request does not say; -1 keeps every frame), else ``None``."""
    urls = [
        part["video_url"]["url"]
        for message in request.get("messages", [])
        if isinstance(message.get("content"), list)
        for part in message["content"]
        if part.get("type") == "video_url"
    ]
    if not urls:
        return None
    kept = ((request.get("media_io_kwargs") or {}).get("video") or {}).get("num_frames", DEFAULT_NUM_FRAMES)
    sent = urls[0].count(",")  # one comma after the data: prefix, then one between frames
    if kept == -1 or sent <= kept:
        return None
    return f"frames_indices length ({sent}) must match number of frames sent ({kept})"


def _count_refusal(request: dict[str, Any], limits: dict[str, int]) -> str | None:
    """vLLM's refusal of more items of a kind than ``limits`` admit, in its words, else ``None``."""
    for modality, most in limits.items():
        sent = sum(
            part.get("type") == f"{modality}_url"
            for message in request.get("messages", [])
            if isinstance(message.get("content"), list)
            for part in message["content"]
        )
        if sent > most:
            return f"At most {most} {modality}(s) may be provided in one prompt. (parameter={modality})"
    return None


def _root(behaviour: Behaviour, name: str) -> dict[str, str]:
    return {"root": behaviour.roots[name]} if name in behaviour.roots else {}


class _Handler(BaseHTTPRequestHandler):
    behaviour: Behaviour
    protocol_version = "HTTP/1.1"

    def log_message(self, *_: Any) -> None:  # keep the test output clean
        pass

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        behaviour = self.behaviour
        if self.path == "/health":
            self._reply(behaviour.health_status, "")
        elif self.path == "/version":
            self._reply(200, {"version": "0.32.0-fake"})
        elif self.path == "/metrics":
            self._reply(200, behaviour.metrics, content_type="text/plain")
        elif self.path == "/v1/models":
            if not self._authorized():
                return
            body = behaviour.models_body or {
                "object": "list",
                "data": [
                    {"id": name, "object": "model", "max_model_len": 8192, **_root(behaviour, name)}
                    for name in behaviour.models
                ],
            }
            self._reply(behaviour.models_status, body)
        else:
            self._reply(404, {"detail": "Not Found"})

    def do_POST(self) -> None:  # noqa: N802
        behaviour = self.behaviour
        length = int(self.headers.get("Content-Length", "0"))
        body = json.loads(self.rfile.read(length) or b"{}")
        if self.path != "/v1/chat/completions":
            self._reply(404, {"detail": "Not Found"})
            return
        if not self._authorized():
            return
        behaviour.chat_requests.append(body)
        if body.get("model") not in behaviour.models:
            self._reply(404, {"error": {"message": f"The model `{body.get('model')}` does not exist.", "code": 404}})
            return
        if behaviour.chat_status != 200:
            self._reply(behaviour.chat_status, behaviour.chat_body)
            return
        refusal = _frames_refusal(body) or _count_refusal(body, behaviour.limits)
        if refusal:
            self._reply(400, {"error": {"message": refusal, "type": "BadRequestError", "code": 400}})
            return
        self._stream(body)

    def _authorized(self) -> bool:
        key = self.behaviour.api_key
        if key is None or self.headers.get("Authorization") == f"Bearer {key}":
            return True
        self._reply(401, {"error": "Unauthorized"})
        return False

    def _stream(self, request: dict[str, Any]) -> None:
        behaviour = self.behaviour
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        if behaviour.stall_s and self._wait_for_disconnect(behaviour.stall_s):
            behaviour.disconnects.append(time.monotonic())
            return
        pieces = behaviour.pieces
        try:
            for index, text in enumerate(pieces):
                if behaviour.cut_after is not None and index == behaviour.cut_after:
                    self.wfile.write(b"5\r\ndata:")  # half a chunk, then the connection drops
                    self.wfile.flush()
                    self.close_connection = True
                    return
                last = index == len(pieces) - 1
                delta = {"content": text} if text else {}
                self._event({"id": "c", "object": "chat.completion.chunk", "model": request["model"],
                             "choices": [{"index": 0, "delta": delta, "finish_reason": "stop" if last else None}]})
                time.sleep(behaviour.piece_delay_s)
            usage = {"prompt_tokens": 368, "completion_tokens": len(pieces) - 1, "total_tokens": 368 + len(pieces) - 1,
                     "prompt_tokens_details": {"cached_tokens": 256}}
            self._event({"id": "c", "object": "chat.completion.chunk", "model": request["model"], "choices": [],
                         "usage": usage})
            self._chunk(b"data: [DONE]\n\n")
            self._chunk(b"")
        except (BrokenPipeError, ConnectionResetError):
            behaviour.disconnects.append(time.monotonic())

    def _wait_for_disconnect(self, seconds: float) -> bool:
        """Wait up to ``seconds``; True as soon as the client closes its end."""
        import select

        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.connection], [], [], 0.02)
            if ready and not self.connection.recv(1, 2):  # MSG_PEEK: b"" means closed
                return True
        return False

    def _event(self, payload: dict[str, Any]) -> None:
        self._chunk(f"data: {json.dumps(payload)}\n\n".encode())

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _reply(self, status: int, body: Any, content_type: str = "application/json") -> None:
        data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
