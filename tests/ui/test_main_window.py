"""The window on a fake engine (same API as core.backends.local.engine.Engine): fast checks of every interaction."""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from pathlib import Path

import pytest
import PySide6
from PySide6.QtCore import QMimeData, QPoint, QPointF, Qt, QUrl
from PySide6.QtGui import QDragEnterEvent, QDropEvent, QGuiApplication
from PySide6.QtWidgets import QApplication, QDialogButtonBox

from framewise.core.events import AnswerSpeed, ClipSampled, EngineInfo
from framewise.core.settings import AppSettings
from tests.core.families.test_toy_family import TOY_LIMITS
from tests.ui.fake_engine import DEMO_LABEL, FakeEngine
from framewise.ui.frames import format_timestamp
from framewise.ui.main_window import MainWindow
from framewise.ui.settings_store import SettingsStore
from tests.ui import probes

LOAD_TIMEOUT_MS = 10_000


def drop_file(target, path: Path) -> None:
    """Drag ``path`` over ``target`` (any widget of the window) and drop it, as a file manager would."""
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(path))])
    center = target.rect().center()
    enter = drag_enter_event(center, mime)
    QApplication.sendEvent(target, enter)
    assert enter.isAccepted(), "the window refused the dragged file"
    drop = QDropEvent(QPointF(center), Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(target, drop)


def drag_enter_event(center: QPoint, mime: QMimeData) -> QDragEnterEvent:
    """A drag entering at ``center``: PySide6 6.12 builds one from a QPointF (the QPoint form is deprecated
    there), older releases from a QPoint only."""
    position = QPointF(center) if PySide6.__version_info__ >= (6, 12) else center
    return QDragEnterEvent(position, Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier)


def activate(qtbot, window: MainWindow) -> None:
    """Make ``window`` the active window, as window-wide shortcuts need."""
    window.activateWindow()
    qtbot.waitUntil(lambda: QApplication.activeWindow() is window)


def wait_ready(qtbot, window: MainWindow) -> None:
    qtbot.waitUntil(lambda: window.session.info is not None and window.session.operation is None, timeout=LOAD_TIMEOUT_MS)


def open_and_wait(qtbot, window: MainWindow, path: Path) -> None:
    drop_file(window.clip_section.preview.view, path)
    qtbot.waitUntil(lambda: window.session.clip is not None and window.session.clip.path == str(path) and not window.session.opening_clip, timeout=LOAD_TIMEOUT_MS)


def ask_and_wait(qtbot, window: MainWindow, question: str) -> None:
    """Ask as a person does, once the window takes a question (the engine's events may still be
    followed a turn after what the window shows), and wait for the answer."""
    qtbot.waitUntil(lambda: window.chat.send_button.isEnabled(), timeout=LOAD_TIMEOUT_MS)
    window.chat.question_edit.setPlainText(question)
    qtbot.keyClick(window.chat.question_edit, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: bool(window.session.conversation.turns) and window.session.conversation.current is None, timeout=LOAD_TIMEOUT_MS)
    qtbot.waitUntil(lambda: window.chat.send_button.isEnabled(), timeout=LOAD_TIMEOUT_MS)


def test_dropped_clip_fills_the_strip_with_sampled_timestamps(qtbot, make_window, sample_clip):
    window = make_window()
    sampled = []
    window.host.event.connect(lambda event: sampled.append(event) if type(event).__name__ == "ClipSampled" else None)
    wait_ready(qtbot, window)
    open_and_wait(qtbot, window, sample_clip)

    timestamps = sampled[-1].timestamps
    assert len(timestamps) >= 4
    assert probes.item_texts(window.clip_section.strip) == [format_timestamp(t) for t in timestamps]
    assert probes.item_texts(window.clip_section.strip)[:2] == ["0:00.0", "0:00.5"]
    assert probes.has_ticks_at(window.clip_section.preview.timeline, timestamps)
    assert sample_clip.name in window.clip_section.title.text()
    assert window.store.recent_files()[0] == str(sample_clip.resolve())


def test_preview_plays_seeks_and_follows_the_strip(qtbot, make_window, sample_clip):
    window = make_window()
    preview = window.clip_section.preview
    opened: list[float] = []  # the clip's file opened for playing
    preview.player.opened.connect(opened.append)
    shown_frames: list[int] = []  # the last sampled frame at or before the time shown, each time it changes
    preview.frame_changed.connect(shown_frames.append)
    wait_ready(qtbot, window)
    open_and_wait(qtbot, window, sample_clip)

    qtbot.waitUntil(lambda: bool(opened), timeout=5000)
    timestamps = window.session.clip.timestamps
    window.clip_section.strip.setCurrentRow(3)
    assert shown_frames[-1] == 3 and window.clip_section.preview.position == timestamps[3]
    window.clip_section.preview.seek(1)
    assert window.clip_section.strip.currentRow() == 1
    decoded = []
    window.clip_section.preview.player.frame_ready.connect(lambda time_s, image: decoded.append((time_s, image.shape)))
    window.clip_section.preview.play()
    assert window.clip_section.preview.is_playing
    qtbot.waitUntil(lambda: shown_frames[-1] >= 2 and len(decoded) >= 4, timeout=5000)
    times = [time_s for time_s, _ in decoded][-4:]  # (the first may be the frame shown for the earlier seek)
    assert times == sorted(set(times))
    assert any(min(abs(time_s - mark) for mark in timestamps) > 0.02 for time_s in times), "frames between the sampled ones"
    assert decoded[-1][1] == (240, 320, 3) and window.clip_section.preview.view.image.width() == 320
    window.clip_section.preview.pause()
    assert not window.clip_section.preview.is_playing
    window.clip_section.preview.timeline.setFocus()
    before = window.clip_section.preview.position
    qtbot.keyClick(window.clip_section.preview.timeline, Qt.Key.Key_Home)
    assert window.clip_section.preview.position == 0.0 and before > 0.0


def test_answer_streams_then_metrics_update(qtbot, make_window, sample_clip):
    window = make_window()
    events = []
    window.host.event.connect(lambda event: events.append(type(event).__name__))
    wait_ready(qtbot, window)
    open_and_wait(qtbot, window, sample_clip)
    assert len(probes.plotted(window.encoder_panel.plot)) >= 2
    assert window.encoder_panel.chunk_table.rowCount() == len(probes.plotted(window.encoder_panel.plot))

    ask_and_wait(qtbot, window, "Where does the square go?")

    assert "Token" in events and "Done" in events
    assert events.index("Token") < events.index("Done")
    turn = window.session.conversation.turns[-1]
    assert turn.status == "done"
    assert turn.answer == "The red square moves to the right."
    card = window.chat.answer_cards()[-1]
    assert card.text() == turn.answer
    assert DEMO_LABEL not in card.header.text() and DEMO_LABEL in card.header.toolTip()
    assert card.header.text().endswith("· Demo model"), "a short demo tag on every answer, the label once"
    assert "tokens/s" in card.footer.text()
    assert "(2 eager passes)" in window.encoder_panel.hits_value.text()
    assert window.encoder_panel.first_token_value.text() == "12 ms"
    assert "tokens/s" in window.encoder_panel.speed_value.text()


def test_the_answers_speed_shows_while_it_streams_and_the_final_figure_replaces_it(qtbot, make_window, sample_clip):
    FakeEngine.token_delay_s = 0.1  # eight tokens over about 0.8 s: a few reports of the speed so far
    window = make_window()
    speeds = []
    window.host.event.connect(lambda event: speeds.append(event) if isinstance(event, AnswerSpeed) else None)
    wait_ready(qtbot, window)
    open_and_wait(qtbot, window, sample_clip)
    panel = window.encoder_panel

    for question in ("Where does the square go?", "And then?"):
        window.chat.question_edit.setPlainText(question)
        window.chat.submit()
        card = window.chat.answer_cards()[-1]
        assert panel.speed_value.text() == "–", "a new question clears the last answer's speed"
        qtbot.waitUntil(lambda: "so far" in panel.speed_value.text(), timeout=LOAD_TIMEOUT_MS)
        turn = window.session.conversation.current
        assert turn is not None, "shown while the answer streams"
        qtbot.waitUntil(lambda: card.text() == turn.answer, timeout=LOAD_TIMEOUT_MS)  # the streamed text shown too
        live = speeds[-1]
        live_text = f"{live.tokens_per_second_so_far:.1f} tokens/s so far ({live.tokens_so_far} tokens)"
        assert 2 <= live.tokens_so_far < 8 and panel.speed_value.text() == live_text
        assert card.footer.text() == live_text, "under the answer being written"

        qtbot.waitUntil(lambda: window.session.conversation.current is None, timeout=LOAD_TIMEOUT_MS)
        assert panel.speed_value.text() == "150.0 tokens/s (8 tokens)", "the final figure replaces it"
        assert "150.0 tokens/s" in card.footer.text() and "so far" not in card.footer.text()
        qtbot.waitUntil(lambda: window.chat.send_button.isEnabled(), timeout=LOAD_TIMEOUT_MS)


def test_follow_up_questions_keep_the_conversation(qtbot, make_window, sample_clip):
    engines: list[FakeEngine] = []

    def factory(settings, sink):
        engines.append(FakeEngine(settings, sink))
        return engines[-1]

    window = make_window(factory)
    wait_ready(qtbot, window)
    open_and_wait(qtbot, window, sample_clip)
    ask_and_wait(qtbot, window, "What moves?")
    ask_and_wait(qtbot, window, "And then?")

    assert [turn.question for turn in window.session.conversation.turns] == ["What moves?", "And then?"]
    kept = [(turn.question, turn.answer) for turn in window.session.conversation.turns]
    assert engines[-1].turns == kept, "the window shows the engine's conversation record"
    assert len(window.chat.answer_cards()) == 2


def test_ask_is_disabled_with_no_clip_and_the_input_says_why(qtbot, make_window, sample_clip):
    window = make_window()
    wait_ready(qtbot, window)
    assert not window.chat.send_button.isEnabled()
    assert "Open a clip first" in window.chat.question_edit.placeholderText()
    window.chat.question_edit.setPlainText("What color is the square?")
    qtbot.keyClick(window.chat.question_edit, Qt.Key.Key_Return)
    assert not window.session.conversation.turns, "nothing is asked without a clip"
    open_and_wait(qtbot, window, sample_clip)
    assert window.chat.send_button.isEnabled() and "Ask about the clip" in window.chat.question_edit.placeholderText()


def test_shift_enter_adds_a_line_and_enter_sends(qtbot, make_window, sample_clip):
    window = make_window()
    wait_ready(qtbot, window)
    open_and_wait(qtbot, window, sample_clip)
    edit = window.chat.question_edit
    edit.setPlainText("first line")
    edit.moveCursor(edit.textCursor().MoveOperation.End)
    qtbot.keyClick(edit, Qt.Key.Key_Return, Qt.KeyboardModifier.ShiftModifier)
    assert edit.toPlainText() == "first line\n"
    assert not window.session.conversation.turns
    qtbot.keyClick(edit, Qt.Key.Key_Return)
    assert [turn.question for turn in window.session.conversation.turns] == ["first line"]


def test_stop_ends_the_answer_within_half_a_second(qtbot, make_window, sample_clip):
    FakeEngine.token_delay_s = 0.05
    FakeEngine.endless = True
    window = make_window(settings=AppSettings().replace("generation", max_new_tokens=2000))
    wait_ready(qtbot, window)
    open_and_wait(qtbot, window, sample_clip)
    window.chat.question_edit.setPlainText("Describe every frame")
    window.chat.submit()
    qtbot.waitUntil(lambda: window.session.conversation.turns[-1].status == "streaming", timeout=LOAD_TIMEOUT_MS)

    started = time.perf_counter()
    qtbot.mouseClick(window.chat.stop_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: window.session.conversation.current is None, timeout=2000)
    elapsed = time.perf_counter() - started

    assert elapsed < 0.5
    turn = window.session.conversation.turns[-1]
    assert turn.status == "stopped" and turn.stats.cancelled
    assert "Stopped" in window.chat.answer_cards()[-1].footer.text()
    qtbot.waitUntil(lambda: window.chat.send_button.isEnabled(), timeout=2000)


def test_escape_and_ctrl_return_shortcuts(qtbot, make_window, sample_clip):
    FakeEngine.token_delay_s = 0.05
    FakeEngine.endless = True
    window = make_window(settings=AppSettings().replace("generation", max_new_tokens=2000))
    wait_ready(qtbot, window)
    open_and_wait(qtbot, window, sample_clip)
    triggered = []
    window.ask_action.triggered.connect(lambda: triggered.append("ask"))
    window.stop_action.triggered.connect(lambda: triggered.append("stop"))
    activate(qtbot, window)
    window.chat.question_edit.setFocus()
    window.chat.question_edit.setPlainText("Keep talking")
    qtbot.keyClick(window.chat.question_edit, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier)
    qtbot.waitUntil(lambda: bool(window.session.conversation.turns) and window.session.conversation.turns[-1].status == "streaming", timeout=LOAD_TIMEOUT_MS)
    qtbot.keyClick(window.chat.question_edit, Qt.Key.Key_Escape)
    qtbot.waitUntil(lambda: window.session.conversation.current is None, timeout=2000)
    assert window.session.conversation.turns[-1].status == "stopped"
    assert triggered == ["ask", "stop"]


def test_corrupt_clip_shows_an_error_and_keeps_everything(qtbot, make_window, sample_clip, corrupt_clip, tmp_path):
    window = make_window()
    wait_ready(qtbot, window)
    open_and_wait(qtbot, window, sample_clip)
    ask_and_wait(qtbot, window, "What moves?")

    drop_file(window.chat, corrupt_clip)
    qtbot.waitUntil(lambda: window.banners.error_banner.isVisible(), timeout=LOAD_TIMEOUT_MS)
    assert "corrupt.mp4" in window.banners.error_banner.text()
    assert "not a video file" in window.banners.error_banner.text()
    assert not window.banners.error_banner.action_button.isVisible(), "Settings cannot fix a file that is not a video"
    assert window.session.clip.path == str(sample_clip)
    assert sample_clip.name in window.clip_section.title.text()
    assert len(window.session.conversation.turns) == 1 and len(window.chat.answer_cards()) == 1
    assert str(corrupt_clip.resolve()) not in window.store.recent_files()

    ask_and_wait(qtbot, window, "And now?")
    assert len(window.session.conversation.turns) == 2 and window.session.conversation.turns[-1].status == "done"

    second = tmp_path / "again.mp4"
    second.write_bytes(sample_clip.read_bytes())
    open_and_wait(qtbot, window, second)
    assert not window.banners.error_banner.isVisible()
    assert window.session.conversation.clip_name == "again.mp4" and not window.session.conversation.turns


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"), "Out of memory. Lower Sampling ▸ max frames"),
        (TypeError("cat(): argument 'tensors' (position 1) must be tuple of Tensors"), "Unexpected error (TypeError) — see the log at "),
    ],
    ids=["out-of-memory", "a-bug"],
)
def test_unexpected_error_is_shown_inline_and_the_app_keeps_running(
    qtbot, make_window, sample_clip, tmp_path, monkeypatch, error, expected
):
    from framewise.core import errors

    monkeypatch.setattr(errors, "_log_file", tmp_path / "framewise.log")
    window = make_window()
    wait_ready(qtbot, window)
    open_and_wait(qtbot, window, sample_clip)
    FakeEngine.fail_ask_with = error
    ask_and_wait(qtbot, window, "What moves?")

    turn = window.session.conversation.turns[-1]
    assert turn.status == "failed" and turn.error.startswith(expected)
    card = window.chat.answer_cards()[-1].text()
    assert expected in card and "Traceback" not in card
    if isinstance(error, TypeError):
        assert turn.error.endswith(str(tmp_path / "framewise.log"))
    FakeEngine.fail_ask_with = None
    ask_and_wait(qtbot, window, "What moves now?")
    assert window.session.conversation.turns[-1].status == "done" and len(window.session.conversation.turns) == 2


