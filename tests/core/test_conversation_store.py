"""Conversations kept in SQLite: written as they go, listed by clip and date, read back, deleted,
and intact after the writing process is killed."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from framewise.core.conversation import Conversation, Turn
from framewise.core.conversation_store import ConversationStore, data_dir, default_store_path, store_note
from framewise.core.errors import ConversationStoreError
from framewise.core.events import AnswerStats
from framewise.core.settings import AppSettings
from tests.conftest import REPO_ROOT

STATS = AnswerStats(30.0, 3, 40.0, False, None)


def _keep(store: ConversationStore, clip: str, questions: list[str], settings: AppSettings = AppSettings()) -> int:
    conversation_id = store.create(Conversation(Path(clip).name, clip, timestamps=(0.0, 0.5)), settings)
    for question in questions:
        turn = Turn(question, "demo", "Demo model")
        turn_id = store.add_question(conversation_id, turn)
        turn.answer, turn.status, turn.stats = f"answer to {question}", "done", STATS
        store.finish_turn(turn_id, turn)
    return conversation_id


def test_a_conversation_reads_back_as_it_was_written(tmp_path: Path):
    settings = AppSettings().replace("sampling", fps=1.5, max_frames=16)
    store = ConversationStore(tmp_path / "c.sqlite3")
    conversation_id = _keep(store, "/clips/a.mp4", ["What colour?", "Which way?"], settings)
    stopped = Turn("And then?", "demo", "Demo model")
    stopped_id = store.add_question(conversation_id, stopped)
    stopped.answer, stopped.status = "It", "stopped"
    store.finish_turn(stopped_id, stopped)
    store.close()

    stored = ConversationStore(tmp_path / "c.sqlite3").open(conversation_id)
    assert stored.settings == settings and stored.settings_problem is None
    assert stored.conversation.clip_path == "/clips/a.mp4" and stored.conversation.clip_name == "a.mp4"
    assert stored.conversation.timestamps == (0.0, 0.5)
    assert [turn.question for turn in stored.conversation.turns] == ["What colour?", "Which way?", "And then?"]
    assert [turn.status for turn in stored.conversation.turns] == ["done", "done", "stopped"]
    assert stored.conversation.turns[0].stats == STATS and stored.conversation.turns[2].stats is None
    assert stored.conversation.turns[1].answer == "answer to Which way?"
    assert stored.created_at <= stored.updated_at


def test_list_by_clip_newest_first_and_without_empty_conversations(tmp_path: Path):
    store = ConversationStore(tmp_path / "c.sqlite3")
    first = _keep(store, "/clips/a.mp4", ["one?"])
    _keep(store, "/clips/b.mp4", ["two?", "three?"])
    store.create(Conversation("a.mp4", "/clips/a.mp4"), AppSettings())  # never asked anything
    latest = _keep(store, "/clips/a.mp4", ["four?"])
    listed = store.list()
    assert [item.first_question for item in listed] == ["four?", "two?", "one?"]
    assert [item.turn_count for item in listed] == [1, 2, 1]
    assert [item.id for item in store.list("/clips/a.mp4")] == [latest, first]
    _keep_more = Turn("five?", "demo", None)
    store.add_question(first, _keep_more)
    assert store.list()[0].id == first  # asking again makes it the most recent


def test_delete_forgets_the_conversation_and_its_turns(tmp_path: Path):
    store = ConversationStore(tmp_path / "c.sqlite3")
    kept = _keep(store, "/clips/a.mp4", ["one?"])
    gone = _keep(store, "/clips/a.mp4", ["two?", "three?"])
    store.delete(gone)
    store.delete(gone)
    assert [item.id for item in store.list()] == [kept]
    with pytest.raises(ConversationStoreError, match="may have been deleted"):
        store.open(gone)
    remaining = sqlite3.connect(tmp_path / "c.sqlite3").execute("SELECT COUNT(*) FROM turns").fetchone()[0]
    assert remaining == 1


def test_store_runs_in_wal_mode_and_rejects_a_file_that_is_not_a_database(tmp_path: Path):
    ConversationStore(tmp_path / "c.sqlite3").close()
    assert sqlite3.connect(tmp_path / "c.sqlite3").execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    bad = tmp_path / "bad.sqlite3"
    bad.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(ConversationStoreError, match="Move or delete that file"):
        ConversationStore(bad)


def test_settings_kept_under_an_older_rule_read_back_as_defaults_with_the_reason(tmp_path: Path):
    store = ConversationStore(tmp_path / "c.sqlite3")
    conversation_id = _keep(store, "/clips/a.mp4", ["one?"])
    store._db.execute("UPDATE conversations SET settings_json = ?", ('{"sampling": {"max_frames": 3}}',))
    stored = store.open(conversation_id)
    assert stored.settings == AppSettings()
    assert "sampling.max_frames" in stored.settings_problem


def test_data_dir_follows_the_override_and_xdg(monkeypatch, tmp_path: Path):
    monkeypatch.setenv("FRAMEWISE_DATA_DIR", str(tmp_path / "data"))
    assert default_store_path() == tmp_path / "data" / "conversations.sqlite3"
    monkeypatch.delenv("FRAMEWISE_DATA_DIR")
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert data_dir() == tmp_path / "xdg" / "framewise"


_WRITER = textwrap.dedent(
    """
    import sys
    from framewise.core.conversation import Conversation, Turn
    from framewise.core.conversation_store import ConversationStore
    from framewise.core.settings import AppSettings

    store = ConversationStore(sys.argv[1])
    conversation_id = store.create(Conversation("a.mp4", "/clips/a.mp4"), AppSettings())
    number = 0
    while True:
        number += 1
        turn = Turn(f"question {number}?", "demo", None)
        turn_id = store.add_question(conversation_id, turn)
        if number == int(sys.argv[2]):
            print("streaming", number, flush=True)  # the answer is being written when the kill comes
            sys.stdin.read()
        turn.answer, turn.status = "x" * 2000, "done"
        store.finish_turn(turn_id, turn)
        if number % 50 == 0:
            print("answered", number, flush=True)
    """
)


def _start_writer(path: Path, stop_at: int) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(path), str(stop_at)],
        cwd=REPO_ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )


def test_a_kill_while_an_answer_streams_loses_only_that_answer(tmp_path: Path):
    path = tmp_path / "c.sqlite3"
    writer = _start_writer(path, stop_at=4)
    try:
        assert writer.stdout.readline().split() == ["streaming", "4"]
    finally:
        writer.send_signal(signal.SIGKILL)
        writer.wait(timeout=30)
    store = ConversationStore(path)
    (summary,) = store.list()
    turns = store.open(summary.id).conversation.turns
    assert [turn.status for turn in turns] == ["done", "done", "done", "interrupted"]
    assert turns[-1].question == "question 4?" and turns[-1].answer == ""


def test_a_kill_in_the_middle_of_writes_leaves_a_consistent_database(tmp_path: Path):
    path = tmp_path / "c.sqlite3"
    writer = _start_writer(path, stop_at=0)  # never pauses: it writes until killed
    try:
        assert writer.stdout.readline().split() == ["answered", "50"]
    finally:
        writer.send_signal(signal.SIGKILL)
        writer.wait(timeout=30)
    assert sqlite3.connect(path).execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    store = ConversationStore(path)
    turns = store.open(store.list()[0].id).conversation.turns
    assert len(turns) >= 50
    assert all(turn.status == "done" and len(turn.answer) == 2000 for turn in turns[:-1])
    assert turns[-1].status in ("done", "interrupted")
    assert [turn.question for turn in turns] == [f"question {number}?" for number in range(1, len(turns) + 1)]


def test_the_recorder_writes_nothing_for_an_unasked_clip_and_each_turn_as_it_goes(tmp_path: Path):
    from framewise.core.conversation_store import ConversationRecorder

    store = ConversationStore(tmp_path / "c.sqlite3")
    recorder = ConversationRecorder(store)
    recorder.start(Conversation("a.mp4", "/clips/a.mp4", timestamps=(0.0, 1.0)))
    assert store.list() == [] and recorder.conversation_id is None
    turn = Turn("What colour?", "demo", None)
    recorder.asked(turn, AppSettings().replace("sampling", fps=1.5))
    assert store.open(recorder.conversation_id).settings.sampling.fps == 1.5
    assert store.open(recorder.conversation_id).conversation.turns[0].status == "interrupted"  # not answered yet
    turn.answer, turn.status = "Red.", "done"
    recorder.finished(turn)
    first = recorder.conversation_id
    assert store.open(first).conversation.turns[0].answer == "Red."

    recorder.start(Conversation("a.mp4", "/clips/a.mp4"))
    recorder.asked(Turn("Again?", "demo", None), AppSettings())
    assert recorder.conversation_id != first and len(store.list()) == 2, "a new conversation keeps the old one"
    recorder.resume(first, store.open(first).conversation)
    recorder.asked(Turn("Back to the first?", "demo", None), AppSettings())
    assert [turn.question for turn in store.open(first).conversation.turns] == ["What colour?", "Back to the first?"]


def test_a_conversation_deleted_by_another_window_is_kept_again_with_every_turn(tmp_path: Path):
    """Another store on the file deletes the conversation being written: the next question, or an answer
    that ends meanwhile, keeps the whole conversation again as a new entry instead of failing (issue 44, item 4)."""
    from framewise.core.conversation_store import ConversationRecorder
    from framewise.core.errors import ConversationGoneError

    store = ConversationStore(tmp_path / "c.sqlite3")
    other_window = ConversationStore(tmp_path / "c.sqlite3")
    conversation = Conversation("a.mp4", "/clips/a.mp4", timestamps=(0.0, 1.0))
    recorder = ConversationRecorder(store)
    recorder.start(conversation)
    first = Turn("What colour?", "demo", None)
    conversation.turns.append(first)
    assert recorder.asked(first, AppSettings().replace("sampling", fps=1.5)) is False
    first.answer, first.status, first.stats = "Red.", "done", STATS
    assert recorder.finished(first) is False

    other_window.delete(recorder.conversation_id)
    with pytest.raises(ConversationGoneError):
        store.add_question(recorder.conversation_id, Turn("Lost?", "demo", None))
    second = Turn("And the shape?", "demo", None)
    conversation.turns.append(second)
    assert recorder.asked(second, AppSettings().replace("sampling", fps=1.5)) is True
    (entry,) = other_window.list()
    assert entry.id == recorder.conversation_id
    kept = other_window.open(entry.id)
    assert [(turn.question, turn.answer, turn.status) for turn in kept.conversation.turns] == [
        ("What colour?", "Red.", "done"), ("And the shape?", "", "interrupted")
    ]
    assert kept.settings.sampling.fps == 1.5 and kept.conversation.turns[0].stats == STATS

    other_window.delete(entry.id)  # again, while the answer is being written
    second.answer, second.status = "A square.", "done"
    assert recorder.finished(second) is True
    (entry,) = other_window.list()
    assert [turn.answer for turn in other_window.open(entry.id).conversation.turns] == ["Red.", "A square."]


def make_read_only(folder: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Take write permission away from ``folder`` (give it back with ``chmod(0o755)``). Root writes
    through permission bits, so for root (CI containers) creating a file in that folder is refused
    here the way the kernel refuses anyone else."""
    folder.chmod(0o555)
    if os.geteuid() == 0:
        real = tempfile.TemporaryFile

        def refusing(*args, dir=None, **kwargs):
            if dir is not None and Path(dir) == folder:
                raise PermissionError(13, "Permission denied", str(folder))
            return real(*args, dir=dir, **kwargs)

        monkeypatch.setattr("framewise.core.conversation_store.tempfile.TemporaryFile", refusing)
    return folder


