"""The window fits 1024×640: nothing forces it larger, and no label is cut where it should not be."""

from __future__ import annotations

import pytest
from PySide6.QtWidgets import QApplication, QLabel

from framewise.ui.elided_label import ElidedLabel
from framewise.ui.settings_dialog import SECTION_TITLES
from tests.ui.test_main_window import ask_and_wait, open_and_wait, wait_ready
from tests.ui import probes


def clipped_labels(window) -> list[str]:
    """Visible labels too small for their text: narrower than it, or (wrapping ones) lower than its lines at
    their width. Elided labels shorten on purpose."""
    cut = []
    for label in window.findChildren(QLabel):
        if not label.isVisible() or isinstance(label, ElidedLabel) or not label.text():
            continue
        if label.wordWrap():
            if label.height() + 1 < label.heightForWidth(label.width()):
                cut.append(f"{label.text()!r}: {label.height()} px high < {label.heightForWidth(label.width())}")
        elif label.width() + 1 < label.minimumSizeHint().width():
            cut.append(f"{label.text()!r}: {label.width()} < {label.minimumSizeHint().width()}")
    return cut


def test_the_window_fits_1024_by_640_without_clipping_a_label(qtbot, make_window, sample_clip):
    window = make_window()
    wait_ready(qtbot, window)
    open_and_wait(qtbot, window, sample_clip)
    ask_and_wait(qtbot, window, "What color is the square?")
    window.resize(1024, 640)
    qtbot.waitUntil(lambda: window.width() == 1024 and window.height() == 640, timeout=3000)
    hint = window.minimumSizeHint()
    assert hint.width() <= 1024 and hint.height() <= 640, f"the layout needs {hint.width()}×{hint.height()}"
    assert clipped_labels(window) == []
    assert not window.encoder_panel.figures_scroll.horizontalScrollBar().isVisible()
    # Long texts are shortened with the whole text in the tooltip, not cut mid-value.
    for label in (window.clip_section.title, window.status_bar.engine_label, window.status_bar.message):
        assert label.toolTip(), label.text()
    assert probes.is_elided(window.status_bar.engine_label) or window.status_bar.engine_label.width() >= window.status_bar.engine_label.sizeHint().width() - 4


def test_every_settings_page_fits_its_dialog_at_1024_by_640(qtbot, make_window):
    window = make_window()
    wait_ready(qtbot, window)
    window.resize(1024, 640)
    dialog = window.settings_flow.open(None)
    hint = dialog.minimumSizeHint()
    assert hint.width() <= 1024 and hint.height() <= 640, f"the dialog needs {hint.width()}×{hint.height()}"
    dialog.reject()


@pytest.mark.parametrize("section", list(SECTION_TITLES))
def test_each_settings_page_fits_its_dialog_without_a_horizontal_scrollbar(qtbot, make_window, section):
    window = make_window()
    wait_ready(qtbot, window)
    window.resize(1024, 640)
    dialog = window.settings_flow.open(section)
    qtbot.waitUntil(dialog.isVisible, timeout=3000)
    scroll = dialog.tabs.currentWidget()
    assert dialog.tabs.tabText(dialog.tabs.currentIndex()) == SECTION_TITLES[section]
    QApplication.processEvents()  # let the page lay out at the dialog's width
    page = scroll.widget()
    assert page.minimumSizeHint().width() <= scroll.viewport().width(), (
        f"the page needs {page.minimumSizeHint().width()} px, the dialog gives it {scroll.viewport().width()}"
    )
    assert not scroll.horizontalScrollBar().isVisible()
    assert clipped_labels(dialog) == []
    dialog.reject()


def test_the_window_opens_within_its_screen(qtbot, make_window):
    """The default size (or geometry saved on a larger screen) shrinks to a smaller screen's free area."""
    window = make_window()
    available, hint = window.screen().availableGeometry(), window.minimumSizeHint()
    assert window.width() <= max(available.width(), hint.width())
    assert window.height() <= max(available.height(), hint.height())
