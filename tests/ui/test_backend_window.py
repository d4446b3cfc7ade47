"""The window switching between this machine and a vLLM server (a fake one on 127.0.0.1) in
Settings ▸ Backend, without a restart, and showing the server's figures."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
from PySide6.QtGui import QGuiApplication

from framewise.core.backends import create_engine
from framewise.core.settings import AppSettings
from tests.fake_vllm_server import Behaviour, FakeVllmServer
from tests.ui.fake_engine import FakeEngine
from tests.ui.test_main_window import LOAD_TIMEOUT_MS, ask_and_wait, open_and_wait, wait_ready
from tests.ui import probes

FAST = AppSettings().replace("sampling", max_frames=4).replace("generation", max_new_tokens=8)


def fake_local_or_server(settings: AppSettings, sink):
    """The fake engine for "this machine", the real vLLM-server backend for a server."""
    if settings.backend.kind == "vllm":
        return create_engine(settings, sink)
    return FakeEngine(settings, sink)


def apply_backend(qtbot, window, *, server_url: str | None) -> None:
    dialog = window.settings_flow.open("backend")
    (dialog.server_radio if server_url else dialog.local_radio).setChecked(True)
    if server_url:
        probes.field(dialog, "backend.server_url").setText(server_url)
    assert dialog.apply()
    dialog.accept()
    qtbot.waitUntil(lambda: window.session.operation is None and window.session.info is not None
                    and (window.session.info.server is not None) == bool(server_url), timeout=LOAD_TIMEOUT_MS)


def test_settings_switch_to_a_server_and_back_and_the_window_shows_its_figures(qtbot, make_window, sample_clip):
    behaviour = Behaviour(pieces=("re", "d", ""))
    with FakeVllmServer(behaviour) as server:
        window = make_window(fake_local_or_server, FAST)
        wait_ready(qtbot, window)
        open_and_wait(qtbot, window, sample_clip)
        ask_and_wait(qtbot, window, "What color is the square?")
        assert window.session.info.server is None and not window.encoder_panel.server_box.isVisibleTo(window)

        apply_backend(qtbot, window, server_url=server.url)
        panel = window.encoder_panel
        assert "Encoding runs on the vLLM server at " + server.url in panel.encoder_value.text()
        assert panel.server_box.isVisibleTo(window)
        command = panel.server_box.command.toPlainText()
        assert "encoder_cudagraph_token_budgets" in command and "--trust-request-mm-kwargs" in command
        panel.server_box.copy_button.click()
        assert QGuiApplication.clipboard().text() == command
        assert not window.banners.cpu_banner.isVisible()
        qtbot.waitUntil(lambda: not window.session.opening_clip, timeout=LOAD_TIMEOUT_MS)

        ask_and_wait(qtbot, window, "And now?")
        turn = window.session.conversation.turns[-1]
        assert turn.status == "done" and turn.answer == "red" and turn.stats.server is not None
        assert "prompt 368 tokens (256 cached)" in panel.server_value.text()
        assert "multimodal cache 1 hits of 2 queries" in panel.server_value.text()
        assert panel.first_token_value.text().endswith(" ms")
        assert panel.speed_value.text() == turn.stats.speed_text() == f"{turn.stats.new_tokens} tokens in {turn.stats.answer_ms():.0f} ms"
        assert "encoded on the server" in panel.timing_value.text()
        sent = behaviour.chat_requests[-1]["messages"][0]["content"][0]["video_url"]["url"]
        assert sent.startswith("data:video/jpeg;base64,") and sent.count(",") == 4  # the clip, re-opened there

        behaviour.chat_status, behaviour.chat_body = 400, {"error": {"message": "At most 1 video(s) may be provided"}}
        ask_and_wait(qtbot, window, "One more?")
        assert window.session.conversation.turns[-1].status == "failed"
        assert "At most 1 video(s)" in window.session.conversation.turns[-1].error
        assert window.session.conversation.turns[-2].status == "done" and window.session.conversation.turns[-2].answer == "red"
        assert window.session.clip is not None

        apply_backend(qtbot, window, server_url=None)
        assert not panel.server_box.isVisibleTo(window) and window.session.info.device == "cpu"


@pytest.fixture
def refusing_url() -> Iterator[str]:
    """The URL of a local port bound but not listening, held for the test: connections to it are
    refused, and no other test's server can take the port meanwhile (a port freed by closing a
    server could be, when the tests run in parallel)."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{held.getsockname()[1]}"


