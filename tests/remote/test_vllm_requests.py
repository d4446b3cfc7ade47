"""What Framewise sends a real vLLM server, and what it says when the server cannot take it (marker
``vllm``): the API key, several clips and a picture, a closer look, a frozen server, an endpoint
address, a clip too large for the context, and a server restarted under another name."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import cv2
import httpx
import numpy as np
import pytest

from framewise.core.backends.vllm.fit import least_clip_tokens
from framewise.core.backends.vllm.request import openai_messages, request_media_io_kwargs
from framewise.core.backends.vllm.server import VllmServerEngine
from framewise.core.errors import ServerAnswerTimeoutError, ServerContextError, ServerLayoutError, ServerModelGoneError
from tests.app.test_cli import framewise
from tests.app.test_cli_server import log_text, secret_seen
from tests.conftest import SAMPLE_CLIPS
from tests.fake_vllm_server import Behaviour, FakeVllmServer
from tests.remote.conftest import SERVED_NAME, RunningServer, free_port, start_server, stop_server
from tests.remote.test_vllm_real import settings_for

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(1200)]  # the first test waits for the server to start
CLIP = SAMPLE_CLIPS / "red_square_moves_right.mp4"
OTHER_CLIP_SAME_TIMES = SAMPLE_CLIPS / "two_shapes_wide.mp4"  # as long as CLIP: sampled at the same times


def red_square_picture(folder: Path) -> Path:
    path = folder / "red.png"
    square = np.zeros((96, 96, 3), dtype=np.uint8)
    square[24:72, 24:72] = (0, 0, 255)  # BGR: a red square
    assert cv2.imwrite(str(path), square)
    return path


def test_a_key_pasted_with_its_line_break_reaches_the_server_and_is_never_printed(
    vllm_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FRAMEWISE_SERVER_API_KEY", "s3cret-key\n")
    result = framewise("ask", str(CLIP), "What color is the square?", "--server", vllm_server, "--max-new-tokens", "8")
    assert result.returncode == 0, result.stderr
    assert "red" in result.stdout.splitlines()[1].lower()
    assert not secret_seen("s3cret-key", result.stdout, result.stderr, log_text())


def test_two_clips_and_a_picture_reach_the_server_as_this_machines_prompt(vllm_server: str, tmp_path: Path) -> None:
    """Clips sampled at the same times go as one video each with their one set of times: the prompt
    the server builds is this machine's, token for token."""
    from framewise.core.backends.local.engine import Engine

    items = [CLIP, OTHER_CLIP_SAME_TIMES, red_square_picture(tmp_path)]
    question = "Which clip has a red square?"
    remote = VllmServerEngine(settings_for(vllm_server))
    remote.load()
    local = Engine(settings_for(vllm_server).replace("backend", kind="local").replace("model", device="cpu"))
    local.load()
    for engine in (remote, local):
        engine.open_clip(items[0])
        for item in items[1:]:
            engine.add_clip(item)
    body = {
        "model": SERVED_NAME,
        "messages": openai_messages(question, remote.clips, [], remote.family),
        "media_io_kwargs": request_media_io_kwargs(remote.clips),
    }
    tokenized = httpx.post(f"{vllm_server}/tokenize", json=body, timeout=300)
    assert tokenized.status_code == 200, tokenized.text
    served_prompt = tokenized.json()["tokens"]
    prompt_items = sorted(local.clips, key=lambda item: item.kind == "image")  # clips, then pictures
    assert served_prompt == local._answerer._build_prompt(question, prompt_items).input_ids[0].tolist()
    assert least_clip_tokens(remote.clips, remote.limits) <= len(served_prompt)  # the context check's bound holds
    answer = remote.ask(question)
    assert answer.stats.server.finish_reason in ("stop", "length") and answer.stats.server.prompt_tokens == len(served_prompt)


def test_the_cli_asks_about_two_clips_of_one_length(vllm_server: str) -> None:
    result = framewise(
        "ask", str(CLIP), str(OTHER_CLIP_SAME_TIMES), "What color is the square?", "--server", vllm_server,
        "--max-new-tokens", "8",
    )
    assert result.returncode == 0, result.stderr


def test_a_closer_look_is_refused_with_the_reason_and_the_conversation_goes_on(vllm_server: str) -> None:
    engine = VllmServerEngine(settings_for(vllm_server))
    engine.load()
    engine.open_clip(CLIP)
    for span in ((1.0, 2.0), (0.0, 4.0)):  # a span, and the whole clip sampled densely (32 frames)
        with pytest.raises(ServerLayoutError, match="one set of frame times per question"):
            engine.look_closer(*span)
    assert len(engine.clips) == 1
    assert "red" in engine.ask("What color is the square?").text.lower()


def test_a_frozen_server_is_given_up_at_the_answer_timeout(vllm_server_process: RunningServer) -> None:
    engine = VllmServerEngine(settings_for(vllm_server_process.url, answer_timeout_s=5.0))
    engine.load()
    engine.open_clip(CLIP)
    os.killpg(vllm_server_process.pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        with pytest.raises(ServerAnswerTimeoutError, match=r"answer timeout \(5 s\).*--answer-timeout"):
            engine.ask("What color is the square?")
        took = time.monotonic() - started
    finally:
        os.killpg(vllm_server_process.pid, signal.SIGCONT)
    assert 5 <= took < 10
    assert "red" in engine.ask("What color is the square?").text.lower()  # the server goes on


def test_an_endpoint_address_reaches_the_server(vllm_server: str) -> None:
    engine = VllmServerEngine(settings_for(f"{vllm_server}/v1/chat/completions"))
    assert engine.load().server.url == vllm_server
    engine.open_clip(CLIP)
    assert "red" in engine.ask("What color is the square?").text.lower()


def test_a_clip_too_large_for_the_servers_context_is_refused_before_it_is_sent(vllm_server: str) -> None:
    engine = VllmServerEngine(settings_for(vllm_server))
    info = engine.load()
    frames = np.zeros((64, 512, 512, 3), dtype=np.uint8)  # 32 frame pairs of 256 tokens each
    with pytest.raises(ServerContextError) as raised:
        engine.open_frames(frames, [index / 2 for index in range(64)], "large.mp4")
    assert f"context holds {info.server.max_model_len:,} tokens (its --max-model-len)" in str(raised.value)
    assert engine.clip is None


def test_a_server_restarted_under_another_name_is_followed(tmp_path: Path) -> None:
    """A conversation opened with a server (here a stand-in on the port) that then restarts as a real
    vLLM under another name: the next question says so, and the one after is answered."""
    port = free_port()
    with FakeVllmServer(Behaviour(models=("before",)), port=port) as before:
        engine = VllmServerEngine(settings_for(before.url))
        engine.load()
        engine.open_clip(CLIP)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    try:
        start_server(run_dir, port, "after")
        with pytest.raises(ServerModelGoneError, match="no longer serves 'before'.*serves 'after' now"):
            engine.ask("What color is the square?")
        again = engine.ask("What color is the square?")
    finally:
        stop_server(run_dir, port)
    assert again.stats.server.model == "after" and "red" in again.text.lower()
    assert engine.info().model_label.startswith("Demo model")
