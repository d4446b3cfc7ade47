"""Read what the window's widgets show, through Qt's and pyqtgraph's own interfaces (named children,
item texts, plotted data, painted pixels), so the product carries no accessors kept for tests."""

from __future__ import annotations

import re
from typing import Callable, TypeVar

import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QPalette
from PySide6.QtWidgets import QAbstractItemView, QLabel, QWidget

from framewise.ui.chat import MessageCard
from framewise.ui.elided_label import ElidedLabel
from framewise.ui.frame_strip import FrameStrip
from framewise.ui.frames import Timeline
from framewise.ui.latency_plot import LatencyPlot, PlotPoint
from framewise.ui.metrics import EncoderPanel
from framewise.ui.section import Section
from framewise.ui.settings_fields import FieldError

T = TypeVar("T")


def run_now(call: Callable[[], T], on_result: Callable[[T], None]) -> None:
    """A query runner that answers at once, on the calling thread (for a dialog built on its own)."""
    on_result(call())


class HeldQueries:
    """A query runner that keeps each query until :meth:`answer` runs it: the order answers arrive in is the test's."""

    def __init__(self) -> None:
        self.waiting: list[tuple[Callable[[], object], Callable[[object], None]]] = []

    def __call__(self, call: Callable[[], T], on_result: Callable[[T], None]) -> None:
        self.waiting.append((call, on_result))  # type: ignore[arg-type]

    def answer(self, index: int = 0) -> None:
        call, on_result = self.waiting.pop(index)
        on_result(call())

    def answer_all(self) -> None:
        while self.waiting:
            self.answer()


# -- the settings dialog: its fields are named after the settings ------------------------------


def field(dialog: QWidget, name: str) -> QWidget:
    """The widget of settings field ``name`` (``"sampling.max_frames"``)."""
    found = dialog.findChild(QWidget, name)
    assert found is not None, f"no field {name}"
    return found


def error_text(dialog: QWidget, name: str) -> str:
    """The error shown under field ``name`` ("" when none is)."""
    error = dialog.findChild(FieldError, f"{name}.error")
    assert error is not None, f"no field {name}"
    return "" if error.isHidden() else error.label.text()


def hint_text(dialog: QWidget, name: str) -> str:
    """The hint under field ``name``: the label beside it in its row's cell."""
    cell = field(dialog, name).parentWidget()
    (hint,) = cell.findChildren(QLabel, options=Qt.FindChildOption.FindDirectChildrenOnly)
    return hint.text()


# -- lists and labels --------------------------------------------------------------------------


def item_texts(view: QAbstractItemView) -> list[str]:
    """The text of every row of a list, in order (a frame strip's captions, the past conversations)."""
    model = view.model()
    return [model.index(row, 0).data() or "" for row in range(model.rowCount())]


def picture_color(strip: FrameStrip, row: int) -> QColor:
    """The color of the middle of frame ``row``'s picture as the strip draws it (made now if it
    was not yet)."""
    icon = strip.model().index(row, 0).data(Qt.ItemDataRole.DecorationRole)
    image = icon.pixmap(strip.iconSize()).toImage()
    return image.pixelColor(image.width() // 2, image.height() // 2)


def kept_bar_share(strip: FrameStrip, row: int) -> float:
    """The share of frame ``row``'s picture, left to right, that its bottom line of pixels shows in
    the strip's highlight colour: the bar of the tokens pruning kept (0 where there is none)."""
    icon = strip.model().index(row, 0).data(Qt.ItemDataRole.DecorationRole)
    image = icon.pixmap(strip.iconSize()).toImage()
    highlight = strip.palette().color(QPalette.ColorRole.Highlight).rgb()
    bottom = image.height() - 1
    return sum(image.pixelColor(x, bottom).rgb() == highlight for x in range(image.width())) / image.width()


def is_elided(label: ElidedLabel) -> bool:
    """Whether the label's text does not fit it (it is drawn shortened)."""
    return label.fontMetrics().horizontalAdvance(label.text()) > label.contentsRect().width()


def is_collapsed(section: Section) -> bool:
    """Whether a collapsible section shows only its header line (its arrow points right)."""
    return section.toggle is not None and section.toggle.arrowType() == Qt.ArrowType.RightArrow


def row_visible(panel: EncoderPanel, caption: str) -> bool:
    """Whether the Encoder panel shows the figure captioned ``caption``."""
    (label,) = [label for label in panel.findChildren(QLabel) if label.text() == caption]
    return not label.isHidden()


def time_items(card: MessageCard) -> list[int | None]:
    """For each time a message shows as a link, the tab of the item it belongs to (``None``: the tab shown)."""
    hrefs = re.findall(r'href="time:([^"]*)"', card.body.text())
    return [int(href.partition("@")[2]) if "@" in href else None for href in hrefs]


# -- the timeline ------------------------------------------------------------------------------


def has_ticks_at(timeline: Timeline, times: tuple[float, ...]) -> bool:
    """Whether the timeline draws one tick at each of ``times`` and no other (times far enough apart)."""
    return timeline.tick_xs() == [timeline.x_of(time) for time in times]


def marks_question_time(timeline: Timeline, start_s: float, end_s: float | None = None) -> bool:
    """Whether the timeline outlines a time the question mentions: a notch at ``start_s``, or for a range
    the outline's top edge between ``start_s`` and ``end_s``, in the link colour."""
    image = timeline.grab().toImage()
    link = timeline.palette().color(QPalette.ColorRole.Link).rgb()
    if end_s is None:
        return image.pixelColor(round(timeline.x_of(start_s)), 1).rgb() == link
    middle = round((timeline.x_of(start_s) + timeline.x_of(end_s)) / 2)
    return image.pixelColor(middle, 2).rgb() == link


# -- the latency plot --------------------------------------------------------------------------


def plotted(plot: LatencyPlot) -> list[PlotPoint]:
    """Every pass the plot draws, hits and misses, in pass order."""
    points = [spot.data() for series in (plot.hits, plot.misses) for spot in series.points()]
    return sorted(points, key=lambda point: point.number)


def series(plot: LatencyPlot) -> dict[str, list[tuple[float, float]]]:
    """The drawn (pass, ms per frame) pairs of each series, by its name."""
    return {item.name(): [(float(x), float(y)) for x, y in zip(*item.getData())] for item in (plot.hits, plot.misses)}


def legend_names(plot: LatencyPlot) -> list[str]:
    return [label.accessibleName() for label in plot.legend.findChildren(QLabel)]


def run_lines(plot: LatencyPlot) -> list[pg.InfiniteLine]:
    """The lines that mark where each encode starts, in order."""
    return [item for item in plot.plot_item.items if isinstance(item, pg.InfiniteLine)]


def run_labels(plot: LatencyPlot) -> list[str]:
    """The text each encode's line shows now (shortened to fit, or empty where there is no room)."""
    return [line.label.toPlainText() for line in run_lines(plot)]
