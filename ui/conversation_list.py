"""The list of past conversations: by clip and date, newest first, with Open, Export and Delete.

Each entry shows its clip's name, its first question (two conversations about one clip in the same
minute differ there) and when it was last asked in, with a line between entries.

Keyboard: Enter opens the selected conversation, Delete removes it; the buttons have mnemonics.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from PySide6.QtCore import QModelIndex, QRect, QSize, Qt, Signal
from PySide6.QtGui import QKeyEvent, QPainter, QPalette
from PySide6.QtWidgets import (
    QApplication,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QStyle,
    QStyledItemDelegate,
    QStyleOptionViewItem,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from framewise.core.conversation_store import ConversationSummary
from framewise.core.wording import plural

_ID_ROLE = Qt.ItemDataRole.UserRole


class ConversationList(QWidget):
    """``open_requested(id)``, ``export_requested(id)`` and ``delete_requested(id)`` go to the window."""

    open_requested = Signal(int)
    export_requested = Signal(int)
    delete_requested = Signal(int)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._deletable = True
        self.list = _KeyedList()
        self.list.setAccessibleName("Past conversations")
        self.list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.list.setItemDelegate(_EntryDelegate(self.list))
        self.list.itemActivated.connect(lambda item: self.open_requested.emit(item.data(_ID_ROLE)))
        self.list.currentItemChanged.connect(lambda *_: self._update_buttons())
        self.list.delete_pressed.connect(self._delete_selected)
        self.empty_hint = QLabel("Conversations are kept here as you ask")
        self.empty_hint.setWordWrap(True)
        self.empty_hint.setForegroundRole(QPalette.ColorRole.PlaceholderText)
        self.open_button = QToolButton()
        self.open_button.setText("&Open")
        self.open_button.setToolTip("Show this conversation and open its clip again (Enter)")
        self.open_button.clicked.connect(lambda: self._emit_selected(self.open_requested))
        self.export_button = QToolButton()
        self.export_button.setText("E&xport…")
        self.export_button.setToolTip("Save this conversation as Markdown or JSON")
        self.export_button.clicked.connect(lambda: self._emit_selected(self.export_requested))
        self.delete_button = QToolButton()
        self.delete_button.setText("&Delete")
        self.delete_button.setToolTip("Forget this conversation (Delete)")
        self.delete_button.clicked.connect(self._delete_selected)
        buttons = QHBoxLayout()
        buttons.setContentsMargins(0, 0, 0, 0)
        for button in (self.open_button, self.export_button, self.delete_button):
            buttons.addWidget(button)
        buttons.addStretch(1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.list, 1)
        layout.addWidget(self.empty_hint)
        layout.addLayout(buttons)
        self.set_conversations([], None)

    def set_conversations(self, summaries: list[ConversationSummary], current_id: int | None) -> None:
        """Show ``summaries`` (newest first) and select ``current_id`` when it is among them."""
        self.list.clear()
        for summary in summaries:
            item = QListWidgetItem(describe(summary))
            item.setData(_ID_ROLE, summary.id)
            item.setToolTip(f"{summary.clip_path or 'no clip'}\nFirst question: {summary.first_question or '–'}")
            self.list.addItem(item)
            if summary.id == current_id:
                self.list.setCurrentItem(item)
        self.empty_hint.setVisible(not summaries)
        self._update_buttons()

    def set_deletable(self, deletable: bool) -> None:
        """Offer Delete only where the store can be written (a read-only one lists and opens, no more)."""
        self._deletable = deletable
        self.delete_button.setToolTip(
            "Forget this conversation (Delete)" if deletable else "The folder of kept conversations is read-only"
        )
        self._update_buttons()

    def ids(self) -> list[int]:
        return [self.list.item(row).data(_ID_ROLE) for row in range(self.list.count())]

    def entry_text(self, conversation_id: int) -> str:
        """What the list shows for ``conversation_id`` (clip, first question, when), "" when it is not listed."""
        for row, item_id in enumerate(self.ids()):
            if item_id == conversation_id:
                return self.list.item(row).text()
        return ""

    def select(self, conversation_id: int) -> None:
        for row, item_id in enumerate(self.ids()):
            if item_id == conversation_id:
                self.list.setCurrentRow(row)

    def _emit_selected(self, signal) -> None:
        item = self.list.currentItem()
        if item is not None:
            signal.emit(item.data(_ID_ROLE))

    def _delete_selected(self) -> None:
        if self._deletable:
            self._emit_selected(self.delete_requested)

    def _update_buttons(self) -> None:
        selected = self.list.currentItem() is not None
        self.open_button.setEnabled(selected)
        self.export_button.setEnabled(selected)
        self.delete_button.setEnabled(selected and self._deletable)


class _KeyedList(QListWidget):
    delete_pressed = Signal()

    def keyPressEvent(self, event: QKeyEvent) -> None:  # noqa: N802 - Qt override
        if event.key() == Qt.Key.Key_Delete:
            self.delete_pressed.emit()
            return
        super().keyPressEvent(event)


class _EntryDelegate(QStyledItemDelegate):
    """Draws an entry's three lines, each shortened to the list's width on its own, and a line under it.

    The clip's name is shortened in the middle (its start and its extension tell clips apart), the
    question and the date at their end."""

    _MODES = (Qt.TextElideMode.ElideMiddle, Qt.TextElideMode.ElideRight, Qt.TextElideMode.ElideRight)

    def paint(self, painter: QPainter, option: QStyleOptionViewItem, index: QModelIndex) -> None:
        self.initStyleOption(option, index)
        lines = str(index.data(Qt.ItemDataRole.DisplayRole) or "").split("\n")
        option.text = ""
        style = option.widget.style() if option.widget else QApplication.style()
        style.drawControl(QStyle.ControlElement.CE_ItemViewItem, option, painter, option.widget)
        selected = bool(option.state & QStyle.StateFlag.State_Selected)
        metrics = option.fontMetrics
        pad = metrics.height() // 4
        text_rect = option.rect.adjusted(pad * 2, pad, -pad * 2, -pad)
        painter.save()
        for number, line in enumerate(lines):
            role = QPalette.ColorRole.HighlightedText if selected else (
                QPalette.ColorRole.Text if number == 0 else QPalette.ColorRole.PlaceholderText
            )
            painter.setPen(option.palette.color(role))
            row = QRect(text_rect.left(), text_rect.top() + number * metrics.lineSpacing(), text_rect.width(), metrics.height())
            mode = self._MODES[min(number, len(self._MODES) - 1)]
            painter.drawText(row, int(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter), metrics.elidedText(line, mode, row.width()))
        painter.setPen(option.palette.color(QPalette.ColorRole.Mid))
        painter.drawLine(option.rect.bottomLeft(), option.rect.bottomRight())
        painter.restore()

    def sizeHint(self, option: QStyleOptionViewItem, index: QModelIndex) -> QSize:  # noqa: N802 - Qt override
        lines = str(index.data(Qt.ItemDataRole.DisplayRole) or "").count("\n") + 1
        metrics = option.fontMetrics
        return QSize(metrics.height() * 8, lines * metrics.lineSpacing() + metrics.height() // 2 + 1)


def describe(summary: ConversationSummary) -> str:
    """Three lines: the clip's name, the first question, then when and how many questions."""
    name = summary.clip_name or (Path(summary.clip_path).name if summary.clip_path else "No clip")
    when = f"{_local_time(summary.updated_at)} · {plural(summary.turn_count, 'question')}"
    question = " ".join((summary.first_question or "").split())
    return f"{name}\n“{question}”\n{when}" if question else f"{name}\n{when}"


def _local_time(iso_utc: str) -> str:
    """Day, month and time; the year only when it is not this one (the list is narrow)."""
    moment = datetime.fromisoformat(iso_utc).astimezone()
    return moment.strftime("%d %b, %H:%M" if moment.year == datetime.now().year else "%d %b %Y, %H:%M")
