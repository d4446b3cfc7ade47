"""The window on the real engine with a tiny random-weight Qwen3.5 (the CPU): the family named in the
chat header and the status bar, a clip, an added picture, follow-ups, a stopped answer and another
question, and a settings change mid-conversation."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from PySide6.QtCore import Qt

from framewise.core.events import Token
from tests.core.families.qwen3_5.checkpoint import write_tiny_checkpoint
from tests.core.families.qwen3_5.test_qwen3_5_engine import settings_for
from tests.core.test_images import red_square_picture
from tests.ui.test_end_to_end import real_engine
from tests.ui.test_main_window import LOAD_TIMEOUT_MS, ask_and_wait, open_and_wait, wait_ready
from tests.ui.test_two_items import wait_items


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    return write_tiny_checkpoint(tmp_path_factory.mktemp("window") / "tiny", seed=2)


class HeldAtFirstToken:
    """The real engine; once :attr:`armed`, the next answer's first streamed token holds the engine's
    thread until Stop has reached the engine, so that a random model's short answer cannot end first."""

    def __init__(self) -> None:
        self.armed = threading.Event()
        self._cancelled = threading.Event()

    def engine(self, settings, sink):
        engine = real_engine(settings, lambda event: self._forward(event, sink))
        cancel = engine.cancel

        def cancelling(*args, **kwargs):
            self._cancelled.set()
            return cancel(*args, **kwargs)

        engine.cancel = cancelling
        return engine

    def _forward(self, event, sink) -> None:
        sink(event)
        if isinstance(event, Token) and self.armed.is_set():
            self.armed.clear()
            self._cancelled.wait(30)


def test_the_window_names_qwen3_5_and_keeps_a_conversation_about_a_clip_and_a_picture(
    qtbot, make_window, sample_clip: Path, checkpoint: Path, tmp_path: Path
) -> None:
    held = HeldAtFirstToken()
    window = make_window(held.engine, settings_for(checkpoint).replace("generation", max_new_tokens=200))
    wait_ready(qtbot, window)
    assert window.chat.title.text() == "tiny · Qwen3.5"
    assert window.status_bar.engine_label.text().startswith("tiny · Qwen3.5 · cpu · float32")

    open_and_wait(qtbot, window, sample_clip)
    window.clip_files.add(str(red_square_picture(tmp_path)))
    wait_items(qtbot, window, 1)
    ask_and_wait(qtbot, window, "What is red?")
    ask_and_wait(qtbot, window, "And what moves?")

    window.chat.question_edit.setPlainText("Describe every frame.")
    held.armed.set()
    window.chat.submit()
    qtbot.waitUntil(lambda: window.session.conversation.turns[-1].status == "streaming", timeout=LOAD_TIMEOUT_MS)
    qtbot.mouseClick(window.chat.stop_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: window.session.conversation.current is None, timeout=LOAD_TIMEOUT_MS)
    assert window.session.conversation.turns[-1].status == "stopped"
    qtbot.waitUntil(lambda: window.chat.send_button.isEnabled(), timeout=LOAD_TIMEOUT_MS)
    ask_and_wait(qtbot, window, "Where does it go?")
    assert [turn.status for turn in window.session.conversation.turns] == ["done", "done", "stopped", "done"]


def test_a_settings_change_mid_conversation_keeps_the_window_answering(
    qtbot, make_window, sample_clip: Path, checkpoint: Path
) -> None:
    window = make_window(real_engine, settings_for(checkpoint))
    wait_ready(qtbot, window)
    open_and_wait(qtbot, window, sample_clip)
    ask_and_wait(qtbot, window, "What moves?")
    assert window.session.apply_settings(settings_for(checkpoint).replace("generation", max_new_tokens=3))
    qtbot.waitUntil(lambda: window.session.operation is None, timeout=LOAD_TIMEOUT_MS)
    ask_and_wait(qtbot, window, "Where does it go?")
    turns = window.session.conversation.turns
    assert [turn.status for turn in turns] == ["done", "done"] and 0 < turns[-1].stats.new_tokens <= 3