def test_banners_say_cpu_eager_and_demo_model(qtbot, make_window):
    window = make_window()
    wait_ready(qtbot, window)
    assert not window.banners.cpu_banner.isVisible(), "on a CPU the Encoder panel's title says it, once"
    assert window.encoder_panel.title.text().startswith("eager on the CPU: no CUDA graphs")
    panel = window.encoder_panel
    assert not probes.row_visible(panel, "Graph hits") and not probes.row_visible(panel, "GPU memory") and probes.row_visible(panel, "Per frame")
    assert panel.chunk_table.isColumnHidden(3) and panel.chunk_table.isColumnHidden(4), "no budget or padding without graphs"
    assert window.banners.demo_banner.isVisible()
    assert "demo model" in window.banners.demo_banner.text() and "Settings ▸ Model" in window.banners.demo_banner.text()
    window.banners.demo_banner.action_button.click()
    dialog = window.settings_flow.dialog
    assert dialog.isVisible() and dialog.tabs.tabText(dialog.tabs.currentIndex()) == "Model"
    dialog.reject()


def test_raised_banners_share_one_row_shown_one_at_a_time(qtbot, make_window):
    window = make_window()
    wait_ready(qtbot, window)
    assert window.banners.demo_banner.isVisible()
    QApplication.processEvents()
    one_banner = window.banners.height()
    assert one_banner > 0
    window.show_error("Could not load the model: no weights", settings_can_help=True)
    window.banners.cpu_banner.set_text("No CUDA graphs: the GPU is too old.")
    window.banners.post(window.banners.cpu_banner)
    qtbot.waitUntil(lambda: window.banners.count_label.isVisible())
    QApplication.processEvents()  # let the layout settle before measuring
    shown = [banner for banner in window.banners.banners if banner.isVisible()]
    assert shown == [window.banners.error_banner], "the error, the most important, is the one shown"
    assert window.banners.error_banner.action_button.isVisible(), "Settings can change a model that did not load"
    assert window.banners.count_label.text() == "1 of 3"
    assert window.banners.height() <= max(one_banner, window.banners.error_banner.sizeHint().height())
    window.banners.next_button.click()
    assert [banner for banner in window.banners.banners if banner.isVisible()] == [window.banners.demo_banner]
    assert window.banners.count_label.text() == "2 of 3"
    window.banners.demo_banner.close_button.click()
    assert [banner for banner in window.banners.banners if banner.isVisible()] == [window.banners.error_banner]
    assert window.banners.count_label.text() == "1 of 2"
    window.banners.error_banner.close_button.click()
    window.banners.cpu_banner.close_button.click()
    assert not window.banners.isVisible()