def test_an_unreachable_server_keeps_the_window_on_this_machine(qtbot, make_window, sample_clip, refusing_url):
    window = make_window(fake_local_or_server, FAST)
    wait_ready(qtbot, window)
    open_and_wait(qtbot, window, sample_clip)
    dialog = window.settings_flow.open("backend")
    dialog.server_radio.setChecked(True)
    probes.field(dialog, "backend.server_url").setText(refusing_url)
    assert dialog.apply()
    qtbot.waitUntil(lambda: window.banners.error_banner.isVisible(), timeout=LOAD_TIMEOUT_MS)
    assert "Cannot reach a server" in window.banners.error_banner.text()
    qtbot.waitUntil(lambda: window.session.operation is None, timeout=LOAD_TIMEOUT_MS)
    assert window.session.info.server is None and window.session.clip is not None
    ask_and_wait(qtbot, window, "Still there?")
    assert window.session.conversation.turns[-1].status == "done"


def test_the_dialog_warns_about_plain_http_to_another_host_and_keeps_the_key_out_of_the_file(qtbot, make_window, store):
    window = make_window(fake_local_or_server, FAST)
    wait_ready(qtbot, window)
    dialog = window.settings_flow.open("backend")
    dialog.server_radio.setChecked(True)
    probes.field(dialog, "backend.server_url").setText("http://gpu-box.example.org:8000")
    assert dialog.http_warning.isVisibleTo(dialog) and "unencrypted" in dialog.http_warning.text()
    probes.field(dialog, "backend.server_url").setText("http://127.0.0.1:8000")
    assert not dialog.http_warning.isVisibleTo(dialog)
    probes.field(dialog, "backend.api_key").setText("k-secret-1")
    settings = dialog.validated_settings()
    assert settings.backend.api_key == "k-secret-1"
    store.save_settings(settings)
    assert "k-secret-1" not in open(store.location, encoding="utf-8").read()
    assert "session only" in window.store.api_key_note()


def test_with_a_secret_store_the_key_outlives_the_session_but_never_enters_the_file(tmp_path, monkeypatch):
    from framewise.core.backends.vllm.keys import KEYRING_SERVICE, ServerKeys
    from framewise.ui import settings_store
    from framewise.ui.settings_store import SESSION_ONLY_KEY_NOTE, SettingsStore
    from tests.core.backends.test_server_keys import MemoryKeyring

    secrets = MemoryKeyring()
    monkeypatch.setattr(settings_store, "desktop_server_keys", lambda: ServerKeys(secrets))
    ini = tmp_path / "framewise.ini"
    settings = FAST.replace("backend", kind="vllm", server_url="https://gpu-box:8000/", api_key="k-secret-2")
    SettingsStore(ini, use_keyring=True).save_settings(settings)
    assert "k-secret-2" not in ini.read_text(encoding="utf-8")
    assert secrets.secrets == {(KEYRING_SERVICE, "https://gpu-box:8000"): "k-secret-2"}
    reopened = SettingsStore(ini, use_keyring=True)
    assert reopened.api_key_note() != SESSION_ONLY_KEY_NOTE and "secret store" in reopened.api_key_note()
    assert reopened.load_settings().backend.api_key == "k-secret-2"
    assert SettingsStore(ini).load_settings().backend.api_key == ""  # an ini store without the secret store
    SettingsStore(ini, use_keyring=True).save_settings(settings.replace("backend", api_key=""))
    assert secrets.secrets == {}


def test_stop_ends_a_server_answer_within_half_a_second_and_closes_the_stream(qtbot, make_window, sample_clip):
    import time

    from PySide6.QtCore import Qt

    behaviour = Behaviour(pieces=("The", " red", " square", "") * 50, piece_delay_s=0.2)
    with FakeVllmServer(behaviour) as server:
        settings = FAST.replace("backend", kind="vllm", server_url=server.url)
        window = make_window(fake_local_or_server, settings)
        wait_ready(qtbot, window)
        open_and_wait(qtbot, window, sample_clip)
        window.chat.question_edit.setPlainText("Describe the clip")
        window.chat.submit()
        qtbot.waitUntil(lambda: window.session.conversation.current is not None and bool(window.session.conversation.current.answer),
                        timeout=LOAD_TIMEOUT_MS)
        started = time.perf_counter()
        qtbot.mouseClick(window.chat.stop_button, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: window.session.conversation.current is None, timeout=3000)
        elapsed = time.perf_counter() - started
        qtbot.waitUntil(lambda: bool(behaviour.disconnects), timeout=3000)
    assert elapsed < 0.5, f"Stop took {elapsed:.2f} s"
    turn = window.session.conversation.turns[-1]
    assert turn.status == "stopped" and turn.stats.cancelled
