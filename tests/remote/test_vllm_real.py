"""Framewise's vLLM-server backend against a real vLLM server serving the demo model (marker ``vllm``).

The demo model is brittle (about 59 % held-out accuracy): these tests ask only what it answers
robustly (the colour and the direction of the sample clip's square) and otherwise check the
shape of the exchange.
"""

from __future__ import annotations

import httpx
import pytest

from framewise.core.backends.vllm_server import VllmServerEngine, openai_messages
from framewise.core.errors import ServerModelError, ServerRequestError
from framewise.core.events import Token
from framewise.core.processing import _pair_timestamps
from framewise.core.settings import AppSettings
from tests.app.test_cli import framewise
from tests.conftest import SAMPLE_CLIPS

pytestmark = pytest.mark.vllm
CLIP = SAMPLE_CLIPS / "red_square_moves_right.mp4"


def settings_for(url: str, **backend: object) -> AppSettings:
    return AppSettings().replace("backend", kind="vllm", server_url=url, **{"timeout_s": 30.0, **backend}).replace(
        "generation", max_new_tokens=16
    )


def test_the_engine_seam_answers_and_follows_up_over_the_wire(vllm_server: str) -> None:
    events: list = []
    engine = VllmServerEngine(settings_for(vllm_server), sink=events.append)
    info = engine.load()
    assert info.server.model == "demo" and info.server.version == "0.32.0"
    assert info.model_label.startswith("Demo model")
    opened = engine.open_clip(CLIP)
    first = engine.ask("What color is the square?")
    second = engine.ask("Which way does the square move?")
    assert "red" in first.text.lower() and "right" in second.text.lower()
    assert [turn[0] for turn in engine.history] == ["What color is the square?", "Which way does the square move?"]
    assert "".join(event.text for event in events if isinstance(event, Token)).strip() == first.text + second.text
    server = second.stats.server
    video_tokens = opened.patches // 4
    assert server.prompt_tokens > video_tokens  # the clip's tokens, the first turn and the follow-up
    assert server.completion_tokens == second.stats.new_tokens > 0
    assert server.finish_reason == "stop"
    assert server.mm_cache_queries is not None and server.mm_cache_queries >= 2


def test_the_server_writes_framewises_time_markers(vllm_server: str) -> None:
    engine = VllmServerEngine(settings_for(vllm_server))
    engine.load()
    opened = engine.open_clip(CLIP)
    body = {
        "model": "demo",
        "messages": openai_messages("When?", engine.clip, []),
        "media_io_kwargs": engine.clip.media_io_kwargs,
        "return_token_strs": True,
    }
    response = httpx.post(f"{vllm_server}/tokenize", json=body, timeout=120)
    assert response.status_code == 200, response.text
    prompt = "".join(response.json()["token_strs"])
    markers = [f"<{time:.1f} seconds>" for time in _pair_timestamps(opened.timestamps, 2)]
    positions = [prompt.find(marker) for marker in markers]
    assert -1 not in positions and positions == sorted(positions), (markers, prompt[:400])


def test_a_model_it_does_not_serve_and_a_prompt_too_long_are_said(vllm_server: str) -> None:
    with pytest.raises(ServerModelError, match="it serves demo"):
        VllmServerEngine(settings_for(vllm_server, server_model="qwen3-vl-235b")).load()
    engine = VllmServerEngine(settings_for(vllm_server))
    engine.load()
    with pytest.raises(ServerRequestError, match="maximum context length"):
        engine.ask("square " * 9000)
    assert engine.history == []


def test_the_cli_streams_an_answer_from_the_server(vllm_server: str) -> None:
    result = framewise("ask", str(CLIP), "What color is the square?", "--server", vllm_server, "--max-new-tokens", "16")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("[Demo model")
    assert "red" in result.stdout.splitlines()[1].lower()
    assert "server: prompt" in result.stdout and "tokens/s" in result.stdout
