"""Banners across the top of the window for facts a person should know before trusting an answer.

All banners share one :class:`BannerArea`, which shows one at a time (the most important raised one)
with a "1 of 3" count and a button to step to the next, so the window never loses more than one
banner's height to them."""

from __future__ import annotations

from typing import Callable

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton, QStyle, QToolButton, QWidget


class Banner(QFrame):
    """An icon, a message, an optional action button, and a close button. Colours come from the palette.

    Give an action only when it can fix what the banner says."""

    dismissed = Signal()

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
        self.row = QHBoxLayout(self)
        self.row.setContentsMargins(round(line * 0.6), round(line * 0.35), round(line * 0.35), round(line * 0.35))
        self.row.setSpacing(round(line * 0.6))
        self.row.addWidget(self.icon, 0, Qt.AlignmentFlag.AlignTop)
        self.row.addWidget(self.label, 1)
        self.action_button: QPushButton | None = None
        if action_text and action:
            self.action_button = QPushButton(action_text)
            self.action_button.clicked.connect(action)
            self.row.addWidget(self.action_button, 0, Qt.AlignmentFlag.AlignVCenter)
        self.close_button = QToolButton()
        self.close_button.setAutoRaise(True)
        self.close_button.setIcon(self.style().standardIcon(QStyle.StandardPixmap.SP_TitleBarCloseButton))
        self.close_button.setToolTip("Hide this message")
        self.close_button.clicked.connect(self.dismissed)
        self.row.addWidget(self.close_button, 0, Qt.AlignmentFlag.AlignTop)

    def text(self) -> str:
        return self.label.text()

    def set_text(self, text: str) -> None:
        self.label.setText(text)


class BannerArea(QWidget):
    """One row for every banner: the most important raised banner is shown, the others wait behind it.

    ``banners`` are given most important first. :meth:`post` raises a banner (or brings it back after
    it was dismissed), :meth:`dismiss` takes it down; the area hides itself when none is raised."""

    def __init__(self, banners: list[Banner], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.banners = list(banners)
        self._raised: list[Banner] = []
        self._current: Banner | None = None
        self.count_label = QLabel()
        self.next_button = QToolButton()
        self.next_button.setAutoRaise(True)
        self.next_button.setArrowType(Qt.ArrowType.RightArrow)
        self.next_button.setToolTip("Show the next message")
        self.next_button.clicked.connect(self.show_next)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        for banner in self.banners:
            banner.hide()
            banner.dismissed.connect(lambda banner=banner: self.dismiss(banner))
            layout.addWidget(banner, 1)
        # The count and the step button sit inside the shown banner's frame, before its close button.
        self.stepper = QWidget(self)
        stepper_row = QHBoxLayout(self.stepper)
        stepper_row.setContentsMargins(0, 0, 0, 0)
        stepper_row.addWidget(self.count_label)
        stepper_row.addWidget(self.next_button)
        self._refresh()

    def raised(self) -> list[Banner]:
        """The banners raised now, most important first."""
        return [banner for banner in self.banners if banner in self._raised]

    def current(self) -> Banner | None:
        """The banner on show, or None when none is raised."""
        return self._current

    def post(self, banner: Banner) -> None:
        """Raise ``banner``; it is shown at once when it is the most important one raised."""
        if banner not in self._raised:
            self._raised.append(banner)
        self._current = self.raised()[0]
        self._refresh()

    def dismiss(self, banner: Banner) -> None:
        """Take ``banner`` down; the next most important raised one (if any) takes its place."""
        if banner in self._raised:
            self._raised.remove(banner)
        if self._current is banner or self._current not in self._raised:
            raised = self.raised()
            self._current = raised[0] if raised else None
        self._refresh()

    def set_raised(self, banner: Banner, raised: bool) -> None:
        """:meth:`post` when ``raised``, else :meth:`dismiss`."""
        if raised:
            self.post(banner)
        else:
            self.dismiss(banner)

    def show_next(self) -> None:
        """Show the raised banner after the one on show (wrapping round)."""
        raised = self.raised()
        if len(raised) > 1 and self._current in raised:
            self._current = raised[(raised.index(self._current) + 1) % len(raised)]
            self._refresh()

    def _refresh(self) -> None:
        raised = self.raised()
        for banner in self.banners:
            banner.setVisible(banner is self._current)
        if self._current is not None:
            row = self._current.row
            row.insertWidget(row.indexOf(self._current.close_button), self.stepper, 0, Qt.AlignmentFlag.AlignTop)
            self.count_label.setText(f"{raised.index(self._current) + 1} of {len(raised)}")
        self.stepper.setVisible(len(raised) > 1)
        self.setVisible(self._current is not None)
