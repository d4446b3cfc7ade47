"""The live plot of the vision encoder: milliseconds per frame of every encoder pass, drawn with pyqtgraph.

Graph replays and eager passes (graph misses) are two series with their own symbol and colour, named
in a legend under the plot, where it hides no point; a vertical line labelled with the clip's name
(shortened to the room before the next one) marks where each encode starts, and the pass axis ticks
only whole passes. Hovering a point shows its chunk's details; the mouse zooms (wheel, right drag)
and pans (left drag) as in every pyqtgraph plot, and the "A" button in the corner fits the view
again. Export writes the plot as PNG or every plotted pass as CSV.

The figures are the engine's (``ChunkStats`` per pass); nothing here is computed beyond placing them.
"""

from __future__ import annotations

import csv
import html
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pyqtgraph as pg
from pyqtgraph.exporters import ImageExporter
from PySide6.QtCore import QEvent, QPoint, Qt, Signal
from PySide6.QtGui import QColor, QFontMetricsF, QImage, QPainter, QPalette
from PySide6.QtWidgets import QFileDialog, QHBoxLayout, QLabel, QMenu, QToolButton, QVBoxLayout, QWidget

from framewise.core.errors import ExportError
from framewise.core.events import ChunkStats
from framewise.ui.dialogs import default_export_folder

# Accents chosen to read on both light and dark backgrounds.
HIT_COLOR = QColor(47, 128, 237)
MISS_COLOR = QColor(235, 131, 23)
HIT_NAME = "graph hit"
MISS_NAME = "eager / graph miss"
HIT_SYMBOL, HIT_GLYPH = "o", "\u25cf"  # pyqtgraph's circle, and the legend's character for it
MISS_SYMBOL, MISS_GLYPH = "t", "\u25bc"  # pyqtgraph's downward triangle
HIT_TIP = "The pass replayed a captured CUDA graph"
MISS_TIP = "The pass ran eagerly: no graph fits it, or graphs are off"

MAX_PLOTTED_CHUNKS = 2000
CSV_COLUMNS = (
    "pass", "clip", "chunk", "frames", "patches", "budget", "padding_fraction", "encode_ms", "ms_per_frame",
    "ran_as", "eager_reason",
)


@dataclass(frozen=True)
class RunMarker:
    """The dashed line where an encode starts: ``first_pass`` is its first pass's number, ``label`` its full name."""

    first_pass: int
    label: str
    line: pg.InfiniteLine


@dataclass(frozen=True)
class PlotPoint:
    """One encoder pass on the plot: ``number`` counts passes from 1 over the run, ``run`` indexes its encode."""

    number: int
    run: int
    stats: ChunkStats


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


