"""Scraping the server's multimodal cache counters from Prometheus' text format."""

from __future__ import annotations

from framewise.core.backends.vllm.metrics import prometheus_totals


def test_counters_sum_over_labels() -> None:
    text = "# HELP x\nvllm:mm_cache_hits_total{engine=\"0\"} 1.0\nvllm:mm_cache_hits_total{engine=\"1\"} 2.0\nother 5\n"
    assert prometheus_totals(text, ("vllm:mm_cache_hits",)) == {"vllm:mm_cache_hits": 3.0}
