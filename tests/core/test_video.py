"""core.video on clips written in the test: sampling by time, rotation, resizing, the OpenCV
fallback, and a typed, actionable error for every kind of bad input, never a hang.
``test_video_robustness.py`` covers long and joined streams, permissions, stuck reads and logs."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from fractions import Fraction

import av
import numpy as np
import pytest

from framewise.core import video
from framewise.core.errors import (
    CancelledError,
    ClipNotFoundError,
    ClipTooLargeError,
    DecodeTimeoutError,
    EmptyClipError,
    NoVideoStreamError,
    UnreadableClipError,
)
from framewise.core.families.qwen3_vl.processor import fit_video_frames, video_frame_sizing
from framewise.core.families.qwen3_vl.sizing import video_frame_size
from framewise.core.settings import SamplingSettings
from framewise.core.video import ReadBudget, SampledClip, probe_clip, pyav_reader, sample_count, sample_times
from framewise.core.video.clip import ReaderFailed
from framewise.core.video.still import read_still
from training.clip_writer import write_audio_only, write_clip

SAMPLE_CLIPS = Path(__file__).resolve().parents[2] / "assets" / "clips"
GRAY_START, GRAY_STEP, GRAY_LEVELS = 10, 6, 40


def index_frame(index: int, height: int = 48, width: int = 64) -> np.ndarray:
    """A gray frame whose left half's brightness encodes ``index % 40``, the right half's ``index // 40``."""
    frame = np.empty((height, width, 3), np.uint8)
    frame[:, : width // 2] = GRAY_START + GRAY_STEP * (index % GRAY_LEVELS)
    frame[:, width // 2 :] = GRAY_START + GRAY_STEP * (index // GRAY_LEVELS)
    return frame


def frame_index(frame: np.ndarray) -> int:
    width = frame.shape[1]
    low, high = (float(part.mean()) for part in (frame[:, : width // 3], frame[:, -(width // 3) :]))
    return round((low - GRAY_START) / GRAY_STEP) + GRAY_LEVELS * round((high - GRAY_START) / GRAY_STEP)


def indices(frames: np.ndarray) -> list[int]:
    return [frame_index(frame) for frame in frames]


def on_screen(source_times: list[float], target: float) -> int:
    """Index of the frame shown at ``target``: the last one whose time is at or before it."""
    return max(sum(1 for t in source_times if t <= target + 1e-9) - 1, 0)


def header_only_clip(path: Path, width: int, height: int) -> Path:
    """A fragmented MP4 that declares a video stream of this size but holds no frames."""
    with av.open(str(path), "w", options={"movflags": "frag_keyframe+empty_moov"}) as container:
        stream = container.add_stream("libx264", rate=10)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        container.start_encoding()
    return path


def write_lossless_clip(path: Path, frames: np.ndarray, fps: int) -> Path:
    """FFV1 in Matroska at a constant rate: decoding gives back exactly these (T, H, W, 3) RGB frames."""
    with av.open(str(path), "w") as container:
        stream = container.add_stream("ffv1", rate=fps)
        stream.width, stream.height, stream.pix_fmt = frames.shape[2], frames.shape[1], "bgr0"
        for index, rgb in enumerate(frames):
            frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(rgb), format="rgb24").reformat(format="bgr0")
            frame.pts, frame.time_base = index, Fraction(1, fps)
            container.mux(stream.encode(frame))
        container.mux(stream.encode())
    return path


@pytest.fixture(scope="module")
def clips(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("clips")
    counted = write_clip(folder / "counted.mp4", [index_frame(i) for i in range(40)], fps=10)
    raw = counted.read_bytes()
    (folder / "random.mp4").write_bytes(np.random.default_rng(0).integers(0, 256, 20_000, np.uint8).tobytes())
    (folder / "truncated.mp4").write_bytes(raw[: len(raw) // 2])
    return {
        "counted": counted,
        "short": write_clip(folder / "short.mp4", [index_frame(i) for i in range(3)], fps=10),
        "audio": write_audio_only(folder / "audio.m4a", 0.5),
        "empty": header_only_clip(folder / "empty.mp4", 64, 48),
        "huge": header_only_clip(folder / "huge.mp4", 10_000, 10_000),
        "wide": header_only_clip(folder / "wide.mp4", 9_000, 16),
        "random": folder / "random.mp4",
        "truncated": folder / "truncated.mp4",
    }


SAMPLING = SamplingSettings(fps=2.0, min_frames=4, max_frames=32)


def sample(path: Path, sampling: SamplingSettings = SAMPLING, **options) -> SampledClip:
    """``sample_clip`` as the engine calls it: frames sized and resampled for Qwen3-VL."""
    return video.sample_clip(path, sampling, video_frame_sizing(sampling), **options)


# --- how many frames, and when ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("duration_s", "fps", "min_frames", "max_frames", "frame_count", "expected"),
    [
        (4.0, 2.0, 4, 32, None, 8),  # duration x fps
        (4.0, 0.5, 4, 32, None, 4),  # raised to min_frames
        (4.0, 10.0, 4, 16, None, 16),  # lowered to max_frames
        (4.0, 1.25, 4, 32, None, 6),  # 5 rounded up to even
        (4.0, 2.0, 4, 32, 5, 6),  # no more than the clip's frames (rounded up to even)
        (0.3, 2.0, 4, 32, 3, 4),  # but never fewer than min_frames
        (0.0, 2.0, 4, 32, 1, 4),  # a single still frame
    ],
)
def test_sample_count_clamps_to_an_even_count_in_range(duration_s, fps, min_frames, max_frames, frame_count, expected):
    sampling = SamplingSettings(fps=fps, min_frames=min_frames, max_frames=max_frames)
    assert sample_count(duration_s, sampling, frame_count, multiple=2) == expected


def test_sample_times_are_the_middles_of_equal_slices():
    assert sample_times(4.0, 8) == pytest.approx([0.25, 0.75, 1.25, 1.75, 2.25, 2.75, 3.25, 3.75])


def test_uniform_sampling_takes_the_frame_on_screen_at_each_target_time(clips):
    sampled = sample(clips["counted"])

    assert sampled.reader == "pyav"
    assert len(sampled.frames) == 8 == len(sampled.timestamps)
    expected = [on_screen([i / 10 for i in range(40)], t) for t in sample_times(4.0, 8)]
    assert expected == [2, 7, 12, 17, 22, 27, 32, 37]
    assert indices(sampled.frames) == expected
    assert sampled.timestamps == pytest.approx([i / 10 for i in expected])
    assert sampled.frames.dtype == np.uint8 and sampled.frames.shape[-1] == 3


@pytest.mark.parametrize(("fps", "min_frames", "max_frames", "expected"), [(0.5, 4, 32, 4), (5.0, 4, 12, 12), (1.25, 4, 32, 6)])
def test_sampling_settings_set_the_frame_count(clips, fps, min_frames, max_frames, expected):
    sampling = SamplingSettings(fps=fps, min_frames=min_frames, max_frames=max_frames)
    sampled = sample(clips["counted"], sampling)

    assert len(sampled.frames) == expected
    assert np.all(np.diff(sampled.timestamps) > 0)
    assert indices(sampled.frames) == [round(t * 10) for t in sampled.timestamps]


def test_a_clip_with_fewer_frames_than_min_frames_repeats_them_evenly(clips):
    sampled = sample(clips["short"])

    assert len(sampled.frames) == 4
    assert sorted(set(indices(sampled.frames))) == [0, 1, 2]
    assert indices(sampled.frames) == [round(t * 10) for t in sampled.timestamps]
    assert np.all(np.diff(sampled.timestamps) >= 0)


def test_variable_frame_rate_is_sampled_by_time_not_by_frame_index(tmp_path):
    times = [0.0, 0.1, 0.2, 1.5, 1.6, 3.0, 3.05, 3.9, 3.95, 4.0]
    path = write_clip(tmp_path / "vfr.mp4", [index_frame(i) for i in range(len(times))], fps=10, timestamps=times)

    sampled = sample(path)

    assert sampled.info.duration_s == pytest.approx(4.05)  # the last frame lasts as long as the one before
    targets = sample_times(sampled.info.duration_s, len(sampled.frames))
    expected = [on_screen(times, t) for t in targets]
    by_index = np.linspace(0, len(times) - 1, len(targets)).round().astype(int).tolist()
    assert expected != by_index  # the clip really tells time-based from index-based sampling
    assert indices(sampled.frames) == expected
    assert sampled.timestamps == pytest.approx([times[i] for i in expected], abs=1e-3)


def write_intra_clip(path: Path, codec: str, pix_fmt: str, count: int, fps: int) -> Path:
    """``count`` frames of :func:`index_frame` at ``fps`` in a codec whose every frame is a keyframe."""
    with av.open(str(path), "w") as container:
        stream = container.add_stream(codec, rate=fps)
        stream.width, stream.height, stream.pix_fmt = 64, 48, pix_fmt
        for index in range(count):
            frame = av.VideoFrame.from_ndarray(index_frame(index), format="rgb24")
            frame.pts, frame.time_base = index, Fraction(1, fps)
            container.mux(stream.encode(frame))
        container.mux(stream.encode())
    return path


@pytest.mark.parametrize(("name", "codec", "pix_fmt"), [("mjpeg.avi", "mjpeg", "yuvj420p"), ("prores.mov", "prores_ks", "yuv422p10le")])
def test_all_intra_clips_are_sampled_at_the_same_frames_as_h264(tmp_path, name, codec, pix_fmt):
    h264 = sample(write_clip(tmp_path / "h264.mp4", [index_frame(i) for i in range(24)], fps=12))
    intra = sample(write_intra_clip(tmp_path / name, codec, pix_fmt, 24, 12))

    assert intra.info.duration_s == pytest.approx(2.0)  # the last frame lasts 1/12 s, as every other one
    assert indices(intra.frames) == indices(h264.frames) == [3, 9, 15, 21]
    assert intra.timestamps == pytest.approx(h264.timestamps)


def test_a_pause_before_the_last_frame_is_not_counted_twice(tmp_path):
    path = write_clip(tmp_path / "pause.mp4", [index_frame(i) for i in range(3)], fps=1, timestamps=[0.0, 1.0, 600.0])

    assert probe_clip(path).duration_s == pytest.approx(601.0)  # not 1199: the last frame lasts 1 s, not the pause


@pytest.mark.parametrize("reader", ["pyav", "opencv"])
def test_a_clip_of_fewer_frames_than_sampled_gives_each_frame_however_far_apart(tmp_path, request, reader):
    path = write_clip(tmp_path / "pause.mp4", [index_frame(i) for i in range(3)], fps=1, timestamps=[0.0, 1.0, 600.0])
    if reader == "opencv":
        request.getfixturevalue("pyav_fails")

    sampled = sample(path)  # 4 frames; by time, frame 1 (on screen 1-600 s) would fill all four

    assert sampled.reader == reader
    assert indices(sampled.frames) == [0, 1, 1, 2]
    assert sampled.timestamps == pytest.approx([0.0, 1.0, 1.0, 600.0], abs=1e-3)


@pytest.fixture
def decoded_times(monkeypatch) -> list[float]:
    """Records the time of every frame the PyAV reader decodes."""
    real_decode = pyav_reader._DecodeState.decode
    decoded: list[float] = []

    def counted(self, *args):
        for time_s, frame in real_decode(self, *args):
            decoded.append(time_s)
            yield time_s, frame

    monkeypatch.setattr(pyav_reader._DecodeState, "decode", counted)
    return decoded


def test_sparse_targets_skip_whole_groups_of_pictures(tmp_path, decoded_times):
    path = write_clip(tmp_path / "long.mp4", [index_frame(i) for i in range(300)], fps=10, keyframe_interval=10)
    sampled = sample(path, SamplingSettings(fps=0.2, min_frames=4, max_frames=6))

    expected = [on_screen([i / 10 for i in range(300)], t) for t in sample_times(30.0, 6)]
    assert indices(sampled.frames) == expected == [25, 75, 125, 175, 225, 275]
    assert len(decoded_times) < 100  # decoding straight through would take 276 frames


# --- size and orientation ----------------------------------------------------------------------------


@pytest.mark.parametrize(("height", "width"), [(240, 320), (96, 480), (64, 40)])
def test_frames_come_out_at_the_qwen3_vl_target_size(tmp_path, height, width):
    sampling = SamplingSettings(fps=2.0, min_frames=4, max_frames=32, max_pixels=4 * 128 * 128)
    path = write_clip(tmp_path / "sized.mp4", [index_frame(i, height, width) for i in range(10)], fps=5)

    sampled = sample(path, sampling)

    assert (sampled.info.width, sampled.info.height) == (width, height)
    target = video_frame_size(len(sampled.frames), height, width, sampling)
    assert sampled.frames.shape == (4, *target, 3)
    assert indices(sampled.frames) == [round(t * 5) for t in sampled.timestamps]


LOSSLESS_SAMPLING = SamplingSettings(
    fps=2.0, min_frames=4, max_frames=32, max_pixels=8 * 64 * 96, min_pixels_per_frame=32 * 32
)


@pytest.fixture
def lossless_clip(tmp_path) -> tuple[Path, np.ndarray]:
    source = np.random.default_rng(3).integers(0, 256, size=(8, 90, 160, 3), dtype=np.uint8)
    return write_lossless_clip(tmp_path / "lossless.mkv", source, fps=2), source


def test_sampled_frames_are_resized_by_the_same_function_as_training(lossless_clip):
    """The reader keeps each frame through the caller's resampler: the app's frames are exactly
    fit_video_frames of the source frames, as training and evaluation make them."""
    path, source = lossless_clip
    sampled = sample(path, LOSSLESS_SAMPLING)

    assert sampled.reader == "pyav"
    assert sampled.timestamps == pytest.approx([i / 2 for i in range(8)])
    assert sampled.frames.shape[1:3] != source.shape[1:3]  # resized, so the resampler matters
    np.testing.assert_array_equal(sampled.frames, fit_video_frames(source, LOSSLESS_SAMPLING))


def test_the_opencv_fallback_resizes_with_the_same_function(lossless_clip, pyav_fails):
    path, source = lossless_clip
    sampled = sample(path, LOSSLESS_SAMPLING)

    assert sampled.reader == "opencv"
    np.testing.assert_array_equal(sampled.frames, fit_video_frames(source, LOSSLESS_SAMPLING))


def quadrant_picture(height: int = 32, width: int = 64) -> np.ndarray:
    """Red top-left quadrant, green top-right, blue bottom-left, yellow bottom-right."""
    image = np.zeros((height, width, 3), np.uint8)
    h, w = height // 2, width // 2
    image[:h, :w], image[:h, w:] = (255, 0, 0), (0, 255, 0)
    image[h:, :w], image[h:, w:] = (0, 0, 255), (255, 255, 0)
    return image


def quadrant_colors(image: np.ndarray) -> np.ndarray:
    """Mean colour of each quadrant, (2, 2, 3), rounded to 0/255."""
    h, w = image.shape[0] // 2, image.shape[1] // 2
    blocks = image[: 2 * h, : 2 * w].reshape(2, h, 2, w, 3).mean(axis=(1, 3))
    return np.where(blocks > 127, 255, 0)


@pytest.mark.parametrize("rotation", [90, 180, 270])
def test_rotation_metadata_gives_upright_frames_and_displayed_size(tmp_path, rotation):
    picture = quadrant_picture()
    path = write_clip(tmp_path / "rotated.mp4", [picture] * 6, fps=6, rotation_degrees=rotation)

    sampled = sample(path)

    displayed = np.rot90(picture, k=rotation // 90)  # counter-clockwise, as a player shows it
    assert sampled.info.rotation_degrees == rotation
    assert (sampled.info.height, sampled.info.width) == displayed.shape[:2]
    assert sampled.frames.shape[1:3] == video_frame_size(4, *displayed.shape[:2], SAMPLING)
    np.testing.assert_array_equal(quadrant_colors(sampled.frames[0]), quadrant_colors(displayed))


def test_probe_reads_the_header_and_counts_frames_without_sampling(clips):
    info = probe_clip(clips["counted"])

    assert (info.width, info.height, info.frame_count, info.rotation_degrees) == (64, 48, 40, 0)
    assert info.duration_s == pytest.approx(4.0)
    assert info.fps == pytest.approx(10.0)
    assert info.codec == "h264"


def test_sample_clips_in_assets_are_as_described():
    infos = {path.name: probe_clip(path) for path in sorted(SAMPLE_CLIPS.glob("*.mp4"))}

    assert set(infos) == {"red_square_moves_right.mp4", "two_shapes_wide.mp4", "rotated_phone.mp4"}
    assert (infos["two_shapes_wide.mp4"].width, infos["two_shapes_wide.mp4"].height) == (480, 200)
    phone = infos["rotated_phone.mp4"]
    assert (phone.rotation_degrees, phone.width, phone.height) == (90, 180, 320)
    assert all(path.stat().st_size < 300_000 for path in SAMPLE_CLIPS.glob("*.mp4"))


# --- OpenCV fallback ---------------------------------------------------------------------------------


@pytest.fixture
def pyav_fails(monkeypatch):
    def fail(path, guard):
        raise ReaderFailed("PyAV: forced to fail by the test")

    monkeypatch.setattr(video, "PyAVClip", fail)


def test_opencv_reads_the_clip_when_pyav_cannot(clips, pyav_fails):
    sampled = sample(clips["counted"])

    assert sampled.reader == "opencv"
    assert indices(sampled.frames) == [2, 7, 12, 17, 22, 27, 32, 37]
    assert sampled.timestamps == pytest.approx([0.2, 0.7, 1.2, 1.7, 2.2, 2.7, 3.2, 3.7], abs=1e-3)
    assert sampled.frames.shape == (8, *video_frame_size(8, 48, 64, SAMPLING), 3)
    assert probe_clip(clips["counted"]).frame_count == 40


def test_opencv_fallback_also_turns_rotated_clips_upright(tmp_path, pyav_fails):
    picture = quadrant_picture()
    path = write_clip(tmp_path / "rotated.mp4", [picture] * 6, fps=6, rotation_degrees=90)

    sampled = sample(path)

    displayed = np.rot90(picture)
    assert sampled.reader == "opencv"
    assert (sampled.info.rotation_degrees, sampled.info.height, sampled.info.width) == (90, 64, 32)
    np.testing.assert_array_equal(quadrant_colors(sampled.frames[0]), quadrant_colors(displayed))


# --- bad input ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("clip", "error", "words"),
    [
        ("random", UnreadableClipError, "not a video Framewise can read"),
        ("truncated", UnreadableClipError, "truncated or damaged"),
        ("audio", NoVideoStreamError, "holds audio only"),
        ("empty", EmptyClipError, "no frames"),
        ("huge", ClipTooLargeError, "10000x10000"),  # 100 megapixels
        ("wide", ClipTooLargeError, "9000x16"),  # one side over 8192
    ],
)
def test_bad_files_raise_a_typed_error_that_says_what_to_do(clips, clip, error, words):
    for call in (lambda: sample(clips[clip]), lambda: probe_clip(clips[clip])):
        with pytest.raises(error) as raised:
            call()
        message = str(raised.value)
        assert clips[clip].name in message and words in message


def test_an_mp4_whose_index_is_cut_off_is_named_as_such(clips, tmp_path):
    raw = clips["counted"].read_bytes()  # the index (moov box) comes last, after the pictures
    cut = tmp_path / "no_index.mp4"
    cut.write_bytes(raw[: raw.rfind(b"moov") + 50])  # the box begun, no track in it

    for call in (lambda: sample(cut), lambda: probe_clip(cut)):
        with pytest.raises(UnreadableClipError) as raised:
            call()
        message = str(raised.value)
        assert "no_index.mp4 has lost its index" in message and "'moov'" in message
        assert "no video stream" not in message and "nothing only" not in message


SVG_DRAWING = '<svg xmlns="http://www.w3.org/2000/svg" width="64" height="48"><rect width="64" height="48" fill="red"/></svg>'


def test_an_svg_drawing_is_refused_by_name(tmp_path):
    drawing = tmp_path / "drawing.svg"
    drawing.write_text(SVG_DRAWING)

    assert read_still(drawing) is None  # not a picture Framewise can decode; sampling says why
    for call in (lambda: sample(drawing), lambda: probe_clip(drawing)):
        with pytest.raises(UnreadableClipError, match="drawing.svg is an SVG drawing.*Export it as a PNG"):
            call()


def write_animated_webp(path: Path, count: int = 4) -> Path:
    """An animated WebP of ``count`` different :func:`index_frame` frames, 0.25 s each."""
    if "libwebp_anim" not in av.codecs_available:
        pytest.skip("this PyAV's FFmpeg has no animated WebP encoder (libwebp_anim) to write the file with")
    with av.open(str(path), "w", format="webp") as container:
        stream = container.add_stream("libwebp_anim", rate=4)
        stream.width, stream.height, stream.pix_fmt = 64, 48, "yuv420p"
        for index in range(count):
            frame = av.VideoFrame.from_ndarray(index_frame(index * 5), format="rgb24")
            frame.pts, frame.time_base = index, Fraction(1, 4)
            container.mux(stream.encode(frame))
        container.mux(stream.encode())
    return path


def test_an_animated_webp_is_refused_by_name_not_read_as_one_frame_repeated(tmp_path):
    animation = write_animated_webp(tmp_path / "animation.webp")

    assert read_still(animation) is None
    for call in (lambda: sample(animation), lambda: probe_clip(animation)):
        with pytest.raises(UnreadableClipError, match="animation.webp is an animated WebP.*cannot read an animation"):
            call()


def test_resolution_is_checked_from_the_header_before_any_decoding(clips, monkeypatch):
    def no_decoding(*args):
        raise AssertionError("decoded a clip whose header is too large")

    monkeypatch.setattr(pyav_reader.PyAVClip, "_decoded", no_decoding)
    monkeypatch.setattr(pyav_reader, "scan_packets", no_decoding)
    with pytest.raises(ClipTooLargeError):
        sample(clips["huge"])


def test_a_loop_of_symbolic_links_is_named_as_one(tmp_path):
    first, second = tmp_path / "a.mp4", tmp_path / "b.mp4"
    first.symlink_to(second)
    second.symlink_to(first)
    with pytest.raises(ClipNotFoundError, match="a.mp4 is a symbolic link that leads back to itself"):
        probe_clip(first)


def test_missing_paths_and_folders_raise_clip_not_found(tmp_path):
    with pytest.raises(ClipNotFoundError, match="No file at .*nowhere.mp4"):
        sample(tmp_path / "nowhere.mp4")
    with pytest.raises(ClipNotFoundError, match="is a folder"):
        probe_clip(tmp_path)
    fifo = tmp_path / "pipe.mp4"
    os.mkfifo(fifo)  # opening it for reading would block forever
    with pytest.raises(ClipNotFoundError, match="not a regular file"):
        sample(fifo)


def index_first(source: Path, path: Path) -> Path:
    """``source`` remuxed with its index (moov) before its pictures, as web-ready MP4s are."""
    with av.open(str(source)) as given, av.open(str(path), "w", options={"movflags": "faststart"}) as output:
        stream = output.add_stream_from_template(given.streams.video[0])
        for packet in given.demux(given.streams.video[0]):
            if packet.size:
                packet.stream = stream
                output.mux(packet)
    return path


def cut_through_pictures(path: Path, into: Path, *, marker: bytes, fraction: float = 0.5) -> Path:
    """``path`` cut ``fraction`` of the way from its first ``marker`` (the box or element that holds
    the pictures) to its end."""
    raw = path.read_bytes()
    start = raw.find(marker)
    into.write_bytes(raw[: start + int((len(raw) - start) * fraction)])
    return into


def cut_short_mp4(folder: Path) -> tuple[Path, Path]:
    """(whole, cut): a 4-second MP4 of 48 :func:`index_frame` frames with its index first, and a
    copy cut 70 % of the way through its pictures (a download that did not finish)."""
    source = write_clip(folder / "source.mp4", [index_frame(i) for i in range(48)], fps=12, keyframe_interval=12)
    whole = index_first(source, folder / "whole.mp4")
    return whole, cut_through_pictures(whole, folder / "cut.mp4", marker=b"mdat", fraction=0.7)


def test_a_cut_short_mp4_says_how_much_of_it_could_be_read(tmp_path):
    whole, cut = cut_short_mp4(tmp_path)

    assert sample(whole).damage is None
    sampled = sample(cut)

    read_s = sampled.info.duration_s
    assert 1.5 < read_s < 3.5 and sampled.info.frame_count < 48  # the part that is there, not the index's 4 s
    assert max(sampled.timestamps) < read_s and indices(sampled.frames)[-1] > 12  # sampled over that part
    assert sampled.damage is not None
    assert sampled.damage.startswith(f"Only the first {read_s:.1f} s of cut.mp4's 4.0 s could be read (")
    assert "of 48 frames)" in sampled.damage


def test_a_cut_short_matroska_file_says_how_much_of_it_could_be_read(tmp_path):
    whole = write_clip(tmp_path / "whole.mkv", [index_frame(i) for i in range(48)], fps=12, keyframe_interval=12)
    cut = cut_through_pictures(whole, tmp_path / "cut.mkv", marker=b"\x1f\x43\xb6\x75")  # the first cluster

    assert sample(whole).damage is None
    sampled = sample(cut)  # measured from the header (4 s); the packets found when sampling end sooner

    assert sampled.damage is not None and sampled.damage.startswith("Only the first ")
    assert "of cut.mkv's 4.0 s could be read:" in sampled.damage


def test_a_cut_short_jpeg_is_read_as_a_damaged_picture(tmp_path):
    rows, cols = np.mgrid[0:240, 0:320]
    picture = np.stack([cols * 255 // 320, rows * 255 // 240, (rows + cols) % 64 * 4], axis=-1).astype(np.uint8)
    whole = tmp_path / "whole.jpg"
    with av.open(str(whole), "w", format="image2") as container:
        stream = container.add_stream("mjpeg", rate=1)
        stream.width, stream.height, stream.pix_fmt = 320, 240, "yuvj420p"
        container.mux(stream.encode(av.VideoFrame.from_ndarray(picture, format="rgb24")))
        container.mux(stream.encode())
    cut = tmp_path / "cut.jpg"
    cut.write_bytes(whole.read_bytes()[:800])

    assert read_still(whole).damage is None
    still = read_still(cut)
    assert still is not None and still.pixels.shape == (240, 320, 3)  # the decoder fills in what is missing
    assert still.damage is not None and still.damage.startswith("cut.jpg is damaged or cut short: part of the picture")


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        ("http://127.0.0.1:8000/clip.mp4", "http://127.0.0.1:8000/clip.mp4 is a web address; Framewise reads files"),
        ("https://example.com/a.mp4?x=1", "https://example.com/a.mp4?x=1 is a web address"),
        ("file:///clips/a%20b.mp4", "file:///clips/a%20b.mp4 is a file URL; give the file's path instead: /clips/a b.mp4"),
    ],
)
def test_a_url_is_refused_as_one_not_as_a_missing_file(address: str, expected: str) -> None:
    with pytest.raises(ClipNotFoundError) as raised:
        probe_clip(address)
    assert str(raised.value).startswith(expected) and "No file at" not in str(raised.value)


# --- bounded in time, cancellable --------------------------------------------------------------------


@pytest.fixture
def slow_decoder(monkeypatch):
    """Decoding that takes 0.2 s per frame (8 s for the counted clip) but checks its guard."""
    real_decoded = pyav_reader.PyAVClip._decoded

    def slow_decoded(self, *args):
        for decoded in real_decoded(self, *args):
            time.sleep(0.2)
            self.guard.check()
            yield decoded

    monkeypatch.setattr(pyav_reader.PyAVClip, "_decoded", slow_decoded)


def decode_threads() -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name.startswith("framewise-decode")]


def wait_for_no_decode_threads(within_s: float) -> None:
    deadline = time.monotonic() + within_s
    while decode_threads() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not decode_threads()


def test_a_slow_decode_times_out_quickly_and_its_worker_stops(clips, slow_decoder):
    started = time.monotonic()
    with pytest.raises(DecodeTimeoutError, match="stopped making progress") as raised:
        sample(clips["counted"], budget=ReadBudget(start_s=0.5, per_video_second_s=0.5))
    assert time.monotonic() - started < 1.5
    assert "0.5 s to start" in str(raised.value) and "counted.mp4" in str(raised.value)
    wait_for_no_decode_threads(within_s=2.0)


def test_cancel_during_decoding_raises_promptly_on_the_callers_thread(clips, slow_decoder):
    asked_from = []

    def should_cancel() -> bool:
        asked_from.append(threading.current_thread())
        return len(asked_from) > 5

    started = time.monotonic()
    with pytest.raises(CancelledError, match="counted.mp4 was cancelled"):
        sample(clips["counted"], should_cancel=should_cancel)
    assert time.monotonic() - started < 1.0
    assert set(asked_from) == {threading.current_thread()}
    wait_for_no_decode_threads(within_s=0.5)


def test_cancel_before_reading_reads_nothing(clips, monkeypatch):
    monkeypatch.setattr(video, "read", lambda *args: pytest.fail("read a clip after cancel"))
    with pytest.raises(CancelledError, match="cancelled"):
        sample(clips["counted"], should_cancel=lambda: True)


# --- the clip writer's own checks ----------------------------------------------------------------------


def test_clip_writer_refuses_frames_it_cannot_encode_faithfully(tmp_path):
    with pytest.raises(ValueError, match="even"):
        write_clip(tmp_path / "odd.mp4", [np.zeros((47, 64, 3), np.uint8)], fps=10)
    with pytest.raises(ValueError, match="increase"):
        write_clip(tmp_path / "back.mp4", [index_frame(0), index_frame(1)], fps=10, timestamps=[0.5, 0.2])
    with pytest.raises(ValueError, match="like the first"):
        write_clip(tmp_path / "mixed.mp4", [index_frame(0), index_frame(1, 32, 32)], fps=10)


def test_reading_clips_does_not_import_torch():
    """The UI may probe clips; core.video must stay free of torch (the caller passes the resampler)."""
    code = (
        "import sys, framewise.core.video as video; video.probe_clip(sys.argv[1]); "
        "assert 'torch' not in sys.modules, 'torch imported'"
    )
    probe = subprocess.run(
        [sys.executable, "-c", code, str(SAMPLE_CLIPS / "rotated_phone.mp4")],
        cwd=Path(__file__).resolve().parents[2], capture_output=True, text=True,
    )
    assert probe.returncode == 0, probe.stderr
