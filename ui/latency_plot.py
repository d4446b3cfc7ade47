"""The live plot of the vision encoder: milliseconds per frame of every encoder pass, drawn with pyqtgraph.

Graph replays and eager passes (graph misses) are two series with their own symbol and colour, named
in a legend; a vertical line labelled with the clip's name marks where each encode starts. Hovering a
point shows its chunk's details; the mouse zooms (wheel, right drag) and pans (left drag) as in every
pyqtgraph plot, and the "A" button in the corner fits the view again. Export writes the plot as PNG
or every plotted pass as CSV.

The figures are the engine's (``ChunkStats`` per pass); nothing here is computed beyond placing them.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pyqtgraph as pg
from pyqtgraph.exporters import ImageExporter
from PySide6.QtCore import QEvent, Qt, Signal
from PySide6.QtGui import QColor, QPalette
from PySide6.QtWidgets import QFileDialog, QHBoxLayout, QLabel, QMenu, QToolButton, QVBoxLayout, QWidget

from framewise.core.errors import ExportError
from framewise.core.events import ChunkStats
from framewise.ui.dialogs import default_export_folder

# Accents chosen to read on both light and dark backgrounds.
HIT_COLOR = QColor(47, 128, 237)
MISS_COLOR = QColor(235, 131, 23)
HIT_NAME = "graph hit"
MISS_NAME = "eager / graph miss"

MAX_PLOTTED_CHUNKS = 2000
CSV_COLUMNS = (
    "pass", "clip", "chunk", "frames", "patches", "budget", "padding_fraction", "encode_ms", "ms_per_frame",
    "ran_as", "eager_reason",
)


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
        self._run_lines: list[tuple[int, pg.InfiniteLine]] = []
        self._passes = 0

        # A PlotWidget, not a GraphicsLayoutWidget: the latter crashes at interpreter exit under PySide6 6.12.
        self.plot_widget = pg.PlotWidget()
        self.plot_widget.setMinimumHeight(self.fontMetrics().height() * 6)
        self.plot_widget.setToolTip("")
        self.plot_item: pg.PlotItem = self.plot_widget.getPlotItem()
        self.plot_item.setMenuEnabled(True)
        self.plot_item.showButtons()  # the "A" (fit) button, shown on hover
        self.plot_item.setLabel("left", "ms per frame")
        self.plot_item.setLabel("bottom", "encoder pass")
        self.plot_item.showGrid(x=False, y=True, alpha=0.25)
        self.plot_item.setLimits(xMin=0, yMin=0)
        self.legend = self.plot_item.addLegend(offset=(-6, -4))  # under the points, apart from the clip labels at the top
        self._line = self.plot_item.plot([], [], connect="finite")
        # An invisible point at 0 ms keeps the axis's zero in the fitted view.
        self.plot_item.addItem(pg.ScatterPlotItem([0.5], [0.0], size=0, pen=None, brush=None, hoverable=False))
        self.hits = self._scatter(HIT_NAME, "o", HIT_COLOR)
        self.misses = self._scatter(MISS_NAME, "t", MISS_COLOR)

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

        bar = QHBoxLayout()
        bar.setContentsMargins(0, 0, 0, 0)
        bar.addStretch(1)
        bar.addWidget(self.export_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(0)
        layout.addWidget(self.placeholder, 1)
        layout.addWidget(self.plot_widget, 1)
        layout.addLayout(bar)
        self._apply_palette()
        self._update_enabled()

    @property
    def points(self) -> list[PlotPoint]:
        return list(self._points)

    def series(self) -> dict[str, list[tuple[float, float]]]:
        """The plotted (pass, ms per frame) pairs of each series, by legend name."""
        return {name: [(float(x), float(y)) for x, y in zip(*item.getData())] for item, name in self._series()}

    def legend_names(self) -> list[str]:
        return [label.text for _, label in self.legend.items]

    def start_run(self, label: str) -> None:
        """Mark the start of a new encode (a clip, or a question's images)."""
        self._run_labels.append(label)
        line = pg.InfiniteLine(
            pos=self._passes + 0.5,
            angle=90,
            movable=False,
            pen=pg.mkPen(self._muted_color(), style=Qt.PenStyle.DashLine),
            label=_short(label),
            labelOpts={"position": 0.97, "color": self._muted_color(), "anchors": [(0, 0), (0, 0)]},
        )
        self.plot_item.addItem(line, ignoreBounds=True)
        self._run_lines.append((self._passes + 1, line))

    def add_chunk(self, stats: ChunkStats) -> None:
        """Plot one encoder pass after the others."""
        if not self._run_labels:
            self.start_run("")
        self._passes += 1
        self._points.append(PlotPoint(self._passes, len(self._run_labels) - 1, stats))
        if len(self._points) > MAX_PLOTTED_CHUNKS:
            del self._points[:-MAX_PLOTTED_CHUNKS]
            self._drop_old_run_lines()
        self._redraw()

    def clear(self) -> None:
        """Forget every pass and run marker."""
        for _, line in self._run_lines:
            self.plot_item.removeItem(line)
        self._run_lines.clear()
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
        """Render the plot (legend and run labels included) to a PNG twice the widget's width."""
        exporter = ImageExporter(self.plot_item)
        exporter.parameters()["width"] = max(800, 2 * self.plot_widget.width())
        image = exporter.export(toBytes=True)
        if image is None or image.isNull() or not image.save(str(path), "PNG"):
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

    def _series(self) -> tuple[tuple[pg.ScatterPlotItem, str], ...]:
        return ((self.hits, HIT_NAME), (self.misses, MISS_NAME))

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

    def _drop_old_run_lines(self) -> None:
        first = self._points[0].number
        while len(self._run_lines) > 1 and self._run_lines[1][0] <= first:
            self.plot_item.removeItem(self._run_lines.pop(0)[1])

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
        self.legend.setLabelTextColor(text)
        backdrop = QColor(palette.color(QPalette.ColorRole.Base))
        backdrop.setAlpha(200)  # points under the legend still show through
        self.legend.setBrush(pg.mkBrush(backdrop))


def _with_suffix(path: Path, suffix: str) -> Path:
    return path if path.suffix else path.with_suffix(suffix)


def _short(label: str, limit: int = 18) -> str:
    """A run's label on the plot: long clip names keep their start and end (the tooltip has the full name)."""
    if len(label) <= limit:
        return label
    keep = (limit - 1) // 2
    return f"{label[:keep]}…{label[-keep:]}"
