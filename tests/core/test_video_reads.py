"""How clips are read: the plan of reads (pure), no frame decoded twice, parallel decoders that
take the same frames as one, and fast mode's nearest keyframes, on clips written in the test."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import time

import av
import numpy as np
import pytest

from framewise.core.errors import SettingsError
from framewise.core.families.qwen3_vl.sizing import video_frame_size
from framewise.core.settings import FAST_MODE_AUTO_ABOVE_S, SamplingSettings
from framewise.core.video import ReadBudget, pyav_reader, sample_times
from framewise.core.video.reads import JUMP_COST, Read, plan_reads, split_reads
from framewise.core.video.sampling import sampling_mode
from training.clip_writer import write_clip

if __package__:
    from .test_video import (  # noqa: F401  (decoded_times is a fixture)
        decoded_times, index_frame, indices, on_screen, quadrant_colors, quadrant_picture, sample,
    )
else:
    from test_video import (  # noqa: F401
        decoded_times, index_frame, indices, on_screen, quadrant_colors, quadrant_picture, sample,
    )

FPS = 10
FRAMES = 300  # 30 s
KEYFRAME_EVERY = 25  # 2.5 s


@pytest.fixture(scope="module")
def gop_clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """30 s at 10 fps, a keyframe every 25 frames; frame i shows index i."""
    folder = tmp_path_factory.mktemp("reads")
    return write_clip(
        folder / "gops.mp4", [index_frame(i) for i in range(FRAMES)], fps=FPS, keyframe_interval=KEYFRAME_EVERY,
        preset="ultrafast",
    )


@pytest.fixture
def workers(monkeypatch):
    """Set how many decoders the PyAV reader may run at once; records each decoder opened."""
    opened: list[object] = []
    real_init = pyav_reader._Decoder.__init__

    def recording_init(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        opened.append(self)

    monkeypatch.setattr(pyav_reader._Decoder, "__init__", recording_init)

    def use(count: int) -> list[object]:
        monkeypatch.setattr(pyav_reader, "default_workers", lambda: count)
        opened.clear()
        return opened

    return use


SOURCE_TIMES = [i / FPS for i in range(FRAMES)]
KEYFRAME_TIMES = tuple(i / FPS for i in range(0, FRAMES, KEYFRAME_EVERY))


# --- the plan ------------------------------------------------------------------------------------------


def test_dense_targets_are_one_sequential_read_and_sparse_ones_a_read_per_group():
    dense = plan_reads(KEYFRAME_TIMES, sample_times(30.0, 60), "exact", 0.5, 1 / FPS)
    sparse = plan_reads(KEYFRAME_TIMES, sample_times(30.0, 4), "exact", 7.5, 1 / FPS)

    assert dense == [Read(0, None, sample_times(30.0, 60))]
    assert [(read.start, read.stop) for read in sparse] == [(1, 2), (4, 5), (7, 8), (10, 11)]
    assert [target for read in sparse for target in read.targets] == list(sample_times(30.0, 4))


def test_a_group_is_left_after_its_last_target_when_that_saves_more_than_a_jump_costs():
    """Keyframes every 2.5 s at 10 fps: a group's last target 0.3 s before the next keyframe reads
    on (3 frames), one 2.2 s before it stops there and jumps (22 frames, more than a jump)."""
    near_end, far_from_end = (0.5, 2.2, 3.0), (0.3, 2.8, 5.1)

    assert plan_reads(KEYFRAME_TIMES, near_end, "exact", 1.0, 1 / FPS) == [Read(0, 2, near_end)]
    assert plan_reads(KEYFRAME_TIMES, far_from_end, "exact", 1.0, 1 / FPS) == [
        Read(0, 1, (0.3,)), Read(1, 2, (2.8,)), Read(2, 3, (5.1,))
    ]
    assert JUMP_COST < 22


def test_a_group_without_targets_is_read_through_when_a_jump_would_cost_more():
    keyframes = tuple(i / FPS for i in range(0, FRAMES, 5))  # a keyframe every 5 frames

    reads = plan_reads(keyframes, (0.45, 1.05), "exact", 0.6, 1 / FPS)

    assert reads == [Read(0, 3, (0.45, 1.05))]  # 0.5 s on to the keyframe at 1.0 rather than a jump


def test_fast_targets_take_the_nearest_keyframe_within_half_an_interval_else_the_earliest_frame_that_near():
    targets = (2.4, 9.0, 20.1)  # keyframes at 0, 2.5, 5, ... 27.5
    reads = plan_reads(KEYFRAME_TIMES, targets, "fast", interval_s=1.0, frame_s=1 / FPS)

    assert reads == [
        Read(1, 2, (2.5,), first_frame_only=True),
        # 1.0 s from the nearest keyframe, more than half the interval: the frame shown at 8.6 s,
        # the earliest at most 0.5 s before 9.0, is 11 frames past the keyframe at 7.5 instead of 15
        Read(3, 4, (pytest.approx(8.6),)),
        Read(8, 9, (20.0,), first_frame_only=True),
    ]


def test_a_group_with_an_exact_target_is_decoded_whole_once_even_for_a_fast_one():
    reads = plan_reads(KEYFRAME_TIMES, (4.9, 6.5), "fast", interval_s=1.6, frame_s=1 / FPS)

    assert reads == [Read(2, 3, (5.0, pytest.approx(5.8)))]


@pytest.mark.parametrize("count", [4, 60, 240])
@pytest.mark.parametrize("workers", [2, 3, 8])
def test_split_reads_keeps_every_target_in_order_in_at_most_that_many_runs(count, workers):
    targets = sample_times(30.0, count)
    reads = plan_reads(KEYFRAME_TIMES, targets, "exact", 30.0 / count, 1 / FPS)

    runs = split_reads(reads, KEYFRAME_TIMES, 30.0, 1 / FPS, workers)

    assert 1 <= len(runs) <= workers and all(runs)
    assert tuple(target for run in runs for read in run for target in read.targets) == targets
    starts = [read.start for run in runs for read in run]
    assert starts == sorted(starts) and len(set(starts)) == len(starts)  # no group read twice
    if count >= 60:
        assert len(runs) == min(workers, len(KEYFRAME_TIMES))  # a long sequential read is shared out


def test_fast_mode_auto_turns_on_above_its_length_only():
    auto, off, on = (SamplingSettings(fast_mode=mode) for mode in ("auto", "off", "on"))

    assert sampling_mode(auto, FAST_MODE_AUTO_ABOVE_S) == "exact"
    assert sampling_mode(auto, FAST_MODE_AUTO_ABOVE_S + 1) == "fast"
    assert sampling_mode(off, 10 * FAST_MODE_AUTO_ABOVE_S) == "exact"
    assert sampling_mode(on, 1.0) == "fast"
    with pytest.raises(SettingsError, match="sampling.fast_mode"):
        SamplingSettings(fast_mode="sometimes").validate(None)


# --- reading a clip ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("count", "workers_used"), [(60, 1), (60, 3), (4, 1), (4, 3)])
def test_no_frame_is_decoded_twice(gop_clip, decoded_times, workers, count, workers_used):
    workers(workers_used)
    sampled = sample(gop_clip, SamplingSettings(fps=2.0, min_frames=4, max_frames=count))

    expected = [on_screen(SOURCE_TIMES, t) for t in sample_times(30.0, count)]
    assert indices(sampled.frames) == expected
    repeated = [time_s for time_s, times in Counter(decoded_times).items() if times > 1]
    assert repeated == []
    assert sampled.frames_decoded == len(decoded_times)
    if count == 4:
        assert sampled.frames_decoded < FRAMES / 2  # sparse targets: only the groups that hold them


def test_exact_mode_stops_a_group_at_its_last_target_when_the_rest_is_worth_a_jump(gop_clip, decoded_times, workers):
    """12 targets 2.5 s apart, each 1.25 s into its group: the 12 frames after each are left."""
    workers(1)
    sampled = sample(gop_clip, SamplingSettings(fps=2.0, min_frames=4, max_frames=12))

    assert indices(sampled.frames) == [on_screen(SOURCE_TIMES, t) for t in sample_times(30.0, 12)]
    assert sampled.frames_decoded < FRAMES * 0.75


def test_a_long_sequential_read_hands_on_each_frame_as_it_is_kept(gop_clip, workers, monkeypatch):
    """60 dense targets are one read of the whole clip; the encoder and the strip get each frame
    while it goes on, not when it ends."""
    workers(1)
    decoded: list[float] = []
    real_decoded = pyav_reader.PyAVClip._decoded

    def counted(self, *args):
        for time_s, frame in real_decoded(self, *args):
            decoded.append(time_s)
            yield time_s, frame

    monkeypatch.setattr(pyav_reader.PyAVClip, "_decoded", counted)

    class Sink:
        def __init__(self) -> None:
            self.decoded_at_put: dict[int, int] = {}

        def start(self, count: int, size: tuple[int, int]) -> None:
            pass

        def put(self, index: int, rgb: np.ndarray, time_s: float) -> None:
            self.decoded_at_put.setdefault(index, len(decoded))

    sink = Sink()
    sample(gop_clip, SamplingSettings(fps=2.0, min_frames=4, max_frames=60), sink=sink)

    assert sorted(sink.decoded_at_put) == list(range(60))
    assert sink.decoded_at_put[0] < FRAMES / 4 and sink.decoded_at_put[29] < FRAMES * 3 / 4  # the read is all 300


@pytest.mark.parametrize("workers_count", [1, 3])
def test_a_read_waiting_for_a_slow_consumer_of_its_frames_is_not_timed_out(gop_clip, workers, workers_count):
    """The encoder may fall behind the reading (a long clip at a large pixel budget on a CPU); the
    reader then waits to hand frames on, and that wait is not the file's fault."""
    workers(workers_count)

    class SlowSink:
        def __init__(self) -> None:
            self.handed: list[int] = []

        def start(self, count: int, size: tuple[int, int]) -> None:
            pass

        def put(self, index: int, rgb: np.ndarray, time_s: float) -> None:
            if index in (0, 10):
                time.sleep(1.0)  # twice the budget for a second of video, twice over
            self.handed.append(index)

    sink = SlowSink()
    sampled = sample(gop_clip, SamplingSettings(fps=2.0, min_frames=4, max_frames=20), sink=sink,
                     budget=ReadBudget(start_s=5.0, per_video_second_s=0.5))

    assert len(sampled.timestamps) == 20 and set(sink.handed) == set(range(20))


