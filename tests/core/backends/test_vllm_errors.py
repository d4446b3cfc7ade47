"""Failures of the chat-completions client translated into messages that say what to change."""

from __future__ import annotations

import httpx
import openai

from framewise.core.backends.vllm.errors import server_error
from framewise.core.errors import ServerAddressError, ServerAuthError

URL = "http://127.0.0.1:8000/v1/chat/completions"


def status_failure(status: int, headers: dict[str, str], body: object) -> openai.APIStatusError:
    request = httpx.Request("POST", URL, headers=headers)
    response = httpx.Response(status, request=request, json=body)
    return openai.APIStatusError("failed", response=response, body=body)


def test_a_401_says_a_key_is_needed_when_none_was_sent_and_refused_when_one_was() -> None:
    missing = server_error(status_failure(401, {}, {"error": "Unauthorized"}), "demo")
    wrong = server_error(status_failure(401, {"Authorization": "Bearer nope"}, {"error": "Unauthorized"}), "demo")
    assert isinstance(missing, ServerAuthError) and isinstance(wrong, ServerAuthError)
    assert str(missing).startswith("The server needs an API key and none was given (401: Unauthorized)")
    assert str(wrong).startswith("The server refused the API key (401: Unauthorized)")
    assert "FRAMEWISE_SERVER_API_KEY" in str(missing) and "nope" not in str(wrong)


def test_a_404_away_from_the_chat_endpoint_is_an_address_that_is_no_vllm_root() -> None:
    request = httpx.Request("GET", "http://127.0.0.1:8000/foo/health")
    failure = openai.APIStatusError("failed", response=httpx.Response(404, request=request), body={"detail": "Not Found"})
    error = server_error(failure, "demo")
    assert isinstance(error, ServerAddressError) and error.field == "backend.server_url"
    assert "not a vLLM server's root" in str(error)
