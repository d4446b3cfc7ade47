"""The window's status bar: what is happening, a progress bar for long work, and what the engine runs on."""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import Qt
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import QProgressBar, QStatusBar, QWidget

from framewise.core.events import EngineInfo
from framewise.ui.elided_label import ElidedLabel
from framewise.ui.wording import engine_text, model_text

if TYPE_CHECKING:
    from framewise.ui.session import Session


class StatusBar(QStatusBar):
    """:attr:`message` (one line, elided), :attr:`progress` (shown while a request reports progress)
    and :attr:`engine_label` (the model, device, dtype and encoder; what the model holds in its tooltip).

    The message takes most of the width: a clip's reading progress ends with the time left, which a
    window 1,024 pixels wide must still show; the engine's line gives way first."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.message = ElidedLabel("Starting…")
        self.message.setTextFormat(Qt.TextFormat.PlainText)
        self.progress = QProgressBar()
        self.progress.setMaximumWidth(self.fontMetrics().height() * 14)
        self.progress.setTextVisible(False)
        self.progress.hide()
        self.engine_label = ElidedLabel("")
        self.engine_label.setForegroundRole(QPalette.ColorRole.PlaceholderText)
        self.setSizeGripEnabled(False)
        self._line = "Starting…"  # the status line, under a note (:meth:`note`)
        self.addWidget(self.message, 3)
        self.addPermanentWidget(self.progress)
        self.addPermanentWidget(self.engine_label, 1)

    def follow(self, session: Session) -> None:
        """Show the session's status lines, errors, progress and engine."""
        signals = session.signals
        signals.status_changed.connect(self.say)
        signals.error_raised.connect(lambda text, settings_can_help: self.say(text))
        signals.progress_changed.connect(self.show_progress)
        signals.progress_ended.connect(self.progress.hide)
        signals.engine_changed.connect(self.show_engine)

    def say(self, text: str) -> None:
        self._line = text
        self.message.setText(text)

    def note(self, text: str) -> None:
        """Show ``text`` over the status line until the next note; "" shows the line again."""
        self.message.setText(text or self._line)

    def show_progress(self, current: int, total: int) -> None:
        # A single step under way (encoding a clip in one pass) shows as busy, not as a bar stuck at 0 of 1.
        if total > 1 or (total == 1 and current >= 1):
            self.progress.setRange(0, total)
            self.progress.setValue(current)
        else:
            self.progress.setRange(0, 0)
        self.progress.show()

    def show_engine(self, info: EngineInfo) -> None:
        # The model's label (the demo model's) is said by its banner and its answers; this says the name only.
        self.engine_label.setText(engine_text(info, info.model_name))
        held = info.held_memory
        held_lines = [f"Holds {held.amount_text()}:", *held.lines()] if held else []
        self.engine_label.setToolTip("\n".join([engine_text(info, model_text(info)), *held_lines]))