def test_a_target_no_read_found_takes_the_frame_before_it_in_place():
    frames = np.zeros((5, 2, 3, 3), np.uint8)
    frames[1], frames[3] = 1, 3
    times = pyav_reader._fill_gaps(frames, [None, 0.5, None, 1.5, None])
    assert frames[:, 0, 0, 0].tolist() == [1, 1, 1, 3, 3] and times == (0.5, 0.5, 0.5, 1.5, 1.5)
    with pytest.raises(pyav_reader.ReaderFailed):
        pyav_reader._fill_gaps(frames, [None] * 5)


@pytest.mark.parametrize(("workers_allowed", "width", "height", "decoders"), [
    (16, 1920, 1080, 16), (16, 3840, 2160, 4), (16, 7680, 4320, 1), (2, 3840, 2160, 2), (1, 640, 360, 1),
])
def test_a_clip_of_large_pictures_gets_fewer_decoders(workers_allowed, width, height, decoders):
    """One decoder per core, but no more than keeps their pictures within the read's allowance."""
    assert pyav_reader.decoders_for(workers_allowed, width, height) == decoders
    if decoders < workers_allowed:
        picture_bytes = width * height * 3 // 2
        assert decoders * pyav_reader.DECODER_PICTURES * picture_bytes <= pyav_reader.DECODERS_BYTES


