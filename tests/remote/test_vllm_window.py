"""The window asking a real vLLM server (marker ``vllm``): the answer streams into the chat and
the Encoder panel shows the server's figures and its serve command."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt

from framewise.core.backends import create_engine
from framewise.core.settings import AppSettings
from tests.conftest import SAMPLE_CLIPS
from tests.remote.conftest import SERVED_NAME
from tests.ui.conftest import log_file, make_window, services, store  # noqa: F401 - the window fixtures
from tests.ui.test_main_window import drop_file

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(1200)]  # the first test waits for the server to start
WAIT_MS = 300_000  # the first request on a busy 2-core machine


def test_the_window_streams_an_answer_from_the_server_with_its_figures(qtbot, make_window, vllm_server):
    settings = (
        AppSettings()
        .replace("backend", kind="vllm", server_url=vllm_server, timeout_s=30.0)
        .replace("generation", max_new_tokens=16)
    )
    window = make_window(create_engine, settings)
    qtbot.waitUntil(lambda: window.session.info is not None and window.session.operation is None, timeout=WAIT_MS)
    assert window.session.info.server.model == SERVED_NAME and window.banners.demo_banner.isVisible()
    clip = SAMPLE_CLIPS / "red_square_moves_right.mp4"
    drop_file(window.clip_section.preview.view, clip)
    qtbot.waitUntil(lambda: window.session.clip is not None and not window.session.opening_clip, timeout=WAIT_MS)

    window.chat.question_edit.setPlainText("What color is the square?")
    qtbot.keyClick(window.chat.question_edit, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: bool(window.session.conversation.turns) and window.session.conversation.current is None, timeout=WAIT_MS)
    turn = window.session.conversation.turns[-1]
    assert turn.status == "done" and "red" in turn.answer.lower()
    assert window.session.info.model_label in window.chat.answer_cards()[-1].header.toolTip()
    panel = window.encoder_panel
    assert "Encoding runs on the vLLM server" in panel.encoder_value.text()
    assert "prompt " in panel.server_value.text() and "multimodal cache" in panel.server_value.text()
    assert "--compilation-config" in panel.server_box.command.toPlainText()
