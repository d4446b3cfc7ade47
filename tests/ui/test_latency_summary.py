"""The encoder panel's latency line: median and 99th percentile over the application's run."""

from __future__ import annotations

from framewise.ui.metrics import latency_summary


def test_no_chunks_yet_shows_a_dash() -> None:
    assert latency_summary([]) == "–"


def test_one_chunk_is_its_own_median_and_p99() -> None:
    assert latency_summary([4.0]) == "p50 4.00 ms, p99 4.00 ms (1 chunks this run)"


def test_nearest_rank_percentiles_ignore_the_order_of_arrival() -> None:
    values = [float(v) for v in range(100, 0, -1)]  # 100 .. 1
    assert latency_summary(values) == "p50 50.00 ms, p99 99.00 ms (100 chunks this run)"
    assert latency_summary([1.0, 9.0, 2.0]).startswith("p50 2.00 ms, p99 9.00 ms")