def test_a_healthy_store_in_a_read_only_folder_opens_read_only_and_lists_what_it_keeps(tmp_path: Path, monkeypatch):
    folder = tmp_path / "data"
    folder.mkdir()
    store = ConversationStore(folder / "c.sqlite3")
    _keep(store, "/clips/a.mp4", ["one?", "two?"])
    store.close()
    before = (folder / "c.sqlite3").read_bytes()
    make_read_only(folder, monkeypatch)
    try:
        store = ConversationStore(folder / "c.sqlite3")
        assert store.read_only and "read-only" in store.read_only_note() and str(folder) in store.read_only_note()
        assert "delete" not in store.read_only_note().lower(), "a healthy store is never to be deleted"
        assert [(item.clip_path, item.turn_count) for item in store.list()] == [("/clips/a.mp4", 2)]
        assert [turn.question for turn in store.open(store.list()[0].id).conversation.turns] == ["one?", "two?"]
        with pytest.raises(ConversationStoreError, match="read-only"):
            store.create(Conversation("b.mp4", "/clips/b.mp4"), AppSettings())
        store.close()
    finally:
        folder.chmod(0o755)
    assert (folder / "c.sqlite3").read_bytes() == before


def test_an_empty_read_only_folder_says_it_cannot_be_written_not_to_delete_a_file(tmp_path: Path, monkeypatch):
    folder = tmp_path / "data"
    folder.mkdir()
    make_read_only(folder, monkeypatch)
    try:
        with pytest.raises(ConversationStoreError) as raised:
            ConversationStore(folder / "c.sqlite3")
    finally:
        folder.chmod(0o755)
    message = str(raised.value)
    assert f"the folder {folder} is read-only" in message and "FRAMEWISE_DATA_DIR" in message
    assert "delete" not in message.lower()


