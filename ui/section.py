"""A titled area of the main window: a bold title, a dimmer one-line subtitle, then its widgets.

A collapsible section has an arrow before its title; collapsed, it shrinks to its header line (the
subtitle still says the gist) and gives its height back to the sections beside it."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import QHBoxLayout, QLabel, QSizePolicy, QToolButton, QVBoxLayout, QWidget

_NO_LIMIT = 16777215  # QWIDGETSIZE_MAX


class Section(QWidget):
    """``widgets`` get the height in the order given; ``fixed_height`` ones keep their size hint's.

    ``collapsed_changed(collapsed)`` follows :meth:`set_collapsed` and clicks on the arrow."""

    collapsed_changed = Signal(bool)

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
        self._collapsed = False
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
            self.toggle.setArrowType(Qt.ArrowType.DownArrow)
            self.toggle.setToolTip(f"Hide or show the {title} panel")
            self.toggle.setAccessibleName(f"Hide or show the {title} panel")
            self.toggle.clicked.connect(lambda: self.set_collapsed(not self._collapsed))
            header.addWidget(self.toggle)
        header.addWidget(self.heading)
        header.addSpacing(self.heading.fontMetrics().height() // 2)
        header.addWidget(subtitle, 1)
        self.header = header
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(header)
        for widget in widgets:
            layout.addWidget(widget, 0 if widget in fixed_height else 1)

    @property
    def is_collapsed(self) -> bool:
        return self._collapsed

    def set_collapsed(self, collapsed: bool) -> None:
        """Show only the header line (``collapsed``) or the whole section (a section made collapsible)."""
        if self.toggle is None or collapsed == self._collapsed:
            return
        self._collapsed = collapsed
        self.toggle.setArrowType(Qt.ArrowType.RightArrow if collapsed else Qt.ArrowType.DownArrow)
        for widget in self.widgets:
            widget.setVisible(not collapsed)
        # A splitter sizes its children within their maximum: collapsed, this one takes its header's height.
        self.setMaximumHeight(self.header.sizeHint().height() if collapsed else _NO_LIMIT)
        self.setSizePolicy(
            QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Fixed if collapsed else QSizePolicy.Policy.Preferred
        )
        self.collapsed_changed.emit(collapsed)
