"""The window's left column: the Clip section above the Encoder section, the clip first.

The clip gets the height that shows its frame 16:9 across the column (with its controls, strip and
header); the Encoder section gets the height left. Where that is less than its figures need, the
section folds to its header line, whose subtitle still gives the live figures; a person can unfold
it, and then it takes the height its figures need from the clip. Once a person drags the handle
between them or folds or unfolds the section, the column keeps their choice as the window resizes.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QResizeEvent
from PySide6.QtWidgets import QSplitter, QWidget

from framewise.ui.clip_section import ClipSection
from framewise.ui.metrics import EncoderPanel
from framewise.ui.section import Section


class ClipColumn(QSplitter):
    """``clip`` above ``encoder`` (the Encoder section, collapsible, showing ``panel``)."""

    def __init__(self, clip: ClipSection, encoder: Section, panel: EncoderPanel, parent: QWidget | None = None) -> None:
        super().__init__(Qt.Orientation.Vertical, parent)
        self.clip, self.encoder, self.panel = clip, encoder, panel
        self.addWidget(clip)
        self.addWidget(encoder)
        self.setStretchFactor(0, 1)
        self.setStretchFactor(1, 0)
        self.setChildrenCollapsible(False)
        self._by_hand = False
        self.splitterMoved.connect(self._taken_by_hand)
        assert encoder.toggle is not None, "the Encoder section folds"
        encoder.toggle.clicked.connect(self._taken_by_hand)
        encoder.collapsed_changed.connect(lambda collapsed: self.share_height())

    def arrange(self) -> None:
        """Fold the Encoder section where the height left under the clip cannot show its figures, unfold
        it where it can, and share the height out (until a person has arranged the column)."""
        total = self._total()
        if total <= 0 or self._by_hand:
            return
        # Judged at the width the column has with the section open: its figures may widen the column,
        # and a clip drawn wider is taller. Judged at the folded width, a window where the open section
        # just misses would unfold and fold again without end.
        width = max(self.width(), self._open_minimum_width())
        room = total - self.clip.height_for_width(width)
        self.encoder.set_collapsed(room < self._encoder_open_height(width))  # shares the height when it changes
        self.share_height()

    def share_height(self) -> None:
        """The clip its height first, the Encoder section the rest: its header line when folded, at
        least its figures' height when not."""
        total = self._total()
        if total <= 0:
            return
        if self.encoder.is_collapsed:
            encoder = self.encoder.maximumHeight()
        else:
            left = total - self.clip.height_for_width(self.width())
            encoder = min(max(left, self._encoder_open_height(self.width())), total - self.clip.minimumSizeHint().height())
        self.setSizes([total - encoder, encoder])

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 - Qt override
        super().resizeEvent(event)
        self.arrange()

    def _encoder_open_height(self, width: int) -> int:
        """The Encoder section's height with its figures shown whole in a column ``width`` pixels wide."""
        return self.encoder.header.sizeHint().height() + self.panel.figures_height(width)

    def _open_minimum_width(self) -> int:
        """The least width the column takes with the Encoder section open (its panel shown)."""
        return max(self.clip.minimumSizeHint().width(), self.panel.minimumSizeHint().width())

    def _total(self) -> int:
        return sum(self.sizes())

    def _taken_by_hand(self, *_args: object) -> None:
        self._by_hand = True