def test_a_data_folder_that_is_a_file_is_named_as_such(tmp_path: Path):
    not_a_folder = tmp_path / "data"
    not_a_folder.write_text("notes", encoding="utf-8")
    with pytest.raises(ConversationStoreError) as raised:
        ConversationStore(not_a_folder / "c.sqlite3")
    message = str(raised.value)
    assert f"{not_a_folder} is a file, not a folder" in message and "Errno" not in message
    assert not_a_folder.read_text(encoding="utf-8") == "notes"


def test_a_store_from_a_newer_version_is_not_called_broken(tmp_path: Path):
    path = tmp_path / "c.sqlite3"
    ConversationStore(path).close()
    sqlite3.connect(path).execute("PRAGMA user_version = 99").connection.commit()
    with pytest.raises(ConversationStoreError) as raised:
        ConversationStore(path)
    assert "newer Framewise" in str(raised.value) and "delete" not in str(raised.value).lower()


def test_the_store_note_names_a_read_only_store_and_is_none_for_a_writable_one(tmp_path: Path, monkeypatch):
    folder = tmp_path / "data"
    assert store_note(folder / "c.sqlite3") is None and not folder.exists()
    folder.mkdir()
    _keep(ConversationStore(folder / "c.sqlite3"), "/clips/a.mp4", ["one?"])
    assert store_note(folder / "c.sqlite3") is None
    make_read_only(folder, monkeypatch)
    try:
        note = store_note(folder / "c.sqlite3")
    finally:
        folder.chmod(0o755)
    assert note.startswith("Past conversations are shown, but new ones will not be kept")