def test_the_progress_bar_follows_each_stage(qtbot, make_window, sample_clip):
    window = make_window()
    bar = window.status_bar.progress
    shown: list[tuple[int, int, int, int, int]] = []  # (current, total) as sent, then the bar's range and value
    statuses: list[str] = []
    signals = window.session.signals  # connected after the status bar's, so the bar has followed each
    signals.progress_changed.connect(
        lambda current, total: shown.append((current, total, bar.minimum(), bar.maximum(), bar.value()))
    )
    signals.status_changed.connect(statuses.append)
    wait_ready(qtbot, window)
    assert [(current, total, low, high, value) for current, total, low, high, value in shown] == [
        (0, 2, 0, 2, 0), (1, 2, 0, 2, 1), (2, 2, 0, 2, 2)
    ], "the bar moves with each load step"
    assert "Loading the weights (2 of 2)" in statuses

    shown.clear()
    open_and_wait(qtbot, window, sample_clip)
    assert shown[0][:4] == (0, 1, 0, 0), "a clip encoded in one pass shows as busy, not stuck at 0 of 1"
    assert shown[-1] == (1, 1, 0, 1, 1)
    assert not bar.isVisible(), "the bar goes once the clip is open"

    shown.clear()
    window.settings_flow.apply(window.session.settings.replace("encoder", budgets=(256, 1024)))
    qtbot.waitUntil(lambda: window.session.settings.encoder.budgets == (256, 1024), timeout=LOAD_TIMEOUT_MS)
    captures = [(low, high, value) for current, total, low, high, value in shown if total == 2]
    assert captures[:3] == [(0, 2, 0), (0, 2, 1), (0, 2, 2)]
    assert "Capturing encoder graph for 256 patches (1 of 2)" in statuses
    assert "Capturing encoder graph for 1024 patches (2 of 2)" in statuses


