"""The server's multimodal cache counters, scraped from vLLM's Prometheus ``/metrics``."""

from __future__ import annotations

import re
from typing import Sequence

import httpx

from framewise.core.backends.vllm.http import auth_headers, http_client
from framewise.core.settings import BackendSettings

# Prometheus counters of vLLM's multimodal cache (names without the _total suffix some versions add).
MM_CACHE_QUERIES = "vllm:mm_cache_queries"
MM_CACHE_HITS = "vllm:mm_cache_hits"
# One sample line of Prometheus' text format: name, optional {labels}, value (a timestamp may follow).
_PROMETHEUS_SAMPLE = re.compile(r"^(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)(?:\{[^}]*\})?\s+(?P<value>\S+)")


def read_mm_cache_counters(backend: BackendSettings) -> tuple[float | None, float | None]:
    """The server's multimodal cache (queries, hits) totals from ``/metrics``; ``None`` where absent."""
    try:
        with http_client(backend) as client:
            response = client.get(f"{backend.base_url()}/metrics", headers=auth_headers(backend))
    except httpx.HTTPError:
        return None, None
    if response.status_code != 200:
        return None, None
    totals = prometheus_totals(response.text, (MM_CACHE_QUERIES, MM_CACHE_HITS))
    return totals.get(MM_CACHE_QUERIES), totals.get(MM_CACHE_HITS)


def prometheus_totals(text: str, names: Sequence[str]) -> dict[str, float]:
    """The sum over label sets of each counter in ``names`` (with or without ``_total``) in
    Prometheus' text format; counters that do not appear are left out."""
    totals: dict[str, float] = {}
    for line in text.splitlines():
        sample = _PROMETHEUS_SAMPLE.match(line)
        if sample is None:
            continue
        name = sample["name"].removesuffix("_total")
        if name in names:
            try:
                totals[name] = totals.get(name, 0.0) + float(sample["value"])
            except ValueError:
                continue
    return totals
