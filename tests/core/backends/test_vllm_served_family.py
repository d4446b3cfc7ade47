"""The vLLM backend picks the family the server serves: by the served model's config.json where it
can be read here, else by its name; a Qwen3.5 gets Qwen3-VL's request layout and is asked not to
think (against the fake server on 127.0.0.1)."""

from __future__ import annotations

from pathlib import Path

import pytest

from framewise.app.cli import format_info
from framewise.core.backends.vllm.family import served_family
from framewise.core.model_source import DEMO_MODEL_DIR
from tests.core.backends.test_vllm_server import CLIP, loaded
from tests.core.families.qwen3_5.checkpoint import write_tiny_checkpoint
from tests.fake_vllm_server import Behaviour, FakeVllmServer


@pytest.fixture(scope="module")
def qwen3_5_folder(tmp_path_factory) -> Path:
    return write_tiny_checkpoint(tmp_path_factory.mktemp("served") / "tiny")


@pytest.mark.parametrize(
    ("name", "family"),
    [("Qwen/Qwen3.5-9B", "Qwen3.5"), ("qwen3_5-4b-fp8", "Qwen3.5"), ("Qwen/Qwen3-VL-8B-Instruct", "Qwen3-VL"),
     ("demo", "Qwen3-VL"), ("my-qwen3.50-merge", "Qwen3-VL"), ("", "Qwen3-VL")],
)
def test_a_served_model_is_known_by_its_name_when_nothing_else_says(name: str, family: str) -> None:
    assert served_family(name, source=f"/nowhere/{name}" if name else None).name == family


def test_the_served_models_own_config_wins_over_its_name(qwen3_5_folder: Path) -> None:
    assert served_family("shapes", str(qwen3_5_folder)).name == "Qwen3.5"
    assert served_family("Qwen3.5-lookalike", str(DEMO_MODEL_DIR)).name == "Qwen3-VL"


def test_a_qwen3_5_server_gets_qwen3_vls_layout_and_is_asked_not_to_think(qwen3_5_folder: Path) -> None:
    behaviour = Behaviour(models=("shapes",), roots={"shapes": str(qwen3_5_folder)}, pieces=("red", ""))
    with FakeVllmServer(behaviour) as server:
        engine = loaded(server.url)
        info = engine.info()
        engine.open_clip(CLIP)
        engine.ask("What color is the square?")
        engine.ask("Which way does it move?")
    assert info.family == "Qwen3.5" and "family:             Qwen3.5" in format_info(info)
    first, follow_up = behaviour.chat_requests
    assert first["chat_template_kwargs"] == {"enable_thinking": False} == follow_up["chat_template_kwargs"]
    assert [part["type"] for part in first["messages"][0]["content"]] == ["video_url", "text"]
    assert [message["role"] for message in follow_up["messages"]] == ["user", "assistant", "user"]
    assert "media_io_kwargs" in first


def test_a_qwen3_vl_server_gets_no_template_keywords() -> None:
    behaviour = Behaviour(models=("Qwen/Qwen3-VL-2B-Instruct",), pieces=("red", ""))
    with FakeVllmServer(behaviour) as server:
        engine = loaded(server.url)
        engine.open_clip(CLIP)
        engine.ask("What color is the square?")
    assert engine.info().family == "Qwen3-VL"
    assert "chat_template_kwargs" not in behaviour.chat_requests[0]
