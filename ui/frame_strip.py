"""The strip of sampled frames under the preview: one captioned picture per frame the model sees.

The strip is a view over :class:`FrameListModel`, which holds each frame's thumbnail as the
engine sent it (a small numpy array) and makes a row's picture only when the view paints that
row, keeping the most recent :data:`PICTURES_KEPT` of them. Opening a clip of 2,048 frames, or
filling the strip while one is read, therefore costs the window a few list assignments and
one signal per event, never one widget item or one picture per frame.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

import numpy as np
from PySide6.QtCore import QAbstractListModel, QModelIndex, QPersistentModelIndex, QSize, Qt, Signal
from PySide6.QtGui import QIcon, QPixmap
from PySide6.QtWidgets import QAbstractItemView, QListView, QSizePolicy, QStyle, QWidget

from framewise.core.events import ClipSampled, FramesRead
from framewise.ui.frames import format_timestamp, image_from_array

PICTURES_KEPT = 512  # pictures made for rows shown lately; more screenfuls than a strip holds
Index = QModelIndex | QPersistentModelIndex


class FrameListModel(QAbstractListModel):
    """The frames of one clip, or of one still being read: a thumbnail ((h, w, 3) uint8, or None
    for a frame not read yet) and a time in seconds per row.

    While a clip is being read (:meth:`start_reading`) its rows are shown but cannot be selected.
    """

    def __init__(self, icon_size: QSize, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._icon_size = icon_size
        self._thumbnails: list[np.ndarray | None] = []
        self._times: list[float | None] = []
        self._reading = False
        self._pictures: OrderedDict[int, QIcon] = OrderedDict()
        blank = QPixmap(icon_size)
        blank.fill(Qt.GlobalColor.transparent)
        self._blank = QIcon(blank)  # a frame not read yet keeps its place at the same size

    @property
    def reading(self) -> bool:
        """True while the rows are the frames of a clip still being read."""
        return self._reading

    def show_clip(self, thumbnails: Sequence[np.ndarray], times: Sequence[float]) -> None:
        """List a finished clip's frames: those with both a thumbnail and a time."""
        shown = min(len(thumbnails), len(times))
        self._reset(list(thumbnails[:shown]), list(times[:shown]), reading=False)

    def start_reading(self, total: int) -> None:
        """List ``total`` places for the frames of a clip being read, none of them read yet."""
        self._reset([None] * total, [None] * total, reading=True)

    def add_read(self, indices: Sequence[int], times: Sequence[float], thumbnails: Sequence[np.ndarray]) -> None:
        """Fill the places ``indices`` with frames just read; the view repaints them once."""
        for index, time_s, thumbnail in zip(indices, times, thumbnails, strict=True):
            self._thumbnails[index] = thumbnail
            self._times[index] = time_s
            self._pictures.pop(index, None)
        if indices:
            self.dataChanged.emit(self.index(min(indices)), self.index(max(indices)))

    def rowCount(self, parent: Index = QModelIndex()) -> int:  # noqa: N802 - Qt override
        return 0 if parent.isValid() else len(self._times)

    def flags(self, index: Index) -> Qt.ItemFlag:
        if self._reading:
            return Qt.ItemFlag.ItemIsEnabled  # shown, not selectable: the preview still shows the clip before
        return Qt.ItemFlag.ItemIsEnabled | Qt.ItemFlag.ItemIsSelectable

    def data(self, index: Index, role: int = Qt.ItemDataRole.DisplayRole) -> object:
        row = index.row()
        if not index.isValid() or not 0 <= row < len(self._times):
            return None
        time_s = self._times[row]
        if role == Qt.ItemDataRole.DisplayRole:
            return "" if time_s is None else format_timestamp(time_s)
        if role == Qt.ItemDataRole.DecorationRole:
            return self._picture(row)
        if role == Qt.ItemDataRole.ToolTipRole and time_s is not None:
            so_far = ", read so far" if self._reading else ""
            return f"Frame {row + 1} of {len(self._times)} at {time_s:.2f} s{so_far}"
        if role == Qt.ItemDataRole.TextAlignmentRole:
            return Qt.AlignmentFlag.AlignHCenter
        return None

    def _picture(self, row: int) -> QIcon:
        """``row``'s thumbnail scaled to the icon size, made now unless it was lately."""
        if row in self._pictures:
            self._pictures.move_to_end(row)
            return self._pictures[row]
        thumbnail = self._thumbnails[row]
        if thumbnail is None:
            return self._blank
        pixmap = QPixmap.fromImage(image_from_array(thumbnail)).scaled(
            self._icon_size, Qt.AspectRatioMode.KeepAspectRatio, Qt.TransformationMode.SmoothTransformation
        )
        self._pictures[row] = QIcon(pixmap)
        if len(self._pictures) > PICTURES_KEPT:
            self._pictures.popitem(last=False)
        return self._pictures[row]

    def _reset(self, thumbnails: list[np.ndarray | None], times: list[float | None], *, reading: bool) -> None:
        self.beginResetModel()
        self._thumbnails, self._times, self._reading = thumbnails, times, reading
        self._pictures.clear()
        self.endResetModel()


class FrameStrip(QListView):
    """A horizontal strip of the sampled frames, each captioned with its timestamp.

    ``frame_selected(index)`` is emitted when a person picks a frame of a finished clip.
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
        self._filling: int | None = None  # the request whose frames are arriving (add_frames)
        self._following = False  # the current frame is being moved to follow the preview, not picked
        self.selectionModel().currentRowChanged.connect(self._on_row_changed)

    def set_clip(self, clip: ClipSampled | None) -> None:
        """List ``clip``'s frames (none for ``None``)."""
        self._filling = None
        self._frames.show_clip(clip.thumbnails if clip else (), clip.timestamps if clip else ())

    def add_frames(self, frames: FramesRead) -> None:
        """Show frames of a clip still being read: the first frames of a request list
        ``frames.total`` empty places, and each call fills the places of the frames it brings.
        They cannot be picked yet (the preview still shows the clip before); :meth:`set_clip`
        replaces them with the finished clip."""
        if self._filling != frames.request_id or self.count() != frames.total:
            self._frames.start_reading(frames.total)
            self._filling = frames.request_id
        self._frames.add_read(frames.indices, frames.timestamps, frames.thumbnails)

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
        # a frame of a clip still being read cannot be picked: the preview shows the clip before it
        if current.row() >= 0 and not self._following and not self._frames.reading:
            self.frame_selected.emit(current.row())

    def _strip_height(self) -> int:
        line = self.fontMetrics().height()
        scrollbar = self.style().pixelMetric(QStyle.PixelMetric.PM_ScrollBarExtent)
        return self.iconSize().height() + line + 3 * self.spacing() + scrollbar + 2 * self.frameWidth()
