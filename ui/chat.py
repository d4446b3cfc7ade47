"""The chat: the transcript of questions and streamed answers, and the question box.

Enter sends (Shift+Enter adds a line); Stop cancels the answer being written. Each answer is
headed by the model that wrote it and the short form of its label (the demo model's "Demo model";
the whole label is the header's tooltip and the window's banner), and can be copied with its
button or its context menu. Under an answer being written is its speed so far; under a finished
one, its figures. Every time a message mentions ("at 0:12", "from 3 to 5 seconds") is a link:
clicking it emits ``time_clicked``.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import TYPE_CHECKING, Callable

from PySide6.QtCore import QEvent, Qt, QTimer, Signal
from PySide6.QtGui import QGuiApplication, QKeyEvent, QPalette
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QMenu,
    QPlainTextEdit,
    QPushButton,
    QScrollArea,
    QSizePolicy,
    QStyle,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from framewise.core.clip_times import ConversationItem, PlacedTime, place_times
from framewise.core.conversation import INTERRUPTED_TEXT, Conversation, Turn, format_answer_stats
from framewise.core.events import EncodeDone, EngineInfo
from framewise.core.timecodes import TimeMention, find_times
from framewise.core.wording import plural
from framewise.ui.elided_label import ElidedLabel
from framewise.ui.frames import format_timestamp, timestamp_decimals
from framewise.ui.icons import glyph_icon
from framewise.ui.metrics import live_speed_text
from framewise.ui.wording import family_words, model_text, model_title

if TYPE_CHECKING:
    from framewise.ui.session import Session

_STREAM_FLUSH_MS = 30
QUESTION_HINT = "Ask about the clip…  (Enter sends, Shift+Enter adds a line)"


class QuestionEdit(QPlainTextEdit):
    """A question box where Enter submits and Shift+Enter starts a new line."""

    submitted = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setTabChangesFocus(True)
        self.setPlaceholderText("Ask about the clip…  (Enter sends, Shift+Enter adds a line)")
        line = self.fontMetrics().lineSpacing()
        self.setFixedHeight(round(line * 3.4 + 2 * self.frameWidth() + self.document().documentMargin() * 2))

    def keyPressEvent(self, event: QKeyEvent) -> None:  # noqa: N802 - Qt override
        if event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter):
            if event.modifiers() & Qt.KeyboardModifier.ShiftModifier:
                self.insertPlainText("\n")
            else:
                self.submitted.emit()
            return
        super().keyPressEvent(event)


class MessageCard(QFrame):
    """One message: a header (who wrote it), the text, and for answers a stats line and Copy.

    ``time_clicked(start_s, end_s)`` is emitted when a time in the text is clicked; ``end_s`` is
    ``None`` for a single time. A time that belongs to one item of the conversation (the answer
    said which) emits ``item_time_clicked(item, start_s, end_s)`` instead, ``item`` the index of
    its tab.
    """

    time_clicked = Signal(float, object)
    item_time_clicked = Signal(int, float, object)

    def __init__(self, role: str, header: str, text: str = "", parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.role = role
        self.setObjectName(f"{role}Card")
        self.setAutoFillBackground(True)
        self.setBackgroundRole(QPalette.ColorRole.AlternateBase if role == "question" else QPalette.ColorRole.Base)
        self.setFrameShape(QFrame.Shape.StyledPanel if role != "question" else QFrame.Shape.NoFrame)
        self.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.customContextMenuRequested.connect(self._show_context_menu)

        line = self.fontMetrics().height()
        self.header = ElidedLabel(header)
        header_font = self.header.font()
        header_font.setBold(True)
        self.header.setFont(header_font)
        self._text = ""
        self._times: list[TimeMention] = []
        self._items: list[int | None] = []
        self.body = QLabel()
        self.body.setWordWrap(True)
        self.body.setTextInteractionFlags(
            Qt.TextInteractionFlag.TextSelectableByMouse
            | Qt.TextInteractionFlag.LinksAccessibleByMouse
            | Qt.TextInteractionFlag.LinksAccessibleByKeyboard
        )
        self.body.setOpenExternalLinks(False)
        self.body.linkActivated.connect(self._on_link)
        self.body.setContextMenuPolicy(Qt.ContextMenuPolicy.NoContextMenu)
        self.body.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Minimum)
        self.body.setAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop)
        self.footer = QLabel()
        self.footer.setForegroundRole(QPalette.ColorRole.PlaceholderText)
        self.footer.setWordWrap(True)
        self.footer.hide()
        self.copy_button = QToolButton()
        self.copy_button.setText("Copy")
        self.copy_button.setToolTip("Copy this answer")
        self.copy_button.setAutoRaise(True)
        self.copy_button.clicked.connect(self.copy_text)
        self.copy_button.setEnabled(False)

        top = QHBoxLayout()
        top.setContentsMargins(0, 0, 0, 0)
        top.addWidget(self.header, 1)
        top.addWidget(self.copy_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(round(line * 0.7), round(line * 0.45), round(line * 0.7), round(line * 0.55))
        layout.setSpacing(round(line * 0.25))
        layout.addLayout(top)
        layout.addWidget(self.body)
        layout.addWidget(self.footer)
        self.copy_button.setVisible(role == "answer")  # only once parented: a parentless widget shown is a window
        self.set_text(text)

    def text(self) -> str:
        """The message as written (without the links' markup)."""
        return self._text

    @property
    def times(self) -> list[TimeMention]:
        """The times shown as links, in order."""
        return list(self._times)

    def set_text(
        self,
        text: str,
        *,
        complete: bool = True,
        linked_length: int | None = None,
        items: Sequence[int | None] = (),
    ) -> None:
        """Show ``text`` with its times as links: those in its first ``linked_length`` characters (all
        of it by default; an error added after an answer is not the model's and gets none). While an
        answer streams (``complete`` false) a time that ends the text so far may still grow ("0:1" of
        "0:12"), so it is linked once text follows it. ``items`` gives, time by time, the tab of the
        item each belongs to (``None``, or none given: the tab shown when it is clicked)."""
        limit = len(text) if linked_length is None else linked_length
        times = [time for time in find_times(text[:limit]) if complete or time.end < len(text)]
        self._text = text
        self._times = times
        self._items = [items[index] if index < len(items) else None for index in range(len(times))]
        if times:
            self.body.setTextFormat(Qt.TextFormat.RichText)
            self.body.setText(linked_html(text, times, self._items))
        else:
            self.body.setTextFormat(Qt.TextFormat.PlainText)
            self.body.setText(text)
        self.body.setVisible(bool(text))

    def click_time(self, index: int) -> None:
        """Act as a click on the ``index``-th linked time."""
        self._on_link(time_href(self._times[index], self._items[index]))

    def set_footer(self, text: str) -> None:
        self.footer.setText(text)
        self.footer.setVisible(bool(text))

    def copy_text(self) -> None:
        QGuiApplication.clipboard().setText(self._text)

    def _on_link(self, href: str) -> None:
        target, item = _split_item(href)
        parsed = parse_time_href(target)
        if parsed is None:
            return
        if item is None:
            self.time_clicked.emit(*parsed)
        else:
            self.item_time_clicked.emit(item, *parsed)

    def _show_context_menu(self, position) -> None:
        menu = QMenu(self)
        selected = self.body.selectedText()
        if selected:
            menu.addAction("Copy selection", lambda: QGuiApplication.clipboard().setText(selected))
        noun = {"answer": "answer", "question": "question"}.get(self.role, "message")
        menu.addAction(f"Copy {noun}", self.copy_text)
        menu.exec(self.mapToGlobal(position))


class ChatPanel(QWidget):
    """Transcript plus question box. ``ask_requested(question)`` and ``stop_requested()`` go to the window;
    so do ``time_clicked(start_s, end_s)``, a time clicked in a message (``end_s`` ``None`` unless a
    range), ``item_time_clicked(item, start_s, end_s)``, such a time that belongs to the item of tab
    ``item``, and ``question_times_changed(times)``, the list of :class:`PlacedTime` in the question
    being typed, whenever it changes. :attr:`title`, the Conversation section's subtitle, names the
    model that answers; :meth:`follow` connects the panel to the session's news."""

    ask_requested = Signal(str)
    stop_requested = Signal()
    time_clicked = Signal(float, object)
    item_time_clicked = Signal(int, float, object)
    question_times_changed = Signal(object)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._answer_card: MessageCard | None = None
        self._pending_text = ""
        self._speed_text = ""  # the footer of the answer being written once its text shows
        self._flush_timer = QTimer(self)
        self._flush_timer.setInterval(_STREAM_FLUSH_MS)
        self._flush_timer.timeout.connect(self._flush)
        line = self.fontMetrics().height()
        self.title = ElidedLabel("")

        self._messages = QWidget()
        self._messages.setBackgroundRole(QPalette.ColorRole.Window)
        self._messages_layout = QVBoxLayout(self._messages)
        self._messages_layout.setContentsMargins(round(line * 0.5), round(line * 0.5), round(line * 0.5), round(line * 0.5))
        self._messages_layout.setSpacing(round(line * 0.6))
        self._messages_layout.addStretch(1)
        self.scroll = QScrollArea()
        self.scroll.setWidgetResizable(True)
        self.scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.scroll.setWidget(self._messages)
        self.scroll.verticalScrollBar().rangeChanged.connect(self._keep_at_bottom)
        self._follow_bottom = True
        self.scroll.verticalScrollBar().valueChanged.connect(self._remember_position)

        self.empty_hint = QLabel("Open a clip, then ask a question about it.\nFollow-up questions keep the conversation.")
        self.empty_hint.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.empty_hint.setForegroundRole(QPalette.ColorRole.PlaceholderText)
        self.empty_hint.setWordWrap(True)
        self._messages_layout.insertWidget(0, self.empty_hint)

        self.question_edit = QuestionEdit()
        self.question_edit.submitted.connect(self.submit)
        self._question_times: list[PlacedTime] = []
        self._items: Callable[[], Sequence[ConversationItem]] = lambda: ()  # the conversation's, once followed
        self.question_edit.textChanged.connect(self._on_question_edited)
        self.send_button = QPushButton("Ask")
        self.send_button.setToolTip("Ask the question (Enter or Ctrl+Return)")
        self.send_button.setDefault(True)
        self.send_button.clicked.connect(self.submit)
        self.stop_button = QPushButton("Stop")
        self.stop_button.setToolTip("Stop the answer (Esc)")
        self.stop_button.clicked.connect(self.stop_requested)
        self.stop_button.setEnabled(False)

        buttons = QVBoxLayout()
        buttons.addWidget(self.send_button)
        buttons.addWidget(self.stop_button)
        buttons.addStretch(1)
        composer = QHBoxLayout()
        composer.addWidget(self.question_edit, 1)
        composer.addLayout(buttons)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.scroll, 1)
        layout.addLayout(composer)
        self._set_button_icons()

    def changeEvent(self, event: QEvent) -> None:  # noqa: N802 - Qt override
        super().changeEvent(event)
        if event.type() == QEvent.Type.PaletteChange:
            self._set_button_icons()

    def _set_button_icons(self) -> None:
        self.send_button.setIcon(glyph_icon(self, QStyle.StandardPixmap.SP_ArrowForward))
        self.stop_button.setIcon(glyph_icon(self, QStyle.StandardPixmap.SP_MediaStop))

    def cards(self) -> list[MessageCard]:
        return [
            self._messages_layout.itemAt(index).widget()
            for index in range(self._messages_layout.count())
            if isinstance(self._messages_layout.itemAt(index).widget(), MessageCard)
        ]

    def answer_cards(self) -> list[MessageCard]:
        return [card for card in self.cards() if card.role == "answer"]

    def submit(self) -> None:
        question = self.question_edit.toPlainText().strip()
        if question and self.send_button.isEnabled():
            self.ask_requested.emit(question)

    def follow(self, session: Session) -> None:
        """Show the session's conversation as it goes, the model that answers, and whether a question can be asked."""
        self._items = session.conversation_items
        signals = session.signals
        signals.engine_changed.connect(self._show_model)
        signals.conversation_reset.connect(self._start_afresh)
        signals.turn_started.connect(lambda turn: self.start_turn(turn, "Thinking…", session.conversation_items()))
        signals.token_received.connect(lambda turn, text: self.append_token(text))
        signals.answer_speed.connect(lambda turn, speed: self.show_speed(live_speed_text(speed)))
        signals.turn_finished.connect(
            lambda turn: self.finish_turn(turn, [item.name for item in session.conversation_items()])
        )
        signals.item_added.connect(lambda clip, done: self.add_notice(added_notice(done)))
        signals.clip_encoded.connect(lambda done: self.add_notice(done.damage) if done.damage else None)
        signals.state_changed.connect(
            lambda: self.show_state(session.answering, session.ask_blocker, session.stop_target)
        )

    def show_state(self, answering: bool, blocker: str | None, stop_target: str | None) -> None:
        """Ask is enabled unless ``blocker`` says why not (its tooltip and the question box's hint say
        it too, but for the next question typed while ``answering``); Stop while there is something to
        stop, which ``stop_target`` names ("reading the clip")."""
        self.send_button.setEnabled(blocker is None)
        self.send_button.setToolTip(blocker or "Ask the question (Enter or Ctrl+Return)")
        self.stop_button.setEnabled(stop_target is not None)
        self.stop_button.setToolTip(f"Stop {stop_target or 'the answer'} (Esc)")
        self._set_question_hint(blocker if blocker and not answering else QUESTION_HINT)

    def _set_question_hint(self, text: str) -> None:
        edit = self.question_edit
        if edit.placeholderText() == text:
            return
        edit.setPlaceholderText(text)
        # QPlainTextEdit repaints only when its hint appears or disappears, not when the hint's text changes.
        edit.viewport().update()

    def _show_model(self, info: EngineInfo) -> None:
        # The model's label (the demo model's) is said by its banner and its answers; the title says the name only.
        self.title.setText(model_title(info))
        self.title.setToolTip(" · ".join([model_text(info), *family_words(info)]))

    def _start_afresh(self, conversation: Conversation, notice: str | None) -> None:
        self.clear()
        if notice:
            self.add_notice(notice)

    def clear(self) -> None:
        self._flush_timer.stop()
        self._pending_text = ""
        self._speed_text = ""
        self._answer_card = None
        for card in self.cards():
            self._messages_layout.removeWidget(card)
            card.deleteLater()
        self.empty_hint.show()

    def replay(self, conversation: Conversation) -> None:
        """Show a kept ``conversation``'s turns in place of the transcript. Only its clip is opened again:
        the times of its answers link to that clip's tab, the others' to the tab shown."""
        self.clear()
        for turn in conversation.turns:
            self.start_turn(turn, "")
            self.finish_turn(turn, [conversation.clip_name or ""])

    def add_notice(self, text: str) -> MessageCard:
        """A line in the transcript that is not part of the conversation (the clip in use, say)."""
        card = MessageCard("notice", "", text, self._messages)
        card.header.hide()
        card.setFrameShape(QFrame.Shape.NoFrame)
        card.setAutoFillBackground(False)
        card.body.setForegroundRole(QPalette.ColorRole.PlaceholderText)
        card.body.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self._append(card)
        return card

    def start_turn(self, turn: Turn, waiting_text: str, items: Sequence[ConversationItem] = ()) -> None:
        """Show ``turn``'s question and an empty answer that tokens will stream into. A time the
        question ties to one of ``items`` (the tabs, in order: "in the second clip at 0:02") links to
        that tab, as an answer's do."""
        self.question_edit.clear()
        question = MessageCard("question", "You", parent=self._messages)
        question.set_text(turn.question, items=[placed.item for placed in place_times(turn.question, items)])
        self._append(question)
        self._answer_card = MessageCard("answer", "", parent=self._messages)
        _show_author(self._answer_card, turn)
        self._answer_card.set_footer(waiting_text)
        self._append(self._answer_card)
        self._follow_bottom = True

    def append_token(self, text: str) -> None:
        """Add streamed text to the answer being written; the screen catches up every few ms."""
        if self._answer_card is None:
            return
        self._pending_text += text
        if not self._flush_timer.isActive():
            self._flush_timer.start()

    def show_speed(self, text: str) -> None:
        """Show ``text``, the speed of the answer being written, under it until the answer ends."""
        self._speed_text = text
        if self._answer_card is not None:
            self._answer_card.set_footer(text)

    def finish_turn(self, turn: Turn, item_names: Sequence[str] = ()) -> None:
        """Replace the streamed text with the final answer (or the error) and show its stats. Its times
        that belong to one of the items named ``item_names`` (the tabs, in order) link to that tab."""
        self._flush_timer.stop()
        self._pending_text = ""
        self._speed_text = ""
        card = self._answer_card
        if card is None:
            return
        _show_author(card, turn)
        items = [item_names.index(name) if name in item_names else None for _, name in turn.times()]
        card.set_text(turn.answer, items=items)
        if turn.status == "failed":
            card.set_text(
                (turn.answer + "\n\n" if turn.answer else "") + f"⚠ {turn.error}", linked_length=len(turn.answer), items=items
            )
        footer = [seen_text(turn)] if turn.saw and turn.status != "failed" else []  # a failed answer saw nothing
        if turn.status == "done" and not turn.answer:
            footer.append("The model wrote no text (only spaces or special tokens)")
        if turn.status == "stopped":
            footer.append("Stopped")
        if turn.status == "interrupted":
            footer.append(INTERRUPTED_TEXT)
        if turn.stats is not None:
            footer.append(format_answer_stats(turn.stats))
        card.set_footer(" · ".join(footer))
        card.copy_button.setEnabled(bool(turn.answer))
        self._answer_card = None

    def _flush(self) -> None:
        card = self._answer_card
        if card is None or not self._pending_text:
            self._flush_timer.stop()
            return
        card.set_footer(self._speed_text)
        card.set_text(card.text() + self._pending_text, complete=False)
        self._pending_text = ""

    def _on_question_edited(self) -> None:
        times = place_times(self.question_edit.toPlainText(), self._items())
        if times != self._question_times:
            self._question_times = times
            self.question_times_changed.emit(times)

    def _append(self, card: MessageCard) -> None:
        self.empty_hint.hide()
        card.time_clicked.connect(self.time_clicked)
        card.item_time_clicked.connect(self.item_time_clicked)
        self._messages_layout.insertWidget(self._messages_layout.count() - 1, card)

    def _remember_position(self, value: int) -> None:
        bar = self.scroll.verticalScrollBar()
        self._follow_bottom = value >= bar.maximum() - self.fontMetrics().height()

    def _keep_at_bottom(self, _minimum: int, maximum: int) -> None:
        if self._follow_bottom:
            self.scroll.verticalScrollBar().setValue(maximum)