def test_a_read_opens_no_more_decoders_than_the_pictures_allow(gop_clip, workers, monkeypatch):
    sampling = SamplingSettings(fps=2.0, min_frames=4, max_frames=48, fast_mode="on")
    workers(1)
    serial = sample(gop_clip, sampling)
    with av.open(str(gop_clip)) as container:
        stream = container.streams.video[0]
        picture_bytes = stream.codec_context.width * stream.codec_context.height * 3 // 2
    monkeypatch.setattr(pyav_reader, "DECODERS_BYTES", 2 * pyav_reader.DECODER_PICTURES * picture_bytes)
    opened = workers(4)
    capped = sample(gop_clip, sampling)
    assert len(opened) == 2  # the first frame's decoder and one more
    np.testing.assert_array_equal(capped.frames, serial.frames)


@pytest.mark.parametrize("fast_mode", ["off", "on"])
def test_parallel_decoders_take_the_same_frames_as_one(gop_clip, workers, fast_mode):
    sampling = SamplingSettings(fps=2.0, min_frames=4, max_frames=48, fast_mode=fast_mode)
    workers(1)
    serial = sample(gop_clip, sampling)
    opened = workers(4)
    parallel = sample(gop_clip, sampling)

    assert len(opened) == 4
    np.testing.assert_array_equal(parallel.frames, serial.frames)
    assert parallel.timestamps == serial.timestamps and parallel.mode == serial.mode


