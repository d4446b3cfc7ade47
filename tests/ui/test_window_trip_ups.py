"""What a new user tripped over in the window (issue 44): Stop while a clip is read, items that
overflow the context, a conversation deleted in another window, a settings file that is not valid,
the layout at 1024×640, 1280×800 and 1920×1080, times in one's own question, and small wording."""

from __future__ import annotations

import shutil
import threading

import numpy as np
import pytest
from PySide6.QtCore import QRect, Qt
from PySide6.QtWidgets import QApplication, QWidget

from framewise.core.conversation_store import ConversationStore, default_store_path
from framewise.core.errors import QuestionTooLongError
from framewise.core.settings import FEWER_ITEMS_ADVICE, AppSettings, context_needed
from framewise.core.video.bounded import ReadProgress
from framewise.core.video.read_report import decode_progress
from framewise.core.video.thumbnails import frames_read
from framewise.ui.clip_tabs import ClipTabs
from framewise.ui.frames import ClipPreview
from framewise.ui.main_window import MainWindow
from framewise.ui.settings_dialog import SettingsDialog
from framewise.ui.worker import EngineHost
from tests.ui import probes
from tests.ui.fake_engine import DEMO_LIMITS, FakeEngine
from tests.ui.test_end_to_end import FAST, real_engine
from tests.ui.test_main_window import LOAD_TIMEOUT_MS, ask_and_wait, open_and_wait, wait_ready
from tests.ui.test_window_details import _Screen


def add_and_wait(qtbot, window: MainWindow, path) -> None:
    """Add ``path`` to the conversation and wait until it is in it."""
    count = len(window.session.added)
    assert window.session.add_clip(str(path))
    qtbot.waitUntil(lambda: len(window.session.added) == count + 1 and window.session.operation is None, timeout=LOAD_TIMEOUT_MS)


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


def test_an_item_the_context_cannot_hold_is_refused_as_it_is_added_with_advice_that_helps(qtbot, make_window, sample_clip):
    """On the demo model, at the smallest context the sampling settings accept: a second clip is refused
    when it is added, the banner says what helps, and the conversation goes on about the first (item 3)."""
    settings = FAST.replace("sampling", max_pixels=4 * 320 * 240)
    needed = context_needed(settings.sampling, settings.generation, limits=DEMO_LIMITS).total
    window = make_window(real_engine, settings.replace("decoding", max_context_tokens=needed, min_bucket=64))
    wait_ready(qtbot, window)
    open_and_wait(qtbot, window, sample_clip)
    assert window.session.add_clip(str(sample_clip))
    qtbot.waitUntil(lambda: window.banners.current() is window.banners.error_banner, timeout=LOAD_TIMEOUT_MS)
    text = window.banners.error_banner.text()
    assert text.startswith("Could not add it to the conversation: With ") and text.endswith(FEWER_ITEMS_ADVICE)
    assert window.banners.error_banner.action_button.isVisible(), "Settings… is offered: the advice is there"
    assert window.session.added == [] and window.clip_section.tabs.count() == 1
    ask_and_wait(qtbot, window, "What color is the square?")
    assert window.session.conversation.turns[-1].status == "done"


def test_a_failed_answer_does_not_say_it_saw_the_items(qtbot, make_window, sample_clip):
    FakeEngine.fail_ask_with = QuestionTooLongError(f"This question is 6 tokens, … more than its 2,048. {FEWER_ITEMS_ADVICE}")
    window = make_window()
    wait_ready(qtbot, window)
    open_and_wait(qtbot, window, sample_clip)
    add_and_wait(qtbot, window, sample_clip)
    ask_and_wait(qtbot, window, "What color is the square?")
    card = window.chat.answer_cards()[-1]
    assert card.text().endswith(FEWER_ITEMS_ADVICE) and "Saw" not in card.footer.text()