def test_a_saved_model_that_fails_at_start_falls_back_to_the_demo_model_and_names_the_setting(
    qtbot, make_window, store
):
    FakeEngine.fail_load_for_source = "/no/such/model"
    saved = AppSettings().replace("model", source="/no/such/model")
    store.save_settings(saved)
    window = make_window()
    qtbot.waitUntil(lambda: window.session.info is not None, timeout=LOAD_TIMEOUT_MS)
    assert window.banners.fallback_banner.isVisible() and not window.banners.error_banner.isVisible()
    assert "The saved setting model.source (/no/such/model) could not be used" in window.banners.fallback_banner.text()
    assert window.session.settings == AppSettings()
    assert store.load_settings() == saved, "the fallback is not saved over the person's settings"
    window.settings_flow.apply(AppSettings())  # choosing the defaults on purpose keeps them
    assert store.load_settings() == AppSettings()


def test_invalid_setting_is_refused_next_to_its_field(qtbot, make_window, store):
    window = make_window()
    dialog = window.settings_flow.open(None)
    probes.field(dialog, "sampling.max_frames").setValue(7)
    dialog.buttons.button(QDialogButtonBox.StandardButton.Apply).click()

    assert "even number" in probes.error_text(dialog, "sampling.max_frames")
    assert dialog.tabs.tabText(dialog.tabs.currentIndex()) == "Sampling"
    assert window.session.settings.sampling.max_frames == 32
    assert store.load_settings() == AppSettings()

    probes.field(dialog, "sampling.max_frames").setValue(8)
    probes.field(dialog, "encoder.max_items_per_batch").setValue(5000)
    dialog.buttons.button(QDialogButtonBox.StandardButton.Ok).click()
    assert probes.error_text(dialog, "sampling.max_frames") == ""
    assert "smallest budget" in probes.error_text(dialog, "encoder.max_items_per_batch")
    assert dialog.isVisible()


