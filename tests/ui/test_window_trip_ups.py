"""What a new user tripped over in the window (issue 44): Stop while a clip is read, items that
overflow the context, a conversation deleted in another window, a settings file that is not valid,
the layout at 1024×640, 1280×800 and 1920×1080, times in one's own question, and small wording."""

from __future__ import annotations

import threading

from PySide6.QtCore import Qt

from tests.ui.fake_engine import FakeEngine
from tests.ui.test_main_window import LOAD_TIMEOUT_MS, wait_ready


def test_stop_ends_a_clip_being_read_and_the_window_says_it_does(qtbot, make_window, sample_clip):
    """Reading a long clip: Stop can be clicked, says what it stops, and ends the read (item 1)."""
    FakeEngine.read_gate = threading.Event()  # the read goes on until cancelled
    window = make_window()
    wait_ready(qtbot, window)
    window.session.open_clip(str(sample_clip))
    qtbot.waitUntil(lambda: window.session.operation == "open_clip", timeout=LOAD_TIMEOUT_MS)
    stop = window.chat.stop_button
    assert stop.isEnabled() and stop.toolTip() == "Stop reading the clip (Esc)"
    assert "press Stop (Esc) to stop reading the clip" in window.chat.question_edit.placeholderText()
    qtbot.mouseClick(stop, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: window.session.operation is None and not window.session.opening_clip, timeout=2000)
    assert window.session.clip is None and window.status_bar.message.text() == "Cancelled."
    assert not stop.isEnabled() and not window.stop_action.isEnabled()
