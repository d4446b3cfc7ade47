"""Details of the window a newcomer trips over (issue 30): the question box's hint is repainted when it
changes, the first start fits the screen with its frame, and the log opens at its newest lines."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QEvent, QObject, QRect, Qt
from PySide6.QtWidgets import QApplication, QLabel

from framewise.core.settings import AppSettings
from framewise.ui.main_window import DEFAULT_SIZE, MainWindow
from framewise.ui.worker import EngineHost
from tests.ui.fake_engine import FakeEngine
from tests.ui.test_layout import clipped_labels
from tests.ui.test_main_window import LOAD_TIMEOUT_MS, ask_and_wait, open_and_wait, wait_ready
from tests.ui import probes

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
    window.session.signals.state_changed.emit()
    QApplication.processEvents()
    assert not painted, "an unchanged hint costs no repaint"
    window.chat.question_edit.setPlaceholderText("An old hint")
    window.session.signals.state_changed.emit()
    qtbot.waitUntil(lambda: bool(painted), timeout=2000)
    assert "Open a clip first" in window.chat.question_edit.placeholderText()
    viewport.removeEventFilter(counter)


def test_the_log_opens_at_its_newest_lines(qtbot, make_window, log_file):
    """Help ▸ Show log shows the end of the log, scrolled to the left (issue 30, item 4)."""
    lines = [f"2026-01-01 12:00:{index % 60:02d} INFO line {index} " + "x" * (index % 150) for index in range(3000)]
    log_file.write_text("\n".join(lines) + "\n", encoding="utf-8")
    window = make_window()
    wait_ready(qtbot, window)
    dialog = window.show_log()
    qtbot.waitExposed(dialog)
    QApplication.processEvents()
    text = dialog.text
    bar = text.verticalScrollBar()
    assert bar.maximum() > 0 and bar.value() == bar.maximum()
    bottom = text.cursorForPosition(text.viewport().rect().bottomLeft()).block()
    assert bottom.blockNumber() >= text.blockCount() - 2, "the newest line is in view"
    assert text.horizontalScrollBar().value() == 0
    dialog.close()


class _Screen:
    """A screen whose free area is ``available``: the offscreen platform's own is 800×800."""

    def __init__(self, available: QRect) -> None:
        self._available = available

    def availableGeometry(self) -> QRect:  # noqa: N802 - the QScreen name
        return self._available


@pytest.mark.parametrize("screen_size", [(1024, 640), (1280, 800), (1920, 1080)])
def test_the_first_start_opens_maximized_at_every_screen_size(qtbot, store, services, monkeypatch, screen_size):
    """The clip and the conversation get the whole screen: at 1280×800 the default window would not fit
    with its title bar (issue 30, item 2), at 1920×1080 it stood small in the middle (issue 44, item 6)."""
    monkeypatch.setattr(MainWindow, "screen", lambda self: _Screen(QRect(0, 0, *screen_size)))
    window = MainWindow(EngineHost(FakeEngine, AppSettings()), store, services, AppSettings())
    qtbot.addWidget(window)
    try:
        assert window.windowState() & Qt.WindowState.WindowMaximized
    finally:
        window.shutdown()


def _shown_title(title: str, application: str = "Framewise") -> str:
    """The title a desktop shows: Qt appends the application's display name unless the title ends with it."""
    return title if title.endswith(application) else f"{title} — {application}"


def test_dialog_titles_name_the_product_once(qtbot, make_window):
    window = make_window()
    wait_ready(qtbot, window)
    dialogs = [window.settings_flow.open(None), window.show_log(), window.show_about()]
    for dialog in dialogs:
        assert _shown_title(dialog.windowTitle()).count("Framewise") == 1, dialog.windowTitle()
        dialog.close()


def test_the_demo_label_is_not_repeated_in_the_window_headers(qtbot, make_window):
    window = make_window()
    wait_ready(qtbot, window)
    label = window.session.info.model_label
    assert label and label in window.banners.demo_banner.text()
    for header in (window.chat.title, window.status_bar.engine_label):
        assert label not in header.text() and label in header.toolTip()


