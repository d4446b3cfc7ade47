"""The vLLM-server backend against a fake server on 127.0.0.1: the requests it sends, the stream
it reads, cancel, and every failure a person must be able to act on."""

from __future__ import annotations

import base64
import functools
import json
import logging
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from framewise.core.backends import create_engine, same_backend
from framewise.core.backends.vllm.server import VllmServerEngine
from framewise.core.errors import (
    FramewiseError,
    ServerAddressError,
    ServerAnswerTimeoutError,
    ServerAuthError,
    ServerContextError,
    ServerFailedError,
    ServerLayoutError,
    ServerModelError,
    ServerModelGoneError,
    ServerRequestError,
    ServerStreamCutError,
    ServerTimeoutError,
    ServerTlsError,
    ServerUnreachableError,
    describe_error,
)
from framewise.core.events import AnswerSpeed, Done, Progress, Token
from framewise.core.metrics import DecodeSpeedMeter
from framewise.core.settings import AppSettings
from tests.conftest import REPO_ROOT, SAMPLE_CLIPS
from tests.fake_vllm_server import Behaviour, FakeVllmServer

CLIP = SAMPLE_CLIPS / "red_square_moves_right.mp4"
OTHER_CLIP_SAME_TIMES = SAMPLE_CLIPS / "two_shapes_wide.mp4"  # as long as CLIP: sampled at the same times


def remote_settings(url: str, **backend: object) -> AppSettings:
    settings = AppSettings().replace("backend", kind="vllm", server_url=url, **{"timeout_s": 3.0, **backend})
    return settings.replace("sampling", max_frames=4).replace("generation", max_new_tokens=8)


def loaded(url: str, events: list | None = None, **backend: object) -> VllmServerEngine:
    engine = VllmServerEngine(remote_settings(url, **backend), sink=(events.append if events is not None else print))
    engine.load()
    return engine


def frames_in(url: str) -> list[bytes]:
    prefix = "data:video/jpeg;base64,"
    assert url.startswith(prefix)
    return [base64.b64decode(part) for part in url[len(prefix):].split(",")]


def test_load_checks_the_server_and_picks_its_only_model() -> None:
    with FakeVllmServer(Behaviour(models=("demo",))) as server:
        engine = create_engine(remote_settings(server.url + "/v1/"))
        assert isinstance(engine, VllmServerEngine)
        info = engine.load()
    assert info.server is not None
    assert info.device_kind == "server" and not info.on_cpu, "a server is no CPU of this machine"
    assert info.server.url == server.url
    assert info.server.model == "demo" and info.model_label.startswith("Demo model")
    assert info.server.version == "0.32.0-fake"
    assert info.encoder_name == "on the server" and "runs on the vLLM server" in info.graphs_reason


def test_a_model_the_server_does_not_serve_names_the_ones_it_does() -> None:
    with FakeVllmServer(Behaviour(models=("qwen3-vl-32b", "demo"))) as server:
        with pytest.raises(ServerModelError) as raised:
            loaded(server.url, server_model="qwen3-vl-8b")
        assert "qwen3-vl-32b, demo" in str(raised.value) and raised.value.field == "backend.server_model"
        with pytest.raises(ServerModelError, match="several models"):
            loaded(server.url)


def test_nothing_listening_is_unreachable_and_says_to_start_the_server() -> None:
    with FakeVllmServer() as server:
        url = server.url
    started = time.monotonic()
    with pytest.raises(ServerUnreachableError, match="Start the vLLM server") as raised:
        loaded(url)
    assert time.monotonic() - started < 3
    assert describe_error(raised.value).field == "backend.server_url"


def test_https_to_a_plain_http_server_is_a_tls_failure() -> None:
    with FakeVllmServer() as server:
        with pytest.raises(ServerTlsError, match="TLS"):
            loaded(server.url.replace("http://", "https://"))