class ToyFamilyEngine(FakeEngine):
    """A fake engine whose loaded model is of the toy family (3 frames per slice, 3x3 merge)."""

    def info(self) -> EngineInfo:
        return dataclasses.replace(super().info(), limits=TOY_LIMITS)


def test_the_settings_dialog_follows_the_loaded_familys_limits(qtbot, make_window):
    window = make_window(ToyFamilyEngine, settings=AppSettings().replace("sampling", min_frames=6, max_frames=30))
    wait_ready(qtbot, window)
    dialog = window.settings_flow.open("sampling")
    frames = probes.field(dialog, "sampling.max_frames")
    assert frames.singleStep() == 3 and probes.field(dialog, "encoder.min_budget").singleStep() == 9
    assert "Toy-VL takes at most 30 frames" in probes.hint_text(dialog, "sampling.max_frames")
    assert "multiples of 9, e.g. 576, 2304, 9216" in probes.hint_text(dialog, "encoder.budgets")

    frames.setValue(32)
    dialog.buttons.button(QDialogButtonBox.StandardButton.Apply).click()
    assert "multiple of 3" in probes.error_text(dialog, "sampling.max_frames"), "checked against the toy's limits"
    dialog.reject()


def test_empty_model_folder_is_refused(qtbot, make_window):
    window = make_window()
    dialog = window.settings_flow.open("model")
    dialog.model_choice.folder_radio.setChecked(True)
    dialog.model_choice.folder_edit.setText("")
    assert not dialog.apply()
    assert "name a model" in probes.error_text(dialog, "model.source")