def added_notice(done: EncodeDone) -> str:
    """What the conversation says when an item joins it: which clip, picture or span later answers see."""
    if done.span is not None:
        decimals = timestamp_decimals(done.span)
        start, end = (format_timestamp(t, decimals) for t in done.span)
        return f"Looking closer at {start}–{end} ({plural(done.frames, 'frame')}); the answers from here on see this span too."
    what = "picture" if done.kind == "image" else "clip"
    return f"Added the {what} {done.clip_name}; the answers from here on see it too."


def answer_header(turn: Turn) -> str:
    """Who wrote an answer: the model, and the short form of its label when it has one (the demo
    model does): the label's part before its dash, so that every card stays one short line."""
    if not turn.model_label:
        return turn.model_name
    return f"{turn.model_name} · {turn.model_label.split(' — ')[0]}"


def _show_author(card: MessageCard, turn: Turn) -> None:
    card.header.setText(answer_header(turn))
    if turn.model_label:
        card.header.setToolTip(f"{turn.model_name} · {turn.model_label}")


def seen_text(turn: Turn) -> str:
    """Which items an answer saw, when the conversation had several ("" otherwise)."""
    return f"Saw {' + '.join(turn.saw)}" if turn.saw else ""


_TIME_SCHEME = "time:"


_ITEM_MARK = "@"