class LatencyPlot(QWidget):
    """Ms per frame of every encoder pass in arrival order, across clips and questions; zoom, pan, hover, export.

    ``exported(message)`` and ``export_failed(message)`` report the export buttons' outcome to the window.
    """

    exported = Signal(str)
    export_failed = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._points: list[PlotPoint] = []
        self._run_labels: list[str] = []
        self._run_markers: list[RunMarker] = []
        self._passes = 0

        # A PlotWidget, not a GraphicsLayoutWidget: the latter crashes at interpreter exit under PySide6 6.12.
        self.plot_widget = pg.PlotWidget(axisItems={"bottom": PassAxis("bottom")})
        self.plot_widget.setMinimumHeight(self.fontMetrics().height() * 6)
        self.plot_widget.setToolTip("")
        self.plot_item: pg.PlotItem = self.plot_widget.getPlotItem()
        self.plot_item.setMenuEnabled(True)
        self.plot_item.showButtons()  # the "A" (fit) button, shown on hover
        self.plot_item.setLabel("left", "ms per frame")
        self.plot_item.setLabel("bottom", "encoder pass")
        self.plot_item.showGrid(x=False, y=True, alpha=0.25)
        self.plot_item.setLimits(xMin=0, yMin=0)
        self._line = self.plot_item.plot([], [], connect="finite")
        # An invisible point at 0 ms keeps the axis's zero in the fitted view.
        self.plot_item.addItem(pg.ScatterPlotItem([0.5], [0.0], size=0, pen=None, brush=None, hoverable=False))
        self.hits = self._scatter(HIT_NAME, HIT_SYMBOL, HIT_COLOR)
        self.misses = self._scatter(MISS_NAME, MISS_SYMBOL, MISS_COLOR)
        view = self.plot_item.getViewBox()
        view.sigRangeChanged.connect(self._fit_run_labels)
        view.sigResized.connect(self._fit_run_labels)

        self.placeholder = QLabel("Each encoder pass appears here as it runs")
        self.placeholder.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.placeholder.setWordWrap(True)
        self.placeholder.setForegroundRole(QPalette.ColorRole.PlaceholderText)
        self.placeholder.setMinimumHeight(self.plot_widget.minimumHeight())

        self.export_button = QToolButton()
        self.export_button.setText("Export")
        self.export_button.setToolTip("Save the plot as a PNG image, or every plotted pass as CSV")
        self.export_button.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        menu = QMenu(self.export_button)
        self.export_png_action = menu.addAction("Plot as PNG…", self.choose_png_path)
        self.export_csv_action = menu.addAction("Passes as CSV…", self.choose_csv_path)
        self.export_button.setMenu(menu)
        self.export_button.setAutoRaise(True)
        self.plot_widget.setToolTip("Wheel or right-drag zooms, left-drag pans, the A button fits; right-click for more")

        self.legend = _legend(self.fontMetrics().height())
        bar = QHBoxLayout()
        bar.setContentsMargins(0, 0, 0, 0)
        bar.addWidget(self.legend)
        bar.addStretch(1)
        bar.addWidget(self.export_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(0)
        layout.addWidget(self.placeholder, 1)
        layout.addWidget(self.plot_widget, 1)
        layout.addLayout(bar)
        self._apply_palette()
        self._redraw()

    def start_run(self, label: str) -> None:
        """Mark the start of a new encode (a clip, or a question's images)."""
        self._run_labels.append(label)
        line = pg.InfiniteLine(
            pos=self._passes + 0.5,
            angle=90,
            movable=False,
            pen=pg.mkPen(self._muted_color(), style=Qt.PenStyle.DashLine),
            label="",
            labelOpts={"position": 0.97, "color": self._muted_color(), "anchors": [(0, 0), (0, 0)]},
        )
        self.plot_item.addItem(line, ignoreBounds=True)
        self._run_markers.append(RunMarker(self._passes + 1, label, line))
        self._fit_run_labels()

    def add_chunk(self, stats: ChunkStats) -> None:
        """Plot one encoder pass after the others."""
        if not self._run_labels:
            self.start_run("")
        self._passes += 1
        self._points.append(PlotPoint(self._passes, len(self._run_labels) - 1, stats))
        if len(self._points) > MAX_PLOTTED_CHUNKS:
            del self._points[:-MAX_PLOTTED_CHUNKS]
            self._drop_old_run_markers()
        self._redraw()

    def clear(self) -> None:
        """Forget every pass and run marker."""
        for marker in self._run_markers:
            self.plot_item.removeItem(marker.line)
        self._run_markers.clear()
        self._points.clear()
        self._run_labels.clear()
        self._passes = 0
        self._redraw()

    # -- export -----------------------------------------------------------------------------

    def choose_png_path(self) -> None:
        path, _ = QFileDialog.getSaveFileName(
            self, "Export the plot", str(default_export_folder() / "framewise-encoder.png"), "PNG image (*.png)"
        )
        if path:
            self._export_reporting_errors(self.export_png, _with_suffix(Path(path), ".png"))

    def choose_csv_path(self) -> None:
        path, _ = QFileDialog.getSaveFileName(
            self, "Export the passes", str(default_export_folder() / "framewise-encoder.csv"), "CSV (*.csv)"
        )
        if path:
            self._export_reporting_errors(self.export_csv, _with_suffix(Path(path), ".csv"))

    def export_png(self, path: Path) -> None:
        """Render the plot (run labels included) to a PNG twice the widget's width, the legend under it."""
        exporter = ImageExporter(self.plot_item)
        exporter.parameters()["width"] = max(800, 2 * self.plot_widget.width())
        plot = exporter.export(toBytes=True)
        if plot is None or plot.isNull() or not self._with_legend(plot).save(str(path), "PNG"):
            raise ExportError(f"Could not write {path}. Choose another folder.")

    def export_csv(self, path: Path) -> None:
        """Every plotted pass, one row each, with the columns of :data:`CSV_COLUMNS`."""
        try:
            with path.open("w", newline="", encoding="utf-8") as file:
                writer = csv.writer(file)
                writer.writerow(CSV_COLUMNS)
                for point in self._points:
                    writer.writerow(self._csv_row(point))
        except OSError as error:
            raise ExportError(f"Could not write {path}: {error.strerror or error}. Choose another folder.") from error

    # -- internals --------------------------------------------------------------------------

    def _scatter(self, name: str, symbol: str, color: QColor) -> pg.ScatterPlotItem:
        item = pg.ScatterPlotItem(
            name=name,
            symbol=symbol,
            size=round(self.fontMetrics().height() * 0.6),
            brush=pg.mkBrush(color),
            pen=pg.mkPen(color.darker(130)),
            hoverable=True,
            hoverSize=round(self.fontMetrics().height() * 0.9),
            tip=self._tip,
        )
        self.plot_item.addItem(item)
        return item

    def _tip(self, x: float, y: float, data: PlotPoint) -> str:
        return describe_chunk(data.stats, self._run_labels[data.run])

    def _redraw(self) -> None:
        hits = [point for point in self._points if point.stats.graph_hit]
        misses = [point for point in self._points if not point.stats.graph_hit]
        for item, points in ((self.hits, hits), (self.misses, misses)):
            item.setData(
                x=[point.number for point in points], y=[point.stats.ms_per_frame for point in points], data=points
            )
        xs: list[float] = []
        ys: list[float] = []
        for index, point in enumerate(self._points):
            if index and point.run != self._points[index - 1].run:  # no line across encodes
                xs.append(point.number - 0.5)
                ys.append(math.nan)
            xs.append(point.number)
            ys.append(point.stats.ms_per_frame)
        self._line.setData(xs, ys, connect="finite")
        # The plot is hidden, not covered, while empty (a QStackedLayout over a pyqtgraph view crashes at exit).
        self.placeholder.setVisible(not self._points)
        self.plot_widget.setVisible(bool(self._points))
        self._update_enabled()

    def _drop_old_run_markers(self) -> None:
        first = self._points[0].number
        while len(self._run_markers) > 1 and self._run_markers[1].first_pass <= first:
            self.plot_item.removeItem(self._run_markers.pop(0).line)

    def _fit_run_labels(self) -> None:
        """Shorten each encode's label to the room between its marker and the next one (or the view's edge)."""
        if not self._run_markers:
            return
        view = self.plot_item.getViewBox()
        (left, right), _ = view.viewRange()
        pixels_per_pass = view.width() / (right - left) if right > left else 0.0
        metrics = QFontMetricsF(self._run_markers[0].line.label.textItem.font())  # every label has the same font
        gap = metrics.height()  # the text item's margins and a little air
        edges = [marker.line.value() for marker in self._run_markers[1:]] + [right]
        for marker, edge in zip(self._run_markers, edges):
            if edge <= left:  # the whole run is left of the view: its label is not drawn
                continue
            room = (edge - marker.line.value()) * pixels_per_pass - gap
            marker.line.label.setFormat(_format_literal(_fit(marker.label, metrics, room)))

    def _with_legend(self, plot: QImage) -> QImage:
        """``plot`` with the legend drawn under it at the plot's scale, on the plot's background."""
        scale = plot.width() / max(1, self.plot_widget.width())
        pad = self.fontMetrics().height() // 3  # above and below the legend's line
        legend_height = math.ceil((self.legend.sizeHint().height() + 2 * pad) * scale)
        image = QImage(plot.width(), plot.height() + legend_height, QImage.Format.Format_ARGB32)
        image.fill(self.palette().color(QPalette.ColorRole.Base))
        painter = QPainter(image)
        painter.drawImage(0, 0, plot)
        painter.translate(0, plot.height())
        painter.scale(scale, scale)
        self.legend.render(painter, QPoint(0, pad), renderFlags=QWidget.RenderFlag.DrawChildren)
        painter.end()
        return image

    def _csv_row(self, point: PlotPoint) -> tuple[object, ...]:
        stats = point.stats
        return (
            point.number,
            self._run_labels[point.run],
            stats.chunk_index,
            stats.frames,
            stats.patches,
            "" if stats.budget is None else stats.budget,
            f"{stats.padding_fraction:.4f}",
            f"{stats.encode_ms:.4f}",
            f"{stats.ms_per_frame:.4f}",
            "graph" if stats.graph_hit else "eager",
            stats.fallback_reason or "",
        )

    def _export_reporting_errors(self, export: Callable[[Path], None], path: Path) -> None:
        try:
            export(path)
        except ExportError as error:
            self.export_failed.emit(str(error))
            return
        self.exported.emit(f"Exported the encoder plot to {path}")

    def changeEvent(self, event: QEvent) -> None:  # noqa: N802 - Qt override
        super().changeEvent(event)
        if event.type() == QEvent.Type.PaletteChange:
            self._apply_palette()

    def _update_enabled(self) -> None:
        self.export_button.setEnabled(bool(self._points))

    def _muted_color(self) -> QColor:
        return self.palette().color(QPalette.ColorRole.PlaceholderText)

    def _apply_palette(self) -> None:
        palette = self.palette()
        text = palette.color(QPalette.ColorRole.Text)
        self.plot_widget.setBackground(palette.color(QPalette.ColorRole.Base))
        for axis in ("left", "bottom"):
            self.plot_item.getAxis(axis).setPen(pg.mkPen(self._muted_color()))
            self.plot_item.getAxis(axis).setTextPen(pg.mkPen(text))
        faint = QColor(text)
        faint.setAlpha(90)
        self._line.setPen(pg.mkPen(faint, width=1.2))


class PassAxis(pg.AxisItem):
    """The encoder-pass axis: passes are counted, so ticks stand only at whole numbers."""

    def tickSpacing(self, minVal: float, maxVal: float, size: float) -> list[tuple[float, float]]:  # noqa: N803
        levels = super().tickSpacing(minVal, maxVal, size)
        whole = [(spacing, offset) for spacing, offset in levels if spacing >= 1 and float(spacing).is_integer()]
        return whole or [(1.0, 0.0)]


def _with_suffix(path: Path, suffix: str) -> Path:
    return path if path.suffix else path.with_suffix(suffix)


def _legend(line: int) -> QWidget:
    """The row that names both series, spaced by ``line`` pixels (a line of text's height)."""
    legend = QWidget()
    layout = QHBoxLayout(legend)
    layout.setContentsMargins(line // 2, 0, 0, 0)
    layout.setSpacing(line)
    layout.addWidget(_legend_entry(HIT_GLYPH, HIT_COLOR, HIT_NAME, HIT_TIP))
    layout.addWidget(_legend_entry(MISS_GLYPH, MISS_COLOR, MISS_NAME, MISS_TIP))
    return legend


def _legend_entry(glyph: str, color: QColor, name: str, tip: str) -> QLabel:
    """One legend entry: the series' symbol in its colour, then its name (also the label's accessible name)."""
    entry = QLabel(f'<span style="color:{color.name()}">{glyph}</span>&nbsp;{html.escape(name)}')
    entry.setTextFormat(Qt.TextFormat.RichText)
    entry.setAccessibleName(name)
    entry.setToolTip(tip)
    return entry


def _fit(label: str, metrics: QFontMetricsF, room: float) -> str:
    """``label`` in ``room`` pixels: whole, or its start and end around "…"; empty where even that does not fit."""
    fitted = metrics.elidedText(label, Qt.TextElideMode.ElideMiddle, max(0.0, room))
    return "" if fitted in ("", "…") else fitted


def _format_literal(text: str) -> str:
    """``text`` as a pyqtgraph line-label format string that shows it as is (a clip may be named "{1}.mp4")."""
    return text.replace("{", "{{").replace("}", "}}")
