"""The strip of sampled frames under the preview: one captioned picture per frame the model sees.

The strip is a view over :class:`FrameListModel`, which holds each frame's thumbnail as the
engine sent it (a small numpy array) and makes a row's picture only when the view paints that
row, keeping the most recent :data:`PICTURES_KEPT` of them. Opening a clip of 2,048 frames
therefore costs the window a few list assignments and one signal, never one widget item or one
picture per frame. The strip shows the open clip's frames only: a clip being read joins the
window, strip and all, when the engine has opened it.

Where pruning dropped some of a clip's video tokens, each picture carries a thin bar along its
bottom edge, filled to the share of its frame pair's tokens that were kept.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

import numpy as np
from PySide6.QtCore import QAbstractListModel, QModelIndex, QPersistentModelIndex, QRect, QSize, Qt, Signal
from PySide6.QtGui import QColor, QIcon, QPainter, QPalette, QPixmap
from PySide6.QtWidgets import QAbstractItemView, QListView, QSizePolicy, QStyle, QWidget

from framewise.core.events import ClipSampled
from framewise.ui.frames import format_timestamp, image_from_array, timestamp_decimals

PICTURES_KEPT = 512  # pictures made for rows shown lately; more screenfuls than a strip holds
Index = QModelIndex | QPersistentModelIndex


class FrameListModel(QAbstractListModel):
    """The frames of one clip: a thumbnail ((h, w, 3) uint8) and a time in seconds per row; once a
    pruned clip is encoded, the share of each frame's tokens kept (:meth:`show_kept`)."""

    def __init__(self, icon_size: QSize, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._icon_size = icon_size
        self._thumbnails: list[np.ndarray] = []
        self._times: list[float] = []
        self._decimals = 1  # of the captions: as many as tell neighbouring frames apart
        self._pictures: OrderedDict[int, QIcon] = OrderedDict()
        self._kept: list[float] = []  # per row, the share of its tokens pruning kept; empty: none ran
        self._kept_color = QColor(Qt.GlobalColor.white)

    def show_clip(self, thumbnails: Sequence[np.ndarray], times: Sequence[float]) -> None:
        """List a clip's frames: those with both a thumbnail and a time."""
        shown = min(len(thumbnails), len(times))
        self.beginResetModel()
        self._thumbnails, self._times, self._kept = list(thumbnails[:shown]), list(times[:shown]), []
        self._decimals = timestamp_decimals(self._times)
        self._pictures.clear()
        self.endResetModel()

    def show_kept(self, shares: Sequence[float], color: QColor) -> None:
        """Mark each row's picture with the share of its tokens pruning kept, a bar in ``color``
        (``shares`` empty, or not one per row: no marks)."""
        kept = list(shares) if len(shares) == len(self._times) else []
        if kept == self._kept:
            return
        self._kept, self._kept_color = kept, color
        self._pictures.clear()
        if self._times:
            self.dataChanged.emit(self.index(0), self.index(len(self._times) - 1))

    def rowCount(self, parent: Index = QModelIndex()) -> int:  # noqa: N802 - Qt override
        return 0 if parent.isValid() else len(self._times)

    def flags(self, index: Index) -> Qt.ItemFlag:
        return Qt.ItemFlag.ItemIsEnabled | Qt.ItemFlag.ItemIsSelectable

    def data(self, index: Index, role: int = Qt.ItemDataRole.DisplayRole) -> object:
        row = index.row()
        if not index.isValid() or not 0 <= row < len(self._times):
            return None
        time_s = self._times[row]
        if role == Qt.ItemDataRole.DisplayRole:
            return format_timestamp(time_s, self._decimals)
        if role == Qt.ItemDataRole.DecorationRole:
            return self._picture(row)
        if role == Qt.ItemDataRole.ToolTipRole:
            kept = f"; pruning kept {self._kept[row]:.0%} of its video tokens" if self._kept else ""
            return f"Frame {row + 1} of {len(self._times)} at {time_s:.2f} s{kept}"
        if role == Qt.ItemDataRole.TextAlignmentRole:
            return Qt.AlignmentFlag.AlignHCenter
        return None

    def _picture(self, row: int) -> QIcon:
        """``row``'s thumbnail scaled to the icon size, made now unless it was lately."""
        if row in self._pictures:
            self._pictures.move_to_end(row)
            return self._pictures[row]
        pixmap = QPixmap.fromImage(image_from_array(self._thumbnails[row])).scaled(
            self._icon_size, Qt.AspectRatioMode.KeepAspectRatio, Qt.TransformationMode.SmoothTransformation
        )
        if self._kept:
            _draw_kept_bar(pixmap, self._kept[row], self._kept_color)
        self._pictures[row] = QIcon(pixmap)
        if len(self._pictures) > PICTURES_KEPT:
            self._pictures.popitem(last=False)
        return self._pictures[row]


def _draw_kept_bar(pixmap: QPixmap, share: float, color: QColor) -> None:
    """Paint along ``pixmap``'s bottom edge a thin dark track, filled in ``color`` from the left to
    ``share`` (0..1) of its width."""
    height = max(3, pixmap.height() // 12)
    top = pixmap.height() - height
    painter = QPainter(pixmap)
    painter.fillRect(QRect(0, top, pixmap.width(), height), QColor(0, 0, 0, 170))
    painter.fillRect(QRect(0, top, round(pixmap.width() * min(max(share, 0.0), 1.0)), height), color)
    painter.end()


class FrameStrip(QListView):
    """A horizontal strip of the sampled frames, each captioned with its timestamp.

    ``frame_selected(index)`` is emitted when a person picks a frame.
    """

    frame_selected = Signal(int)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        line = self.fontMetrics().height()
        self.setViewMode(QListView.ViewMode.IconMode)
        self.setFlow(QListView.Flow.LeftToRight)
        self.setWrapping(False)
        self.setMovement(QListView.Movement.Static)
        self.setDragEnabled(False)
        self.setAcceptDrops(False)
        self.setResizeMode(QListView.ResizeMode.Adjust)
        self.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.setHorizontalScrollMode(QAbstractItemView.ScrollMode.ScrollPerPixel)
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setIconSize(QSize(round(line * 5.5), round(line * 3.2)))
        self.setSpacing(max(2, line // 5))
        self.setUniformItemSizes(True)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.setFixedHeight(self._strip_height())
        self.setToolTip("Frames sampled from the clip, as the model sees them")
        self._frames = FrameListModel(self.iconSize(), self)
        self.setModel(self._frames)
        self._following = False  # the current frame is being moved to follow the preview, not picked
        self.selectionModel().currentRowChanged.connect(self._on_row_changed)

    def set_clip(self, clip: ClipSampled | None) -> None:
        """List ``clip``'s frames (none for ``None``)."""
        self._frames.show_clip(clip.thumbnails if clip else (), clip.timestamps if clip else ())

    def show_kept(self, shares: Sequence[float]) -> None:
        """Mark each frame with the share of its video tokens pruning kept (``()``: none ran)."""
        self._frames.show_kept(shares, self.palette().color(QPalette.ColorRole.Highlight))

    def count(self) -> int:
        return self._frames.rowCount()

    def currentRow(self) -> int:  # noqa: N802 - named as QListWidget's
        return self.currentIndex().row()

    def setCurrentRow(self, row: int) -> None:  # noqa: N802 - named as QListWidget's
        self.setCurrentIndex(self._frames.index(row))

    def select_frame(self, index: int) -> None:
        """Make frame ``index`` the current one, following the preview (no :attr:`frame_selected`)."""
        if 0 <= index < self.count() and index != self.currentRow():
            self._following = True
            try:
                self.setCurrentRow(index)
            finally:
                self._following = False
            self.scrollTo(self._frames.index(index))

    def _on_row_changed(self, current: QModelIndex, previous: QModelIndex) -> None:
        if current.row() >= 0 and not self._following:
            self.frame_selected.emit(current.row())

    def _strip_height(self) -> int:
        line = self.fontMetrics().height()
        scrollbar = self.style().pixelMetric(QStyle.PixelMetric.PM_ScrollBarExtent)
        return self.iconSize().height() + line + 3 * self.spacing() + scrollbar + 2 * self.frameWidth()
