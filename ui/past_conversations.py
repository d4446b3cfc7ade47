"""The Past conversations dock: the kept conversations, each opened again, exported or deleted from it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from PySide6.QtWidgets import QDockWidget, QMessageBox, QWidget

from framewise.core.conversation_store import ConversationStore
from framewise.ui.chat import ChatPanel
from framewise.ui.conversation_keeper import ConversationKeeper
from framewise.ui.conversation_list import ConversationList
from framewise.ui.export import Exporter

if TYPE_CHECKING:
    from framewise.ui.session import Session


class PastConversations(QDockWidget):
    """:attr:`history` lists the conversations :attr:`keeper` keeps (in ``store``, else the user's
    default one). Opening one shows it in ``chat`` and re-opens its clip through ``session``; ``say``
    is a line for the status bar, ``warn`` a failure to show."""

    def __init__(
        self,
        session: Session,
        chat: ChatPanel,
        exporter: Exporter,
        say: Callable[[str], None],
        warn: Callable[[str], None],
        store: ConversationStore | None = None,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__("Past conversations", parent)
        self.setObjectName("history")
        self.history = ConversationList()
        self.setWidget(self.history)
        self.setFeatures(QDockWidget.DockWidgetFeature.DockWidgetClosable | QDockWidget.DockWidgetFeature.DockWidgetMovable)
        self.keeper = ConversationKeeper(self.history, warn, store, tell=chat.add_notice)
        self._session = session
        self._chat = chat
        self._exporter = exporter
        self._say = say
        self.history.open_requested.connect(self.open_kept)
        self.history.export_requested.connect(self.export_kept)
        self.history.delete_requested.connect(self.delete_kept)
        self.keeper.follow(session)

    def open_kept(self, conversation_id: int) -> None:
        """Show a kept conversation and open its clip again (re-encoding it) when the file is still there."""
        session = self._session
        if session.answering or session.opening_clip:
            self._say("Wait for the answer or the clip to finish before opening another conversation.")
            return
        kept = self.keeper.open(conversation_id)
        if kept is None:
            return
        conversation = kept.conversation
        self.keeper.resume(conversation_id, conversation)
        self._chat.replay(conversation)
        if session.resume(conversation):
            self._chat.add_notice(
                f"Kept conversation about {conversation.clip_name}: its clip is opened again, "
                "and the model answers what comes next without the earlier answers."
            )
        else:
            self._chat.add_notice(
                f"The clip of this conversation is no longer at {conversation.clip_path}; "
                "it can be read and exported, not continued."
            )
        self.history.select(conversation_id)

    def export_kept(self, conversation_id: int) -> None:
        kept = self.keeper.open(conversation_id)
        if kept is not None:
            self._exporter.choose_and_export(kept.conversation, kept.settings)

    def delete_kept(self, conversation_id: int) -> None:
        """Forget a kept conversation once the person confirms it; the one on screen is left for a new one first."""
        if not self._confirm_delete(conversation_id):
            return
        if conversation_id == self.keeper.conversation_id:
            if self._session.answering:
                self._say("Wait for the answer to finish before deleting this conversation.")
                return
            self._session.new_conversation()
        self.keeper.delete(conversation_id)

    def _confirm_delete(self, conversation_id: int) -> bool:
        """Ask before forgetting a conversation: nothing brings it back."""
        entry = self.history.entry_text(conversation_id)
        answer = QMessageBox.question(
            self,
            "Delete Conversation",
            f"Delete this kept conversation? It cannot be brought back.\n\n{entry}",
            QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.Cancel,
            QMessageBox.StandardButton.Cancel,
        )
        return answer == QMessageBox.StandardButton.Yes
