"""A real (CPU) vLLM server serving a tiny random-weight Qwen3.5 (marker ``vllm``): the backend
knows the family from the served folder's config, and the prompt the server builds from Framewise's
request (Qwen3-VL's layout, asked not to think) is this machine's, token for token.

vLLM's CPU Gated DeltaNet kernel takes bf16 weights and linear-attention heads of 128 only (it
refused float32 and heads of 16 or 32 when tried), so the checkpoint here has heads of 128 and is
served in bf16, its context no longer than its 4,096 positions."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import httpx
import pytest

from framewise.core.backends.local.engine import Engine
from framewise.core.backends.vllm.request import openai_messages, request_media_io_kwargs
from framewise.core.backends.vllm.server import VllmServerEngine
from tests.conftest import SAMPLE_CLIPS
from tests.core.families.qwen3_5.checkpoint import write_tiny_checkpoint
from tests.remote.conftest import free_port, start_server, stop_server
from tests.remote.test_vllm_real import settings_for

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(1200)]
CLIP = SAMPLE_CLIPS / "red_square_moves_right.mp4"
SERVED_NAME = "tiny-hybrid"  # says nothing of the family: the config must


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    return write_tiny_checkpoint(tmp_path_factory.mktemp("served") / "tiny", seed=2, linear_head_dim=128)


@pytest.fixture(scope="module")
def qwen3_5_server(checkpoint: Path, tmp_path_factory) -> Iterator[str]:
    run_dir = tmp_path_factory.mktemp("vllm-run-qwen3_5")
    port = free_port()
    try:
        yield start_server(run_dir, port, SERVED_NAME, checkpoint, ["--dtype", "bfloat16", "--max-model-len", "4096"]).url
    finally:
        stop_server(run_dir, port)


def test_the_server_builds_this_machines_prompt_and_answers(qwen3_5_server: str, checkpoint: Path) -> None:
    settings = settings_for(qwen3_5_server).replace("sampling", max_frames=4).replace("generation", max_new_tokens=8)
    remote = VllmServerEngine(settings)
    assert remote.load().family == "Qwen3.5"
    local = Engine(settings.replace("backend", kind="local").replace("model", source=str(checkpoint), device="cpu"))
    local.load()
    for engine in (remote, local):
        engine.open_clip(CLIP)
    question = "What moves?"
    body = {
        "model": SERVED_NAME,
        "messages": openai_messages(question, remote.clips, [], remote.family),
        "media_io_kwargs": request_media_io_kwargs(remote.clips),
        "chat_template_kwargs": dict(remote.family.chat_template_options),
    }
    tokenized = httpx.post(f"{qwen3_5_server}/tokenize", json=body, timeout=300)
    assert tokenized.status_code == 200, tokenized.text
    served_prompt = tokenized.json()["tokens"]
    assert served_prompt == local._answerer._build_prompt(question, local.clips).input_ids[0].tolist()
    answer = remote.ask(question)
    assert answer.stats.server.finish_reason in ("stop", "length")
    assert answer.stats.server.prompt_tokens == len(served_prompt)