def test_settings_survive_a_restart_and_reach_the_engine(qtbot, make_window, store, tmp_path):
    engines: list[FakeEngine] = []

    def factory(settings, sink):
        engines.append(FakeEngine(settings, sink))
        return engines[-1]

    window = make_window(factory)
    wait_ready(qtbot, window)
    progress = []
    window.host.event.connect(lambda event: progress.append(event) if type(event).__name__ == "Progress" else None)
    dialog = window.settings_flow.open(None)
    probes.field(dialog, "sampling.fps").setValue(1.5)
    probes.field(dialog, "generation.max_new_tokens").setValue(64)
    dialog.budget_mode.setCurrentIndex(1)
    probes.field(dialog, "encoder.budgets").setText("256, 1024")
    probes.field(dialog, "encoder.attention_backend").setCurrentText("sdpa_masked")
    dialog.model_choice.repo_radio.setChecked(True)
    dialog.model_choice.repo_edit.setText("Qwen/Qwen3-VL-2B-Instruct")
    dialog.buttons.button(QDialogButtonBox.StandardButton.Ok).click()
    assert not dialog.isVisible()

    expected = (
        AppSettings()
        .replace("sampling", fps=1.5)
        .replace("generation", max_new_tokens=64)
        .replace("encoder", budgets=(256, 1024), attention_backend="sdpa_masked")
        .replace("model", source="Qwen/Qwen3-VL-2B-Instruct")
    )
    # The window takes (and saves) the settings once the engine has applied them.
    qtbot.waitUntil(lambda: window.session.settings == expected, timeout=LOAD_TIMEOUT_MS)
    assert engines[-1].settings == expected
    qtbot.waitUntil(lambda: any(event.stage == "capture" for event in progress), timeout=LOAD_TIMEOUT_MS)
    window.close()

    reopened = make_window(window_store=SettingsStore(store.location))
    assert reopened.session.settings == expected
    dialog = reopened.settings_flow.open(None)
    assert probes.field(dialog, "sampling.fps").value() == 1.5
    assert probes.field(dialog, "encoder.budgets").text() == "256, 1024"
    assert dialog.model_choice.repo_radio.isChecked() and dialog.model_choice.repo_edit.text() == "Qwen/Qwen3-VL-2B-Instruct"
    assert AppSettings.from_dict(dialog.values()) == expected


