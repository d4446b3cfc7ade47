"""The encoder panel's latency line: it renders core's percentiles over the run, computing none."""

from __future__ import annotations

from framewise.core.events import ChunkStats
from framewise.core.metrics import EncoderMetricsAccumulator
from framewise.ui.metrics import latency_summary


def passes(ms_per_frame: list[float]) -> list[ChunkStats]:
    return [ChunkStats(i, 1, 2, 512, None, 0.0, 2 * ms, False, "eager") for i, ms in enumerate(ms_per_frame)]


def test_no_chunks_yet_shows_a_dash() -> None:
    assert latency_summary(EncoderMetricsAccumulator().snapshot()) == "–"


def test_one_chunk_is_its_own_median_and_p99() -> None:
    assert latency_summary(EncoderMetricsAccumulator().add_item(passes([4.0]))) == "p50 4.00 ms, p99 4.00 ms (1 chunk this run)"


def test_nearest_rank_percentiles_ignore_the_order_of_arrival() -> None:
    values = [float(v) for v in range(100, 0, -1)]  # 100 .. 1
    assert latency_summary(EncoderMetricsAccumulator().add_item(passes(values))) == "p50 50.00 ms, p99 99.00 ms (100 chunks this run)"
    assert latency_summary(EncoderMetricsAccumulator().add_item(passes([1.0, 9.0, 2.0]))).startswith("p50 2.00 ms, p99 9.00 ms")


def test_a_full_window_says_how_much_of_the_run_it_covers() -> None:
    metrics = EncoderMetricsAccumulator(window_size=10)
    metrics.add_item(passes([100.0] * 5))
    text = latency_summary(metrics.add_item(passes([1.0] * 10)))
    assert text == "p50 1.00 ms, p99 1.00 ms (last 10 of 15 chunks)"