def test_fast_mode_takes_keyframes_with_their_own_times_and_decodes_one_frame_each(gop_clip, workers):
    workers(1)
    sampling = SamplingSettings(fps=2.0, min_frames=4, max_frames=12, fast_mode="on")
    sampled = sample(gop_clip, sampling)

    interval = 30.0 / 12
    assert sampled.mode == "fast"
    for target, time_s, index in zip(sample_times(30.0, 12), sampled.timestamps, indices(sampled.frames), strict=True):
        assert index % KEYFRAME_EVERY == 0 and time_s == pytest.approx(index / FPS)  # a keyframe, at its own time
        assert abs(time_s - target) <= interval / 2
    assert sampled.frames_decoded <= 12 + 1


def test_fast_mode_between_sparse_keyframes_takes_the_earliest_frame_near_enough(gop_clip, workers):
    """20 targets 1.5 s apart against keyframes 2.5 s apart: most have no keyframe within 0.75 s.
    Each takes the earliest frame at most 0.75 s before it, so fewer frames are decoded than for
    the exact ones, and every frame is still within half the interval, at its own time."""
    workers(1)
    fast = sample(gop_clip, SamplingSettings(fps=2.0, min_frames=4, max_frames=20, fast_mode="on"))
    exact = sample(gop_clip, SamplingSettings(fps=2.0, min_frames=4, max_frames=20, fast_mode="off"))

    half_interval = 30.0 / 20 / 2
    taken = indices(fast.frames)
    assert taken == sorted(set(taken))  # no frame twice, in order
    for target, time_s, index in zip(sample_times(30.0, 20), fast.timestamps, taken, strict=True):
        assert time_s == pytest.approx(index / FPS)
        assert abs(time_s - target) <= half_interval + 1e-6
    assert fast.frames_decoded < exact.frames_decoded


def test_fast_mode_is_off_for_short_clips_by_default(gop_clip):
    sampled = sample(gop_clip)

    assert sampled.mode == "exact"


def test_a_decoder_still_reading_after_the_others_ended_keeps_the_read_alive(gop_clip, workers, monkeypatch):
    """Each decoder's own progress extends the budget: the first half of the clip decodes slowly,
    long after the decoder of the second half (which reached further into the video) has ended."""
    real_decoded = pyav_reader.PyAVClip._decoded

    def uneven(self, *args):
        for time_s, frame in real_decoded(self, *args):
            time.sleep(0.03 if time_s < 15.0 else 0.002)  # 0.3 s per second of video, then 0.02
            self.guard.check(time_s)
            yield time_s, frame

    monkeypatch.setattr(pyav_reader.PyAVClip, "_decoded", uneven)
    opened = workers(2)
    sampled = sample(gop_clip, SamplingSettings(fps=2.0, min_frames=4, max_frames=60),
                     budget=ReadBudget(start_s=5.0, per_video_second_s=1.5))

    assert len(opened) == 2
    assert indices(sampled.frames) == [on_screen(SOURCE_TIMES, t) for t in sample_times(30.0, 60)]