def test_export_markdown_and_json_name_the_clip_settings_and_model(qtbot, make_window, sample_clip, tmp_path):
    window = make_window()
    wait_ready(qtbot, window)
    open_and_wait(qtbot, window, sample_clip)
    ask_and_wait(qtbot, window, "Where does the square go?")

    window.exporter.export(window.session.conversation, window.session.settings, tmp_path / "talk.md")
    markdown = (tmp_path / "talk.md").read_text(encoding="utf-8")
    assert sample_clip.name in markdown
    assert DEMO_LABEL in markdown
    assert "Where does the square go?" in markdown and "The red square moves to the right." in markdown
    assert '"max_new_tokens": 128' in markdown

    window.exporter.export(window.session.conversation, window.session.settings, tmp_path / "talk.json")
    data = json.loads((tmp_path / "talk.json").read_text(encoding="utf-8"))
    assert data["clip"]["name"] == sample_clip.name
    assert data["settings"] == window.session.settings.to_dict()
    assert data["turns"][0]["model_label"] == DEMO_LABEL
    assert data["turns"][0]["answer"] == "The red square moves to the right."
    assert data["turns"][0]["stats"]["new_tokens"] == 8


def test_copy_answer_puts_it_on_the_clipboard(qtbot, make_window, sample_clip):
    window = make_window()
    wait_ready(qtbot, window)
    open_and_wait(qtbot, window, sample_clip)
    ask_and_wait(qtbot, window, "Anything?")
    card = window.chat.answer_cards()[-1]
    assert card.copy_button.isEnabled()
    QGuiApplication.clipboard().clear()
    card.copy_button.click()
    assert QGuiApplication.clipboard().text() == "The red square moves to the right."


def test_help_menu_shows_the_log_and_versions(qtbot, make_window):
    window = make_window()
    wait_ready(qtbot, window)
    log_dialog = window.show_log()
    assert "framewise started" in log_dialog.text.toPlainText()
    log_dialog.close()
    about = window.show_about()
    assert about.versions["torch"] == "2.13.0 (CPU)"
    assert DEMO_LABEL in about.versions["Model"]
    assert "transformers: 5.17.0" in about.versions_text()
    about.close()


def test_window_starts_at_the_default_size_and_shuts_down_cleanly(qtbot, make_window):
    window = make_window()
    available = window.screen().availableGeometry()
    if available.width() >= 1280 and available.height() >= 800:
        assert (window.width(), window.height()) == (1280, 800)
    else:  # the offscreen test screen is 800 wide: the default would not fit
        assert window.isMaximized() and window.width() <= available.width()
    wait_ready(qtbot, window)
    window.close()
    assert window.host.thread.isFinished()


def test_stop_drops_work_still_waiting_in_the_queue(qtbot, make_window, sample_clip):
    engines: list[FakeEngine] = []

    def factory(settings, sink):
        engines.append(FakeEngine(settings, sink))
        return engines[-1]

    def ask(question):
        return window.host.submit("ask", lambda backend, rid: backend.ask(question, request_id=rid), cancellable=True)

    FakeEngine.load_gate = threading.Event()
    window = make_window(factory)
    ask("queued behind the model load")
    window.host.submit(
        "open_clip", lambda backend, rid: backend.open_clip(str(sample_clip), request_id=rid), cancellable=True
    )
    window.host.cancel()
    FakeEngine.load_gate.set()
    wait_ready(qtbot, window)
    ask("asked after Stop")
    qtbot.waitUntil(lambda: len(engines[0].calls) == 1, timeout=LOAD_TIMEOUT_MS)
    assert engines[0].calls[0][0] == "ask"


def test_keyboard_shortcuts_open_settings_open_export_and_quit(qtbot, make_window, sample_clip, monkeypatch, tmp_path):
    window = make_window()
    wait_ready(qtbot, window)
    activate(qtbot, window)

    qtbot.keyClick(window.chat.question_edit, Qt.Key.Key_Comma, Qt.KeyboardModifier.ControlModifier)
    assert window.settings_flow.dialog is not None and window.settings_flow.dialog.isVisible()
    window.settings_flow.dialog.reject()
    activate(qtbot, window)

    assert not window.export_action.isEnabled(), "nothing to export before a question"
    monkeypatch.setattr("framewise.ui.clip_files.QFileDialog.getOpenFileName", lambda *args, **kwargs: (str(sample_clip), ""))
    qtbot.keyClick(window.chat.question_edit, Qt.Key.Key_O, Qt.KeyboardModifier.ControlModifier)
    qtbot.waitUntil(
        lambda: window.session.clip is not None and window.session.clip.path == str(sample_clip) and not window.session.opening_clip,
        timeout=LOAD_TIMEOUT_MS,
    )
    ask_and_wait(qtbot, window, "What moves?")

    activate(qtbot, window)
    target = tmp_path / "exported"
    monkeypatch.setattr("framewise.ui.export.QFileDialog.getSaveFileName", lambda *args, **kwargs: (str(target), "JSON (*.json)"))
    qtbot.keyClick(window.chat.question_edit, Qt.Key.Key_E, Qt.KeyboardModifier.ControlModifier | Qt.KeyboardModifier.ShiftModifier)
    assert json.loads(target.with_suffix(".json").read_text(encoding="utf-8"))["clip"]["name"] == sample_clip.name

    qtbot.keyClick(window.chat.question_edit, Qt.Key.Key_Q, Qt.KeyboardModifier.ControlModifier)
    assert not window.isVisible() and window.host.thread.isFinished()


