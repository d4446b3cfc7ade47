"""The encoder's live plot: hits and misses as two named series, hover text, run markers, zoom, export."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from PySide6.QtCore import QRect
from PySide6.QtGui import QColor, QFontMetricsF, QImage

from framewise.core.errors import ExportError
from framewise.core.events import ChunkStats
from framewise.ui import latency_plot
from framewise.ui.latency_plot import CSV_COLUMNS, HIT_COLOR, HIT_NAME, MISS_COLOR, MISS_NAME, LatencyPlot
from tests.ui import probes


def chunk(index: int, hit: bool, ms_per_frame: float, frames: int = 8) -> ChunkStats:
    return ChunkStats(
        index, 1, frames, 900, 1024 if hit else None, 0.12 if hit else 0.0, ms_per_frame * frames, hit,
        None if hit else "larger than every budget",
    )


@pytest.fixture
def plot(qtbot) -> LatencyPlot:
    widget = LatencyPlot()
    qtbot.addWidget(widget)
    widget.resize(700, 320)
    widget.show()
    widget.start_run("a.mp4")
    for index, (hit, ms) in enumerate(((True, 2.0), (False, 9.0), (True, 3.0))):
        widget.add_chunk(chunk(index, hit, ms))
    widget.start_run("b.mp4")
    widget.add_chunk(chunk(0, True, 1.5))
    return widget


def test_hits_and_misses_are_two_series_with_their_own_symbol_colour_and_legend(plot):
    assert probes.series(plot) == {HIT_NAME: [(1.0, 2.0), (3.0, 3.0), (4.0, 1.5)], MISS_NAME: [(2.0, 9.0)]}
    assert probes.legend_names(plot) == [HIT_NAME, MISS_NAME]
    assert plot.hits.opts["symbol"] != plot.misses.opts["symbol"]
    assert plot.hits.opts["brush"].color() == HIT_COLOR and plot.misses.opts["brush"].color() == MISS_COLOR
    assert [point.run for point in probes.plotted(plot)] == [0, 0, 0, 1], "the plot keeps every clip"
    assert not plot.placeholder.isVisible()


def test_the_legend_hides_no_point(plot):
    legend = QRect(plot.legend.mapTo(plot, plot.legend.rect().topLeft()), plot.legend.size())
    assert plot.legend.isVisible() and not legend.intersects(plot.plot_widget.geometry())


def test_the_pass_axis_ticks_whole_passes_only(plot):
    axis = plot.plot_item.getAxis("bottom")
    few = [value for _, values in axis.tickValues(0.5, 3.5, 300) for value in values]
    assert few and all(float(value).is_integer() for value in few)
    many = [value for _, values in axis.tickValues(0, 2000, 300) for value in values]
    assert len(many) < 100, "a long run is not ticked at every pass"


def test_the_points_are_drawn_in_their_colours(plot, qtbot):
    qtbot.wait(50)
    image = plot.plot_widget.grab().toImage()
    colours = {image.pixelColor(x, y).rgb() for x in range(image.width()) for y in range(image.height())}
    assert QColor(HIT_COLOR).rgb() in colours and QColor(MISS_COLOR).rgb() in colours


def test_hovering_a_point_describes_its_chunk_and_clip(plot):
    assert plot.hits.opts["hoverable"] and plot.misses.opts["hoverable"]
    (spot,) = plot.misses.points()
    text = plot.misses.opts["tip"](x=spot.pos().x(), y=spot.pos().y(), data=spot.data())
    assert text.startswith("Chunk 1 of a.mp4: 8 frames, 900 patches, eager (no graph)")
    assert "9.00 ms per frame, graph miss" in text and "Eager because: larger than every budget" in text
    last = plot.hits.points()[-1]
    assert "of b.mp4" in plot.hits.opts["tip"](x=0, y=0, data=last.data())


def test_a_line_marks_where_each_encode_starts(plot):
    assert [line.value() for line in probes.run_lines(plot)] == [0.5, 3.5], "before passes 1 and 4"
    assert probes.run_labels(plot) == ["a.mp4", "b.mp4"]


def test_a_clip_label_shortens_to_the_room_before_the_next_clip(qtbot):
    widget = LatencyPlot()
    qtbot.addWidget(widget)
    widget.resize(400, 240)
    widget.show()
    names = [f"clip_{index}_with_a_rather_long_name.mp4" for index in range(4)]
    for index, name in enumerate(names):
        widget.start_run(name)
        widget.add_chunk(chunk(0, True, 1.0 + index))
    view = widget.plot_item.getViewBox()
    view.autoRange()
    (left, right), _ = view.viewRange()
    room = view.width() / (right - left)  # one pass apart
    shown = probes.run_labels(widget)
    font = probes.run_lines(widget)[0].label.textItem.font()
    for name, text in zip(names, shown):
        assert text != name and QFontMetricsF(font).horizontalAdvance(text) <= room
        assert text == "" or (text.startswith(name[:2]) and text.endswith(name[-2:]) and "…" in text)
    view.setXRange(0.5, 1.5, padding=0)  # zoomed in on the first clip: its whole name fits
    assert probes.run_labels(widget)[0] == names[0]


def test_a_clip_name_with_braces_is_shown_as_is(plot):
    plot.start_run("take {1} {value}.mp4")
    plot.add_chunk(chunk(0, True, 2.0))
    plot.plot_item.getViewBox().setXRange(4.5, 5.5, padding=0)
    assert probes.run_labels(plot)[-1] == "take {1} {value}.mp4"


def test_zoom_and_pan_move_the_view_and_fit_restores_it(plot):
    view = plot.plot_item.getViewBox()
    view.autoRange()
    (x0, x1), _ = view.viewRange()
    view.scaleBy((0.5, 0.5))
    (zoomed0, zoomed1), _ = view.viewRange()
    assert zoomed1 - zoomed0 == pytest.approx((x1 - x0) / 2, rel=0.05)
    view.translateBy(x=0.5)
    assert view.viewRange()[0][0] == pytest.approx(zoomed0 + 0.5, rel=0.05)
    view.autoRange()
    assert view.viewRange()[0][0] <= 1.0 and view.viewRange()[0][1] >= 4.0 and view.viewRange()[1][1] >= 9.0


def test_export_png_renders_the_plot(plot, tmp_path: Path):
    plot.export_png(tmp_path / "plot.png")
    image = QImage(str(tmp_path / "plot.png"))
    assert image.width() >= 800 and image.height() > 100
    colours = {image.pixelColor(x, y).rgb() for x in range(0, image.width(), 1) for y in range(0, image.height(), 1)}
    assert QColor(HIT_COLOR).rgb() in colours


def test_export_png_carries_the_legend(qtbot, tmp_path: Path):
    widget = LatencyPlot()
    qtbot.addWidget(widget)
    widget.resize(500, 260)
    widget.show()
    widget.add_chunk(chunk(0, True, 2.0))  # no miss is plotted: the miss colour can only be the legend's
    widget.export_png(tmp_path / "plot.png")
    image = QImage(str(tmp_path / "plot.png"))
    lowest = range(image.height() * 3 // 4, image.height())
    colours = {image.pixelColor(x, y).rgb() for x in range(image.width()) for y in lowest}
    assert QColor(MISS_COLOR).rgb() in colours and QColor(HIT_COLOR).rgb() in colours


def test_export_csv_has_one_row_per_pass(plot, tmp_path: Path):
    plot.export_csv(tmp_path / "passes.csv")
    with (tmp_path / "passes.csv").open(encoding="utf-8") as file:
        rows = list(csv.DictReader(file))
    assert list(rows[0]) == list(CSV_COLUMNS)
    assert [(row["pass"], row["clip"], row["ran_as"]) for row in rows] == [
        ("1", "a.mp4", "graph"), ("2", "a.mp4", "eager"), ("3", "a.mp4", "graph"), ("4", "b.mp4", "graph")
    ]
    assert float(rows[1]["ms_per_frame"]) == 9.0 and rows[1]["budget"] == "" and rows[1]["eager_reason"]


def test_export_to_a_missing_folder_is_a_typed_error(plot, tmp_path: Path):
    with pytest.raises(ExportError):
        plot.export_csv(tmp_path / "nope" / "passes.csv")
    with pytest.raises(ExportError):
        plot.export_png(tmp_path / "nope" / "plot.png")


def test_a_new_plot_shows_only_its_placeholder(qtbot):
    widget = LatencyPlot()
    qtbot.addWidget(widget)
    widget.show()
    assert widget.placeholder.isVisible() and not widget.plot_widget.isVisible()
    widget.add_chunk(chunk(0, True, 1.0))
    assert widget.plot_widget.isVisible() and not widget.placeholder.isVisible()


def test_clear_empties_the_plot_and_a_long_run_keeps_the_latest_passes(qtbot, monkeypatch):
    # A cap of 20 for the test: each pass redraws every point kept, so filling the real cap costs seconds.
    monkeypatch.setattr(latency_plot, "MAX_PLOTTED_CHUNKS", 20)
    widget = LatencyPlot()
    qtbot.addWidget(widget)
    assert not widget.export_button.isEnabled()
    widget.start_run("long.mp4")
    for index in range(20 + 5):
        widget.add_chunk(chunk(index, True, 1.0 + index % 3))
    assert len(probes.plotted(widget)) == 20 and probes.plotted(widget)[0].number == 6
    assert widget.export_button.isEnabled()
    widget.clear()
    assert probes.plotted(widget) == [] and probes.series(widget) == {HIT_NAME: [], MISS_NAME: []} and probes.run_lines(widget) == []
    assert not widget.export_button.isEnabled()
