"""Details of the window a newcomer trips over (issue 30): the question box's hint is repainted when it
changes, the first start fits the screen with its frame, and the log opens at its newest lines."""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject
from PySide6.QtWidgets import QApplication

from tests.ui.test_main_window import wait_ready

def test_the_question_hint_is_repainted_when_it_changes(qtbot, make_window, sample_clip):
    """The hint's new text reaches the screen, not only the widget (issue 30, item 1)."""
    window = make_window()
    wait_ready(qtbot, window)
    viewport = window.chat.question_edit.viewport()
    qtbot.waitExposed(window)
    painted: list[int] = []

    class PaintCounter(QObject):
        def eventFilter(self, watched, event):  # noqa: N802 - Qt override
            if event.type() == QEvent.Type.Paint:
                painted.append(1)
            return False

    counter = PaintCounter()
    viewport.installEventFilter(counter)
    QApplication.processEvents()
    painted.clear()
    window.state_changed()
    QApplication.processEvents()
    assert not painted, "an unchanged hint costs no repaint"
    window.chat.question_edit.setPlaceholderText("An old hint")
    window.state_changed()
    qtbot.waitUntil(lambda: bool(painted), timeout=2000)
    assert "Open a clip first" in window.chat.question_edit.placeholderText()
    viewport.removeEventFilter(counter)