def test_a_missing_or_wrong_key_is_refused_and_the_key_never_reaches_the_settings_file_or_the_log(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    with FakeVllmServer(Behaviour(api_key="s3cret-key")) as server:
        for key in ("", "wrong"):
            with pytest.raises(ServerAuthError, match="API key") as raised:
                loaded(server.url, api_key=key)
            assert raised.value.field == "backend.api_key"
        engine = loaded(server.url, api_key="s3cret-key")
        engine.ask("What color?")
        settings = engine.settings
    assert "s3cret-key" not in json.dumps(settings.to_dict())
    assert "s3cret-key" not in repr(settings)
    assert "s3cret-key" not in caplog.text
    assert AppSettings.from_dict({"backend": {"api_key": "from-a-file"}}).backend.api_key == ""


def test_no_key_where_the_server_needs_one_says_a_key_is_needed_not_that_it_was_refused() -> None:
    with FakeVllmServer(Behaviour(api_key="s3cret-key")) as server:
        with pytest.raises(ServerAuthError) as missing:
            loaded(server.url)
        with pytest.raises(ServerAuthError) as wrong:
            loaded(server.url, api_key="wrong")
    assert "needs an API key and none was given (401" in str(missing.value) and "refused" not in str(missing.value)
    assert "refused the API key (401" in str(wrong.value)


def test_an_address_below_the_servers_root_is_said_to_be_no_vllm_root() -> None:
    with FakeVllmServer() as server:
        with pytest.raises(ServerAddressError) as raised:
            loaded(server.url + "/foo")
    assert f"{server.url}/foo/health does not exist (404)" in str(raised.value)
    assert "not a vLLM server's root" in str(raised.value) and "finish starting" not in str(raised.value)
    assert describe_error(raised.value).field == "backend.server_url"


def test_the_offered_serve_command_loads_the_model_from_where_the_server_did() -> None:
    roots = {"demo": "/srv/models/demo_model"}
    with FakeVllmServer(Behaviour(models=("demo",), roots=roots)) as server:
        info = loaded(server.url).info()
    assert info.server.model_source == "/srv/models/demo_model"
    assert "--model /srv/models/demo_model --served-model-name demo " in info.server.serve_command
    with FakeVllmServer(Behaviour(models=("Qwen/Qwen3-VL-8B-Instruct",))) as server:  # no root said: the name
        command = loaded(server.url).info().server.serve_command
    assert "--model Qwen/Qwen3-VL-8B-Instruct --trust-request-mm-kwargs" in command


def test_a_refused_request_quotes_the_server_and_the_conversation_stays() -> None:
    message = "At most 1 video(s) may be provided in one prompt. (parameter=video)"
    behaviour = Behaviour(chat_status=400, chat_body={"error": {"message": message, "type": "BadRequestError"}})
    with FakeVllmServer(behaviour) as server:
        engine = loaded(server.url)
        engine.open_clip(CLIP)
        engine.turns.append(("earlier?", "yes"))
        with pytest.raises(ServerRequestError, match=r"At most 1 video\(s\)"):
            engine.ask("What color is the square?")
    assert engine.clip is not None and engine.turns == [("earlier?", "yes")]
    assert len(behaviour.chat_requests) == 1  # nothing retried


@pytest.mark.parametrize("status", [500, 503])
def test_a_server_failure_says_to_check_its_log(status: int) -> None:
    behaviour = Behaviour(chat_status=status, chat_body={"error": {"message": "engine dead"}})
    with FakeVllmServer(behaviour) as server:
        engine = loaded(server.url)
        with pytest.raises(ServerFailedError, match=f"{status}: engine dead.*log"):
            engine.ask("What color?")
    assert len(behaviour.chat_requests) == 1


def test_a_server_that_goes_quiet_times_out() -> None:
    with FakeVllmServer(Behaviour(stall_s=6)) as server:
        engine = loaded(server.url, answer_timeout_s=1.0)
        started = time.monotonic()
        with pytest.raises(ServerTimeoutError, match="timeout"):
            engine.ask("What color?")
    assert time.monotonic() - started < 4


def test_an_answer_that_trickles_past_the_answer_timeout_is_cut_there_and_not_kept() -> None:
    behaviour = Behaviour(pieces=tuple("abcdefghij"), piece_delay_s=0.4)  # each piece well within the timeout
    with FakeVllmServer(behaviour) as server:
        engine = loaded(server.url, answer_timeout_s=1.5)
        engine.open_clip(CLIP)
        started = time.monotonic()
        with pytest.raises(ServerAnswerTimeoutError, match=r"answer timeout \(1.5 s\)") as raised:
            engine.ask("What color?")
    assert time.monotonic() - started < 3
    assert describe_error(raised.value).field == "backend.answer_timeout_s"
    assert engine.turns == []


def test_a_stream_cut_mid_answer_is_said_and_the_answer_is_not_kept() -> None:
    events: list = []
    with FakeVllmServer(Behaviour(pieces=("re", "d", " square", ""), cut_after=2)) as server:
        engine = loaded(server.url, events)
        engine.open_clip(CLIP)
        with pytest.raises(ServerStreamCutError, match="stopped|broke"):
            engine.ask("What color is the square?")
    assert [event.text for event in events if isinstance(event, Token)] == ["re", "d"]
    assert engine.turns == [] and engine.clip is not None


def test_cancel_closes_the_stream_within_half_a_second() -> None:
    behaviour = Behaviour(stall_s=20)
    with FakeVllmServer(behaviour) as server:
        engine = loaded(server.url)
        engine.open_clip(CLIP)
        pressed: list[float] = []

        def press_stop() -> None:
            time.sleep(0.5)
            pressed.append(time.monotonic())
            engine.cancel()

        threading.Thread(target=press_stop).start()
        done = engine.ask("What color is the square?")
        returned = time.monotonic()
        deadline = time.monotonic() + 2
        while not behaviour.disconnects and time.monotonic() < deadline:
            time.sleep(0.02)
    assert done.stats.cancelled and engine.turns == []
    assert returned - pressed[0] < 0.5
    assert behaviour.disconnects and behaviour.disconnects[0] - pressed[0] < 0.5  # the server saw the close


def test_the_clip_travels_as_frames_with_their_times_and_follow_ups_keep_the_history() -> None:
    events: list = []
    behaviour = Behaviour(pieces=("re", "d", ""))
    with FakeVllmServer(behaviour) as server:
        engine = loaded(server.url, events)
        opened = engine.open_clip(CLIP)
        first = engine.ask("What color is the square?")
        second = engine.ask("Which way does it move?")
    assert first.text == "red" and second.text == "red"
    assert opened.frames == 4  # sampling.max_frames caps what is sent
    request = behaviour.chat_requests[0]
    content = request["messages"][0]["content"]
    assert [part["type"] for part in content] == ["video_url", "text"]
    frames = frames_in(content[0]["video_url"]["url"])
    assert len(frames) == 4 and all(frame.startswith(b"\x89PNG") for frame in frames)
    times = request["media_io_kwargs"]["video"]
    assert times["fps"] == 1000.0
    assert [index / 1000 for index in times["frames_indices"]] == pytest.approx(opened.timestamps, abs=1e-3)
    assert request["stream"] is True and request["max_tokens"] == 8 and request["temperature"] == 0.0
    follow_up = behaviour.chat_requests[1]["messages"]
    assert [message["role"] for message in follow_up] == ["user", "assistant", "user"]
    assert follow_up[1]["content"] == "red" and follow_up[2]["content"] == "Which way does it move?"
    assert follow_up[0]["content"][0]["video_url"]["url"] == content[0]["video_url"]["url"]


def test_every_frame_of_a_long_clip_is_kept_by_the_server() -> None:
    behaviour = Behaviour(pieces=("red", ""))
    frames = np.zeros((64, 32, 32, 3), dtype=np.uint8)
    with FakeVllmServer(behaviour) as server:
        engine = loaded(server.url)
        engine.open_frames(frames, [index / 2 for index in range(64)], "long.mp4")
        done = engine.ask("What color?")
    assert done.text == "red"
    request = behaviour.chat_requests[0]
    assert len(frames_in(request["messages"][0]["content"][0]["video_url"]["url"])) == 64
    assert request["media_io_kwargs"]["video"]["num_frames"] == -1  # vLLM keeps 32 unless the request says


def test_the_answer_streams_with_the_servers_figures() -> None:
    events: list = []
    with FakeVllmServer(Behaviour(pieces=("re", "d", ""), piece_delay_s=0.05)) as server:
        engine = loaded(server.url, events)
        done = engine.ask("What color?")
    assert [event.text for event in events if isinstance(event, Token)] == ["re", "d"]
    assert events[-1] == done and isinstance(done, Done)
    stats = done.stats
    assert stats.server is not None and stats.server.model == "demo"
    assert (stats.server.prompt_tokens, stats.server.completion_tokens, stats.server.cached_prompt_tokens) == (368, 2, 256)
    assert (stats.server.mm_cache_queries, stats.server.mm_cache_hits) == (2.0, 1.0)
    assert stats.time_to_first_token_ms > 0 and stats.tokens_per_second > 0
    assert "multimodal cache 1 hits of 2 queries" in stats.server.summary()


def test_the_answers_speed_so_far_streams_with_it_as_on_this_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(DecodeSpeedMeter, "interval_s", 0.0)  # a report for every token from the second on
    events: list = []
    with FakeVllmServer(Behaviour(pieces=("The", " red", " square", ""), piece_delay_s=0.05)) as server:
        engine = loaded(server.url, events)
        done = engine.ask("What color?")
    speeds = [event for event in events if isinstance(event, AnswerSpeed)]
    assert [speed.tokens_so_far for speed in speeds] == [2, 3]
    assert all(speed.request_id == done.request_id and speed.tokens_per_second_so_far > 0 for speed in speeds)
    # The same count over the time since the first token; the final figure's clock stops after the last token.
    assert done.stats.new_tokens == 3 and 0 < done.stats.tokens_per_second <= speeds[-1].tokens_per_second_so_far


def test_metrics_without_the_mm_cache_leave_the_counters_unknown() -> None:
    with FakeVllmServer(Behaviour(metrics="vllm:num_requests_running 0\n")) as server:
        done = loaded(server.url).ask("What color?")
    assert done.stats.server.mm_cache_queries is None and "multimodal" not in done.stats.server.summary()


def test_plain_http_to_another_host_warns_before_the_first_request() -> None:
    events: list = []
    with pytest.raises(ServerUnreachableError):
        loaded("http://framewise-test.invalid:8000", events, timeout_s=2.0)
    assert isinstance(events[0], Progress) and "unencrypted" in events[0].message
    assert not remote_settings("http://127.0.0.1:8000").backend.is_plain_http_to_remote_host()
    assert not remote_settings("https://gpu.example.org").backend.is_plain_http_to_remote_host()


def test_pruning_is_left_to_the_server_and_said_once_per_setting() -> None:
    """Nothing about pruning goes with a question (vLLM sets its rate when it starts); the backend
    warns once that the server's own rate applies, again only when the pruning setting changes, and
    the offered serve command carries the rate."""
    events: list = []
    behaviour = Behaviour(pieces=("red", ""))
    with FakeVllmServer(behaviour) as server:
        engine = VllmServerEngine(remote_settings(server.url).replace("sampling", pruning="0.5"), sink=events.append)
        engine.load()
        engine.open_clip(CLIP)
        engine.ask("What color?")
        engine.apply_settings(engine.settings.replace("sampling", pruning="0.5", max_frames=6))
        engine.ask("What color?")
        engine.apply_settings(engine.settings.replace("sampling", pruning="auto"))
        assert len(engine.turns) == 1, "the frames sent are the same: the conversation goes on"
    progress = [event.message for event in events if isinstance(event, Progress)]
    notes = [message for message in progress if "--video-pruning-rate" in message]
    assert len(notes) == 2 and notes[0].startswith("Warning:") and "30847" in notes[0] and "auto" in notes[1]
    assert "prun" not in json.dumps(behaviour.chat_requests)
    assert engine.info().server.serve_command.count("--video-pruning-rate") == 0  # auto: the server cannot
    assert engine.clip.summary.video_tokens_before == engine.clip.summary.video_tokens_after > 0


def test_settings_refuse_addresses_that_are_not_http() -> None:
    from framewise.core.errors import SettingsError

    for url in ("", "ftp://host", "127.0.0.1:8000", "http://host:99999", "http://host/?q=1"):
        with pytest.raises(SettingsError) as raised:
            remote_settings(url).validate(None)
        assert raised.value.field == "backend.server_url"
    assert same_backend(AppSettings(), AppSettings().replace("sampling", max_frames=8))
    assert not same_backend(AppSettings(), remote_settings("http://127.0.0.1:1"))


def test_an_exported_conversation_carries_the_servers_figures() -> None:
    from framewise.core.conversation import Conversation, Turn
    from framewise.core.markdown_text import escape_text

    with FakeVllmServer(Behaviour(pieces=("re", "d", ""))) as server:
        engine = loaded(server.url)
        done = engine.ask("What color?")
    turn = Turn(question="What color?", model_name="demo", model_label=engine.info().model_label,
                answer=done.text, status="done", stats=done.stats)
    conversation = Conversation(clip_name="clip.mp4", turns=[turn])
    markdown = conversation.to_markdown(engine.settings)
    assert escape_text(f"vLLM server {server.url}: prompt 368 tokens (256 cached)") in markdown  # as typed
    exported = json.loads(conversation.export_text(engine.settings, ".json"))
    assert exported["turns"][0]["stats"]["server"]["completion_tokens"] == 2
    assert "api_key" not in exported["settings"]["backend"]


# Loads, opens the sample clip and asks, against the fake server, then names the heavy modules loaded.
_IMPORTS_SCRIPT = f"""
import json, sys
from framewise.core.backends.vllm.server import VllmServerEngine
from framewise.core.settings import AppSettings
from tests.fake_vllm_server import FakeVllmServer
with FakeVllmServer() as server:
    settings = AppSettings().replace("backend", kind="vllm", server_url=server.url).replace("sampling", max_frames=4)
    engine = VllmServerEngine(settings)
    engine.load()
    engine.open_clip({str(CLIP)!r})
    engine.ask("What color is the square?")
print(json.dumps(sorted(name for name in ("torch", "transformers") if name in sys.modules)))
"""


@functools.cache
def _heavy_modules_after_answering() -> list[str]:
    result = subprocess.run(
        [sys.executable, "-c", _IMPORTS_SCRIPT], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.splitlines()[-1])


def test_the_vllm_backend_answers_without_importing_transformers() -> None:
    assert "transformers" not in _heavy_modules_after_answering()


def test_the_vllm_backend_answers_without_importing_torch() -> None:
    assert "torch" not in _heavy_modules_after_answering()


def test_a_clip_and_a_picture_travel_as_a_video_part_and_an_image_part(tmp_path) -> None:
    from tests.core.test_images import red_square_picture

    behaviour = Behaviour(pieces=("re", "d", ""))
    with FakeVllmServer(behaviour) as server:
        engine = loaded(server.url)
        opened = engine.open_clip(CLIP)
        picture = engine.add_clip(red_square_picture(tmp_path))
        engine.ask("Which one is brighter?")
    assert picture.kind == "image" and [clip.kind for clip in engine.clips] == ["video", "image"]
    request = behaviour.chat_requests[0]
    content = request["messages"][0]["content"]
    assert [part["type"] for part in content] == ["video_url", "image_url", "text"]
    assert content[1]["image_url"]["url"].startswith("data:image/png;base64,")
    assert base64.b64decode(content[1]["image_url"]["url"].split(",", 1)[1]).startswith(b"\x89PNG")
    times = request["media_io_kwargs"]["video"]["frames_indices"]
    assert [index / 1000 for index in times] == pytest.approx(opened.timestamps, abs=1e-3), "the clip keeps its times"


def test_two_clips_sampled_at_the_same_times_go_as_two_videos_saying_what_the_server_must_admit() -> None:
    behaviour = Behaviour(pieces=("re", "d", ""))
    events: list = []
    with FakeVllmServer(behaviour) as server:
        engine = loaded(server.url, events)
        first = engine.open_clip(CLIP)
        second = engine.add_clip(OTHER_CLIP_SAME_TIMES)
        engine.ask("Which clip has a red square?")
    assert second.timestamps == first.timestamps
    request = behaviour.chat_requests[0]
    content = request["messages"][0]["content"]
    assert [part["type"] for part in content] == ["video_url", "video_url", "text"]
    times = request["media_io_kwargs"]["video"]["frames_indices"]
    assert [index / 1000 for index in times] == pytest.approx(first.timestamps, abs=1e-3)
    said = [event.message for event in events if isinstance(event, Progress)]
    assert any("a question now sends 2 videos (the server's --limit-mm-per-prompt must admit them)" in m for m in said)


def test_a_server_that_admits_fewer_videos_says_which_serve_command_admits_them() -> None:
    with FakeVllmServer(Behaviour(limits={"video": 1})) as server:
        engine = loaded(server.url)
        engine.open_clip(CLIP)
        engine.add_clip(OTHER_CLIP_SAME_TIMES)
        with pytest.raises(ServerRequestError, match=r"admits at most 1 video\(s\) per question") as raised:
            engine.ask("Which clip has a red square?")
    assert "framewise info --server" in str(raised.value) and "--limit-mm-per-prompt" in str(raised.value)


def test_a_closer_look_at_other_times_is_refused_with_the_reason_before_anything_is_sent() -> None:
    """vLLM takes one set of frame times per request: the span's own times cannot travel beside the
    clip's, and the pictures it went as before were not the model's prompt (twice the tokens)."""
    behaviour = Behaviour(pieces=("re", "d", ""))
    with FakeVllmServer(behaviour) as server:
        engine = loaded(server.url)
        engine.open_clip(CLIP)
        with pytest.raises(ServerLayoutError) as raised:
            engine.look_closer(1.0, 2.0)
        assert [clip.summary.clip_name for clip in engine.clips] == [CLIP.name]  # nothing added
        assert behaviour.chat_requests == []
        done = engine.ask("What color is the square?")
    message = str(raised.value)
    assert f"{CLIP.name} 1.0–2.0 s cannot go to the vLLM server beside {CLIP.name}" in message
    assert "one set of frame times per question" in message and "This machine" in message
    assert done.text == "red" and [part["type"] for part in behaviour.chat_requests[0]["messages"][0]["content"]] == [
        "video_url", "text"
    ]


def test_a_clip_too_large_for_the_servers_context_is_refused_before_it_is_sent() -> None:
    behaviour = Behaviour()
    frames = np.zeros((64, 512, 512, 3), dtype=np.uint8)  # 32 frame pairs of 256 tokens: 8,192 beside the markers
    with FakeVllmServer(behaviour) as server:  # a context of 8,192 tokens
        engine = loaded(server.url)
        engine.open_clip(CLIP)
        with pytest.raises(ServerContextError) as raised:
            engine.open_frames(frames, [index / 2 for index in range(64)], "large.mp4")
        assert engine.clip.summary.clip_name == CLIP.name  # the open clip stays
    message = str(raised.value)
    assert "context holds 8,192 tokens (its --max-model-len)" in message and "at least 8,288" in message
    assert "--max-model-len" in message and "fewer frames" in message
    assert behaviour.chat_requests == []


def test_the_servers_own_context_refusal_comes_with_what_to_change() -> None:
    reason = "This model's maximum context length is 8192 tokens. However, your prompt contains 9000 input tokens."
    behaviour = Behaviour(chat_status=400, chat_body={"error": {"message": reason, "type": "BadRequestError"}})
    with FakeVllmServer(behaviour) as server:
        engine = loaded(server.url)
        with pytest.raises(ServerContextError) as raised:
            engine.ask("square " * 9000)
    assert reason in str(raised.value) and "Start a new conversation" in str(raised.value)


def test_an_endpoint_address_is_taken_as_the_servers_root() -> None:
    with FakeVllmServer(Behaviour()) as server:
        for endpoint in ("/v1/chat/completions", "/v1/chat/completions/", "/v1/models"):
            engine = loaded(server.url + endpoint)
            assert engine.info().server.url == server.url
            assert engine.ask("What color?").text == "red"


def test_a_server_restarted_under_another_name_is_followed_when_no_model_was_named() -> None:
    behaviour = Behaviour(models=("demo",))
    events: list = []
    with FakeVllmServer(behaviour) as server:
        engine = loaded(server.url, events)
        engine.open_clip(CLIP)
        behaviour.models = ("shapes",)  # the server restarted, serving another name
        with pytest.raises(ServerModelGoneError) as raised:
            engine.ask("What color is the square?")
        again = engine.ask("What color is the square?")
    message = str(raised.value)
    assert "no longer serves 'demo'" in message and "serves 'shapes' now" in message
    assert "Change the server model" not in message and raised.value.field is None
    assert events[-1] is again and behaviour.chat_requests[-1]["model"] == "shapes"
    assert engine.info().model_name == "shapes" and engine.clip is not None


def test_a_model_the_person_named_stays_theirs_to_change_after_a_restart() -> None:
    behaviour = Behaviour(models=("demo",))
    with FakeVllmServer(behaviour) as server:
        engine = loaded(server.url, server_model="demo")
        behaviour.models = ("shapes",)
        with pytest.raises(ServerModelError, match="Change the server model"):
            engine.ask("What color?")


def test_the_demo_model_keeps_its_label_under_another_served_name() -> None:
    from framewise.core.model_source import DEMO_MODEL_DIR

    roots = {"shapes": str(DEMO_MODEL_DIR)}
    with FakeVllmServer(Behaviour(models=("shapes",), roots=roots)) as server:
        assert loaded(server.url).info().model_label.startswith("Demo model")
    with FakeVllmServer(Behaviour(models=("shapes",), roots={"shapes": "/srv/elsewhere/shapes"})) as server:
        assert loaded(server.url).info().model_label is None  # a folder not on this machine: no label known


def test_new_sampling_settings_resample_every_clip_and_keep_the_picture(tmp_path) -> None:
    from tests.core.test_images import red_square_picture

    with FakeVllmServer(Behaviour()) as server:
        engine = loaded(server.url)
        engine.open_clip(CLIP)
        engine.add_clip(red_square_picture(tmp_path))
        engine.apply_settings(engine.settings.replace("sampling", max_frames=8))
    assert [clip.kind for clip in engine.clips] == ["video", "image"]
    assert engine.clips[0].summary.frames == 8 and len(frames_in(engine.clips[0].url)) == 8


def test_the_strip_fills_while_the_clip_is_read_as_on_this_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    """Frames reach the window as they are read (FramesRead, with the reading's progress), not only
    once the whole clip is: each once, at the time and with the picture the finished clip shows."""
    from framewise.core.backends.vllm import server as vllm_server
    from framewise.core.events import ClipSampled, FramesRead
    from framewise.core.video.feed import FrameArrivals

    class SlowArrivals(FrameArrivals):
        def put(self, index: int, rgb: np.ndarray, time_s: float) -> None:
            time.sleep(0.2)  # a slow read: several progress reports before its end
            super().put(index, rgb, time_s)

    monkeypatch.setattr(vllm_server, "FrameArrivals", SlowArrivals)
    events: list = []
    with FakeVllmServer(Behaviour(pieces=("red", ""))) as server:
        engine = loaded(server.url, events)
        engine.settings = engine.settings.replace("sampling", max_frames=8)
        engine.open_clip(CLIP)

    sampled_at = next(index for index, event in enumerate(events) if isinstance(event, ClipSampled))
    reads = [event for event in events[:sampled_at] if isinstance(event, FramesRead)]
    assert reads, "no frames shown before the clip was read"
    assert any(isinstance(event, Progress) and "of 8 frames" in event.message for event in events[:sampled_at])
    sampled = events[sampled_at]
    shown = [(index, time_s, picture) for read in reads for index, time_s, picture in zip(read.indices, read.timestamps, read.thumbnails, strict=True)]
    assert len({index for index, _, _ in shown}) == len(shown)
    for index, time_s, picture in shown:
        assert time_s == sampled.timestamps[index]
        np.testing.assert_array_equal(picture, sampled.thumbnails[index])
