"""The window's conversation keeper: what it says, in a banner, when conversations cannot be kept, and
what it still shows (a read-only store lists and opens; nothing new is written, nothing deleted)."""

from __future__ import annotations

from pathlib import Path

from framewise.core.conversation import Conversation, Turn
from framewise.core.conversation_store import ConversationStore
from framewise.core.errors import ConversationStoreError
from framewise.core.settings import AppSettings
from framewise.ui.conversation_keeper import ConversationKeeper
from framewise.ui.conversation_list import ConversationList
from tests.core.test_conversation_store import make_read_only
from tests.ui.test_main_window import ask_and_wait, open_and_wait, wait_ready
from tests.ui import probes


def _keep_one(folder: Path, question: str) -> None:
    store = ConversationStore(folder / "conversations.sqlite3")
    conversation_id = store.create(Conversation("a.mp4", "/clips/a.mp4", timestamps=(0.0,)), AppSettings())
    turn = Turn(question, "demo", None)
    turn_id = store.add_question(conversation_id, turn)
    turn.answer, turn.status = "Red.", "done"
    store.finish_turn(turn_id, turn)
    store.close()


def test_a_read_only_store_is_listed_with_a_banner_and_keeps_nothing_new(
    qtbot, make_window, sample_clip, _conversations_in_tmp, monkeypatch
):
    folder = _conversations_in_tmp
    folder.mkdir()
    _keep_one(folder, "What colour?")
    before = (folder / "conversations.sqlite3").read_bytes()
    make_read_only(folder, monkeypatch)
    try:
        window = make_window()
        wait_ready(qtbot, window)
        assert window.banners.store_banner in window.banners.raised()
        note = window.banners.store_banner.text()
        assert "new ones will not be kept" in note and str(folder) in note and "delete" not in note.lower()
        assert len(window.history_dock.history.ids()) == 1 and probes.item_texts(window.history_dock.history.list)[0].startswith("a.mp4")
        window.history_dock.history.list.setCurrentRow(0)
        assert window.history_dock.history.open_button.isEnabled() and not window.history_dock.history.delete_button.isEnabled()
        open_and_wait(qtbot, window, sample_clip)
        ask_and_wait(qtbot, window, "And now?")
        assert len(window.history_dock.history.ids()) == 1 and window.history_dock.keeper.conversation_id is None
        assert window.banners.error_banner not in window.banners.raised(), "a read-only store is no error to ask through"
    finally:
        folder.chmod(0o755)
    assert (folder / "conversations.sqlite3").read_bytes() == before


def test_a_data_folder_that_is_a_file_is_said_in_a_banner(qtbot, make_window, _conversations_in_tmp):
    _conversations_in_tmp.write_text("not a folder", encoding="utf-8")
    window = make_window()
    wait_ready(qtbot, window)
    assert window.banners.store_banner in window.banners.raised()
    assert f"{_conversations_in_tmp} is a file, not a folder" in window.banners.store_banner.text()
    assert "is a file, not a folder" in window.history_dock.history.empty_hint.text()


def test_an_empty_read_only_folder_is_said_in_a_banner(qtbot, make_window, _conversations_in_tmp, monkeypatch):
    _conversations_in_tmp.mkdir()
    make_read_only(_conversations_in_tmp, monkeypatch)
    try:
        window = make_window()
        wait_ready(qtbot, window)
    finally:
        _conversations_in_tmp.chmod(0o755)
    text = window.banners.store_banner.text()
    assert window.banners.store_banner in window.banners.raised()
    assert "read-only" in text and "Move or delete" not in text


class _FailingStore(ConversationStore):
    """A store whose writes fail after the first question, as a full disk would."""

    fail = False

    def add_question(self, conversation_id: int, turn: Turn) -> int:
        if self.fail:
            raise ConversationStoreError("The disk is full.")
        return super().add_question(conversation_id, turn)


def test_a_failed_write_is_reported_once_and_the_kept_ones_stay_listed(qtbot, tmp_path: Path):
    history = ConversationList()
    qtbot.addWidget(history)
    errors: list[str] = []
    store = _FailingStore(tmp_path / "c.sqlite3")
    keeper = ConversationKeeper(history, errors.append, store)
    conversation = Conversation("a.mp4", "/clips/a.mp4")
    keeper.start(conversation)
    first = Turn("One?", "demo", None)
    keeper.asked(first, AppSettings())
    keeper.finished(first)
    assert keeper.conversation_id is not None and history.ids() == [keeper.conversation_id]

    store.fail = True
    keeper.asked(Turn("Two?", "demo", None), AppSettings())
    keeper.asked(Turn("Three?", "demo", None), AppSettings())
    assert errors == ["The disk is full. This conversation is no longer being kept."]
    assert len(history.ids()) == 1 and keeper.conversation_id is None