def test_settings_generation_sets_the_context_the_advice_names(qtbot):
    """"Raise the context (Generation ▸ Max context)": the field is there, 0 reads Automatic (item 3)."""
    dialog = SettingsDialog(AppSettings().replace("decoding", max_context_tokens=8192), probes.run_now)
    qtbot.addWidget(dialog)
    field = probes.field(dialog, "decoding.max_context_tokens")
    assert field.value() == 8192
    field.setValue(0)
    assert field.text() == "Automatic" and AppSettings.from_dict(dialog.values()).decoding.max_context_tokens == 0
    assert "Max context" in FEWER_ITEMS_ADVICE and "Generation" in FEWER_ITEMS_ADVICE


def test_a_conversation_deleted_in_another_window_keeps_its_follow_up_and_says_so(qtbot, make_window, sample_clip):
    """Another window (another store on the same file) deletes the conversation on screen: the follow-up is
    kept, with the questions before it, as a new entry, and the conversation says what happened (item 4)."""
    window = make_window()
    wait_ready(qtbot, window)
    open_and_wait(qtbot, window, sample_clip)
    ask_and_wait(qtbot, window, "What moves?")
    other_window = ConversationStore(default_store_path())
    other_window.delete(window.history_dock.keeper.conversation_id)
    assert other_window.list() == []
    ask_and_wait(qtbot, window, "And then?")
    assert window.banners.current() is not window.banners.error_banner, "nothing failed"
    assert any("deleted from the kept ones (in another window)" in card.text() for card in window.chat.cards())
    (kept,) = other_window.list()
    turns = other_window.open(kept.id).conversation.turns
    assert [(turn.question, turn.status) for turn in turns] == [("What moves?", "done"), ("And then?", "done")]
    assert turns[0].answer == "The red square moves to the right."
    assert window.history_dock.history.ids() == [kept.id] == [window.history_dock.keeper.conversation_id]


def test_a_settings_file_that_is_not_valid_is_said_by_field_and_kept_beside(qtbot, make_window, store, tmp_path):
    """Saved settings rejected as they are read: a banner names the field and where the file is kept, and
    stays after the model loads, until settings are applied (item 5)."""
    store.save_settings(AppSettings().replace("sampling", max_frames=3))
    saved = (tmp_path / "framewise.ini").read_text(encoding="utf-8")
    window = make_window()
    wait_ready(qtbot, window)
    banner = window.banners.fallback_banner
    assert banner in window.banners.raised(), "still said once the model has loaded"
    kept = tmp_path / "framewise.ini.invalid"
    assert "sampling.max_frames is invalid" in banner.text() and str(kept) in banner.text()
    assert kept.read_text(encoding="utf-8") == saved and window.session.settings == AppSettings()
    window.settings_flow.apply(AppSettings().replace("sampling", max_frames=8))
    qtbot.waitUntil(lambda: banner not in window.banners.raised(), timeout=LOAD_TIMEOUT_MS)
    assert store.load_settings().sampling.max_frames == 8 and kept.read_text(encoding="utf-8") == saved


def test_rejected_settings_not_in_a_file_are_kept_in_the_data_folder(store, monkeypatch, _conversations_in_tmp):
    """Where the native store is no file (the Windows registry), the rejected JSON goes to the data folder."""
    monkeypatch.setattr(type(store), "location", property(lambda self: "\\\\HKEY_CURRENT_USER\\Software\\Framewise"))
    kept = store.keep_rejected('{"sampling": {"max_frames": 3}}')
    assert kept == _conversations_in_tmp / "settings.invalid.json"
    assert kept.read_text(encoding="utf-8") == '{"sampling": {"max_frames": 3}}'


def test_a_time_in_ones_own_question_goes_to_the_clip_it_names(qtbot, make_window, sample_clip):
    """"In the second clip at 0:02": the question's link shows the second tab, as an answer's would (item 7)."""
    window = make_window()
    wait_ready(qtbot, window)
    open_and_wait(qtbot, window, sample_clip)
    add_and_wait(qtbot, window, sample_clip)
    ask_and_wait(qtbot, window, "In the second clip at 0:02, where is the square? And at 0:01 in the first clip?")
    (question,) = [card for card in window.chat.cards() if card.role == "question"]
    assert probes.time_items(question) == [1, 0]
    tabs = window.clip_section.tabs
    tabs.setCurrentIndex(0)
    question.click_time(0)
    assert tabs.currentIndex() == 1 and abs(tabs.current_preview().position - 2.0) < 0.05
    question.click_time(1)
    assert tabs.currentIndex() == 0 and abs(tabs.current_preview().position - 1.0) < 0.05


