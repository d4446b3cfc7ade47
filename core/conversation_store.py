"""Past conversations kept on disk, in one SQLite database in the user's data folder.

    Linux    $XDG_DATA_HOME/framewise/conversations.sqlite3  (default ~/.local/share/framewise/...)
    macOS    ~/Library/Application Support/Framewise/conversations.sqlite3
    Windows  %APPDATA%\\Framewise\\conversations.sqlite3

FRAMEWISE_DATA_DIR overrides the folder (tests, portable installs).

Each conversation keeps its clip's path, the sampled timestamps, the settings it was asked under
(``AppSettings.to_dict()`` as JSON), its created/updated times and its turns (each with the items
its answer saw, when there were several, and which of them each time it mentions belongs to). A database of an older schema is brought up to date when
it is opened for writing; opened read-only, it reads as it is (its turns saw no named items). Writes happen as the
conversation goes: a question is committed when it is asked, its answer when it is done. The database
runs in WAL mode, so a crash or a kill loses at most the answer being streamed; such a turn reads
back as ``interrupted``.
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
import tempfile
from contextlib import closing
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from framewise.core.user_folders import user_folder
from framewise.core.conversation import INTERRUPTED_TEXT, Conversation, Turn
from framewise.core.errors import ConversationGoneError, ConversationStoreError, SettingsError
from framewise.core.events import AnswerStats
from framewise.core.settings import AppSettings

STORE_FILE_NAME = "conversations.sqlite3"
SCHEMA_VERSION = 2
"""1: the first schema. 2: each turn keeps ``saw_json``, the items its answer saw, and
``time_clips_json``, the item each time it mentions belongs to."""
# The columns schema 2 added to the turns table.
_TURN_COLUMNS_SINCE_2 = ("saw_json", "time_clips_json")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS conversations (
    id INTEGER PRIMARY KEY,
    clip_name TEXT,
    clip_path TEXT,
    timestamps_json TEXT NOT NULL,
    settings_json TEXT NOT NULL,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS turns (
    id INTEGER PRIMARY KEY,
    conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    question TEXT NOT NULL,
    model_name TEXT NOT NULL,
    model_label TEXT,
    asked_at TEXT NOT NULL,
    answer TEXT NOT NULL DEFAULT '',
    status TEXT NOT NULL,
    error TEXT,
    stats_json TEXT,
    saw_json TEXT,
    time_clips_json TEXT
);
CREATE INDEX IF NOT EXISTS turns_by_conversation ON turns(conversation_id, id);
CREATE INDEX IF NOT EXISTS conversations_by_clip ON conversations(clip_path, updated_at);
"""


def data_dir() -> Path:
    """The folder that holds the conversation database (not created here)."""
    return user_folder("FRAMEWISE_DATA_DIR", "data")


def default_store_path() -> Path:
    return data_dir() / STORE_FILE_NAME


def store_note(path: Path) -> str | None:
    """What a person should know about the store at ``path`` before using it (that new conversations
    will not be kept, and why), or None when they will be. Writes nothing: a missing store is
    made by whoever first keeps a conversation."""
    existing = next((folder for folder in (path.parent, *path.parent.parents) if folder.exists()), None)
    if existing is not None and not existing.is_dir():
        return _not_a_folder(existing)
    if not path.exists():
        reason = _read_only_reason(existing / path.name) if existing is not None else None
        if reason and existing != path.parent:
            reason = f"the folder {path.parent} cannot be created, as {reason}"
        return _not_kept_because(reason) if reason else None
    problem = _opening_problem(path)
    if problem is not None:
        return problem
    reason = _read_only_reason(path)
    return None if reason is None else _shown_not_kept(reason)


def _opening_problem(path: Path) -> str | None:
    """What opening the store at ``path`` would say is wrong with it (a damaged file, one from a
    newer Framewise), found by reading it only; None when it opens."""
    try:
        with closing(_connect_read_only(path)) as db:
            version = db.execute("PRAGMA user_version").fetchone()[0]
            db.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()
    except sqlite3.Error as error:
        return _cannot_be_opened(path, error)
    return _written_by_newer(path, version) if version > SCHEMA_VERSION else None


@dataclass(frozen=True)
class ConversationSummary:
    """One line of the list of past conversations."""

    id: int
    clip_name: str | None
    clip_path: str | None
    created_at: str
    updated_at: str
    turn_count: int
    first_question: str | None


