"""Encoding while the clip is read: the feed's chunks (in order, bounded, stoppable) and the
engine's streamed encode, which matches encoding the whole clip at once (demo model, CPU)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from framewise.core.backends.local.engine import Engine
from framewise.core.errors import CancelledError
from framewise.core.events import ChunkStats, ClipSampled, EncodeDone, FramesRead
from framewise.core.settings import AppSettings
from framewise.core.video import sample_clip
from framewise.core.video.feed import ChunkFeed, FrameArrivals
from tests.core.test_engine import Recorder
from training.clip_writer import write_clip

if __package__:
    from .test_video import index_frame
else:
    from test_video import index_frame


def frame(index: int) -> np.ndarray:
    return np.full((2, 2, 3), index, np.uint8)


def test_frames_put_out_of_order_come_out_as_whole_chunks_in_clip_order():
    feed = ChunkFeed(lambda count, size: [4, 4, 2], max_chunks=4)  # room for every chunk and the end
    feed.start(10, (2, 2))
    for index in (5, 4, 9, 8, 7, 6, 0, 3, 2, 1):  # a second decoder's frames first
        feed.put(index, frame(index), index / 10)
    feed.end()
    chunks = list(feed.chunks())
    assert [chunk.first for chunk in chunks] == [0, 4, 8]
    assert [chunk.frames[:, 0, 0, 0].tolist() for chunk in chunks] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert chunks[1].times == (0.4, 0.5, 0.6, 0.7)


def test_a_reader_ahead_of_the_encoder_waits_with_at_most_the_queued_chunks_held():
    feed = ChunkFeed(lambda count, size: [2] * 50, max_chunks=2)
    feed.start(100, (2, 2))
    put = []

    def read() -> None:
        for index in range(100):
            feed.put(index, frame(index), float(index))
            put.append(index)
        feed.end()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    time.sleep(0.3)
    assert feed.queued == 2 and len(put) == 5  # two chunks queued; the third chunk's put waits
    taken = [chunk.first for chunk in feed.chunks()]
    reader.join(5)
    assert taken == list(range(0, 100, 2))


def test_closing_the_feed_releases_a_reader_waiting_on_a_full_queue():
    feed = ChunkFeed(lambda count, size: [1, 1, 1], max_chunks=1)
    feed.start(3, (2, 2))
    feed.put(0, frame(0), 0.0)
    errors = []

    def put_next() -> None:
        try:
            feed.put(1, frame(1), 1.0)
        except CancelledError as error:
            errors.append(error)

    reader = threading.Thread(target=put_next, daemon=True)
    reader.start()
    time.sleep(0.1)
    assert reader.is_alive()
    feed.close()
    reader.join(1)
    assert not reader.is_alive() and errors


SEVERAL_PASSES = (
    AppSettings()
    .replace("model", device="cpu")
    .replace("sampling", max_frames=16, fps=4.0)
    .replace("encoder", max_frame_pairs_per_batch=2, max_items_per_batch=2)
    .replace("generation", max_new_tokens=6)
)


@pytest.fixture(scope="module")
def moving_clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("streamed")
    return write_clip(folder / "moving.mp4", [index_frame(i) for i in range(40)], fps=10, preset="ultrafast")


def test_a_clip_encoded_while_it_is_read_matches_the_whole_clip_encoded_at_once(moving_clip):
    recorder = Recorder()
    engine = Engine(SEVERAL_PASSES, sink=recorder)
    engine.load()
    engine.open_clip(moving_clip)
    streamed = engine.clip
    assert len(recorder.of(ChunkStats)) > 1, "the clip is encoded in several passes"
    assert [chunk.chunk_index for chunk in recorder.of(ChunkStats)] == list(range(len(recorder.of(ChunkStats))))
    streamed_answer = engine.ask("What color is the square?").text

    loaded = engine.loaded
    sampled = sample_clip(moving_clip, SEVERAL_PASSES.sampling, loaded.family.frame_sizing(SEVERAL_PASSES.sampling, loaded.limits))
    engine.open_frames(sampled.frames, sampled.timestamps, "at once")
    whole = engine.clip

    assert streamed.summary.timestamps == whole.summary.timestamps == sampled.timestamps
    assert streamed.video.item.grid_thw == whole.video.item.grid_thw
    assert streamed.video.pair_timestamps == whole.video.pair_timestamps
    for clip in (streamed, whole):  # the pixel rows are dropped once encoded: a long clip's take 4x its frames
        assert clip.video.item.pixel_values.numel() == 0 and clip.video.item.patches > 0
    torch.testing.assert_close(streamed.features.embeds, whole.features.embeds, rtol=1e-5, atol=1e-5)
    for streamed_layer, whole_layer in zip(streamed.features.deepstack, whole.features.deepstack, strict=True):
        torch.testing.assert_close(streamed_layer, whole_layer, rtol=1e-5, atol=1e-5)
    assert engine.ask("What color is the square?").text == streamed_answer
    assert recorder.of(EncodeDone)[0].frames == 16


def _vision_blocks(engine: Engine) -> list[torch.nn.Module]:
    loaded = engine.loaded
    return list(loaded.family.cancel_points(loaded.model).vision)


def test_frames_reach_the_strip_while_the_clip_is_read_before_its_encode_ends(moving_clip):
    recorder = Recorder()
    engine = Engine(SEVERAL_PASSES, sink=recorder)
    engine.load()
    blocks = _vision_blocks(engine)
    marks = [block.register_forward_pre_hook(lambda module, args: recorder.events.append("vision block")) for block in blocks]
    try:
        engine.open_clip(moving_clip)
    finally:
        for mark in marks:
            mark.remove()

    last_block = len(recorder.events) - 1 - recorder.events[::-1].index("vision block")
    assert any(isinstance(event, FramesRead) for event in recorder.events[:last_block]), "frames shown mid-encode"
    (sampled,) = recorder.of(ClipSampled)
    shown = [
        (index, time_s, thumbnail)
        for read in recorder.of(FramesRead)
        for index, time_s, thumbnail in zip(read.indices, read.timestamps, read.thumbnails, strict=True)
    ]
    assert {read.total for read in recorder.of(FramesRead)} == {16}
    assert len({index for index, _, _ in shown}) == len(shown)  # each frame sent once
    for index, time_s, thumbnail in shown:  # the frames the finished clip shows
        assert time_s == sampled.timestamps[index]
        np.testing.assert_array_equal(thumbnail, sampled.thumbnails[index])


@pytest.mark.parametrize(("reading", "threads"), [(True, {1}), (False, {2})], ids=["while reading", "once read"])
def test_a_clip_read_on_the_cpu_is_encoded_on_one_torch_thread_beside_the_decoders_until_every_frame_is_read(
    moving_clip, monkeypatch: pytest.MonkeyPatch, reading: bool, threads: set[int]
):
    """While frames are still being read a chunk is encoded on one of torch's threads, beside the
    decoders; once every frame is read, the chunks left take every thread (here the reading state is
    held fixed, each way)."""
    monkeypatch.setattr(FrameArrivals, "reading", lambda self: reading)
    engine = Engine(SEVERAL_PASSES)
    engine.load()
    suite_threads = torch.get_num_threads()  # the suite runs on one; a person's machine on every core
    torch.set_num_threads(2)
    seen = []
    hooks = [block.register_forward_pre_hook(lambda module, args: seen.append(torch.get_num_threads()))
             for block in _vision_blocks(engine)]
    try:
        engine.open_clip(moving_clip)
        assert torch.get_num_threads() == 2  # put back for the prefill and the answers
    finally:
        torch.set_num_threads(suite_threads)
        for hook in hooks:
            hook.remove()
    assert seen and set(seen) == threads


def test_the_arrivals_are_reading_until_every_frame_is_put() -> None:
    arrivals = FrameArrivals()
    assert arrivals.reading()  # the count is not known yet
    arrivals.start(2, (8, 8))
    arrivals.put(1, np.zeros((8, 8, 3), np.uint8), 0.5)
    arrivals.put(1, np.zeros((8, 8, 3), np.uint8), 0.5)  # a frame put again is one frame
    assert arrivals.reading()
    arrivals.put(0, np.zeros((8, 8, 3), np.uint8), 0.0)
    assert not arrivals.reading()


def test_stop_in_the_middle_of_a_streamed_encode_ends_it_within_half_a_second_and_keeps_the_rest(tmp_path):
    engine = Engine(SEVERAL_PASSES)
    engine.load()
    engine.open_clip(write_clip(tmp_path / "first.mp4", [index_frame(i) for i in range(20)], fps=10, preset="ultrafast"))
    answer = engine.ask("What color is the square?").text
    opened, loaded, settings, turns = engine.clip, engine.loaded, engine.settings, list(engine.turns)
    second = write_clip(tmp_path / "second.mp4", [index_frame(i) for i in range(80)], fps=10, preset="ultrafast")
    blocks = _vision_blocks(engine)
    calls, second_pass, cancelled_at = [], threading.Event(), []

    def slow_block(module, args) -> None:  # 0.05 s a block: each of the 4 passes takes a while
        calls.append(module)
        if len(calls) == len(blocks) + 1:
            second_pass.set()
        time.sleep(0.05)

    def stop_in_the_second_pass() -> None:
        second_pass.wait(60)
        cancelled_at.append(time.monotonic())
        engine.cancel()

    slow = [block.register_forward_pre_hook(slow_block) for block in blocks]
    threading.Thread(target=stop_in_the_second_pass, daemon=True).start()
    try:
        with pytest.raises(CancelledError):
            engine.open_clip(second)
        stopped_s = time.monotonic() - cancelled_at[0]
    finally:
        for handle in slow:
            handle.remove()

    assert stopped_s < 0.5
    assert len(calls) < 4 * len(blocks)  # stopped inside the encode, not after it
    assert engine.clip is opened and engine.loaded is loaded and engine.settings == settings
    assert engine.turns == turns and turns[0][0] == "What color is the square?" and answer
    follow_up = engine.ask("And now?")  # the conversation goes on about the first clip
    assert follow_up.text and not follow_up.stats.cancelled and len(engine.turns) == 2


def test_a_2048_frame_clip_runs_end_to_end_on_the_demo_model(tmp_path):
    """Qwen3-VL's most frames (its long-video evaluations'): sampled, encoded while read, prompted
    with 1,024 time markers and answered (tiny frames keep it quick on a CPU)."""
    frames = 2100
    clip = write_clip(tmp_path / "long.mp4", [index_frame(i % 256) for i in range(frames)], fps=30, preset="ultrafast")
    settings = (
        AppSettings()
        .replace("model", device="cpu")
        .replace("sampling", fps=30.0, max_frames=2048, min_pixels_per_frame=32 * 32, max_pixels=2048 * 32 * 32)
        .replace("generation", max_new_tokens=4)
    )
    recorder = Recorder()
    engine = Engine(settings, sink=recorder)
    engine.load()
    done = engine.open_clip(clip)
    assert done.frames == 2048 and len(done.timestamps) == 2048
    assert list(done.timestamps) == sorted(done.timestamps) and done.timestamps[-1] < frames / 30
    assert len(engine.clip.video.pair_timestamps) == 1024
    assert engine.clip.features.embeds.shape[0] == engine.clip.video.item.patches // engine.loaded.limits.merge_area
    answer = engine.ask("What happens at the end?")
    assert answer.stats.decoder.prompt_tokens > 1024 * 3  # each pair: its time marker, vision start/end and tokens
    assert answer.stats.new_tokens >= 1 and not answer.stats.cancelled


@pytest.mark.parametrize(("frames", "height"), [(32, 256), (768, 156), (2048, 95)])
def test_a_clips_thumbnails_share_a_bounded_size_whatever_its_frame_count(frames: int, height: int):
    from framewise.core.video import SampledFrames
    from framewise.core.video.thumbnails import CLIP_THUMBNAILS_BYTES, clip_sampled, frames_read

    picture = np.zeros((360, 640, 3), np.uint8)
    sampled = SampledFrames.given(np.broadcast_to(picture, (frames, *picture.shape)), [i * 0.5 for i in range(frames)], "c")
    thumbnails = clip_sampled(sampled).thumbnails
    assert {thumbnail.shape for thumbnail in thumbnails} == {(height, round(640 * height / 360), 3)}
    assert sum(thumbnail.nbytes for thumbnail in thumbnails) <= CLIP_THUMBNAILS_BYTES
    read = frames_read("c", frames, [(0, picture, 0.0)])  # the strip fills with the same pictures
    assert read.thumbnails[0].shape == thumbnails[0].shape
    small = np.zeros((64, 96, 3), np.uint8)  # never enlarged
    assert clip_sampled(SampledFrames.given(small[None], [0.0], "s")).thumbnails[0].shape == small.shape


def test_reading_progress_tells_frames_read_of_total_and_the_time_left():
    from framewise.core.video.read_report import decode_progress
    from framewise.core.video import ReadProgress

    early = decode_progress("talk.mp4", ReadProgress("decode", 100.0, 3600.0), (20, 768), elapsed_s=5.0)
    assert early.message == "Reading talk.mp4: 20 of 768 frames, 100 of 3600 s of video"  # too early to tell
    later = decode_progress("talk.mp4", ReadProgress("decode", 1800.0, 3600.0), (384, 768), elapsed_s=6.0)
    assert (later.current, later.total) == (1800, 3600)
    assert later.message == "Reading talk.mp4: 384 of 768 frames, 1800 of 3600 s of video, about 6 s left"