def test_a_time_typed_for_the_second_clip_is_outlined_on_its_timeline(qtbot, make_window, sample_clip):
    window = make_window()
    wait_ready(qtbot, window)
    open_and_wait(qtbot, window, sample_clip)
    add_and_wait(qtbot, window, sample_clip)
    window.chat.question_edit.setPlainText("What happens in the second clip at 0:02?")
    first, second = window.clip_section.tabs.main, window.clip_section.tabs.added_previews[0]
    assert probes.marks_question_time(second.timeline, 2.0) and not probes.marks_question_time(first.timeline, 2.0)


@pytest.mark.parametrize("screen", [(1024, 640), (1280, 800), (1920, 1080)])
def test_the_clip_comes_first_and_the_encoder_figures_stay_whole_in_the_room_left(
    qtbot, store, services, monkeypatch, sample_clip, screen
):
    """At each size, maximized under a title bar: the preview shows a 16:9 frame the column's width
    across; the Encoder panel takes what is left where its figures fit whole (no scrollbar), and folds
    to its header line, which gives the live figures, where they would not (item 6)."""
    monkeypatch.setattr(MainWindow, "screen", lambda self: _Screen(QRect(0, 0, *screen)))
    window = MainWindow(EngineHost(FakeEngine, AppSettings()), store, services, AppSettings())
    qtbot.addWidget(window)
    try:
        window.setWindowState(Qt.WindowState.WindowNoState)
        window.resize(screen[0], screen[1] - 40)  # what a maximized window gets under a title bar
        window.show()
        window.start()
        wait_ready(qtbot, window)
        open_and_wait(qtbot, window, sample_clip)
        ask_and_wait(qtbot, window, "What color is the square?")
        QApplication.processEvents()
        view = window.clip_section.preview.view
        assert view.height() >= view.width() * 9 // 16 - 1, f"the preview is {view.width()}×{view.height()}"
        panel, title = window.encoder_panel, window.encoder_panel.title.text()
        if window.encoder_section.is_collapsed:
            assert title.startswith(f"{window.session.metrics.ms_per_frame_p50:.1f} ms per frame · first token")
        else:
            assert not panel.figures_scroll.verticalScrollBar().isVisible() and panel.plot.height() > 100
        assert window.encoder_section.is_collapsed is (screen != (1920, 1080))
    finally:
        window.shutdown()


class _ReadingEngine(FakeEngine):
    """Reports two frames of a clip read before reading it (held there while ``read_gate`` is set)."""

    def _read(self, path, reason, call, span=None):
        import numpy as np

        frame = np.full((24, 32, 3), 200, np.uint8)
        self._emit(frames_read(path.name, 4, [(0, frame, 0.25), (1, frame, 100.0)]))
        return super()._read(path, reason, call, span)


