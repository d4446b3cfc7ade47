"""Framewise's vLLM-server backend against a real vLLM server serving the demo model (marker ``vllm``).

The demo model is brittle (about 59 % held-out accuracy): these tests ask only what it answers
robustly (the colour and the direction of the sample clip's square) and otherwise check the
shape of the exchange.
"""

from __future__ import annotations

import json
import shlex
import re
import subprocess
from pathlib import Path

import httpx
import numpy as np
import pytest

from framewise.core.backends.vllm.request import openai_messages
from framewise.core.backends.vllm.serve_command import vllm_serve_command
from framewise.core.backends.vllm.server import VllmServerEngine
from framewise.core.errors import ServerContextError, ServerModelError
from framewise.core.events import Token
from framewise.core.families.qwen3_vl.sizing import pair_timestamps
from framewise.core.resources import asset_path
from framewise.core.settings import AppSettings, EncoderSettings, SamplingSettings
from tests.app.test_cli import framewise
from tests.conftest import REPO_ROOT, SAMPLE_CLIPS
from tests.remote.conftest import SERVED_NAME

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(1200)]  # the first test waits for the server to start
CLIP = SAMPLE_CLIPS / "red_square_moves_right.mp4"


def settings_for(url: str, **backend: object) -> AppSettings:
    return AppSettings().replace("backend", kind="vllm", server_url=url, **{"timeout_s": 30.0, **backend}).replace(
        "generation", max_new_tokens=16
    )


def test_the_engine_seam_answers_and_follows_up_over_the_wire(vllm_server: str) -> None:
    events: list = []
    engine = VllmServerEngine(settings_for(vllm_server), sink=events.append)
    info = engine.load()
    assert info.server.model == SERVED_NAME and info.server.version == "0.32.0"
    assert info.model_label.startswith("Demo model"), "the demo model keeps its label under another served name"
    assert (Path(info.server.model_source) / "config.json").is_file()  # a folder the offered command can load
    assert f"--model {info.server.model_source} --served-model-name {SERVED_NAME} " in info.server.serve_command
    opened = engine.open_clip(CLIP)
    first = engine.ask("What color is the square?")
    second = engine.ask("Which way does the square move?")
    assert "red" in first.text.lower() and "right" in second.text.lower()
    assert [turn[0] for turn in engine.turns] == ["What color is the square?", "Which way does the square move?"]
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
        "model": SERVED_NAME,
        "messages": openai_messages("When?", engine.clips, []),
        "media_io_kwargs": engine.clip.media_io_kwargs,
    }
    tokenized = httpx.post(f"{vllm_server}/tokenize", json=body, timeout=120)
    assert tokenized.status_code == 200, tokenized.text
    tokens = tokenized.json()["tokens"]
    detokenized = httpx.post(f"{vllm_server}/detokenize", json={"model": SERVED_NAME, "tokens": tokens}, timeout=120)
    assert detokenized.status_code == 200, detokenized.text
    prompt = detokenized.json()["prompt"]
    markers = [f"<{time:.1f} seconds>" for time in pair_timestamps(opened.timestamps, 2)]
    positions = [prompt.find(marker) for marker in markers]
    assert -1 not in positions and positions == sorted(positions), (markers, prompt[:400])


