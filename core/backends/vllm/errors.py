"""What went wrong between Framewise and a vLLM server, as a :class:`~framewise.core.errors.ServerError`
that says what to change.

Failures come from two clients: httpx for the server's plain endpoints (``/health``,
``/v1/models``, ``/metrics``) and the openai client for the streamed chat completion. Both are
translated here, quoting the server's own message where it gave one.
"""

from __future__ import annotations

import re
import ssl
from typing import Any

import httpx
import openai

from framewise.core.errors import (
    ServerAddressError,
    ServerAuthError,
    ServerContextError,
    ServerError,
    ServerFailedError,
    ServerModelError,
    ServerRequestError,
    ServerStreamCutError,
    ServerAnswerTimeoutError,
    ServerTimeoutError,
    ServerTlsError,
    ServerUnreachableError,
)

# The chat endpoint below the server's root: only a 404 from it can mean an unknown model.
CHAT_ENDPOINT = "/v1/chat/completions"
# vLLM's refusal of more items of one kind than its --limit-mm-per-prompt admits.
_ITEM_LIMIT = re.compile(r"At most (\d+) (\w+)\(s\) may be provided in one prompt")
# How vLLM's refusals of a prompt longer than its context begin their reason.
_CONTEXT_REFUSAL = "maximum context length"
CONTEXT_ADVICE = (
    "Start a new conversation, ask about fewer items or fewer frames (Sampling ▸ max frames and max pixels; "
    "--max-frames, --max-pixels), lower max new tokens, or start the server with a larger --max-model-len."
)
_KEY_ADVICE = (
    "Give the key the server was started with (vLLM's --api-key) in Settings ▸ Backend, "
    "or FRAMEWISE_SERVER_API_KEY for the command line."
)


def server_error(error: BaseException, model: str) -> ServerError:
    """The :class:`ServerError` for an exception of the HTTP layer (httpx) or of the openai client."""
    if isinstance(error, ServerError):
        return error
    if isinstance(error, openai.APIStatusError):
        message = _message_from_body(error.body) or error.message
        request = error.request
        return status_error(error.status_code, message, model, str(request.url), key_sent=_carries_key(request))
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


def answer_timeout_error(seconds: float) -> ServerAnswerTimeoutError:
    """The error for an answer that took longer than the answer timeout (``seconds``)."""
    return ServerAnswerTimeoutError(
        f"The vLLM server's answer did not finish within the answer timeout ({seconds:g} s); the question was "
        "withdrawn and the conversation is kept. Check that the server is running and not stalled, or raise the "
        "answer timeout in Settings ▸ Backend (--answer-timeout) for long answers on a slow server."
    )


def status_error(status: int, message: str, model: str, url: str, *, key_sent: bool) -> ServerError:
    """The :class:`ServerError` for an HTTP error status, quoting the server's own ``message``.

    ``key_sent`` says whether the request carried an API key: a 401 then means a wrong key,
    otherwise a missing one.
    """
    if status == 401 and not key_sent:
        return ServerAuthError(f"The server needs an API key and none was given ({status}: {message}). {_KEY_ADVICE}")
    if status in (401, 403):
        what = "refused the API key" if status == 401 else "does not allow this API key to do that"
        return ServerAuthError(f"The server {what} ({status}: {message}). {_KEY_ADVICE}")
    if status == 404:
        if url.endswith(CHAT_ENDPOINT) and "model" in message.lower():
            return ServerModelError(f"The server does not serve the model {model!r} ({message}). Change the server model.")
        return ServerAddressError(
            f"{url} does not exist (404): the address is not a vLLM server's root. Correct it in "
            "Settings ▸ Backend (--server) to the server's root, e.g. http://127.0.0.1:8000."
        )
    item_limit = _ITEM_LIMIT.search(message) if status == 400 else None
    if item_limit:
        return ServerRequestError(
            f"The server admits at most {item_limit[1]} {item_limit[2]}(s) per question, fewer than this one sends "
            f"({message}). Start it with the serve command `framewise info --server URL` prints (Encoder panel ▸ "
            "serve command), whose --limit-mm-per-prompt admits what Framewise sends, or ask about fewer items."
        )
    if status == 400 and _CONTEXT_REFUSAL in message:
        return ServerContextError(
            f"The server's context cannot hold this question with the conversation so far and one answer ({message}). "
            f"{CONTEXT_ADVICE}"
        )
    if status == 400:
        return ServerRequestError(f"The server refused the request: {message}")
    if status >= 500:
        return ServerFailedError(f"The server failed ({status}: {message}). Check the server's log; then ask again.")
    return ServerFailedError(f"The server answered {status}: {message}")


def raise_for_status(response: httpx.Response, model: str) -> None:
    """Raise the :class:`ServerError` for an error status of a plain endpoint; nothing for success."""
    if response.status_code >= 400:
        raise status_error(
            response.status_code, _error_message(response), model, str(response.url), key_sent=_carries_key(response.request)
        )


def _carries_key(request: httpx.Request) -> bool:
    return "Authorization" in request.headers


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
