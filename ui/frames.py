"""The clip preview and the strip of sampled frames.

Both show the frames the model sees (``ClipSampled.thumbnails``) at their timestamps: the preview
plays them back in clip time with play/pause and a seek slider, the strip lists them all.
"""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import QRectF, QSize, Qt, QTimer, Signal
from PySide6.QtGui import QIcon, QImage, QPainter, QPalette, QPixmap
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QLabel,
    QListView,
    QListWidget,
    QListWidgetItem,
    QSizePolicy,
    QSlider,
    QStyle,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from framewise.core.events import ClipSampled

_MIN_FRAME_INTERVAL_MS = 40


def image_from_array(frame: np.ndarray) -> QImage:
    """A ``QImage`` owning a copy of ``frame``: uint8 (h, w, 3) RGB."""
    if frame.dtype != np.uint8 or frame.ndim != 3 or frame.shape[2] != 3:
        raise ValueError(f"expected a uint8 (h, w, 3) RGB frame, got {frame.dtype} {frame.shape}")
    frame = np.ascontiguousarray(frame)
    height, width, _ = frame.shape
    return QImage(frame.data, width, height, 3 * width, QImage.Format.Format_RGB888).copy()


def format_timestamp(seconds: float) -> str:
    """``75.25`` -> ``"1:15.2"``; hours are added when needed (``"1:02:03.0"``)."""
    seconds = max(0.0, seconds)
    minutes, secs = divmod(seconds, 60.0)
    hours, minutes = divmod(int(minutes), 60)
    text = f"{minutes}:{secs:04.1f}"
    return f"{hours}:{minutes:02d}:{secs:04.1f}" if hours else text


class FrameView(QWidget):
    """Paints one frame scaled to fit, keeping its aspect ratio; shows a hint when empty."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._image: QImage | None = None
        self._placeholder = ""
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)
        self.setMinimumHeight(self.fontMetrics().height() * 8)

    def set_image(self, image: QImage | None) -> None:
        self._image = image
        self.update()

    def set_placeholder(self, text: str) -> None:
        self._placeholder = text
        self.update()

    def sizeHint(self) -> QSize:
        line = self.fontMetrics().height()
        return QSize(line * 30, line * 17)

    def paintEvent(self, event) -> None:  # noqa: N802 - Qt override
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.SmoothPixmapTransform)
        painter.fillRect(self.rect(), self.palette().color(QPalette.ColorRole.Dark if self._image else QPalette.ColorRole.Base))
        if self._image is None or self._image.isNull():
            painter.setPen(self.palette().color(QPalette.ColorRole.PlaceholderText))
            painter.drawText(self.rect(), Qt.AlignmentFlag.AlignCenter | Qt.TextFlag.TextWordWrap, self._placeholder)
            return
        size = self._image.size().scaled(self.size(), Qt.AspectRatioMode.KeepAspectRatio)
        left = (self.width() - size.width()) / 2
        top = (self.height() - size.height()) / 2
        painter.drawImage(QRectF(left, top, size.width(), size.height()), self._image)


class ClipPreview(QWidget):
    """Plays the sampled frames at their timestamps; play/pause, a seek slider, and the time.

    ``frame_changed(index)`` is emitted whenever the shown frame changes.
    """

    frame_changed = Signal(int)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._images: list[QImage] = []
        self._timestamps: tuple[float, ...] = ()
        self._duration = 0.0
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.timeout.connect(self._advance)

        self.view = FrameView()
        self.view.set_placeholder("Drop a video clip anywhere in the window\nor open one with File ▸ Open (Ctrl+O)")
        self.play_button = QToolButton()
        self.play_button.setAutoRaise(True)
        self.play_button.setToolTip("Play or pause the sampled frames (Space)")
        self.play_button.clicked.connect(self.toggle_playing)
        self.slider = QSlider(Qt.Orientation.Horizontal)
        self.slider.setToolTip("Seek")
        self.slider.valueChanged.connect(self._show_frame)
        self.time_label = QLabel()
        self.time_label.setTextInteractionFlags(Qt.TextInteractionFlag.NoTextInteraction)

        controls = QHBoxLayout()
        controls.setContentsMargins(0, 0, 0, 0)
        controls.addWidget(self.play_button)
        controls.addWidget(self.slider, 1)
        controls.addWidget(self.time_label)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.view, 1)
        layout.addLayout(controls)
        self.set_clip(None)

    @property
    def is_playing(self) -> bool:
        return self._timer.isActive()

    @property
    def current_index(self) -> int:
        return self.slider.value()

    def set_clip(self, clip: ClipSampled | None) -> None:
        """Show ``clip``'s frames from the first one; ``None`` empties the preview."""
        self.pause()
        self._images = [image_from_array(frame) for frame in clip.thumbnails] if clip else []
        self._timestamps = clip.timestamps if clip else ()
        self._duration = clip.duration_s if clip else 0.0
        has_frames = bool(self._images)
        self.slider.blockSignals(True)
        self.slider.setRange(0, max(0, len(self._images) - 1))
        self.slider.setValue(0)
        self.slider.blockSignals(False)
        for widget in (self.slider, self.play_button):
            widget.setEnabled(has_frames)
        self._show_frame(0)

    def seek(self, index: int) -> None:
        self.slider.setValue(index)

    def toggle_playing(self) -> None:
        if self.is_playing:
            self.pause()
        else:
            self.play()

    def play(self) -> None:
        if len(self._images) < 2:
            return
        if self.slider.value() >= len(self._images) - 1:
            self.slider.setValue(0)
        self._schedule_next()
        self._update_play_icon()

    def pause(self) -> None:
        self._timer.stop()
        self._update_play_icon()

    def _schedule_next(self) -> None:
        index = self.slider.value()
        if index >= len(self._images) - 1:
            self.pause()
            return
        interval_s = self._timestamps[index + 1] - self._timestamps[index]
        self._timer.start(max(_MIN_FRAME_INTERVAL_MS, round(interval_s * 1000)))

    def _advance(self) -> None:
        self.slider.setValue(self.slider.value() + 1)
        self._schedule_next()
        self._update_play_icon()

    def _show_frame(self, index: int) -> None:
        if not self._images:
            self.view.set_image(None)
            self.time_label.setText("–:–– / –:––")
            self._update_play_icon()
            return
        self.view.set_image(self._images[index])
        self.time_label.setText(f"{format_timestamp(self._timestamps[index])} / {format_timestamp(self._duration)}")
        self.frame_changed.emit(index)

    def _update_play_icon(self) -> None:
        icon = QStyle.StandardPixmap.SP_MediaPause if self.is_playing else QStyle.StandardPixmap.SP_MediaPlay
        self.play_button.setIcon(self.style().standardIcon(icon))