@dataclass(frozen=True)
class StoredConversation:
    """A conversation read back: its turns, and the settings and times it was kept with."""

    id: int
    conversation: Conversation
    settings: AppSettings
    created_at: str
    updated_at: str
    settings_problem: str | None = None
    """Set when the kept settings no longer validate; ``settings`` are then the defaults."""


class ConversationStore:
    """Creates, lists, reads and deletes kept conversations. One connection; use it from one thread.

    A healthy store in a folder that cannot be written opens read-only: it lists and opens what it
    keeps, :attr:`read_only_reason` says why nothing new can be written, and writes raise."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        _make_folder(self.path.parent)
        self.read_only_reason = _read_only_reason(self.path)
        if self.read_only_reason is not None and not self.path.exists():
            raise ConversationStoreError(_not_kept_because(self.read_only_reason))
        try:
            if self.read_only_reason is not None:
                self._db = _connect_read_only(self.path)
                self._check_version()
                return
            self._db = sqlite3.connect(self.path, isolation_level=None)
            self._db.execute("PRAGMA foreign_keys = ON")
            self._db.execute("PRAGMA journal_mode = WAL")
            # WAL with NORMAL syncs at checkpoints: a committed write survives the process dying
            # (a crash or kill); only a power loss may take the last commits with it.
            self._db.execute("PRAGMA synchronous = NORMAL")
            self._migrate()
        except _NewerSchemaError as error:
            raise ConversationStoreError(_written_by_newer(self.path, error.version)) from error
        except (OSError, sqlite3.Error) as error:
            raise ConversationStoreError(_cannot_be_opened(self.path, error)) from error

    @property
    def read_only(self) -> bool:
        """True when kept conversations can be read but new ones cannot be written."""
        return self.read_only_reason is not None

    def read_only_note(self) -> str | None:
        """What a person should be told about a read-only store (None when it is writable)."""
        return None if self.read_only_reason is None else _shown_not_kept(self.read_only_reason)

    def close(self) -> None:
        self._db.close()

    def create(self, conversation: Conversation, settings: AppSettings) -> int:
        """Keep a new, empty conversation about ``conversation``'s clip; returns its id."""
        with self._write() as db:
            return _insert_conversation(db, conversation, settings)

    def add_question(self, conversation_id: int, turn: Turn) -> int:
        """Keep ``turn``'s question (its answer still to come); returns the turn's id. Raises
        ConversationGoneError when the conversation is no longer kept (deleted, in another window)."""
        with self._write() as db:
            if db.execute("SELECT 1 FROM conversations WHERE id = ?", (conversation_id,)).fetchone() is None:
                raise ConversationGoneError(f"Kept conversation {conversation_id} was deleted.")
            turn_id = _insert_question(db, conversation_id, turn)
            self._touch(db, conversation_id)
        return turn_id

    def finish_turn(self, turn_id: int, turn: Turn) -> None:
        """Keep ``turn``'s answer, status, error and stats (it has ended: done, stopped or failed).
        Raises ConversationGoneError when its question is no longer kept (its conversation deleted)."""
        with self._write() as db:
            row = db.execute("SELECT conversation_id FROM turns WHERE id = ?", (turn_id,)).fetchone()
            if row is None:
                raise ConversationGoneError(f"No kept question has id {turn_id}; its conversation was deleted.")
            _update_answer(db, turn_id, turn)
            self._touch(db, row[0])

    def keep_again(self, conversation: Conversation, settings: AppSettings) -> tuple[int, list[int]]:
        """Keep ``conversation`` anew, as a new entry, with every turn it holds (those that ended with
        their answers), in one write: for a conversation on screen whose kept copy was deleted.
        Returns its new id and its turns' ids, in order."""
        with self._write() as db:
            conversation_id = _insert_conversation(db, conversation, settings)
            turn_ids = []
            for turn in conversation.turns:
                turn_ids.append(_insert_question(db, conversation_id, turn))
                if turn.status not in ("waiting", "streaming"):
                    _update_answer(db, turn_ids[-1], turn)
        return conversation_id, turn_ids

    def list(self, clip_path: str | None = None) -> list[ConversationSummary]:
        """Kept conversations with at least one question, the one asked most recently first; only ``clip_path``'s when given."""
        query = (
            "SELECT c.id, c.clip_name, c.clip_path, c.created_at, c.updated_at, COUNT(t.id),"
            " (SELECT question FROM turns WHERE conversation_id = c.id ORDER BY id LIMIT 1)"
            " FROM conversations c JOIN turns t ON t.conversation_id = c.id"
        )
        arguments: tuple[Any, ...] = ()
        if clip_path is not None:
            query += " WHERE c.clip_path = ?"
            arguments = (clip_path,)
        query += " GROUP BY c.id ORDER BY MAX(t.id) DESC"  # the latest question first (clock-independent)
        rows = self._read(query, arguments)
        return [ConversationSummary(*row) for row in rows]

    def open(self, conversation_id: int) -> StoredConversation:
        """Read one conversation back; a turn that never got its answer comes back ``interrupted``."""
        rows = self._read(
            "SELECT clip_name, clip_path, timestamps_json, settings_json, created_at, updated_at"
            " FROM conversations WHERE id = ?",
            (conversation_id,),
        )
        if not rows:
            raise ConversationStoreError(f"No kept conversation has id {conversation_id}; it may have been deleted.")
        clip_name, clip_path, timestamps_json, settings_json, created_at, updated_at = rows[0]
        # A read-only store of schema 1 lacks the later columns: they read as NULL.
        later = ", ".join(name if name not in self._missing_turn_columns() else "NULL" for name in _TURN_COLUMNS_SINCE_2)
        turns = [
            _turn_from_row(row)
            for row in self._read(
                f"SELECT question, model_name, model_label, asked_at, answer, status, error, stats_json, {later}"
                " FROM turns WHERE conversation_id = ? ORDER BY id",
                (conversation_id,),
            )
        ]
        settings, problem = _settings_from_json(settings_json)
        conversation = Conversation(clip_name, clip_path, turns, tuple(json.loads(timestamps_json)))
        return StoredConversation(conversation_id, conversation, settings, created_at, updated_at, problem)

    def delete(self, conversation_id: int) -> None:
        """Forget a conversation and its turns (nothing happens when it is already gone)."""
        with self._write() as db:
            db.execute("DELETE FROM conversations WHERE id = ?", (conversation_id,))

    # -- internals --------------------------------------------------------------------------

    def _migrate(self) -> None:
        """Create the tables, or bring an older schema's up to date, in one transaction."""
        self._check_version()
        with _Transaction(self._db, self.path) as db:
            if _has_table(db, "turns"):
                for name in self._missing_turn_columns():  # schema 1 -> 2
                    db.execute(f"ALTER TABLE turns ADD COLUMN {name} TEXT")
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    db.execute(statement)
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def _missing_turn_columns(self) -> list[str]:
        """The columns of schema 2 on that the turns table lacks (all of them in a schema 1 store)."""
        present = {row[1] for row in self._db.execute("PRAGMA table_info(turns)")}
        return [name for name in _TURN_COLUMNS_SINCE_2 if name not in present]

    def _check_version(self) -> None:
        version = self._db.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise _NewerSchemaError(version)

    def _write(self) -> _Transaction:
        if self.read_only_reason is not None:
            raise ConversationStoreError(
                f"The conversation could not be kept in {self.path}: {self.read_only_reason}."
            )
        return _Transaction(self._db, self.path)

    def _read(self, query: str, arguments: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        try:
            return self._db.execute(query, arguments).fetchall()
        except sqlite3.Error as error:
            raise _store_error(self.path, error) from error

    @staticmethod
    def _touch(db: sqlite3.Connection, conversation_id: int) -> None:
        db.execute("UPDATE conversations SET updated_at = ? WHERE id = ?", (_now(), conversation_id))


class _NewerSchemaError(Exception):
    """The store was written by a newer Framewise (schema ``version``): healthy, but not this version's to read."""

    def __init__(self, version: int) -> None:
        super().__init__(version)
        self.version = version


def _make_folder(folder: Path) -> None:
    """Create ``folder`` (and its parents) for the store, or say in a typed error why it cannot be."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError) as error:
        blocker = Path(error.filename) if error.filename else folder
        raise ConversationStoreError(_not_a_folder(blocker)) from error
    except OSError as error:
        raise ConversationStoreError(
            f"Conversations will not be kept: the folder {folder} could not be created ({error.strerror or error}). "
            "Set FRAMEWISE_DATA_DIR to a folder you can write to."
        ) from error


def _not_a_folder(blocker: Path) -> str:
    return f"Conversations will not be kept: {blocker} is a file, not a folder. Set FRAMEWISE_DATA_DIR to a folder."


def _shown_not_kept(read_only_reason: str) -> str:
    return (
        f"Past conversations are shown, but new ones will not be kept: {read_only_reason}. "
        "Make it writable, or set FRAMEWISE_DATA_DIR to a folder you can write to."
    )


def _cannot_be_opened(path: Path, error: BaseException) -> str:
    return (
        f"Past conversations cannot be kept: {path} could not be opened ({error}). "
        "Move or delete that file, or set FRAMEWISE_DATA_DIR to another folder."
    )


def _written_by_newer(path: Path, version: int) -> str:
    return (
        f"Past conversations cannot be shown: {path} was written by a newer Framewise (schema {version}). "
        "Update Framewise, or set FRAMEWISE_DATA_DIR to another folder."
    )


def _not_kept_because(read_only_reason: str) -> str:
    return (
        f"Conversations will not be kept: {read_only_reason}. "
        "Make it writable, or set FRAMEWISE_DATA_DIR to a folder you can write to."
    )


def _read_only_reason(path: Path) -> str | None:
    """Why SQLite could not write ``path`` and its journal beside it, or None when it could.

    Tried, not read from the permission bits: a read-only mount or an ACL says no where the bits say yes."""
    try:
        with tempfile.TemporaryFile(dir=path.parent):
            pass
    except OSError:
        return f"the folder {path.parent} is read-only"
    if path.exists():
        try:
            with path.open("r+b"):
                pass
        except OSError:
            return f"the file {path} is read-only"
    return None


def _connect_read_only(path: Path) -> sqlite3.Connection:
    """Open ``path`` for reading only. A WAL database wants its shared-memory file beside it; where that
    cannot be created (a read-only folder after a clean exit removed it), open it as immutable."""
    uri = path.resolve().as_uri()
    db = sqlite3.connect(f"{uri}?mode=ro", uri=True, isolation_level=None)
    try:
        db.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()
        return db
    except sqlite3.OperationalError:
        db.close()
        return sqlite3.connect(f"{uri}?mode=ro&immutable=1", uri=True, isolation_level=None)


class _Transaction:
    """``with`` block around one write: BEGIN IMMEDIATE, then COMMIT, or ROLLBACK and a typed error."""

    def __init__(self, db: sqlite3.Connection, path: Path) -> None:
        self._db = db
        self._path = path

    def __enter__(self) -> sqlite3.Connection:
        try:
            self._db.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as error:
            raise _store_error(self._path, error) from error
        return self._db

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, traceback: object) -> None:
        if kind is None:
            try:
                self._db.execute("COMMIT")
                return
            except sqlite3.Error as commit_error:
                self._db.execute("ROLLBACK")
                raise _store_error(self._path, commit_error) from commit_error
        self._db.execute("ROLLBACK")
        if isinstance(error, sqlite3.Error):
            raise _store_error(self._path, error) from error


def _store_error(path: Path, error: sqlite3.Error) -> ConversationStoreError:
    return ConversationStoreError(
        f"The conversation could not be kept in {path} ({error}). Check the disk has room and the folder is writable."
    )


def _insert_conversation(db: sqlite3.Connection, conversation: Conversation, settings: AppSettings) -> int:
    now = _now()
    cursor = db.execute(
        "INSERT INTO conversations (clip_name, clip_path, timestamps_json, settings_json, created_at, updated_at)"
        " VALUES (?, ?, ?, ?, ?, ?)",
        (
            conversation.clip_name,
            conversation.clip_path,
            json.dumps(list(conversation.timestamps)),
            json.dumps(settings.to_dict(), sort_keys=True),
            now,
            now,
        ),
    )
    return int(cursor.lastrowid)


def _insert_question(db: sqlite3.Connection, conversation_id: int, turn: Turn) -> int:
    cursor = db.execute(
        "INSERT INTO turns (conversation_id, question, model_name, model_label, asked_at, status, saw_json)"
        " VALUES (?, ?, ?, ?, ?, ?, ?)",
        (
            conversation_id,
            turn.question,
            turn.model_name,
            turn.model_label,
            turn.asked_at,
            turn.status,
            json.dumps(list(turn.saw)) if turn.saw else None,
        ),
    )
    return int(cursor.lastrowid)


def _update_answer(db: sqlite3.Connection, turn_id: int, turn: Turn) -> None:
    stats = json.dumps(dataclasses.asdict(turn.stats)) if turn.stats else None
    time_clips = json.dumps(list(turn.time_clips)) if turn.time_clips else None
    db.execute(
        "UPDATE turns SET answer = ?, status = ?, error = ?, stats_json = ?, time_clips_json = ? WHERE id = ?",
        (turn.answer, turn.status, turn.error, stats, time_clips, turn_id),
    )


def _has_table(db: sqlite3.Connection, name: str) -> bool:
    return db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)).fetchone() is not None


def _turn_from_row(row: tuple[Any, ...]) -> Turn:
    question, model_name, model_label, asked_at, answer, status, error, stats_json, saw_json, time_clips_json = row
    if status in ("waiting", "streaming"):  # the process ended before the answer was written
        status, error = "interrupted", INTERRUPTED_TEXT
    saw = tuple(json.loads(saw_json)) if saw_json else ()
    time_clips = tuple(json.loads(time_clips_json)) if time_clips_json else ()
    stats = _stats_from_json(stats_json)
    return Turn(question, model_name, model_label, asked_at, answer, status, error, stats, saw, time_clips)


def _stats_from_json(text: str | None) -> AnswerStats | None:
    """The kept stats, or ``None`` when there are none or they were kept by a version with other fields."""
    if not text:
        return None
    known = {item.name for item in dataclasses.fields(AnswerStats)}
    values = {key: value for key, value in json.loads(text).items() if key in known}
    try:
        return AnswerStats(**values)
    except TypeError:  # a field this version requires was not kept
        return None


def _settings_from_json(text: str) -> tuple[AppSettings, str | None]:
    try:
        # A record of what was asked: checked as settings, not against a model family (none is read here).
        return AppSettings.from_dict(json.loads(text)).validate(None), None
    except SettingsError as error:
        return AppSettings(), f"The settings kept with this conversation are no longer valid ({error}); showing the defaults."


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


class ConversationRecorder:
    """Keeps the conversation on screen in a :class:`ConversationStore` as it goes.

    :meth:`start` names the conversation under way (nothing is written until its first question, so a
    clip opened and never asked about leaves no entry); :meth:`asked` writes a question as it is asked,
    with the settings it is asked under (kept with the conversation at its first question), and
    :meth:`finished` its answer once it has ended. :meth:`resume` continues a kept conversation.
    Where the kept copy was deleted meanwhile (in another window), both keep the whole conversation
    again as a new entry and return True, so that nothing on screen is lost.
    """

    def __init__(self, store: ConversationStore) -> None:
        self.store = store
        self._conversation: Conversation | None = None
        self._settings = AppSettings()
        self._id: int | None = None
        self._turn_ids: dict[int, int] = {}

    @property
    def conversation_id(self) -> int | None:
        """The kept id of the conversation under way, once its first question is written."""
        return self._id

    def start(self, conversation: Conversation) -> None:
        self._conversation, self._id = conversation, None
        self._turn_ids.clear()

    def resume(self, conversation_id: int, conversation: Conversation) -> None:
        """Continue kept conversation ``conversation_id``: later questions are added to it."""
        self.start(conversation)
        self._id = conversation_id

    def asked(self, turn: Turn, settings: AppSettings) -> bool:
        """Keep ``turn``'s question; True when the conversation had to be kept again (see the class)."""
        if self._conversation is None:
            raise ValueError("start() a conversation before recording its questions")
        self._settings = settings
        if self._id is None:
            self._id = self.store.create(self._conversation, settings)
        try:
            self._turn_ids[id(turn)] = self.store.add_question(self._id, turn)
        except ConversationGoneError:
            self._keep_again()
            return True
        return False

    def finished(self, turn: Turn) -> bool:
        """Keep ``turn``'s answer; True when the conversation had to be kept again (see the class)."""
        turn_id = self._turn_ids.pop(id(turn), None)
        if turn_id is None:
            return False
        try:
            self.store.finish_turn(turn_id, turn)
        except ConversationGoneError:
            self._keep_again()
            return True
        return False

    def _keep_again(self) -> None:
        """Keep the conversation under way anew, every turn on screen in it, under the last settings asked with."""
        assert self._conversation is not None
        turns = self._conversation.turns
        self._id, turn_ids = self.store.keep_again(self._conversation, self._settings)
        self._turn_ids = {
            id(turn): turn_id for turn, turn_id in zip(turns, turn_ids) if turn.status in ("waiting", "streaming")
        }
