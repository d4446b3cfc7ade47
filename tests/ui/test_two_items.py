"""Several items in one conversation in the window (fake engine): File ▸ Add to Conversation, a drop
with Ctrl, a tab per item, a closer look at a Shift-dragged span, and answers that say what they saw."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PySide6.QtCore import QMimeData, QPoint, QPointF, Qt, QUrl
from PySide6.QtGui import QDropEvent
from PySide6.QtWidgets import QApplication

from framewise.core.conversation_store import ConversationStore, default_store_path
from framewise.ui.frames import nearest_index
from framewise.ui.main_window import MainWindow
from tests.ui.test_main_window import ask_and_wait, drag_enter_event, open_and_wait, wait_ready
from tests.ui import probes

TIMEOUT_MS = 10_000


def ctrl_drop(target, path: Path) -> None:
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(path))])
    center = target.rect().center()
    QApplication.sendEvent(target, drag_enter_event(center, mime))
    drop = QDropEvent(QPointF(center), Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.ControlModifier)
    QApplication.sendEvent(target, drop)


def wait_items(qtbot, window: MainWindow, count: int) -> None:
    qtbot.waitUntil(lambda: len(window.session.added) == count and window.session.operation is None, timeout=TIMEOUT_MS)


def window_with_two_clips(qtbot, make_window, sample_clip: Path, folder: Path) -> MainWindow:
    """A ready window with ``sample_clip`` open and a copy of it, second.mp4, added."""
    window = make_window()
    wait_ready(qtbot, window)
    open_and_wait(qtbot, window, sample_clip)
    second = folder / "second.mp4"
    second.write_bytes(sample_clip.read_bytes())
    window.clip_files.add(str(second))
    wait_items(qtbot, window, 1)
    return window


def test_a_ctrl_drop_adds_a_second_clip_beside_the_first(qtbot, make_window, sample_clip: Path, tmp_path: Path) -> None:
    window = make_window()
    wait_ready(qtbot, window)
    open_and_wait(qtbot, window, sample_clip)
    ask_and_wait(qtbot, window, "What moves?")
    second = tmp_path / "second.mp4"
    second.write_bytes(sample_clip.read_bytes())

    ctrl_drop(window.clip_section.preview.view, second)
    wait_items(qtbot, window, 1)
    assert window.session.clip is not None and window.session.clip.clip_name == sample_clip.name, "the opened clip stays"
    assert window.clip_section.tabs.count() == 2 and window.clip_section.tabs.tabText(1) == "second.mp4"
    assert window.clip_section.tabs.tabBar().isVisible()
    assert window.clip_section.title.text().startswith("second.mp4 · "), "the added clip's tab is shown, the header names it"
    window.clip_section.tabs.setCurrentIndex(0)
    assert window.clip_section.title.text().startswith(f"{sample_clip.name} · "), "the header follows the tab shown"
    window.clip_section.tabs.setCurrentIndex(1)
    assert len(window.session.conversation.turns) == 1, "the conversation goes on"
    assert "Added the clip second.mp4" in window.chat.cards()[-1].text()

    ask_and_wait(qtbot, window, "Which clip is brighter?")
    assert window.session.conversation.turns[-1].saw == (sample_clip.name, "second.mp4")
    assert f"Saw {sample_clip.name} + second.mp4" in window.chat.answer_cards()[-1].footer.text()
    assert window.session.conversation.turns[0].saw == (), "the first answer saw the one clip"

    open_and_wait(qtbot, window, sample_clip)
    qtbot.waitUntil(lambda: window.clip_section.tabs.count() == 1, timeout=TIMEOUT_MS)
    assert not window.clip_section.tabs.tabBar().isVisible() and window.session.added == []


def test_a_shift_dragged_span_is_looked_at_closer(qtbot, make_window, sample_clip: Path) -> None:
    window = make_window()
    wait_ready(qtbot, window)
    open_and_wait(qtbot, window, sample_clip)
    timeline = window.clip_section.preview.timeline
    assert not window.clip_section.preview.look_closer_button.isEnabled(), "nothing selected yet"
    left, right = QPoint(round(timeline.x_of(1.0)), 5), QPoint(round(timeline.x_of(2.0)), 5)
    qtbot.mousePress(timeline, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.ShiftModifier, left)
    qtbot.mouseMove(timeline, right)
    qtbot.mouseRelease(timeline, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.ShiftModifier, right)
    span = timeline.selected_span
    assert span is not None and abs(span[0] - 1.0) < 0.1 and abs(span[1] - 2.0) < 0.1
    assert window.clip_section.preview.look_closer_button.isEnabled()

    qtbot.mouseClick(window.clip_section.preview.look_closer_button, Qt.MouseButton.LeftButton)
    wait_items(qtbot, window, 1)
    _, done = window.session.added[0]
    assert done.span == span
    notice = window.chat.cards()[-1].text()
    assert notice.startswith("Looking closer at 0:01") and "the answers from here on see this span" in notice
    assert window.clip_section.tabs.tabText(1).startswith(sample_clip.name) and window.clip_section.tabs.tabText(1).endswith(" s")


def test_after_a_restart_an_answer_still_says_which_items_it_saw(qtbot, make_window, sample_clip: Path, tmp_path: Path) -> None:
    first = window_with_two_clips(qtbot, make_window, sample_clip, tmp_path)
    ask_and_wait(qtbot, first, "Which clip is brighter?")
    first.shutdown()

    window = make_window()
    wait_ready(qtbot, window)
    window.history_dock.open_kept(window.history_dock.history.ids()[0])
    assert window.session.conversation.turns[0].saw == (sample_clip.name, "second.mp4")
    assert f"Saw {sample_clip.name} + second.mp4" in window.chat.answer_cards()[0].footer.text()


def test_settings_that_resample_keep_every_item_in_its_tab(qtbot, make_window, sample_clip: Path, tmp_path: Path) -> None:
    window = window_with_two_clips(qtbot, make_window, sample_clip, tmp_path)
    assert window.session.look_closer(1.0, 2.0)
    wait_items(qtbot, window, 2)
    names = [done.clip_name for _, done in window.session.added]
    frames_before = len(window.session.added[0][0].timestamps)

    window.settings_flow.apply(window.session.settings.replace("sampling", fps=1.0))
    qtbot.waitUntil(lambda: window.session.operation is None and window.session.settings.sampling.fps == 1.0, timeout=TIMEOUT_MS)
    assert [done.clip_name for _, done in window.session.added] == names
    assert [window.clip_section.tabs.tabText(index) for index in range(3)] == [sample_clip.name, *names]
    assert window.session.clip.clip_name == sample_clip.name and window.session.added[1][1].span == (1.0, 2.0)
    added_frames = len(window.session.added[0][0].timestamps)
    assert added_frames == len(window.session.clip.timestamps) != frames_before, "the added clip is sampled under the new settings"
    ask_and_wait(qtbot, window, "Which clip is brighter?")
    assert window.session.conversation.turns[-1].saw == (sample_clip.name, *names)


def test_a_time_the_answer_ties_to_a_clip_shows_that_clips_tab_there(
    qtbot, make_window, sample_clip: Path, tmp_path: Path, monkeypatch
) -> None:
    from tests.ui.fake_engine import FakeEngine
    from tests.ui.test_time_links import click_time

    answer = ("In", " the", " second", " clip", " at", " 0:02", " it", " is", " red.", " At", " 0:01", " too.")
    monkeypatch.setattr(FakeEngine, "answer_words", answer)
    window = window_with_two_clips(qtbot, make_window, sample_clip, tmp_path)
    window.clip_section.tabs.setCurrentIndex(0)
    ask_and_wait(qtbot, window, "Which clip is red when?")
    turn = window.session.conversation.turns[-1]
    assert turn.time_clips == ("second.mp4", None), "the second time names no clip and both hold it"
    card = window.chat.answer_cards()[-1]
    assert probes.time_items(card) == [1, None]

    click_time(qtbot, card, 0)
    added = window.clip_section.tabs.added_previews[0]
    assert window.clip_section.tabs.currentIndex() == 1 and added.position == pytest.approx(2.0)
    assert window.clip_section.strip.currentRow() == nearest_index(added.clip.timestamps, 2.0)
    assert window.clip_section.preview.position == pytest.approx(0.0), "the opened clip stays where it was"
    click_time(qtbot, card, 1)
    assert window.clip_section.tabs.currentIndex() == 1 and added.position == pytest.approx(1.0), "an untied time: the tab shown"

    exported = json.loads(window.session.conversation.export_text(window.session.settings, ".json"))
    assert [time["clip"] for time in exported["turns"][-1]["times"]] == ["second.mp4", None]
    window.shutdown()
    stored = ConversationStore(default_store_path()).open(window.history_dock.keeper.conversation_id)
    assert stored.conversation.turns[-1].time_clips == ("second.mp4", None)