def test_a_reopened_kept_conversation_does_not_say_it_is_still_opening(qtbot, make_window, sample_clip):
    window = make_window()
    wait_ready(qtbot, window)
    open_and_wait(qtbot, window, sample_clip)
    ask_and_wait(qtbot, window, "What moves?")
    window.session.new_conversation()
    qtbot.waitUntil(lambda: not window.session.conversation.turns, timeout=LOAD_TIMEOUT_MS)
    window.history_dock.open_kept(window.history_dock.history.ids()[0])
    qtbot.waitUntil(lambda: window.session.clip is not None and not window.session.opening_clip, timeout=LOAD_TIMEOUT_MS)
    (notice,) = [card.text() for card in window.chat.cards() if card.text().startswith("Kept conversation")]
    assert sample_clip.name in notice and "opening" not in notice, notice


def test_the_about_dialog_shows_the_whole_model_name(qtbot, make_window):
    window = make_window()
    wait_ready(qtbot, window)
    about = window.show_about()
    qtbot.waitExposed(about)
    QApplication.processEvents()
    assert clipped_labels(about) == []
    model = next(label for label in about.findChildren(QLabel) if label.text() == about.versions["Model"])
    assert model.width() >= model.fontMetrics().horizontalAdvance(model.text()), "the model's name is on one line"
    assert about.width() <= about.screen().availableGeometry().width()
    about.close()


def _window_on_screen(qtbot, store, services, monkeypatch, size: tuple[int, int]) -> MainWindow:
    monkeypatch.setattr(MainWindow, "screen", lambda self: _Screen(QRect(0, 0, *size)))
    window = MainWindow(EngineHost(FakeEngine, AppSettings()), store, services, AppSettings())
    qtbot.addWidget(window)
    return window


def test_at_1024_by_640_the_clip_and_the_conversation_come_first(qtbot, store, services, monkeypatch):
    """The Encoder panel starts collapsed to its header and the list hidden; each is a click away (issue 30, item 3)."""
    window = _window_on_screen(qtbot, store, services, monkeypatch, (1024, 640))
    try:
        window.setWindowState(Qt.WindowState.WindowNoState)
        window.resize(1024, 640)
        window.show()
        qtbot.waitExposed(window)
        assert probes.is_collapsed(window.encoder_section) and not window.encoder_panel.isVisible()
        assert not window.history_dock.isVisible() and not window.history_action.isChecked()
        clip_height, encoder_height = window.left_splitter.sizes()
        assert encoder_height <= window.encoder_section.header.sizeHint().height() < clip_height
        window.encoder_section.toggle.click()
        QApplication.processEvents()
        assert window.encoder_panel.isVisible() and min(window.left_splitter.sizes()) > encoder_height * 3
        window.history_action.trigger()
        assert window.history_dock.isVisible()
    finally:
        window.shutdown()


def test_on_a_large_screen_everything_is_shown_from_the_start(qtbot, store, services, monkeypatch):
    window = _window_on_screen(qtbot, store, services, monkeypatch, (1920, 1080))
    try:
        window.setWindowState(Qt.WindowState.WindowNoState)
        window.resize(1920, 1040)  # maximized under a title bar (the offscreen screen itself is 800×800)
        window.show()
        qtbot.waitExposed(window)
        assert not probes.is_collapsed(window.encoder_section) and window.encoder_panel.isVisible()
        assert window.history_dock.isVisible()
    finally:
        window.shutdown()