def test_one_clip_on_screen_while_another_is_read_and_after_its_read_is_stopped(qtbot, make_window, sample_clip, tmp_path):
    """Open a clip, then another, and stop its read: the strip, the preview, the titles and the
    conversation are the open clip's throughout, and its frames can still be picked (item 2)."""
    other = tmp_path / "long_talk.mp4"
    shutil.copy(sample_clip, other)
    window = make_window(_ReadingEngine)
    wait_ready(qtbot, window)
    open_and_wait(qtbot, window, sample_clip)
    ask_and_wait(qtbot, window, "What moves?")
    section, strip = window.clip_section, window.clip_section.strip
    captions = probes.item_texts(strip)

    def only_the_open_clip() -> None:
        assert probes.item_texts(strip) == captions and "1:40.0" not in probes.item_texts(strip)
        assert section.preview.clip.path == str(sample_clip) and section.title.text().startswith(sample_clip.name)
        assert window.windowTitle().startswith(sample_clip.name)
        assert [card.text() for card in window.chat.answer_cards()] == ["The red square moves to the right."]

    FakeEngine.read_gate = threading.Event()
    window.session.open_clip(str(other))
    qtbot.waitUntil(lambda: window.session.operation == "open_clip", timeout=LOAD_TIMEOUT_MS)
    qtbot.wait(100)  # the frames read so far reach the window
    only_the_open_clip()
    window.stop_action.trigger()
    qtbot.waitUntil(lambda: window.session.operation is None and not window.session.opening_clip, timeout=2000)
    only_the_open_clip()
    strip.setCurrentRow(2)
    assert section.preview.position == window.session.clip.timestamps[2], "a frame picked seeks the preview"

    FakeEngine.read_gate = None
    window.session.open_clip(str(other))
    qtbot.waitUntil(lambda: window.session.clip.path == str(other) and window.session.operation is None, timeout=LOAD_TIMEOUT_MS)
    assert section.title.text().startswith(other.name) and window.windowTitle().startswith(other.name)
    assert section.preview.clip.path == str(other) and window.chat.answer_cards() == []


def test_at_1024_the_status_line_shows_a_reading_progress_to_its_time_left(qtbot, make_window):
    """The reading progress of a clip with a longish name, with the progress bar and the engine's line
    beside it, is not cut before "about 12 s left" (item 8)."""
    window = make_window()
    wait_ready(qtbot, window)
    window.setWindowState(Qt.WindowState.WindowNoState)
    window.resize(1024, 640)
    qtbot.waitUntil(lambda: window.width() == 1024, timeout=3000)
    progress = decode_progress("lecture_recording.mp4", ReadProgress("decode", 894.0, 1800.0), (298, 768), 12.0)
    window.status_bar.show_progress(progress.current, progress.total)
    window.status_bar.say(progress.message)
    qtbot.wait(50)
    assert progress.message.endswith("s left") and not probes.is_elided(window.status_bar.message)


def test_small_things_said_right(qtbot, make_window, sample_clip):
    """Focus goes to the question box when a clip opens; the window's title names the clip of the tab
    shown; a note that a time is past the clip's end goes at the next seek (item 8)."""
    window = make_window()
    wait_ready(qtbot, window)
    window.activateWindow()
    window.clip_section.strip.setFocus()
    open_and_wait(qtbot, window, sample_clip)
    assert QApplication.focusWidget() is window.chat.question_edit
    ask_and_wait(qtbot, window, "What moves?")

    window.clip_section.show_moment(600.0, None)
    assert "10:00.0 is past the clip's end" in window.status_bar.message.text()
    window.clip_section.strip.setCurrentRow(1)
    assert window.status_bar.message.text() == "Answered.", "the note went at the next seek; the line is back"

    add_and_wait(qtbot, window, sample_clip)  # the same file again, as a second item
    window.clip_section.tabs.setCurrentIndex(1)
    assert window.windowTitle().startswith(window.session.added[0][1].clip_name)


def test_tabs_not_shown_keep_the_underscores_of_their_names(qtbot):
    """Fusion draws the tabs not shown a little lower: their names lost their underscores (item 8)."""
    tabs = ClipTabs(ClipPreview())
    qtbot.addWidget(tabs)
    tabs.set_main_title("cat_dance.mov")  # no letter below the line: only the underscore is
    tabs.addTab(QWidget(), "cat_dance.mov")
    tabs.resize(500, 200)
    tabs.show()
    qtbot.waitExposed(tabs)
    bar = tabs.tabBar()
    image = bar.grab().toImage()

    def ink_rows(index: int) -> int:
        rect = bar.tabRect(index).adjusted(10, 0, -10, 0)
        rows = [
            y for y in range(rect.top(), rect.bottom() + 1)
            if any(image.pixelColor(x, y).lightness() < 60 for x in range(rect.left(), rect.right()))
        ]
        return rows[-1] - rows[0]

    assert bar.currentIndex() == 0 and ink_rows(1) == ink_rows(0)
