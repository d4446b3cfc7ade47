"""The numbers computed once: percentiles, the bounded window, hits per item, the one denominator, the decode speed."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from framewise.core.encoding.defs import VisionItem
from framewise.core.encoding.eager import item_frames, piece_frames
from framewise.core.events import AnswerSpeed, ChunkStats
from framewise.core.families.qwen3_vl.geometry import VisionGeometry
from framewise.core.families.qwen3_vl.processor import preprocess_video
from framewise.core.metrics import DecodeSpeedMeter, EncoderMetricsAccumulator, decode_rate, percentile


def a_pass(ms_per_frame: float, frames: int = 2, hit: bool = True, index: int = 0) -> ChunkStats:
    return ChunkStats(index, 1, frames, 256, 1024 if hit else None, 0.1, ms_per_frame * frames, hit, None if hit else "eager")


def nearest_rank(values: list[float], q: float) -> float:
    """The textbook definition: the value at rank ceil(q/100 * n) of the sorted values."""
    ordered = sorted(values)
    return ordered[max(1, math.ceil(q / 100 * len(ordered))) - 1]


def test_percentile_is_nearest_rank_on_random_data() -> None:
    rng = np.random.default_rng(7)
    for _ in range(200):
        values = list(rng.lognormal(1.0, 0.8, size=int(rng.integers(1, 400))))
        for q in (1, 50, 90, 99, 100):
            assert percentile(values, q) == nearest_rank(values, q)
    assert percentile([], 50) is None and percentile([3.0], 99) == 3.0
    assert percentile(range(1, 101), 50) == 50 and percentile(range(1, 101), 99) == 99


def test_the_window_keeps_only_the_latest_passes() -> None:
    rng = np.random.default_rng(3)
    metrics = EncoderMetricsAccumulator(window_size=64)
    samples: list[float] = []
    for item in range(40):
        values = rng.uniform(1.0, 50.0, size=int(rng.integers(1, 6)))
        if item == 0:
            values[0] = 10_000.0  # an outlier that must leave the window
        samples += list(values)
        snapshot = metrics.add_item([a_pass(float(v), index=i) for i, v in enumerate(values)])
    window = np.array(samples[-64:])
    assert len(samples) > 64 and snapshot.window == snapshot.window_size == 64
    assert snapshot.passes == len(samples)
    assert snapshot.ms_per_frame_p50 == pytest.approx(np.percentile(window, 50, method="inverted_cdf"))
    assert snapshot.ms_per_frame_p99 == pytest.approx(np.percentile(window, 99, method="inverted_cdf"))
    assert snapshot.ms_per_frame_p99 < 10_000.0


def test_hits_are_counted_per_item_not_per_pass() -> None:
    metrics = EncoderMetricsAccumulator()
    assert metrics.snapshot().hit_rate is None and metrics.snapshot().ms_per_frame_p50 is None
    metrics.add_item([a_pass(1.0, index=0), a_pass(1.0, index=1), a_pass(1.0, index=2)])  # a long clip, all graphs
    snapshot = metrics.add_item([a_pass(1.0, index=0), a_pass(5.0, hit=False, index=1)])  # one eager pass
    assert (snapshot.items, snapshot.item_hits, snapshot.item_misses) == (2, 1, 1)
    assert (snapshot.passes, snapshot.eager_passes) == (5, 1)
    assert snapshot.hit_rate == 0.5 and snapshot.last_item_hit is False
    assert metrics.add_item([a_pass(2.0)]).last_item_hit is True


def test_an_items_ms_per_frame_divides_by_its_sampled_frames() -> None:
    passes = [a_pass(2.0, frames=8, index=0), a_pass(10.0, frames=2, index=1)]
    snapshot = EncoderMetricsAccumulator().add_item(passes)
    assert snapshot.last_item_ms_per_frame == pytest.approx((16.0 + 20.0) / 10)  # not the mean of 2 and 10
    assert passes[1].ms_per_frame == 10.0


class PairsOfFrames:
    """The one thing the frame count asks of an adapter: Qwen3-VL's 2 frames per video slice."""

    def frames_per_slice(self, modality: str) -> int:
        return 2 if modality == "video" else 1


def test_a_repeated_last_frame_is_not_a_frame() -> None:
    frames = np.zeros((5, 32, 32, 3), np.uint8)
    item = preprocess_video(frames, [0.0, 0.5, 1.0, 1.5, 2.0], VisionGeometry()).item
    adapter = PairsOfFrames()
    assert item.grid_thw[0] == 3 and item.repeated_frames == 1
    assert item_frames(adapter, item) == 5  # type: ignore[arg-type]
    pieces = [piece_frames(adapter, item, 0, 2), piece_frames(adapter, item, 2, 1)]  # type: ignore[arg-type]
    assert pieces == [4, 1], "the pass holding the last pair encodes 1 sampled frame"
    image = VisionItem(torch.zeros(4, 1536), (1, 2, 2), "image")
    assert item_frames(adapter, image) == piece_frames(adapter, image, 0, 1) == 1  # type: ignore[arg-type]


def test_bad_uses_are_refused() -> None:
    with pytest.raises(ValueError, match="at least one pass"):
        EncoderMetricsAccumulator(window_size=0)
    with pytest.raises(ValueError, match="at least one encoder pass"):
        EncoderMetricsAccumulator().add_item([])


class Clock:
    """A clock a test moves by hand."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_live_speed_is_reported_a_few_times_a_second_with_the_final_definition() -> None:
    clock = Clock()
    meter = DecodeSpeedMeter(clock)
    arrivals = [100.0 + 0.1 * index for index in range(12)]  # ten tokens a second after the first
    reports = []
    for arrival in arrivals:
        clock.now = arrival
        reports.append(meter.add())
    sent = [(index + 1, report) for index, report in enumerate(reports) if report is not None]
    assert [tokens for tokens, _ in sent] == [4, 7, 10], "at least 0.25 s apart, counted from the first token"
    for tokens, report in sent:
        assert report.tokens_so_far == tokens
        assert report.tokens_per_second_so_far == pytest.approx((tokens - 1) / (arrivals[tokens - 1] - arrivals[0]))
        assert report.tokens_per_second_so_far == decode_rate(tokens, meter.first_token_time, arrivals[tokens - 1])
    assert meter.tokens == 12 and meter.first_token_time == 100.0
    assert decode_rate(meter.tokens, meter.first_token_time, arrivals[-1]) == pytest.approx(10.0)


def test_the_decode_speed_starts_after_the_first_token() -> None:
    assert decode_rate(1, 5.0, 6.0) == 0.0, "one token has no speed: its wait is the time to first token"
    assert decode_rate(0, None, 6.0) == 0.0
    assert decode_rate(3, 5.0, 5.0) == 0.0
    assert decode_rate(3, 5.0, 5.5) == 4.0
    clock = Clock()
    meter = DecodeSpeedMeter(clock)
    assert meter.add() is None, "no report for the first token"
    clock.now += 10.0
    assert meter.add() == AnswerSpeed(2, 0.1)
