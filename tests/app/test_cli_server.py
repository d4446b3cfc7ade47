"""``framewise ask/info --server`` against a fake vLLM server on 127.0.0.1."""

from __future__ import annotations

import json
import time

import pytest

from tests.app.test_cli import framewise
from tests.conftest import SAMPLE_CLIPS
from tests.fake_vllm_server import Behaviour, FakeVllmServer

CLIP = str(SAMPLE_CLIPS / "red_square_moves_right.mp4")


def test_ask_streams_the_servers_answer_with_its_figures() -> None:
    behaviour = Behaviour(pieces=("re", "d", ""))
    with FakeVllmServer(behaviour) as server:
        result = framewise("ask", CLIP, "What color is the square?", "--server", server.url, "--max-frames", "4")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("[Demo model") and lines[1] == "red"
    assert f"frames 4 sent to {server.url}" in result.stdout
    assert "server: prompt 368 tokens (256 cached), completion 2 tokens, multimodal cache 1 hits of 2 queries" in result.stdout
    assert behaviour.chat_requests[0]["model"] == "demo"


def test_ask_json_carries_the_server_and_its_usage(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FRAMEWISE_SERVER_API_KEY", "k-123")
    with FakeVllmServer(Behaviour(api_key="k-123", models=("qwen", "demo"))) as server:
        result = framewise(
            "ask", CLIP, "What color?", "--server", server.url, "--server-model", "demo", "--max-frames", "4", "--json"
        )
    assert result.returncode == 0, result.stderr
    payload = json.loads(result.stdout)
    assert payload["answer"] == "red" and payload["server"]["served_models"] == ["qwen", "demo"]
    assert payload["stats"]["server"]["prompt_tokens"] == 368
    assert "k-123" not in result.stdout + result.stderr


def test_info_lists_the_served_models_and_the_serve_command() -> None:
    with FakeVllmServer(Behaviour(models=("demo",), roots={"demo": "/srv/run/model-8001"})) as server:
        result = framewise("info", "--server", server.url)
    assert result.returncode == 0, result.stderr
    assert f"vLLM server {server.url} (vLLM 0.32.0-fake)" in result.stdout
    assert "encoder_cudagraph_token_budgets" in result.stdout and "--trust-request-mm-kwargs" in result.stdout
    # A path the server loaded, not the served name (which `--model` could not load), named as served.
    assert "--model /srv/run/model-8001 --served-model-name demo " in result.stdout
    assert "--model demo " not in result.stdout
    assert "pruning:" not in result.stdout


def test_info_with_a_pruning_rate_offers_it_to_the_server_and_says_the_servers_rate_applies() -> None:
    with FakeVllmServer(Behaviour()) as server:
        result = framewise("info", "--server", server.url, "--pruning", "0.75")
    assert result.returncode == 0, result.stderr
    assert "--video-pruning-rate 0.75" in result.stdout
    assert "pruning:            Pruning is the server's" in result.stdout and "30847" in result.stdout
    assert result.stderr.count("Warning: Pruning is the server's") == 1


@pytest.mark.parametrize(
    ("behaviour", "flags", "said"),
    [
        (Behaviour(api_key="needed"), [], "needs an API key and none was given (401: Unauthorized)"),
        (Behaviour(models=("demo",)), ["--server-model", "big"], "does not serve 'big'; it serves demo"),
        (Behaviour(chat_status=400, chat_body={"error": {"message": "This model's maximum context length is 8192"}}),
         [], "cannot hold this question with the conversation so far and one answer (This model's maximum context "
         "length is 8192). Start a new conversation"),
    ],
)
def test_server_failures_exit_2_with_what_to_change(behaviour: Behaviour, flags: list[str], said: str) -> None:
    with FakeVllmServer(behaviour) as server:
        result = framewise("ask", CLIP, "What color?", "--server", server.url, "--max-frames", "4", *flags)
    assert result.returncode == 2
    assert said in result.stderr and "Traceback" not in result.stderr


def test_a_wrong_key_is_said_to_be_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FRAMEWISE_SERVER_API_KEY", "wrong")
    with FakeVllmServer(Behaviour(api_key="needed")) as server:
        result = framewise("ask", CLIP, "What color?", "--server", server.url, "--max-frames", "4")
    assert result.returncode == 2
    assert "refused the API key (401: Unauthorized)" in result.stderr and "wrong" not in result.stderr


def test_an_address_below_the_servers_root_says_so_and_names_the_flag() -> None:
    with FakeVllmServer() as server:
        result = framewise("info", "--server", server.url + "/foo")
    assert result.returncode == 2
    assert "/foo/health does not exist (404): the address is not a vLLM server's root" in result.stderr
    assert "(--server)" in result.stderr and "finish starting" not in result.stderr


def test_an_address_that_is_not_http_is_refused_before_anything_loads() -> None:
    result = framewise("ask", CLIP, "What color?", "--server", "127.0.0.1:8000")
    assert result.returncode == 2
    assert result.stderr.startswith("framewise: --server: ") and "http://" in result.stderr


def secret_seen(secret: str, *texts: str) -> bool:
    """Whether ``secret`` (or any line of it) shows in ``texts``, raw or as Python would quote it."""
    pieces = [secret, repr(secret)[1:-1], *[line for line in secret.splitlines() if len(line) >= 4]]
    return any(piece in text for piece in pieces for text in texts)


def log_text() -> str:
    from framewise.app.logs import log_file_path

    path = log_file_path()
    return path.read_text(encoding="utf-8") if path.exists() else ""


@pytest.mark.parametrize("pasted", ["s3cret-key\n", " s3cret-key ", "s3cret-key\r\n"])
def test_a_key_pasted_with_white_space_around_it_is_used_without_it(monkeypatch: pytest.MonkeyPatch, pasted: str) -> None:
    monkeypatch.setenv("FRAMEWISE_SERVER_API_KEY", pasted)
    with FakeVllmServer(Behaviour(api_key="s3cret-key")) as server:
        result = framewise("ask", CLIP, "What color?", "--server", server.url, "--max-frames", "4")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[1] == "red"
    assert not secret_seen("s3cret-key", result.stdout, result.stderr, log_text())


@pytest.mark.parametrize("key", ["s3cret\nkey-part", "s3cret\tkey-part", "s3cret-kéy-part"])
def test_a_key_no_header_can_carry_is_refused_by_name_and_never_printed(monkeypatch: pytest.MonkeyPatch, key: str) -> None:
    monkeypatch.setenv("FRAMEWISE_SERVER_API_KEY", key)
    with FakeVllmServer(Behaviour(api_key=key)) as server:
        result = framewise("ask", CLIP, "What color?", "--server", server.url, "--max-frames", "4")
        requests = list(server.behaviour.chat_requests)
    assert result.returncode == 2
    assert result.stderr.startswith("framewise: FRAMEWISE_SERVER_API_KEY: the API key holds a line break")
    assert not secret_seen(key, result.stdout, result.stderr, log_text())
    assert requests == []  # refused before anything was sent


def test_the_answer_timeout_bounds_the_whole_answer_and_names_its_flag() -> None:
    # Each piece comes within a second, so only a bound on the whole answer stops it.
    behaviour = Behaviour(pieces=tuple("red square moving right"), piece_delay_s=0.4)
    with FakeVllmServer(behaviour) as server:
        started = time.monotonic()
        result = framewise(
            "ask", CLIP, "What color?", "--server", server.url, "--max-frames", "4",
            "--server-timeout", "2", "--answer-timeout", "2",
        )
        took = time.monotonic() - started
    assert result.returncode == 2
    assert "did not finish within the answer timeout (2 s)" in result.stderr and "--answer-timeout" in result.stderr
    assert took < 6  # the whole answer would take 9 s


def test_a_frozen_server_is_given_up_after_the_answer_timeout() -> None:
    with FakeVllmServer(Behaviour(stall_s=30)) as server:
        started = time.monotonic()
        result = framewise("ask", CLIP, "What color?", "--server", server.url, "--max-frames", "4", "--answer-timeout", "2")
        took = time.monotonic() - started
        deadline = time.monotonic() + 2
        while not server.behaviour.disconnects and time.monotonic() < deadline:
            time.sleep(0.05)
    assert result.returncode == 2 and "--answer-timeout" in result.stderr
    assert took < 6 and server.behaviour.disconnects  # the connection was shut, so vLLM aborts the request