@pytest.mark.parametrize("rotation", [90, 270])
def test_fast_mode_scales_rotated_frames_upright_to_the_displayed_size(tmp_path, rotation):
    picture = quadrant_picture(32, 64)
    path = write_clip(tmp_path / "rotated.mp4", [picture] * 20, fps=10, rotation_degrees=rotation, keyframe_interval=5)
    sampling = SamplingSettings(fps=2.0, min_frames=4, max_frames=4, fast_mode="on")

    sampled = sample(path, sampling)

    displayed = np.rot90(picture, k=rotation // 90)
    assert sampled.mode == "fast"
    assert sampled.frames.shape[1:3] == video_frame_size(4, *displayed.shape[:2], sampling)
    for frame in sampled.frames:
        np.testing.assert_array_equal(quadrant_colors(frame), quadrant_colors(displayed))


def test_fast_mode_across_a_timestamp_reset_keeps_each_frames_true_time(tmp_path):
    first = write_clip(tmp_path / "first.ts", [index_frame(i) for i in range(30)], fps=10, keyframe_interval=10)
    second = write_clip(tmp_path / "second.ts", [index_frame(100 + i) for i in range(20)], fps=10, keyframe_interval=10)
    joined = tmp_path / "joined.ts"
    joined.write_bytes(first.read_bytes() + second.read_bytes())

    sampled = sample(joined, SamplingSettings(fps=2.0, min_frames=4, max_frames=10, fast_mode="on"))

    assert sampled.mode == "fast"
    shown = [index if index < 100 else 30 + index - 100 for index in indices(sampled.frames)]  # on the clip's timeline
    assert sampled.timestamps == pytest.approx([index / 10 for index in shown], abs=1e-3)
    for target, time_s in zip(sample_times(5.0, 10), sampled.timestamps, strict=True):
        assert abs(time_s - target) <= 0.25 + 1e-6  # half the interval: keyframes lie at most 10 frames apart


# --- measuring from the index ------------------------------------------------------------------------


def _scans(path: Path) -> tuple[pyav_reader.PacketScan | None, pyav_reader.PacketScan]:
    """(from the index, from the packets) for ``path``'s video stream."""
    import av

    from framewise.core.video.bounded import Guard

    with av.open(str(path)) as container:
        from_index = pyav_reader.index_scan(container, container.streams.video[0])
    with av.open(str(path)) as container:
        from_packets = pyav_reader.scan_packets(container, container.streams.video[0], Guard(ReadBudget()))
    return from_index, from_packets


def test_an_mp4_index_measures_the_clip_as_its_packets_do_b_frames_included(tmp_path):
    """B-frames put decode times before presentation times; the index's keyframes still match
    the packets' presentation times exactly, so the decoders find them."""
    clip = write_clip(tmp_path / "b.mp4", [index_frame(i) for i in range(90)], fps=FPS, keyframe_interval=20)
    from_index, from_packets = _scans(clip)
    assert from_index == from_packets
    assert len(from_index.segments[0].keyframes) >= 5  # one every 20 frames, and any scene cut


def test_a_container_whose_index_lists_only_keyframes_is_measured_from_its_packets(tmp_path):
    clip = write_clip(tmp_path / "b.mkv", [index_frame(i) for i in range(60)], fps=FPS, keyframe_interval=20)
    from_index, from_packets = _scans(clip)
    assert from_index is None and from_packets.packets == 60


def test_opening_an_mp4_reads_no_packet_to_measure_it(gop_clip, monkeypatch):
    def no_scan(*args, **kwargs):
        raise AssertionError("scanned the packets of a file whose index lists every frame")

    monkeypatch.setattr(pyav_reader, "scan_packets", no_scan)
    sampled = sample(gop_clip, SamplingSettings(fps=1.0, max_frames=8, fast_mode="off"))
    assert sampled.info.duration_s == pytest.approx(30.0)
    assert indices(sampled.frames) == [on_screen(SOURCE_TIMES, t) for t in sampled.timestamps]


@pytest.mark.parametrize("fast_mode", ["off", "on"])
def test_a_matroska_file_is_measured_from_its_header_and_scanned_only_to_sample_it(tmp_path, workers, monkeypatch, fast_mode):
    from framewise.core.video import probe_clip

    clip = write_clip(tmp_path / "gops.mkv", [index_frame(i) for i in range(120)], fps=FPS, keyframe_interval=KEYFRAME_EVERY)
    scans = []
    real_scan = pyav_reader.scan_packets
    monkeypatch.setattr(pyav_reader, "scan_packets", lambda *args: scans.append(args) or real_scan(*args))
    workers(2)

    info = probe_clip(clip)
    assert scans == [] and info.duration_s == pytest.approx(12.0) and info.frame_count == 120
    sampled = sample(clip, SamplingSettings(fps=1.0, min_frames=4, max_frames=6, fast_mode=fast_mode))
    assert len(scans) == 1  # the keyframes, for the plan
    times = [i / FPS for i in range(120)]
    if fast_mode == "off":
        assert indices(sampled.frames) == [on_screen(times, t) for t in sample_times(12.0, 6)]
    else:
        assert sampled.mode == "fast" and sampled.frames_decoded <= 6 + 1  # the keyframes the scan found
    assert sampled.timestamps == pytest.approx([index / FPS for index in indices(sampled.frames)])


def test_a_file_with_timestamp_resets_is_still_measured_from_its_packets(tmp_path):
    """An MPEG-TS header counts only part of two recordings joined end to end."""
    import av

    first = write_clip(tmp_path / "first.ts", [index_frame(i) for i in range(30)], fps=10, keyframe_interval=10)
    second = write_clip(tmp_path / "second.ts", [index_frame(100 + i) for i in range(20)], fps=10, keyframe_interval=10)
    joined = tmp_path / "joined.ts"
    joined.write_bytes(first.read_bytes() + second.read_bytes())
    with av.open(str(joined)) as container:
        assert pyav_reader.header_scan(container, container.streams.video[0]) is None

    from framewise.core.video import probe_clip

    assert probe_clip(joined).duration_s == pytest.approx(5.0, abs=0.15)


def test_the_converter_converts_a_frame_kept_twice_once_and_raises_its_errors_on_the_decoder():
    import threading

    converted, handed = [], []
    first, second = np.zeros((2, 2, 3), np.uint8), np.ones((2, 2, 3), np.uint8)

    def convert(frame: np.ndarray) -> np.ndarray:
        converted.append(frame)
        return frame * 2

    out = np.zeros((13, 2, 2, 3), np.uint8)
    converter = pyav_reader._Converter(convert, lambda index, kept: handed.append((index, kept)), threading.Event(), out)
    for index, frame in enumerate((first, first, second)):
        converter.put(10, index, frame, index / 2)
    times = converter.finish()
    converter.close()
    assert len(converted) == 2 and sorted(index for index, _ in handed) == [10, 11, 12]
    assert times[10:] == [0.0, 0.5, 1.0] and times[:10] == [None] * 10
    assert (out[12] == 2).all() and (out[:12] == 0).all()
    # each frame handed on is its place in ``out``, not a picture of its own
    assert all(np.shares_memory(kept[0][0], out) for _, kept in handed)

    failing = pyav_reader._Converter(lambda frame: 1 / 0, lambda index, kept: None, threading.Event(), np.zeros((1, 2, 2, 3), np.uint8))
    failing.put(0, 0, first, 0.0)
    with pytest.raises(ZeroDivisionError):
        failing.finish()
    failing.close()
