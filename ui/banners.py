"""Banners across the top of the window for facts a person should know before trusting an answer."""

from __future__ import annotations

from typing import Callable

from PySide6.QtCore import Qt
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton, QStyle, QToolButton, QWidget


class Banner(QFrame):
    """An icon, a message, an optional action button, and a close button. Colours come from the palette."""

    def __init__(
        self,
        text: str,
        *,
        icon: QStyle.StandardPixmap = QStyle.StandardPixmap.SP_MessageBoxInformation,
        action_text: str | None = None,
        action: Callable[[], None] | None = None,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.setAutoFillBackground(True)
        self.setBackgroundRole(QPalette.ColorRole.AlternateBase)
        line = self.fontMetrics().height()
        self.icon = QLabel()
        self.icon.setPixmap(self.style().standardIcon(icon).pixmap(round(line * 1.3), round(line * 1.3)))
        self.label = QLabel(text)
        self.label.setWordWrap(True)
        self.label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(round(line * 0.6), round(line * 0.35), round(line * 0.35), round(line * 0.35))
        layout.setSpacing(round(line * 0.6))
        layout.addWidget(self.icon, 0, Qt.AlignmentFlag.AlignTop)
        layout.addWidget(self.label, 1)
        self.action_button: QPushButton | None = None
        if action_text and action:
            self.action_button = QPushButton(action_text)
            self.action_button.clicked.connect(action)
            layout.addWidget(self.action_button, 0, Qt.AlignmentFlag.AlignVCenter)
        close = QToolButton()
        close.setAutoRaise(True)
        close.setIcon(self.style().standardIcon(QStyle.StandardPixmap.SP_TitleBarCloseButton))
        close.setToolTip("Hide this message")
        close.clicked.connect(self.hide)
        layout.addWidget(close, 0, Qt.AlignmentFlag.AlignTop)

    def text(self) -> str:
        return self.label.text()

    def set_text(self, text: str) -> None:
        self.label.setText(text)
