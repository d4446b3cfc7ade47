"""Keeps the window's conversations on disk and the Past conversations list in step with them."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Callable

from framewise.core.conversation import Conversation, Turn
from framewise.core.conversation_store import (
    ConversationRecorder,
    ConversationStore,
    StoredConversation,
    default_store_path,
)
from framewise.core.errors import ConversationStoreError
from framewise.core.settings import AppSettings
from framewise.ui.conversation_list import ConversationList

if TYPE_CHECKING:
    from framewise.ui.session import Session

log = logging.getLogger(__name__)


class ConversationKeeper:
    """Writes the conversation on screen to a :class:`ConversationStore` as it goes, and fills ``history``
    with the kept ones.

    ``store`` is opened at the user's default path when not given. :attr:`notice` says why new
    conversations are not kept (the store could not be opened, or only read), for the window to show
    in a banner; a failure later on (a write or read) goes to ``report_error`` and the conversation
    goes on unkept. A conversation whose kept copy was deleted while on screen (in another window) is
    kept again as a new entry, and ``tell`` says so."""

    def __init__(
        self,
        history: ConversationList,
        report_error: Callable[[str], None],
        store: ConversationStore | None = None,
        tell: Callable[[str], object] = lambda text: None,
    ) -> None:
        self.history = history
        self._report_error = report_error
        self._tell = tell
        self.store, self.notice = _open_store(store)
        writable = self.store is not None and not self.store.read_only
        self._recorder = ConversationRecorder(self.store) if writable else None
        history.set_deletable(writable)

    @property
    def conversation_id(self) -> int | None:
        """The kept id of the conversation under way, once its first question is written."""
        return self._recorder.conversation_id if self._recorder is not None else None

    def start(self, conversation: Conversation) -> None:
        """``conversation`` is the one on screen now; it is written from its first question on."""
        if self._recorder is not None:
            self._recorder.start(conversation)
        self.refresh()

    def follow(self, session: Session) -> None:
        """Write the session's conversation as it goes: each one on screen from its first question on."""
        signals = session.signals
        signals.conversation_reset.connect(lambda conversation, notice: self.start(conversation))
        signals.turn_started.connect(lambda turn: self.asked(turn, session.settings))
        signals.turn_finished.connect(self.finished)
        self.start(session.conversation)

    def resume(self, conversation_id: int, conversation: Conversation) -> None:
        """Later questions go to kept conversation ``conversation_id``."""
        if self._recorder is not None:
            self._recorder.resume(conversation_id, conversation)

    def asked(self, turn: Turn, settings: AppSettings) -> None:
        self._record(lambda recorder: recorder.asked(turn, settings))

    def finished(self, turn: Turn) -> None:
        self._record(lambda recorder: recorder.finished(turn))

    def open(self, conversation_id: int) -> StoredConversation | None:
        """Read a kept conversation back; ``None`` (the failure reported) when it cannot be."""
        if self.store is None:
            return None
        try:
            return self.store.open(conversation_id)
        except ConversationStoreError as error:
            self._report_error(str(error))
            self.refresh()
            return None

    def delete(self, conversation_id: int) -> None:
        """Forget a kept conversation (the window first moves off it when it is the one on screen)."""
        if self.store is None:
            return
        try:
            self.store.delete(conversation_id)
        except ConversationStoreError as error:
            self._report_error(str(error))
        self.refresh()

    def refresh(self) -> None:
        """List the kept conversations again, the one under way selected."""
        if self.store is None:
            self.history.set_conversations([], None)
            self.history.empty_hint.setText(self.notice or "Conversations are not being kept")
            return
        try:
            summaries = self.store.list()
        except ConversationStoreError as error:
            summaries = []
            self.history.empty_hint.setText(str(error))
        self.history.set_conversations(summaries, self.conversation_id)

    def _record(self, write: Callable[[ConversationRecorder], bool]) -> None:
        """Write through the recorder; a failure is reported once and the conversation goes on unkept."""
        if self._recorder is None:
            return
        try:
            kept_again = write(self._recorder)
        except ConversationStoreError as error:
            self._report_error(f"{error} This conversation is no longer being kept.")
            self._recorder = None
            kept_again = False
        if kept_again:
            self._tell(
                "This conversation was deleted from the kept ones (in another window) while it was on screen; "
                "it is kept again, as a new entry, with every question and answer shown here."
            )
        self.refresh()


def _open_store(store: ConversationStore | None) -> tuple[ConversationStore | None, str | None]:
    """The store (given, or opened at the default path) and what a person should know about it."""
    if store is None:
        try:
            store = ConversationStore(default_store_path())
        except ConversationStoreError as error:
            log.warning("%s", error)
            return None, str(error)
    note = store.read_only_note()
    if note:
        log.warning("%s", note)
    return store, note