class FrameStrip(QListWidget):
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
        self.currentRowChanged.connect(self._on_row_changed)

    def set_clip(self, clip: ClipSampled | None) -> None:
        self.blockSignals(True)
        self.clear()
        if clip is not None:
            for index, (frame, timestamp) in enumerate(zip(clip.thumbnails, clip.timestamps)):
                pixmap = QPixmap.fromImage(image_from_array(frame)).scaled(
                    self.iconSize(), Qt.AspectRatioMode.KeepAspectRatio, Qt.TransformationMode.SmoothTransformation
                )
                item = QListWidgetItem(QIcon(pixmap), format_timestamp(timestamp))
                item.setToolTip(f"Frame {index + 1} of {len(clip.timestamps)} at {timestamp:.2f} s")
                item.setTextAlignment(Qt.AlignmentFlag.AlignHCenter)
                self.addItem(item)
        self.blockSignals(False)

    def timestamp_texts(self) -> list[str]:
        """The captions shown under the frames, in order."""
        return [self.item(row).text() for row in range(self.count())]

    def select_frame(self, index: int) -> None:
        if 0 <= index < self.count() and index != self.currentRow():
            self.blockSignals(True)
            self.setCurrentRow(index)
            self.blockSignals(False)
            self.scrollToItem(self.item(index))

    def _on_row_changed(self, row: int) -> None:
        if row >= 0:
            self.frame_selected.emit(row)

    def _strip_height(self) -> int:
        line = self.fontMetrics().height()
        scrollbar = self.style().pixelMetric(QStyle.PixelMetric.PM_ScrollBarExtent)
        return self.iconSize().height() + line + 3 * self.spacing() + scrollbar + 2 * self.frameWidth()
