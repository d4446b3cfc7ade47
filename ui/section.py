"""A titled area of the main window: a bold title, a dimmer one-line subtitle, then its widgets.

A collapsible section has an arrow before its title; collapsed, it shrinks to its header line (the
subtitle still says the gist) and gives its height back to the sections beside it."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import QHBoxLayout, QLabel, QSizePolicy, QToolButton, QVBoxLayout, QWidget

_NO_LIMIT = 16777215  # QWIDGETSIZE_MAX


class Section(QWidget):
    """``widgets`` get the height in the order given; ``fixed_height`` ones keep their size hint's."""

    def __init__(
        self,
        title: str,
        subtitle: QLabel,
        *widgets: QWidget,
        fixed_height: tuple[QWidget, ...] = (),
        collapsible: bool = False,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.widgets = widgets
        self.heading = QLabel(title)
        font = self.heading.font()
        font.setBold(True)
        font.setPointSizeF(font.pointSizeF() * 1.1)
        self.heading.setFont(font)
        subtitle.setForegroundRole(QPalette.ColorRole.PlaceholderText)
        subtitle.setWordWrap(False)
        self.toggle: QToolButton | None = None
        header = QHBoxLayout()
        if collapsible:
            self.toggle = QToolButton()
            self.toggle.setAutoRaise(True)
            self.toggle.setCheckable(True)
            self.toggle.setChecked(True)
            self.toggle.setArrowType(Qt.ArrowType.DownArrow)
            self.toggle.setToolTip(f"Hide or show the {title} panel")
            self.toggle.setAccessibleName(f"Show the {title} panel")
            self.toggle.toggled.connect(self._show_body)
            header.addWidget(self.toggle)
            self.heading.setBuddy(self.toggle)
        header.addWidget(self.heading)
        header.addSpacing(self.heading.fontMetrics().height() // 2)
        header.addWidget(subtitle, 1)
        self.header = header
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(header)
        for widget in widgets:
            layout.addWidget(widget, 0 if widget in fixed_height else 1)

    def is_collapsed(self) -> bool:
        return self.toggle is not None and not self.toggle.isChecked()

    def set_collapsed(self, collapsed: bool) -> None:
        """Show only the header line (``collapsed``) or the whole section."""
        if self.toggle is not None:
            self.toggle.setChecked(not collapsed)

    def _show_body(self, shown: bool) -> None:
        self.toggle.setArrowType(Qt.ArrowType.DownArrow if shown else Qt.ArrowType.RightArrow)
        for widget in self.widgets:
            widget.setVisible(shown)
        # A splitter sizes its children within their maximum: collapsed, this one takes its header's height.
        self.setMaximumHeight(_NO_LIMIT if shown else self.header.sizeHint().height())
        self.setSizePolicy(
            QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Preferred if shown else QSizePolicy.Policy.Fixed
        )