def time_href(time: TimeMention, item: int | None = None) -> str:
    """The link target of a time: ``time:12.5`` or, for a range, ``time:40.0,52.0``; ``@2`` follows
    for a time that belongs to the item of tab 2."""
    href = f"{_TIME_SCHEME}{time.start_s!r}" + (f",{time.end_s!r}" if time.end_s is not None else "")
    return href if item is None else f"{href}{_ITEM_MARK}{item}"


def _split_item(href: str) -> tuple[str, int | None]:
    """:func:`time_href`'s target without its item, and the item (``None`` when it names none)."""
    target, mark, item = href.partition(_ITEM_MARK)
    return (target, int(item)) if mark and item.isdigit() else (href, None)


def parse_time_href(href: str) -> tuple[float, float | None] | None:
    """``(start_s, end_s)`` from :func:`time_href`'s link target; ``None`` for any other link."""
    if not href.startswith(_TIME_SCHEME):
        return None
    start, _, end = href[len(_TIME_SCHEME) :].partition(",")
    try:
        return float(start), float(end) if end else None
    except ValueError:
        return None


def linked_html(text: str, times: list[TimeMention], items: Sequence[int | None] = ()) -> str:
    """``text`` as rich text keeping its spaces and line breaks, each of ``times`` (spans of it) a link
    (to the tab ``items`` gives it, when it gives one)."""
    pieces: list[str] = []
    position = 0
    for index, time in enumerate(times):
        item = items[index] if index < len(items) else None
        pieces.append(html.escape(text[position : time.start]))
        pieces.append(f'<a href="{time_href(time, item)}">{html.escape(time.text)}</a>')
        position = time.end
    pieces.append(html.escape(text[position:]))
    return f'<span style="white-space: pre-wrap;">{"".join(pieces)}</span>'