def test_dragging_text_instead_of_a_file_is_refused(qtbot, make_window):
    window = make_window()
    mime = QMimeData()
    mime.setText("not a file")
    enter = drag_enter_event(QPoint(10, 10), mime)
    QApplication.sendEvent(window, enter)
    assert not enter.isAccepted()


def test_dragging_a_file_over_the_window_highlights_it_until_dropped(qtbot, make_window, sample_clip):
    window = make_window()
    wait_ready(qtbot, window)
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(sample_clip))])
    enter = drag_enter_event(QPoint(10, 10), mime)
    QApplication.sendEvent(window, enter)
    assert window.clip_files.highlight.isVisible() and sample_clip.name in window.clip_files.highlight.text()
    drop = QDropEvent(QPointF(10, 10), Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(window, drop)
    assert not window.clip_files.highlight.isVisible()


def test_on_a_cpu_the_graph_only_settings_are_disabled_with_the_reason(qtbot, make_window):
    window = make_window()
    wait_ready(qtbot, window)
    dialog = window.settings_flow.open("encoder")
    assert dialog.graphs_note.isVisible() and "no CUDA device" in dialog.graphs_note.text()
    for name in ("encoder.use_graphs", "encoder.min_budget", "encoder.max_budget", "encoder.budget_ratio"):
        assert not probes.field(dialog, name).isEnabled(), name
    assert probes.field(dialog, "encoder.attention_backend").isEnabled(), "what runs eager stays settable"
    dialog.reject()


def test_the_clip_title_says_the_video_tokens_before_and_after_pruning_once_the_clip_is_encoded(
    qtbot, make_window, sample_clip
):
    window = make_window(settings=AppSettings().replace("sampling", pruning="0.5"))
    wait_ready(qtbot, window)
    open_and_wait(qtbot, window, sample_clip)
    done = window.session.clip_summary
    assert done is not None and done.pruned
    tokens = f"{done.video_tokens_before:,} → {done.video_tokens_after:,} video tokens"
    title = window.clip_section.title.text()
    assert title.startswith(f"{sample_clip.name} · ") and title.endswith(f" · {tokens}")
    assert window.encoder_panel.clip_value.text().endswith(tokens)


def test_each_frame_of_the_strip_shows_how_much_of_it_pruning_kept(qtbot, make_window, sample_clip):
    window = make_window(settings=AppSettings().replace("sampling", pruning="0.75"))
    wait_ready(qtbot, window)
    open_and_wait(qtbot, window, sample_clip)
    strip = window.clip_section.strip
    shares = window.session.clip_summary.kept_per_frame
    assert shares[:3] == (1.0, 1.0, 0.25)  # the fake keeps the first pair whole, then a quarter
    assert [probes.kept_bar_share(strip, row) for row in range(3)] == [1.0, 1.0, pytest.approx(0.25, abs=0.03)]
    assert "pruning kept 25% of its video tokens" in strip.model().index(2, 0).data(Qt.ItemDataRole.ToolTipRole)

    window.session.apply_settings(AppSettings().replace("sampling", pruning="off"))
    qtbot.waitUntil(lambda: window.session.settings.sampling.pruning == "off", timeout=LOAD_TIMEOUT_MS)
    assert not window.session.clip_summary.pruned
    assert probes.kept_bar_share(strip, 2) == 0.0


def test_the_clip_title_says_when_fast_mode_took_the_frames(qtbot, make_window):
    window = make_window()
    clip = ClipSampled(
        clip_name="match.mp4", path="/clips/match.mp4", timestamps=(0.0, 600.0), thumbnails=(), width=1920,
        height=1080, duration_s=1200.0, sampling_mode="fast",
    )
    window.session.signals.clip_changed.emit(clip)
    assert "fast mode" in window.clip_section.title.text()
    window.session.signals.clip_changed.emit(dataclasses.replace(clip, sampling_mode="exact"))
    assert "fast mode" not in window.clip_section.title.text()
