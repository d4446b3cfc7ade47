"""The live encoder view: per-frame encode latency plot, graph hit counters, chunk table, answer speed.

Everything here updates from the engine's events as they arrive (``ChunkStats`` per encoder
pass, ``EncodeDone`` per clip, ``Done`` per answer), so the view moves while work runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from PySide6.QtCore import QPointF, QRectF, QSize, Qt
from PySide6.QtGui import QColor, QFontMetrics, QPainter, QPainterPath, QPalette, QPen
from PySide6.QtWidgets import (
    QAbstractItemView,
    QGridLayout,
    QHeaderView,
    QLabel,
    QSizePolicy,
    QTableWidget,
    QTableWidgetItem,
    QToolTip,
    QWidget,
)

from framewise.core.events import AnswerStats, ChunkStats, EncodeDone, EngineInfo

# Plot accents, chosen to read on both light and dark backgrounds.
HIT_COLOR = QColor(47, 128, 237)
MISS_COLOR = QColor(235, 131, 23)

MAX_PLOTTED_CHUNKS = 500
_CHUNK_COLUMNS = ("Chunk", "Frames", "Patches", "Budget", "Padding", "ms/frame", "Ran as")


@dataclass(frozen=True)
class PlotPoint:
    """One encoder pass on the plot; ``run`` indexes the clip encode it belonged to."""

    run: int
    stats: ChunkStats


class LatencyPlot(QWidget):
    """Milliseconds per frame of every encoder pass, in arrival order, across clips and questions.

    Graph replays and eager passes get different colours; a dashed line and the clip's name mark
    where each encode starts. Hovering a point shows its chunk's details.
    """

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._points: list[PlotPoint] = []
        self._run_labels: list[str] = []
        self.setMouseTracking(True)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)
        self.setMinimumHeight(self.fontMetrics().height() * 7)
        self.setToolTip("")

    @property
    def points(self) -> list[PlotPoint]:
        return list(self._points)

    def start_run(self, label: str) -> None:
        """Mark the start of a new encode (a clip, or a question's images)."""
        self._run_labels.append(label)
        self.update()

    def add_chunk(self, stats: ChunkStats) -> None:
        if not self._run_labels:
            self._run_labels.append("")
        self._points.append(PlotPoint(len(self._run_labels) - 1, stats))
        del self._points[:-MAX_PLOTTED_CHUNKS]
        self.update()

    def sizeHint(self) -> QSize:
        line = self.fontMetrics().height()
        return QSize(line * 28, line * 12)

    def _plot_area(self) -> QRectF:
        metrics = QFontMetrics(self.font())
        left = metrics.horizontalAdvance("0000.0") + metrics.height()
        top = metrics.height() * 2.0
        bottom = metrics.height() * 1.8
        right = metrics.height() * 0.8
        return QRectF(left, top, max(1.0, self.width() - left - right), max(1.0, self.height() - top - bottom))

    def _y_axis(self) -> tuple[float, float]:
        """(top, step) of the y axis: about four round steps above the highest point."""
        peak = max((point.stats.ms_per_frame for point in self._points), default=1.0) * 1.1
        step = nice_ceiling(peak / 4)
        return step * max(1, math.ceil(peak / step)), step

    def _point_position(self, index: int, area: QRectF, y_max: float) -> QPointF:
        """Each pass gets an equal slot along x (centred in it); y is its ms per frame."""
        x = area.left() + area.width() * (index + 0.5) / len(self._points)
        y = area.bottom() - area.height() * min(1.0, self._points[index].stats.ms_per_frame / y_max)
        return QPointF(x, y)

    def paintEvent(self, event) -> None:  # noqa: N802 - Qt override
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        palette = self.palette()
        painter.fillRect(self.rect(), palette.color(QPalette.ColorRole.Base))
        area = self._plot_area()
        metrics = QFontMetrics(self.font())
        grid_color = palette.color(QPalette.ColorRole.Mid)
        grid_color.setAlpha(110)

        painter.setPen(palette.color(QPalette.ColorRole.PlaceholderText))
        painter.drawText(
            QRectF(0, 0, area.left() + area.width() / 2, area.top()),
            Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter,
            "ms per frame",
        )
        self._draw_legend(painter, area, metrics)

        y_max, step = self._y_axis()
        for index in range(round(y_max / step) + 1):
            tick = index * step
            y = area.bottom() - area.height() * tick / y_max
            painter.setPen(QPen(grid_color, 1))
            painter.drawLine(QPointF(area.left(), y), QPointF(area.right(), y))
            painter.setPen(palette.color(QPalette.ColorRole.PlaceholderText))
            label_rect = QRectF(0, y - metrics.height() / 2, area.left() - metrics.height() * 0.4, metrics.height())
            painter.drawText(label_rect, Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter, format_tick(tick))
        painter.setPen(QPen(grid_color, 1))
        painter.drawLine(area.bottomLeft(), area.bottomRight())

        if not self._points:
            painter.setPen(palette.color(QPalette.ColorRole.PlaceholderText))
            painter.drawText(
                area, Qt.AlignmentFlag.AlignCenter | Qt.TextFlag.TextWordWrap, "Each encoder pass appears here as it runs"
            )
            return
        self._draw_runs(painter, area, y_max, metrics)
        self._draw_points(painter, area, y_max, metrics)

    def _draw_legend(self, painter: QPainter, area: QRectF, metrics: QFontMetrics) -> None:
        x = area.right()
        radius = metrics.height() * 0.25
        for label, color in (("eager / miss", MISS_COLOR), ("graph hit", HIT_COLOR)):
            width = metrics.horizontalAdvance(label)
            x -= width
            painter.setPen(self.palette().color(QPalette.ColorRole.Text))
            painter.drawText(QRectF(x, 0, width, area.top()), Qt.AlignmentFlag.AlignVCenter, label)
            x -= radius * 2.5
            painter.setPen(Qt.PenStyle.NoPen)
            painter.setBrush(color)
            painter.drawEllipse(QPointF(x + radius, area.top() / 2), radius, radius)
            x -= metrics.height()

    def _draw_runs(self, painter: QPainter, area: QRectF, y_max: float, metrics: QFontMetrics) -> None:
        """A dashed line where each encode starts, with the clip's name under the axis up to the next one."""
        separator = self.palette().color(QPalette.ColorRole.PlaceholderText)
        painter.setBrush(Qt.BrushStyle.NoBrush)
        slot = area.width() / len(self._points)
        starts = [index for index, point in enumerate(self._points) if index == 0 or point.run != self._points[index - 1].run]
        for number, index in enumerate(starts):
            end = starts[number + 1] if number + 1 < len(starts) else len(self._points)
            left = area.left() + slot * index
            painter.setPen(QPen(separator, 1, Qt.PenStyle.DashLine))
            if index:
                painter.drawLine(QPointF(left, area.top()), QPointF(left, area.bottom()))
            width = slot * (end - index)
            label = metrics.elidedText(
                self._run_labels[self._points[index].run], Qt.TextElideMode.ElideMiddle, round(width - 4)
            )
            painter.setPen(separator)
            painter.drawText(
                QRectF(left + 2, area.bottom() + 2, width - 4, metrics.height() * 1.6),
                Qt.AlignmentFlag.AlignHCenter | Qt.AlignmentFlag.AlignVCenter,
                label,
            )

    def _draw_points(self, painter: QPainter, area: QRectF, y_max: float, metrics: QFontMetrics) -> None:
        line_color = self.palette().color(QPalette.ColorRole.Text)
        line_color.setAlpha(90)
        positions = [self._point_position(index, area, y_max) for index in range(len(self._points))]
        path = QPainterPath()
        for index, position in enumerate(positions):
            new_run = index == 0 or self._points[index].run != self._points[index - 1].run
            if new_run:
                path.moveTo(position)
            else:
                path.lineTo(position)
        painter.setPen(QPen(line_color, 1.2))
        painter.setBrush(Qt.BrushStyle.NoBrush)
        painter.drawPath(path)
        radius = max(2.0, metrics.height() * 0.22)
        painter.setPen(QPen(self.palette().color(QPalette.ColorRole.Base), 1))
        for point, position in zip(self._points, positions):
            painter.setBrush(HIT_COLOR if point.stats.graph_hit else MISS_COLOR)
            painter.drawEllipse(position, radius, radius)

    def mouseMoveEvent(self, event) -> None:  # noqa: N802 - Qt override
        if not self._points:
            return
        area = self._plot_area()
        y_max, _ = self._y_axis()
        position = event.position()
        index = min(
            range(len(self._points)),
            key=lambda i: (self._point_position(i, area, y_max) - position).manhattanLength(),
        )
        if (self._point_position(index, area, y_max) - position).manhattanLength() > self.fontMetrics().height() * 1.5:
            QToolTip.hideText()
            return
        point = self._points[index]
        QToolTip.showText(event.globalPosition().toPoint(), describe_chunk(point.stats, self._run_labels[point.run]), self)


class EncoderPanel(QWidget):
    """The latency plot, counters for graph hits and answer speed, and the last encode's chunks."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.hits = 0
        self.misses = 0
        self._graphs_enabled: bool | None = None
        self._run_label = ""

        self.plot = LatencyPlot()
        self.chunk_table = QTableWidget(0, len(_CHUNK_COLUMNS))
        self.chunk_table.setHorizontalHeaderLabels(_CHUNK_COLUMNS)
        self.chunk_table.verticalHeader().setVisible(False)
        self.chunk_table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.chunk_table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.chunk_table.setAlternatingRowColors(True)
        self.chunk_table.setWordWrap(False)
        header = self.chunk_table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setStretchLastSection(True)
        row_height = round(self.fontMetrics().height() * 1.5)
        self.chunk_table.verticalHeader().setDefaultSectionSize(row_height)
        self.chunk_table.setMinimumHeight(row_height * 3)
        self.chunk_table.setToolTip(
            "Each pass of the vision encoder for the last clip: the token budget it used and the share that was padding"
        )

        self._ms_per_frame: list[float] = []
        self.encoder_value = QLabel("–")
        self.hits_value = QLabel("–")
        self.latency_value = QLabel("–")
        self.clip_value = QLabel("–")
        self.timing_value = QLabel("–")
        self.first_token_value = QLabel("–")
        self.speed_value = QLabel("–")
        self.memory_value = QLabel("–")
        self.decoder_value = QLabel("–")
        stats = QGridLayout()
        stats.setContentsMargins(0, 0, 0, 0)
        stats.setHorizontalSpacing(self.fontMetrics().height())
        stats.setVerticalSpacing(max(2, self.fontMetrics().height() // 4))
        rows = (
            ("Encoder", self.encoder_value),
            ("Graph hits", self.hits_value),
            ("Per frame", self.latency_value),
            ("Last clip", self.clip_value),
            ("Clip timing", self.timing_value),
            ("First token", self.first_token_value),
            ("Speed", self.speed_value),
            ("GPU memory", self.memory_value),
            ("Decoder", self.decoder_value),
        )
        for row, (name, value) in enumerate(rows):
            caption = QLabel(name)
            caption.setForegroundRole(QPalette.ColorRole.PlaceholderText)
            value.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
            value.setWordWrap(True)
            stats.addWidget(caption, row, 0, Qt.AlignmentFlag.AlignTop)
            stats.addWidget(value, row, 1, Qt.AlignmentFlag.AlignTop)
        stats.setColumnStretch(1, 1)
        stats.setRowStretch(len(rows), 1)

        layout = QGridLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setHorizontalSpacing(self.fontMetrics().height())
        layout.addWidget(self.plot, 0, 0)
        layout.addLayout(stats, 0, 1)
        layout.addWidget(self.chunk_table, 1, 0, 1, 2)
        layout.setColumnStretch(0, 3)
        layout.setColumnStretch(1, 2)
        layout.setRowStretch(0, 3)
        layout.setRowStretch(1, 1)

    def set_engine_info(self, info: EngineInfo) -> None:
        self._graphs_enabled = info.graphs_enabled
        if info.graphs_enabled:
            budgets = info.graph_budgets
            span = f", {len(budgets)} graphs (budgets {budgets[0]}–{budgets[-1]})" if budgets else ""
            self.encoder_value.setText(f"{info.encoder_name}{span} on {info.device}")
        else:
            self.encoder_value.setText(f"eager on {info.device}")
        self.encoder_value.setToolTip(info.graphs_reason)
        if info.decoder is not None:
            decoder = info.decoder
            steps = f"{len(decoder.buckets)} decode graphs" if decoder.graphs_enabled else "eager decode steps"
            self.decoder_value.setText(f"{steps}, KV cache of {decoder.context_tokens:,} tokens")
            self.decoder_value.setToolTip(decoder.graphs_reason)
        self._update_hits()

    def start_clip(self, clip_name: str) -> None:
        """A clip started encoding: its chunks get a new run on the plot and a fresh table."""
        self._run_label = clip_name
        self.chunk_table.setRowCount(0)
        self.plot.start_run(clip_name)

    def add_chunk(self, stats: ChunkStats) -> None:
        if stats.graph_hit:
            self.hits += 1
        else:
            self.misses += 1
        self.plot.add_chunk(stats)
        self._ms_per_frame.append(stats.ms_per_frame)
        self.latency_value.setText(latency_summary(self._ms_per_frame))
        row = self.chunk_table.rowCount()
        self.chunk_table.insertRow(row)
        path = "graph" if stats.graph_hit else f"eager: {stats.fallback_reason}" if stats.fallback_reason else "eager"
        cells = (
            str(stats.chunk_index),
            str(stats.frames),
            str(stats.patches),
            "–" if stats.budget is None else str(stats.budget),
            f"{stats.padding_fraction:.0%}",
            f"{stats.ms_per_frame:.2f}",
            path,
        )
        for column, text in enumerate(cells):
            item = QTableWidgetItem(text)
            if column < len(cells) - 1:
                item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            item.setToolTip(describe_chunk(stats, self._run_label))
            self.chunk_table.setItem(row, column, item)
        self.chunk_table.scrollToBottom()
        self._update_hits()

    def set_encode_done(self, done: EncodeDone) -> None:
        self.clip_value.setText(f"{done.frames} frames, {done.patches:,} patches")
        self.timing_value.setText(
            f"decode {done.decode_ms:.0f} ms, preprocess {done.preprocess_ms:.0f} ms, "
            f"encode {done.encode_ms:.1f} ms ({done.ms_per_frame:.2f} ms/frame)"
        )

    def set_answer_stats(self, stats: AnswerStats) -> None:
        self.first_token_value.setText(f"{stats.time_to_first_token_ms:.0f} ms")
        self.speed_value.setText(f"{stats.tokens_per_second:.1f} tokens/s ({stats.new_tokens} tokens)")
        if stats.gpu_memory_mb is None:
            self.memory_value.setText("– (not on a GPU)")
        else:
            self.memory_value.setText(f"{stats.gpu_memory_mb:,.0f} MiB")
        if stats.decoder is not None:
            self.decoder_value.setText(stats.decoder.summary())

    def hits_text(self) -> str:
        return self.hits_value.text()

    def _update_hits(self) -> None:
        total = self.hits + self.misses
        if self._graphs_enabled is False:
            text = f"none: eager encoder ({total} eager passes)"
        else:
            text = f"{self.hits} hits, {self.misses} misses"
            if total:
                text += f" ({self.hits / total:.0%})"
        self.hits_value.setText(text)


def latency_summary(ms_per_frame: list[float]) -> str:
    """Median and 99th percentile (nearest rank) of the encode time per frame of every chunk so far."""
    ordered = sorted(ms_per_frame)
    if not ordered:
        return "–"

    def nearest_rank(q: float) -> float:
        return ordered[max(0, math.ceil(q * len(ordered)) - 1)]

    return f"p50 {nearest_rank(0.5):.2f} ms, p99 {nearest_rank(0.99):.2f} ms ({len(ordered)} chunks this run)"


def describe_chunk(stats: ChunkStats, run_label: str) -> str:
    """A tooltip for one encoder pass."""
    budget = "eager (no graph)" if stats.budget is None else f"budget {stats.budget} ({stats.padding_fraction:.0%} padding)"
    where = f" of {run_label}" if run_label else ""
    text = (
        f"Chunk {stats.chunk_index}{where}: {stats.frames} frames, {stats.patches} patches, {budget}\n"
        f"{stats.encode_ms:.2f} ms, {stats.ms_per_frame:.2f} ms per frame, "
        + ("graph hit" if stats.graph_hit else "graph miss")
    )
    if stats.fallback_reason:
        text += f"\nEager because: {stats.fallback_reason}"
    return text


def nice_ceiling(value: float) -> float:
    """The smallest of 1, 2, 2.5, 5 x 10^k that is >= ``value`` (and > 0)."""
    if value <= 0 or not math.isfinite(value):
        return 1.0
    exponent = math.floor(math.log10(value))
    for step in (1.0, 2.0, 2.5, 5.0, 10.0):
        candidate = step * 10**exponent
        if candidate >= value * (1 - 1e-9):
            return candidate
    return 10.0 ** (exponent + 1)


def format_tick(value: float) -> str:
    if value == 0:
        return "0"
    return f"{value:.6g}"
