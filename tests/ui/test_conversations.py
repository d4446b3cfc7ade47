"""Conversations are kept: through a settings change that re-samples, a new clip, and a restart;
the list re-opens, exports and deletes them; a missing clip is said so."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from PySide6.QtWidgets import QMessageBox

from framewise.core.conversation_store import ConversationStore, default_store_path
from framewise.core.settings import AppSettings
from tests.ui.test_main_window import LOAD_TIMEOUT_MS, ask_and_wait, open_and_wait, wait_ready
from tests.ui import probes


def kept() -> ConversationStore:
    return ConversationStore(default_store_path())


def kept_questions() -> list[list[str]]:
    store = kept()
    return [[turn.question for turn in store.open(item.id).conversation.turns] for item in store.list()]


def test_a_setting_that_resamples_starts_a_new_conversation_and_keeps_the_old(qtbot, make_window, sample_clip):
    window = make_window()
    wait_ready(qtbot, window)
    open_and_wait(qtbot, window, sample_clip)
    ask_and_wait(qtbot, window, "What moves?")
    ask_and_wait(qtbot, window, "Which way?")
    first_id = window.history_dock.keeper.conversation_id

    window.settings_flow.apply(window.session.settings.replace("sampling", fps=1.0))
    qtbot.waitUntil(lambda: window.session.operation is None and not window.session.conversation.turns, timeout=LOAD_TIMEOUT_MS)
    assert f"The new settings read {Path(sample_clip).name} again" in window.chat.cards()[-1].text()
    assert kept_questions() == [["What moves?", "Which way?"]], "the old conversation is kept"
    ask_and_wait(qtbot, window, "And now?")
    assert kept_questions() == [["And now?"], ["What moves?", "Which way?"]]
    assert window.history_dock.history.ids()[1] == first_id and probes.item_texts(window.history_dock.history.list)[1].endswith("2 questions")
    stored = kept().open(window.history_dock.keeper.conversation_id)
    assert stored.settings.sampling.fps == 1.0 and stored.conversation.timestamps == window.session.clip.timestamps


def test_another_clip_starts_a_new_conversation_and_keeps_the_old(qtbot, make_window, sample_clip, tmp_path):
    other = tmp_path / "other.mp4"
    shutil.copy(sample_clip, other)
    window = make_window()
    wait_ready(qtbot, window)
    open_and_wait(qtbot, window, sample_clip)
    ask_and_wait(qtbot, window, "What moves?")
    open_and_wait(qtbot, window, other)
    assert not window.session.conversation.turns and window.session.conversation.clip_path == str(other)
    ask_and_wait(qtbot, window, "Same here?")
    assert [text.splitlines()[0] for text in probes.item_texts(window.history_dock.history.list)] == ["other.mp4", sample_clip.name]
    assert kept_questions() == [["Same here?"], ["What moves?"]]


def test_after_a_restart_the_list_reopens_a_conversation_and_its_clip(qtbot, make_window, sample_clip):
    first = make_window()
    wait_ready(qtbot, first)
    open_and_wait(qtbot, first, sample_clip)
    ask_and_wait(qtbot, first, "What moves?")
    first.shutdown()

    window = make_window()
    wait_ready(qtbot, window)
    assert window.session.clip is None and len(window.history_dock.history.ids()) == 1
    window.history_dock.history.list.setCurrentRow(0)
    window.history_dock.history.open_button.click()
    assert [card.text() for card in window.chat.answer_cards()] == ["The red square moves to the right."]
    qtbot.waitUntil(lambda: window.session.clip is not None and not window.session.opening_clip, timeout=LOAD_TIMEOUT_MS)
    assert window.session.clip.path == str(sample_clip) and window.chat.send_button.isEnabled()
    ask_and_wait(qtbot, window, "And then?")
    assert kept_questions() == [["What moves?", "And then?"]], "the follow-up continues the kept conversation"


def test_a_conversation_whose_clip_is_gone_is_shown_but_cannot_continue(qtbot, make_window, sample_clip, tmp_path):
    moved = tmp_path / "moved.mp4"
    shutil.copy(sample_clip, moved)
    window = make_window()
    wait_ready(qtbot, window)
    open_and_wait(qtbot, window, moved)
    ask_and_wait(qtbot, window, "What moves?")
    open_and_wait(qtbot, window, sample_clip)
    moved.unlink()
    window.history_dock.open_kept(window.history_dock.history.ids()[0])
    assert "no longer at" in window.chat.cards()[-1].text() and str(moved) in window.chat.cards()[-1].text()
    assert not window.chat.send_button.isEnabled() and "no longer at" in window.chat.question_edit.placeholderText()
    assert [card.text() for card in window.chat.answer_cards()] == ["The red square moves to the right."]


def test_export_and_delete_one_kept_conversation(qtbot, make_window, sample_clip, tmp_path, monkeypatch):
    window = make_window()
    wait_ready(qtbot, window)
    open_and_wait(qtbot, window, sample_clip)
    ask_and_wait(qtbot, window, "What moves?")
    window.session.new_conversation()
    ask_and_wait(qtbot, window, "Second?")
    older = window.history_dock.history.ids()[1]
    target = tmp_path / "older.json"
    monkeypatch.setattr("framewise.ui.export.QFileDialog.getSaveFileName", lambda *args, **kwargs: (str(target), "JSON (*.json)"))
    window.history_dock.export_kept(older)
    data = json.loads(target.read_text(encoding="utf-8"))
    assert [turn["question"] for turn in data["turns"]] == ["What moves?"] and data["clip"]["timestamps"]
    window.history_dock.history.select(older)
    asked: list[str] = []
    answers = iter([QMessageBox.StandardButton.Cancel, QMessageBox.StandardButton.Yes])
    monkeypatch.setattr(
        "framewise.ui.past_conversations.QMessageBox.question", lambda parent, title, text, *args: asked.append(text) or next(answers)
    )
    window.history_dock.history.delete_button.click()
    assert "“What moves?”" in asked[0] and "cannot be brought back" in asked[0], "Delete asks first, naming the entry"
    assert kept_questions() == [["Second?"], ["What moves?"]], "cancelled: nothing is deleted"
    window.history_dock.history.delete_button.click()
    assert kept_questions() == [["Second?"]] and len(window.history_dock.history.ids()) == 1
    assert [turn.question for turn in window.session.conversation.turns] == ["Second?"], "deleting another leaves this one"


def test_figures_of_the_last_answer_are_cleared_when_a_clip_opens(qtbot, make_window, sample_clip, tmp_path):
    other = tmp_path / "other.mp4"
    shutil.copy(sample_clip, other)
    window = make_window(settings=AppSettings())
    wait_ready(qtbot, window)
    open_and_wait(qtbot, window, sample_clip)
    ask_and_wait(qtbot, window, "What moves?")
    assert window.encoder_panel.first_token_value.text() != "–"
    open_and_wait(qtbot, window, other)
    assert window.encoder_panel.first_token_value.text() == "–" and window.encoder_panel.speed_value.text() == "–"


def test_the_log_records_clips_and_answers_without_the_question(qtbot, make_window, sample_clip, caplog):
    caplog.set_level("INFO", logger="framewise.ui.main_window")
    window = make_window()
    wait_ready(qtbot, window)
    open_and_wait(qtbot, window, sample_clip)
    ask_and_wait(qtbot, window, "Secret question text?")
    messages = [record.getMessage() for record in caplog.records]
    assert any(message.startswith(f"clip opened: {sample_clip.name}") for message in messages)
    assert any(message.startswith("answer done:") and "tokens" in message for message in messages)
    assert not any("Secret question" in message for message in messages)
