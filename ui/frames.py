"""The clip preview and its timeline.

The preview plays the clip itself (decoded on :class:`~framewise.ui.playback.PlaybackThread`), with a
timeline whose ticks mark the frames the model sees; the strip under it
(:class:`~framewise.ui.frame_strip.FrameStrip`) lists those frames with their timestamps, and picking
one seeks the preview there. The timeline also shows a selected span (a time range clicked in an
answer) and the times the question being typed mentions.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence

import numpy as np
from PySide6.QtCore import QEvent, QPointF, QRectF, QSize, Qt, Signal
from PySide6.QtGui import QColor, QImage, QPainter, QPalette, QPen, QPolygonF
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QSizePolicy,
    QStyle,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from framewise.core.events import ClipSampled
from framewise.core.timecodes import TimeMention
from framewise.ui.icons import glyph_icon
from framewise.ui.playback import PlaybackThread

def image_from_array(frame: np.ndarray) -> QImage:
    """A ``QImage`` owning a copy of ``frame``: uint8 (h, w, 3) RGB."""
    if frame.dtype != np.uint8 or frame.ndim != 3 or frame.shape[2] != 3:
        raise ValueError(f"expected a uint8 (h, w, 3) RGB frame, got {frame.dtype} {frame.shape}")
    frame = np.ascontiguousarray(frame)
    height, width, _ = frame.shape
    return QImage(frame.data, width, height, 3 * width, QImage.Format.Format_RGB888).copy()


def nearest_index(timestamps: tuple[float, ...], seconds: float) -> int:
    """The index of the timestamp nearest ``seconds`` (the earlier one on a tie); -1 when there are none."""
    if not timestamps:
        return -1
    return min(range(len(timestamps)), key=lambda index: abs(timestamps[index] - seconds))


def format_timestamp(seconds: float, decimals: int = 1) -> str:
    """``75.25`` -> ``"1:15.3"``, with ``decimals`` digits of the second; hours are added when needed
    (``"1:02:03.0"``). Halves round up, so frames half a second apart read half a second apart
    (0.25 and 0.75 s: "0:00.3" and "0:00.8", where Python's own rounding of 0.25 gives 0.2)."""
    scale = 10**decimals
    units = math.floor(max(0.0, seconds) * scale + 0.5 + 1e-6)  # the 1e-6: 1.15 is 1.1499… in binary
    whole, fraction = divmod(units, scale)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    text = f"{secs:02d}.{fraction:0{decimals}d}"
    return f"{hours}:{minutes:02d}:{text}" if hours else f"{minutes}:{text}"


def timestamp_decimals(times: Sequence[float]) -> int:
    """The fewest decimals, from 1 to 3, at which neighbouring ``times`` read apart: a closer look's
    frames can be less than a tenth of a second apart."""
    for decimals in (1, 2):
        labels = [format_timestamp(time, decimals) for time in times]
        if all(first != second for first, second in zip(labels, labels[1:])):
            return decimals
    return 3


class FrameView(QWidget):
    """Paints one frame scaled to fit, keeping its aspect ratio; shows a hint when empty."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._image: QImage | None = None
        self._placeholder = ""
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)
        self.setMinimumHeight(self.fontMetrics().height() * 5)

    @property
    def image(self) -> QImage | None:
        return self._image

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


MIN_TICK_GAP_PX = 2.0  # closer ticks would merge into one bar
DENSE_TICK_PX = 4  # below this many pixels per tick, ticks are drawn thin and shaded


class Timeline(QWidget):
    """The clip's time as a track: a tick for each sampled frame, the playhead, and seeking by click, drag or keys.

    Over the track: the selected span, filled (:meth:`select_span`), and the times the question being
    typed mentions, outlined (:meth:`set_question_times`). ``seek_requested(seconds)`` is emitted when a
    person moves the playhead.
    """

    seek_requested = Signal(float)
    span_changed = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._span_anchor: float | None = None  # where a Shift-drag selecting a span began
        self._duration = 0.0
        self._marks: tuple[float, ...] = ()
        self._position = 0.0
        self._span: tuple[float, float] | None = None
        self._question_times: tuple[tuple[float, float | None], ...] = ()
        self._ticks: tuple[QSize, list[float]] | None = None  # tick_xs() at a size, until the clip changes
        self.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.setToolTip(
            "The clip's timeline; ticks mark the frames the model sees, a filled span is a time range clicked in "
            "the conversation or Shift-dragged here, outlines are the times in the question being typed. Click or drag to "
            "seek, arrow keys step"
        )
        self.setAccessibleName("Clip timeline")

    @property
    def position(self) -> float:
        return self._position

    @property
    def selected_span(self) -> tuple[float, float] | None:
        """The selected span ``(start_s, end_s)``, within the clip; ``None`` when none is."""
        return self._span

    def set_clip(self, duration_s: float, marks: tuple[float, ...]) -> None:
        self._duration = max(0.0, duration_s)
        self._marks = marks
        self._ticks = None
        self._position = 0.0
        self._span = None
        self.span_changed.emit()
        self.update()

    def select_span(self, start_s: float, end_s: float) -> None:
        """Select ``start_s``..``end_s``, cut to the clip; a span wholly outside it selects nothing."""
        start, end = max(0.0, start_s), min(self._duration, end_s)
        self._span = (start, end) if end > start else None
        self.span_changed.emit()
        self.update()

    def clear_span(self) -> None:
        self._span = None
        self.span_changed.emit()
        self.update()

    def set_question_times(self, times: list[TimeMention]) -> None:
        self._question_times = tuple((time.start_s, time.end_s) for time in times)
        self.update()

    def set_position(self, seconds: float) -> None:
        self._position = min(max(0.0, seconds), self._duration)
        self.update()

    def x_of(self, seconds: float) -> float:
        left, width = self._track()
        return left + width * (seconds / self._duration if self._duration else 0.0)

    def sizeHint(self) -> QSize:
        line = self.fontMetrics().height()
        return QSize(line * 20, round(line * 1.4))

    def minimumSizeHint(self) -> QSize:
        line = self.fontMetrics().height()
        return QSize(line * 4, round(line * 1.4))

    def paintEvent(self, event) -> None:  # noqa: N802 - Qt override
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        palette = self.palette()
        left, width = self._track()
        middle = self.height() / 2
        painter.fillRect(QRectF(left, middle - 2, width, 4), palette.color(QPalette.ColorRole.Mid))
        if not self._duration:
            return
        self._paint_span(painter)
        self._paint_question_times(painter)
        ticks = self.tick_xs()
        dense = len(ticks) * DENSE_TICK_PX > width
        color = QColor(palette.color(QPalette.ColorRole.Highlight))
        if dense:
            color.setAlpha(150)  # hundreds of frames: a shaded comb the span and the knob still show through
        painter.setPen(QPen(color, 1 if dense else 2))
        for x in ticks:
            painter.drawLine(QPointF(x, middle - self.height() * 0.3), QPointF(x, middle + self.height() * 0.3))
        painter.setPen(QPen(palette.color(QPalette.ColorRole.Text), 1))
        painter.setBrush(palette.color(QPalette.ColorRole.Button))
        radius = self.height() * 0.3
        painter.drawEllipse(QPointF(self.x_of(self._position), middle), radius, radius)
        if self.hasFocus():
            painter.setPen(QPen(palette.color(QPalette.ColorRole.Highlight), 1, Qt.PenStyle.DotLine))
            painter.setBrush(Qt.BrushStyle.NoBrush)
            painter.drawRect(self.rect().adjusted(0, 0, -1, -1))

    def tick_xs(self) -> list[float]:
        """Where the sampled frames' ticks are drawn: at most one per :data:`MIN_TICK_GAP_PX`.
        Worked out once per clip and size: the timeline repaints with every frame played."""
        if self._ticks is not None and self._ticks[0] == self.size():
            return self._ticks[1]
        xs: list[float] = []
        for mark in self._marks:
            x = self.x_of(mark)
            if not xs or x - xs[-1] >= MIN_TICK_GAP_PX:
                xs.append(x)
        self._ticks = (self.size(), xs)
        return xs

    def _paint_span(self, painter: QPainter) -> None:
        if self._span is None:
            return
        fill = QColor(self.palette().color(QPalette.ColorRole.Highlight))
        fill.setAlpha(110)
        start, end = self.x_of(self._span[0]), self.x_of(self._span[1])
        painter.fillRect(QRectF(start, 1, max(2.0, end - start), self.height() - 2), fill)

    def _paint_question_times(self, painter: QPainter) -> None:
        """Each time in the question: a range as an outlined box, a single time as a notch from the top."""
        color = self.palette().color(QPalette.ColorRole.Link)
        painter.save()
        painter.setPen(QPen(color, 2))
        painter.setBrush(Qt.BrushStyle.NoBrush)
        for start_s, end_s in self._question_times:
            if start_s > self._duration:
                continue
            start = self.x_of(start_s)
            if end_s is None:
                size = self.height() * 0.3
                painter.setBrush(color)
                painter.drawPolygon(QPolygonF([QPointF(start - size, 0), QPointF(start + size, 0), QPointF(start, size * 1.3)]))
                painter.setBrush(Qt.BrushStyle.NoBrush)
            else:
                end = self.x_of(min(end_s, self._duration))
                painter.drawRect(QRectF(start, 2, max(2.0, end - start), self.height() - 4))
        painter.restore()

    def mousePressEvent(self, event) -> None:  # noqa: N802 - Qt override
        self._span_anchor = None
        if event.modifiers() & Qt.KeyboardModifier.ShiftModifier and self._duration:
            self._span_anchor = self._time_at(event.position().x())
            self.clear_span()
        self._seek_to_x(event.position().x())

    def mouseMoveEvent(self, event) -> None:  # noqa: N802 - Qt override
        if event.buttons() & Qt.MouseButton.LeftButton:
            if self._span_anchor is not None:
                here = self._time_at(event.position().x())
                self.select_span(min(self._span_anchor, here), max(self._span_anchor, here))
            self._seek_to_x(event.position().x())

    def mouseReleaseEvent(self, event) -> None:  # noqa: N802 - Qt override
        self._span_anchor = None

    def keyPressEvent(self, event) -> None:  # noqa: N802 - Qt override
        steps = {Qt.Key.Key_Left: -1.0, Qt.Key.Key_Right: 1.0, Qt.Key.Key_PageDown: -10.0, Qt.Key.Key_PageUp: 10.0}
        if event.key() in steps and self._duration:
            self._request(self._position + steps[event.key()])
        elif event.key() == Qt.Key.Key_Home and self._duration:
            self._request(0.0)
        elif event.key() == Qt.Key.Key_End and self._duration:
            self._request(self._duration)
        else:
            super().keyPressEvent(event)

    def _track(self) -> tuple[float, float]:
        margin = self.height() * 0.4
        return margin, max(1.0, self.width() - 2 * margin)

    def _time_at(self, x: float) -> float:
        left, width = self._track()
        return self._duration * min(1.0, max(0.0, (x - left) / width))

    def _seek_to_x(self, x: float) -> None:
        if self._duration:
            self._request(self._time_at(x))

    def _request(self, seconds: float) -> None:
        self.set_position(seconds)
        self.seek_requested.emit(self._position)


class ClipPreview(QWidget):
    """Plays the clip itself (pictures only), decoded off the GUI thread, with a timeline of the sampled frames.

    ``frame_changed(index)`` is emitted when playback passes another sampled frame: the index of the last
    sampled frame at or before the time shown. Until the first decoded picture arrives, and when the file
    cannot be played, the preview shows the sampled frame nearest the time instead.
    """

    frame_changed = Signal(int)
    look_closer_requested = Signal(float, float)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._clip: ClipSampled | None = None
        self._thumbnails: tuple[np.ndarray, ...] = ()  # made into pictures one at a time, when shown
        self._index = -1
        self._playing = False
        self._playable = False
        self.player = PlaybackThread(self)
        self.player.frame_ready.connect(self._on_frame)
        self.player.opened.connect(self._on_opened)
        self.player.failed.connect(self._on_failed)
        self.player.ended.connect(self._on_ended)

        self.view = FrameView()
        self.view.set_placeholder("Drop a video clip anywhere in the window\nor open one with File ▸ Open (Ctrl+O)")
        self.play_button = QToolButton()
        self.play_button.setAutoRaise(True)
        self.play_button.setToolTip("Play or pause the clip")
        self.play_button.clicked.connect(self.toggle_playing)
        self.timeline = Timeline()
        self.timeline.seek_requested.connect(self.seek_time)
        self.look_closer_button = QToolButton()
        self.look_closer_button.setText("Look closer")
        self.look_closer_button.setToolTip(
            "Sample the selected span (Shift-drag on the timeline, or click a time range in an answer) with the whole "
            "frame budget and add it to the conversation"
        )
        self.look_closer_button.clicked.connect(self._request_closer_look)
        self.timeline.span_changed.connect(self._update_look_closer)
        self.time_label = QLabel()
        self.time_label.setTextInteractionFlags(Qt.TextInteractionFlag.NoTextInteraction)

        controls = QHBoxLayout()
        controls.setContentsMargins(0, 0, 0, 0)
        controls.addWidget(self.play_button)
        controls.addWidget(self.timeline, 1)
        controls.addWidget(self.time_label)
        controls.addWidget(self.look_closer_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.view, 1)
        layout.addLayout(controls)
        self.set_clip(None)

    @property
    def is_playing(self) -> bool:
        return self._playing

    @property
    def clip(self) -> ClipSampled | None:
        """The clip shown (``None`` when empty)."""
        return self._clip

    @property
    def position(self) -> float:
        return self.timeline.position

    def set_clip(self, clip: ClipSampled | None) -> None:
        """Show ``clip`` from its start (playing its file when it can be played); ``None`` empties the preview."""
        self.pause()
        self._clip = clip
        self._thumbnails = clip.thumbnails if clip else ()
        self._playable = False
        self._index = -1
        self.timeline.set_clip(clip.duration_s if clip else 0.0, clip.timestamps if clip else ())
        is_picture = clip is not None and clip.kind == "image"
        for widget in (self.timeline, self.play_button, self.time_label, self.look_closer_button):
            widget.setEnabled(clip is not None)
            widget.setVisible(not is_picture)  # a still picture has no time to play or seek
        self._update_look_closer()
        if clip is None or not clip.path:
            self.player.close_clip()
        else:
            self.player.open(clip.path)
            self.player.show(0.0)
        self._show_time(0.0, image_from_array(self._thumbnails[0]) if self._thumbnails else None)

    def _update_look_closer(self) -> None:
        self.look_closer_button.setEnabled(self._clip is not None and self.timeline.selected_span is not None)

    def _request_closer_look(self) -> None:
        span = self.timeline.selected_span
        if span is not None:
            self.look_closer_requested.emit(*span)

    def seek(self, index: int) -> None:
        """Go to sampled frame ``index`` (a frame picked in the strip)."""
        if self._clip is not None and 0 <= index < len(self._clip.timestamps):
            self.seek_time(self._clip.timestamps[index])

    def show_moment(self, start_s: float, end_s: float | None = None) -> int:
        """Go to a time an answer or a question mentions: seek to ``start_s`` and select the span to
        ``end_s`` on the timeline (or clear the span for a single time). Returns the index of the
        sampled frame nearest ``start_s`` (-1 with no clip)."""
        if self._clip is None:
            return -1
        if end_s is None:
            self.timeline.clear_span()
        else:
            self.timeline.select_span(start_s, end_s)
        self.seek_time(min(start_s, self._clip.duration_s))
        return nearest_index(self._clip.timestamps, start_s)

    def seek_time(self, seconds: float) -> None:
        if self._clip is None:
            return
        self._show_time(seconds, self._nearest_thumbnail(seconds) if not self._playable else None)
        if self._playable:
            (self.player.play if self._playing else self.player.show)(seconds)

    def toggle_playing(self) -> None:
        if self.is_playing:
            self.pause()
        else:
            self.play()

    def play(self) -> None:
        if self._clip is None or not self._playable:
            return
        start = 0.0 if self.position >= self._clip.duration_s - 0.05 else self.position
        self._playing = True
        self.player.play(start)
        self._update_play_icon()

    def pause(self) -> None:
        if self._playing:
            self.player.pause()
        self._playing = False
        self._update_play_icon()

    def shutdown(self) -> None:
        self._playing = False
        self.player.shutdown()

    def _on_opened(self, duration_s: float) -> None:
        self._playable = True
        self.play_button.setToolTip("Play or pause the clip")

    def _on_failed(self, message: str) -> None:
        self._playable = False
        self._playing = False
        self._update_play_icon()
        self.play_button.setEnabled(False)
        self.play_button.setToolTip(f"The clip cannot be played here ({message}); its sampled frames are shown")

    def _on_frame(self, time_s: float, frame: np.ndarray) -> None:
        if self._clip is None:
            return
        self._show_time(time_s, image_from_array(frame))

    def _on_ended(self) -> None:
        self._playing = False
        self._update_play_icon()

    def _show_time(self, seconds: float, image: QImage | None) -> None:
        if self._clip is None:
            self.view.set_image(None)
            self.time_label.setText("–:–– / –:––")
            self._update_play_icon()
            return
        if image is not None:
            self.view.set_image(image)
        self.timeline.set_position(seconds)
        self.time_label.setText(f"{format_timestamp(seconds)} / {format_timestamp(self._clip.duration_s)}")
        index = max(0, bisect.bisect_right(self._clip.timestamps, seconds + 1e-6) - 1)
        if index != self._index:
            self._index = index
            self.frame_changed.emit(index)

    def _nearest_thumbnail(self, seconds: float) -> QImage | None:
        if not self._thumbnails or self._clip is None:
            return None
        return image_from_array(self._thumbnails[nearest_index(self._clip.timestamps, seconds)])

    def _update_play_icon(self) -> None:
        icon = QStyle.StandardPixmap.SP_MediaPause if self.is_playing else QStyle.StandardPixmap.SP_MediaPlay
        self.play_button.setIcon(glyph_icon(self, icon))

    def changeEvent(self, event: QEvent) -> None:  # noqa: N802 - Qt override
        super().changeEvent(event)
        if event.type() == QEvent.Type.PaletteChange:
            self._update_play_icon()