# The tables as schema 1 made them (before turns kept which items an answer saw).
_SCHEMA_1 = """
CREATE TABLE conversations (id INTEGER PRIMARY KEY, clip_name TEXT, clip_path TEXT, timestamps_json TEXT NOT NULL,
    settings_json TEXT NOT NULL, created_at TEXT NOT NULL, updated_at TEXT NOT NULL);
CREATE TABLE turns (id INTEGER PRIMARY KEY, conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    question TEXT NOT NULL, model_name TEXT NOT NULL, model_label TEXT, asked_at TEXT NOT NULL,
    answer TEXT NOT NULL DEFAULT '', status TEXT NOT NULL, error TEXT, stats_json TEXT);
INSERT INTO conversations VALUES (1, 'a.mp4', '/clips/a.mp4', '[0.0]', '{}', '2026-01-01', '2026-01-01');
INSERT INTO turns VALUES (1, 1, 'What colour?', 'demo', NULL, '2026-01-01', 'Red.', 'done', NULL, NULL);
PRAGMA user_version = 1;
"""


def _schema_1_store(path: Path) -> Path:
    db = sqlite3.connect(path)
    db.executescript(_SCHEMA_1)
    db.close()
    return path


def test_the_items_an_answer_saw_read_back(tmp_path: Path):
    store = ConversationStore(tmp_path / "c.sqlite3")
    conversation_id = store.create(Conversation("a.mp4", "/clips/a.mp4"), AppSettings())
    both = Turn("Which is brighter?", "demo", None, saw=("a.mp4", "b.png"))
    both_id = store.add_question(conversation_id, both)
    both.answer, both.status, both.time_clips = "b.png; a.mp4 darkens at 0:03 and 0:05", "done", ("a.mp4", None)
    store.finish_turn(both_id, both)
    alone = Turn("And now?", "demo", None)
    store.finish_turn(store.add_question(conversation_id, alone), alone)
    store.close()
    turns = ConversationStore(tmp_path / "c.sqlite3").open(conversation_id).conversation.turns
    assert [turn.saw for turn in turns] == [("a.mp4", "b.png"), ()]
    assert [turn.time_clips for turn in turns] == [("a.mp4", None), ()]