def test_a_clip_of_64_frames_reaches_the_model_whole(vllm_server: str) -> None:
    """vLLM keeps 32 frames of a video unless the request says otherwise (the server's own
    ``--media-io-kwargs`` does not reach a request that brings its frame times)."""
    engine = VllmServerEngine(settings_for(vllm_server))
    engine.load()
    prompt_tokens = {}
    for count in (32, 64):
        frames = np.zeros((count, 64, 64, 3), dtype=np.uint8)
        frames[..., 0] = np.linspace(0, 255, count, dtype=np.uint8)[:, None, None]
        opened = engine.open_frames(frames, [index / 2 for index in range(count)], f"{count}.mp4")
        done = engine.ask("What color is it?")
        assert opened.frames == count and done.stats.server.finish_reason in ("stop", "length")
        prompt_tokens[count] = done.stats.server.prompt_tokens
    tokens_per_pair = (64 // 16) ** 2 // 4  # 64x64 frames: 16 patches, 4 merged tokens a frame pair
    assert prompt_tokens[64] - prompt_tokens[32] >= 16 * tokens_per_pair  # 16 more frame pairs, with their times


def test_a_model_it_does_not_serve_and_a_prompt_too_long_are_said(vllm_server: str) -> None:
    with pytest.raises(ServerModelError, match=f"it serves {SERVED_NAME}"):
        VllmServerEngine(settings_for(vllm_server, server_model="qwen3-vl-235b")).load()
    engine = VllmServerEngine(settings_for(vllm_server))
    engine.load()
    with pytest.raises(ServerContextError, match="maximum context length.*Start a new conversation"):
        engine.ask("square " * 9000)
    assert engine.turns == []


def test_the_cli_streams_an_answer_from_the_server(vllm_server: str) -> None:
    result = framewise("ask", str(CLIP), "What color is the square?", "--server", vllm_server, "--max-new-tokens", "16")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("[Demo model")
    assert "red" in result.stdout.splitlines()[1].lower()
    assert "server: prompt" in result.stdout
    assert re.search(r"first token \d+ ms, (\d+ tokens? in \d+ ms|\d+ tokens?|[\d.]+ tokens/s \(\d+ tokens\))$", result.stdout, re.M)


# vLLM's own parser reads the command line as `vllm serve` would (flag names, JSON values, the
# CompilationConfig fields) and prints what it understood.
PARSE_SERVE_COMMAND = """
import json, shlex, sys
from vllm.config.multimodal import MultiModalConfig
from vllm.engine.arg_utils import EngineArgs
from vllm.entrypoints.launchers.cli_args import make_arg_parser
from vllm.utils.argparse_utils import FlexibleArgumentParser
arguments = shlex.split(sys.argv[1])[3:]  # after "python -m vllm.entrypoints.openai.api_server"
parsed = make_arg_parser(FlexibleArgumentParser()).parse_args(arguments)
compilation = EngineArgs.from_cli_args(parsed).compilation_config
admitted = MultiModalConfig(limit_per_prompt=parsed.limit_mm_per_prompt or {})
print(json.dumps({
    "cudagraph_mm_encoder": compilation.cudagraph_mm_encoder,
    "budgets": compilation.encoder_cudagraph_token_budgets,
    "items": compilation.encoder_cudagraph_max_vision_items_per_batch,
    "frames": compilation.encoder_cudagraph_max_frames_per_batch,
    "trust_request_mm_kwargs": parsed.trust_request_mm_kwargs,
    "media_io_kwargs": parsed.media_io_kwargs,
    "items_admitted": {kind: admitted.get_limit_per_prompt(kind) for kind in ("video", "image")},
    "max_model_len": parsed.max_model_len,
    "kv_cache_memory_bytes": parsed.kv_cache_memory_bytes,
}))
"""


def test_vllm_reads_the_offered_serve_command_as_meant(server_python: list[str]) -> None:
    encoder = EncoderSettings(min_budget=256, max_budget=4096, budget_ratio=2.0, max_items_per_batch=4, max_frame_pairs_per_batch=32)
    command = vllm_serve_command(str(asset_path("demo_model")), encoder, SamplingSettings())  # a folder: no hub lookup
    result = subprocess.run(
        [*server_python, "-c", PARSE_SERVE_COMMAND, command], capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
    understood = json.loads(result.stdout.strip().splitlines()[-1])
    assert understood == {
        "cudagraph_mm_encoder": True,
        "budgets": [64, 128, 256, 512, 1024],
        "items": 4,
        "frames": 32,
        "trust_request_mm_kwargs": True,
        "media_io_kwargs": {"video": {"num_frames": -1}},
        "items_admitted": {"video": 999, "image": 999},  # vLLM's default count: every item of a conversation
        "max_model_len": None,
        "kv_cache_memory_bytes": None,
    }


def readme_serve_command() -> str:
    """The README's by-hand ``python -m vllm...`` command, its continuation lines joined."""
    text = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    start = text.index("python -m vllm.entrypoints.openai.api_server --model ")
    return text[start:text.index("\n```", start)].replace("\\\n", " ")


def test_vllm_reads_the_readmes_serve_command_as_meant(server_python: list[str]) -> None:
    arguments = shlex.split(readme_serve_command())
    arguments[arguments.index("--model") + 1] = str(asset_path("demo_model"))  # a folder: no hub lookup
    result = subprocess.run(
        [*server_python, "-c", PARSE_SERVE_COMMAND, shlex.join(arguments)], capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
    understood = json.loads(result.stdout.strip().splitlines()[-1])
    assert understood["trust_request_mm_kwargs"] is True and understood["cudagraph_mm_encoder"] is True
    assert understood["media_io_kwargs"] == {"video": {"num_frames": -1}}
    assert understood["budgets"] == [64, 128, 256, 512, 1024, 2048, 4096]
    assert understood["items_admitted"] == {"video": 999, "image": 999}
    # What lets it start where the card (or, on a CPU server, the RAM) is not almost all free.
    assert understood["max_model_len"] == 16384 and understood["kv_cache_memory_bytes"] == 3 * 2**30