def test_past_conversations_about_one_clip_are_told_apart_by_their_first_question(qtbot, make_window, sample_clip):
    window = make_window()
    wait_ready(qtbot, window)
    open_and_wait(qtbot, window, sample_clip)
    ask_and_wait(qtbot, window, "What colour is the square?")
    window.session.new_conversation()
    qtbot.waitUntil(lambda: not window.session.conversation.turns, timeout=LOAD_TIMEOUT_MS)
    ask_and_wait(qtbot, window, "Which way does it move?")
    first, second = probes.item_texts(window.history_dock.history.list)
    assert first.splitlines()[1] == "“Which way does it move?”" and second.splitlines()[1] == "“What colour is the square?”"
    assert first.splitlines()[0] == second.splitlines()[0] == sample_clip.name


def test_the_encoder_figures_keep_whole_phrases_on_a_line_at_1024_by_640(qtbot, make_window, sample_clip):
    """Shown at 1024×640 beside the list, the figures get the width of a phrase, the plot gives it up."""
    window = make_window()
    wait_ready(qtbot, window)
    open_and_wait(qtbot, window, sample_clip)
    window.setWindowState(Qt.WindowState.WindowNoState)
    window.resize(1024, 640)
    window.history_dock.show()
    window.encoder_section.set_collapsed(False)
    qtbot.waitUntil(lambda: window.width() == 1024 and window.height() == 640, timeout=3000)
    QApplication.processEvents()
    value = window.encoder_panel.timing_value
    lines = value.heightForWidth(value.width()) / value.fontMetrics().lineSpacing()
    assert lines <= 4, f"{value.text()!r} takes {lines:.1f} lines at {value.width()} px"


def sampling_field(qtbot, name: str, value: str):
    """A settings dialog filled with ``sampling.<name>`` = ``value``, and that field's widget."""
    from framewise.ui.settings_dialog import SettingsDialog

    dialog = SettingsDialog(AppSettings().replace("sampling", **{name: value}), probes.run_now)
    qtbot.addWidget(dialog)
    return dialog, probes.field(dialog, f"sampling.{name}")


def test_settings_sampling_sets_fast_mode_and_says_when_auto_turns_it_on(qtbot):
    """Settings ▸ Sampling carries ``sampling.fast_mode`` both ways, with its hint."""
    dialog, combo = sampling_field(qtbot, "fast_mode", "on")
    assert combo.currentText() == "on"
    combo.setCurrentText("off")
    assert AppSettings.from_dict(dialog.values()).sampling.fast_mode == "off"
    assert "longer than 10 minutes" in probes.hint_text(dialog, "sampling.fast_mode")


def test_settings_sampling_sets_pruning_picked_or_typed_and_refuses_a_rate_of_one_under_the_field(qtbot):
    dialog, choice = sampling_field(qtbot, "pruning", "0.75")
    assert choice.currentText() == "0.75"
    choice.setCurrentText("auto")
    assert dialog.validated_settings().sampling.pruning == "auto"
    choice.setEditText("0.6")
    assert dialog.validated_settings().sampling.pruning == "0.6"
    choice.setEditText("1")
    assert dialog.validated_settings() is None
    assert "below 1" in probes.error_text(dialog, "sampling.pruning")
    assert "auto: 0.5 for clips over 12,288 video tokens" in probes.hint_text(dialog, "sampling.pruning")


def test_the_encoder_section_settles_at_sizes_where_opening_it_widens_the_column(qtbot, store, services, monkeypatch):
    """Opening the Encoder section widens the left column to its figures' width, and a wider clip is
    taller: at a size where the open section then just misses its room, the column must settle (folded)
    rather than fold and unfold for ever."""
    window = _window_on_screen(qtbot, store, services, monkeypatch, (800, 800))
    changes: list[bool] = []
    window.encoder_section.collapsed_changed.connect(changes.append)
    try:
        window.setWindowState(Qt.WindowState.WindowNoState)
        window.show()
        qtbot.waitExposed(window)
        for height in range(700, 860, 8):
            window.resize(796, height)
            qtbot.wait(30)
            changes.clear()
            qtbot.wait(120)
            assert len(changes) <= 1, f"at 796×{height} the section folded and unfolded {len(changes)} times"
    finally:
        window.shutdown()