def test_a_schema_1_store_is_brought_up_to_date_and_keeps_its_turns(tmp_path: Path):
    path = _schema_1_store(tmp_path / "c.sqlite3")
    store = ConversationStore(path)
    assert store._db.execute("PRAGMA user_version").fetchone()[0] == 2
    old = store.open(1).conversation.turns
    assert [(turn.question, turn.answer, turn.saw, turn.time_clips) for turn in old] == [("What colour?", "Red.", (), ())]
    later = Turn("Which is brighter?", "demo", None, saw=("a.mp4", "b.png"))
    store.finish_turn(store.add_question(1, later), later)
    assert store.open(1).conversation.turns[-1].saw == ("a.mp4", "b.png")


def test_a_read_only_schema_1_store_still_opens(tmp_path: Path, monkeypatch):
    folder = tmp_path / "data"
    folder.mkdir()
    path = _schema_1_store(folder / "c.sqlite3")
    make_read_only(folder, monkeypatch)
    try:
        store = ConversationStore(path)
        assert store.read_only
        assert [turn.question for turn in store.open(1).conversation.turns] == ["What colour?"]
        store.close()
    finally:
        folder.chmod(0o755)


def test_the_store_note_names_a_damaged_store_and_leaves_it_as_it_was(tmp_path: Path):
    path = tmp_path / "c.sqlite3"
    path.write_bytes(b"not a database " * 400)
    note = store_note(path)
    assert note is not None and note.startswith("Past conversations cannot be kept") and str(path) in note
    assert "could not be opened (file is not a database)" in note and "Move or delete that file" in note
    assert path.read_bytes() == b"not a database " * 400 and sorted(tmp_path.iterdir()) == [path]


def test_the_store_note_names_a_store_from_a_newer_version(tmp_path: Path):
    path = tmp_path / "c.sqlite3"
    ConversationStore(path).close()
    sqlite3.connect(path).execute("PRAGMA user_version = 99").connection.commit()
    note = store_note(path)
    assert note is not None and "newer Framewise (schema 99)" in note and "delete" not in note.lower()


def test_the_store_note_names_a_data_folder_that_cannot_be_created(tmp_path: Path, monkeypatch):
    folder = tmp_path / "data"
    folder.mkdir()
    make_read_only(folder, monkeypatch)
    try:
        note = store_note(folder / "framewise" / "inner" / "c.sqlite3")
    finally:
        folder.chmod(0o755)
    assert note == (
        f"Conversations will not be kept: the folder {folder / 'framewise' / 'inner'} cannot be created, as the "
        f"folder {folder} is read-only. Make it writable, or set FRAMEWISE_DATA_DIR to a folder you can write to."
    )
    assert list(folder.iterdir()) == []
