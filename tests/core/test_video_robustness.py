"""core.video when things go wrong or run long, on files written in the test: a long MPEG-TS
without an index, recordings joined with ``cat``, permissions and impossible names, a cover
picture instead of video, interrupted and stuck reads, and libav's messages kept off the console."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import av
import cv2
import numpy as np
import pytest

from framewise.core.errors import (
    CancelledError,
    ClipAccessError,
    ClipNotFoundError,
    DecodeTimeoutError,
    NoVideoStreamError,
    ReaderStuckError,
)
from framewise.core.settings import SamplingSettings
from framewise.core.video import (
    ReadBudget,
    ReadProgress,
    opencv_reader,
    probe_clip,
    pyav_reader,
    sample_times,
    stuck_reads,
)
from training.clip_writer import write_clip

if __package__:
    from .test_video import (
        SAMPLING,
        decode_threads,
        decoded_times,  # noqa: F401  (a fixture)
        index_frame,
        indices,
        on_screen,
        pyav_fails,  # noqa: F401  (a fixture)
        sample,
        slow_decoder,  # noqa: F401  (a fixture)
        wait_for_no_decode_threads,
    )
else:
    from test_video import (  # noqa: F401
        SAMPLING,
        decode_threads,
        decoded_times,
        index_frame,
        indices,
        on_screen,
        pyav_fails,
        sample,
        slow_decoder,
        wait_for_no_decode_threads,
    )

REPO_ROOT = Path(__file__).resolve().parents[2]
LONG_TS_SECONDS, LONG_TS_FPS = 60, 5


@pytest.fixture(scope="module")
def long_ts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """60 s of 64x48 MPEG-TS at 5 fps, a keyframe every 2 s; TS carries no index."""
    frames = [index_frame(i) for i in range(LONG_TS_SECONDS * LONG_TS_FPS)]
    return write_clip(tmp_path_factory.mktemp("ts") / "long.ts", frames, fps=LONG_TS_FPS, keyframe_interval=10)


@pytest.fixture
def counted(tmp_path: Path) -> Path:
    return write_clip(tmp_path / "counted.mp4", [index_frame(i) for i in range(40)], fps=10)


def delay_each_frame(monkeypatch: pytest.MonkeyPatch, seconds: float, *, stall_at_s: float | None = None) -> None:
    """Make the PyAV reader take ``seconds`` per decoded frame (and, from ``stall_at_s`` of video
    on, a whole second per frame), checking its guard as the real decoding loop does."""
    real_decoded = pyav_reader.PyAVClip._decoded

    def delayed(self, *args):
        for time_s, frame in real_decoded(self, *args):
            time.sleep(1.0 if stall_at_s is not None and time_s >= stall_at_s else seconds)
            self.guard.check(time_s)
            yield time_s, frame

    monkeypatch.setattr(pyav_reader.PyAVClip, "_decoded", delayed)


# --- a long stream: the budget follows the work -----------------------------------------------------


def test_a_long_ts_is_read_whole_while_it_keeps_making_progress(long_ts, monkeypatch):
    delay_each_frame(monkeypatch, 0.01)  # 0.05 s per second of video, well inside the budget
    budget = ReadBudget(start_s=1.0, per_video_second_s=0.5)
    progress: list[ReadProgress] = []
    sampling = SamplingSettings(fps=2.0, min_frames=4, max_frames=128)

    started = time.monotonic()
    sampled = sample(long_ts, sampling, budget=budget, on_progress=progress.append)
    elapsed = time.monotonic() - started

    assert elapsed > 2 * budget.start_s  # a fixed limit of that size would have refused the file
    assert sampled.info.duration_s == pytest.approx(LONG_TS_SECONDS)
    expected = [on_screen([i / LONG_TS_FPS for i in range(300)], t) for t in sample_times(60.0, 120)]
    assert indices(sampled.frames) == expected
    decoding = [p for p in progress if p.stage == "decode"]
    assert len(decoding) >= 3 and decoding[-1].total_s == pytest.approx(LONG_TS_SECONDS)
    assert [p.seconds for p in decoding] == sorted(p.seconds for p in decoding)
    assert decoding[-1].seconds > LONG_TS_SECONDS / 2


def test_a_read_that_stalls_mid_stream_stops_within_the_per_second_budget(long_ts, monkeypatch):
    delay_each_frame(monkeypatch, 0.001, stall_at_s=20.0)
    started = time.monotonic()
    with pytest.raises(DecodeTimeoutError, match=r"long.ts stopped making progress: it got 2\d s into the video"):
        sample(long_ts, SamplingSettings(fps=2.0, min_frames=4, max_frames=128),
               budget=ReadBudget(start_s=5.0, per_video_second_s=0.5))
    assert time.monotonic() - started < 5.0  # the start budget alone would have let it run on
    wait_for_no_decode_threads(within_s=1.5)


def test_cancel_reaches_a_long_read_within_half_a_second(long_ts, monkeypatch):
    delay_each_frame(monkeypatch, 0.01)
    asked = threading.Event()
    progress: list[ReadProgress] = []

    def should_cancel() -> bool:
        if progress and progress[-1].stage == "decode" and progress[-1].seconds >= 10 and not asked.is_set():
            asked.set()
            should_cancel.at = time.monotonic()
        return asked.is_set()

    with pytest.raises(CancelledError, match="long.ts was cancelled"):
        sample(long_ts, SamplingSettings(fps=2.0, min_frames=4, max_frames=128),
               should_cancel=should_cancel, on_progress=progress.append)
    assert time.monotonic() - should_cancel.at < 0.5
    wait_for_no_decode_threads(within_s=0.5)


def test_sparse_targets_in_a_ts_without_an_index_skip_whole_groups(long_ts, decoded_times):
    assert len(av.open(str(long_ts)).streams.video[0].index_entries) == 0  # nothing to seek with

    sampled = sample(long_ts, SamplingSettings(fps=0.1, min_frames=4, max_frames=6))

    expected = [on_screen([i / LONG_TS_FPS for i in range(300)], t) for t in sample_times(60.0, 6)]
    assert indices(sampled.frames) == expected
    straight_through = on_screen([i / LONG_TS_FPS for i in range(300)], sample_times(60.0, 6)[-1]) + 1
    assert len(decoded_times) < straight_through / 2  # only the groups of pictures that hold a target


# --- recordings joined with cat -------------------------------------------------------------------


@pytest.mark.parametrize("second_starts_at_s", [None, 1000.0], ids=["timestamps reset", "timestamps jump ahead"])
def test_joined_recordings_are_measured_and_sampled_whole(tmp_path, second_starts_at_s):
    first = write_clip(tmp_path / "first.ts", [index_frame(i) for i in range(30)], fps=10)
    later = None if second_starts_at_s is None else [second_starts_at_s + i / 10 for i in range(20)]
    second = write_clip(tmp_path / "second.ts", [index_frame(100 + i) for i in range(20)], fps=10, timestamps=later)
    joined = tmp_path / "joined.ts"
    joined.write_bytes(first.read_bytes() + second.read_bytes())

    sampled = sample(joined, SAMPLING)

    assert sampled.info.duration_s == pytest.approx(5.0)
    assert probe_clip(joined).duration_s == pytest.approx(5.0)
    assert indices(sampled.frames) == [2, 7, 12, 17, 22, 27, 102, 107, 112, 117]
    assert sampled.timestamps == pytest.approx([0.2, 0.7, 1.2, 1.7, 2.2, 2.7, 3.2, 3.7, 4.2, 4.7], abs=1e-3)


# --- names, folders and permissions -----------------------------------------------------------------


def test_a_name_longer_than_the_file_system_allows_is_a_typed_error(tmp_path):
    path = tmp_path / ("clip-" + "x" * 300 + ".mp4")
    for call in (lambda: sample(path), lambda: probe_clip(path)):
        with pytest.raises(ClipNotFoundError, match="309 bytes long; file systems allow at most 255"):
            call()


AS_ANOTHER_USER = r"""
import json, os, sys
import cv2, av  # everything is imported before root's rights are given up
from framewise.core.families.qwen3_vl.processor import video_frame_sizing
from framewise.core.settings import SamplingSettings
from framewise.core.video import sample_clip

# The first decode imports more of PyAV (av.subtitles): decode the readable clip (the last path)
# once while the interpreter's files are readable, wherever they live (a 0700 checkout too).
sample_clip(sys.argv[-1], SamplingSettings(), video_frame_sizing(SamplingSettings()))
if os.geteuid() == 0:
    os.setgid(int(sys.argv[1]))
    os.setuid(int(sys.argv[2]))
outcomes = {}
for path in sys.argv[3:]:
    try:
        sample_clip(path, SamplingSettings(), video_frame_sizing(SamplingSettings()))
        outcomes[path] = ["read", ""]
    except Exception as error:
        outcomes[path] = [type(error).__name__, str(error)]
print(json.dumps(outcomes))
"""


@pytest.fixture
def unreadable_places():
    """A clip inside a folder without search permission, and a clip without read permission,
    in a folder under /tmp that another user can reach; permissions restored afterwards."""
    base = Path(tempfile.mkdtemp(prefix="framewise-permissions-", dir="/tmp"))
    base.chmod(0o755)
    locked = base / "locked"
    locked.mkdir()
    clip = write_clip(base / "clip.mp4", [index_frame(i) for i in range(10)], fps=10)
    shutil.copy(clip, locked / "inside.mp4")
    shutil.copy(clip, base / "unreadable.mp4")
    (base / "unreadable.mp4").chmod(0o000)
    locked.chmod(0o644)  # may list, may not search
    yield {"folder": locked / "inside.mp4", "file": base / "unreadable.mp4", "readable": clip}
    locked.chmod(0o755)
    shutil.rmtree(base)


def test_permission_denied_gives_a_typed_error_and_nothing_on_stderr(unreadable_places):
    if os.geteuid() == 0:
        try:
            nobody = pwd.getpwnam("nobody")
        except KeyError:
            pytest.skip("runs as root, whom permissions do not stop, and there is no user 'nobody' to run as")
        ids = [str(nobody.pw_gid), str(nobody.pw_uid)]
    else:
        ids = ["-1", "-1"]
    paths = [str(unreadable_places[name]) for name in ("folder", "file", "readable")]
    result = subprocess.run(
        [sys.executable, "-c", AS_ANOTHER_USER, *ids, *paths],
        cwd="/tmp", capture_output=True, text=True, timeout=120,
    )

    assert result.returncode == 0 and result.stderr == "", result.stderr
    outcomes = json.loads(result.stdout)
    folder, file, readable = (outcomes[path] for path in paths)
    assert folder[0] == "ClipAccessError" and "may not look inside the folder" in folder[1]
    assert file[0] == "ClipAccessError" and "may not read unreadable.mp4" in file[1]
    assert "re-encode" not in folder[1] + file[1] and "damaged" not in folder[1] + file[1]
    assert readable == ["read", ""]  # the same user reads a clip it has rights to


# --- a cover picture is not a video ----------------------------------------------------------------


def write_audio_with_cover(path: Path) -> Path:
    """An AAC .m4a whose only video stream is an attached picture (album art), as music files hold."""
    with av.open(str(path), "w", format="mp4") as container:
        audio = container.add_stream("aac", rate=16_000, layout="mono")
        cover = container.add_stream("mjpeg")
        cover.width, cover.height, cover.pix_fmt = 64, 64, "yuvj420p"
        cover.disposition = av.stream.Disposition.attached_pic
        picture = av.VideoFrame.from_ndarray(np.full((64, 64, 3), 200, np.uint8), format="rgb24")
        picture = picture.reformat(format="yuvj420p")
        picture.pts = 0
        cover_packets = cover.encode(picture) + cover.encode()
        for start in range(0, 16_000, 1024):
            tone = av.AudioFrame.from_ndarray(np.zeros((1, 1024), np.float32), format="fltp", layout="mono")
            tone.sample_rate, tone.pts = 16_000, start
            container.mux(audio.encode(tone))
        container.mux(audio.encode())
        container.mux(cover_packets)
    return path


def test_an_audio_file_with_only_a_cover_picture_says_so(tmp_path):
    path = write_audio_with_cover(tmp_path / "song.m4a")
    assert [s.type for s in av.open(str(path)).streams] == ["audio", "video"]

    for call in (lambda: sample(path), lambda: probe_clip(path)):
        with pytest.raises(NoVideoStreamError, match="song.m4a holds only a cover picture .*, no video beside its audio"):
            call()


# --- libav's and OpenCV's messages stay off the console -----------------------------------------------


READ_BAD_FILES = r"""
import json, sys
from unittest import mock

import av.logging

from framewise.core.families.qwen3_vl.processor import video_frame_sizing
from framewise.core.settings import SamplingSettings
from framewise.core.video import pyav_reader, sample_clip

pyav_reader.default_workers = lambda: 4  # several decoders open the file at once
levels = []
real_set_level = av.logging.set_level
errors = []
with mock.patch.object(av.logging, "set_level", side_effect=lambda level: (levels.append(level), real_set_level(level))):
    for path in sys.argv[1:]:
        try:
            sample_clip(path, SamplingSettings(max_frames=16), video_frame_sizing(SamplingSettings(max_frames=16)))
        except Exception as error:
            errors.append(type(error).__name__)
print(json.dumps({"errors": errors, "levels": levels, "level": av.logging.get_level()}))
"""


def test_libav_and_opencv_messages_stay_off_the_console_and_python_callbacks_off(tmp_path, counted):
    """PyAV's route for libav's messages calls back into Python from FFmpeg; with several decoders
    opening one file at once it locked every reader up on a 16-core machine, so it stays off."""
    raw = counted.read_bytes()
    truncated = tmp_path / "truncated.mp4"
    truncated.write_bytes(raw[: len(raw) // 2])
    noise = tmp_path / "noise.mp4"
    noise.write_bytes(np.random.default_rng(0).integers(0, 256, 20_000, np.uint8).tobytes())

    result = subprocess.run(
        [sys.executable, "-c", READ_BAD_FILES, str(truncated), str(noise), str(counted)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=120,
        env={name: value for name, value in os.environ.items() if not name.startswith("OPENCV_")},
    )

    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    outcome = json.loads(result.stdout)
    assert outcome["errors"] == ["UnreadableClipError", "UnreadableClipError"]
    assert outcome["levels"] == [] and outcome["level"] is None


# --- interrupted and stuck reads --------------------------------------------------------------------


def test_keyboard_interrupt_while_sampling_stops_the_decode_thread(counted, slow_decoder):
    polls = []

    def interrupt_on_the_fifth_poll() -> bool:
        polls.append(1)
        if len(polls) == 5:
            raise KeyboardInterrupt
        return False

    with pytest.raises(KeyboardInterrupt):
        sample(counted, should_cancel=interrupt_on_the_fifth_poll)
    wait_for_no_decode_threads(within_s=0.5)


@pytest.fixture
def stuck_scan(monkeypatch):
    """Measuring a clip (its index or its packets) blocks, ignoring the guard as a native call
    would, until released."""
    release = threading.Event()
    real_measure = pyav_reader.measure

    def blocked(*args):
        release.wait(30)
        return real_measure(*args)

    monkeypatch.setattr(pyav_reader, "measure", blocked)
    yield release
    release.set()
    for read in stuck_reads():
        read.thread.join(5)


def test_a_read_stuck_in_a_native_call_is_reported_and_not_repeated(counted, stuck_scan, monkeypatch):
    started = time.monotonic()
    with pytest.raises(DecodeTimeoutError, match="still stuck inside the decoder and holds the file open"):
        probe_clip(counted, budget=ReadBudget(start_s=0.3))
    assert time.monotonic() - started < 1.0

    (stuck,) = stuck_reads()
    assert stuck.path == counted and stuck.thread.is_alive()
    threads = len(decode_threads())
    with pytest.raises(ReaderStuckError, match="An earlier read of counted.mp4 is still stuck"):
        probe_clip(counted)
    assert len(decode_threads()) == threads  # no second thread, no second open file

    stuck_scan.set()
    stuck.thread.join(5)
    assert stuck_reads() == ()
    monkeypatch.undo()
    assert probe_clip(counted).frame_count == 40


def test_too_many_stuck_reads_refuse_every_new_read(tmp_path, counted, stuck_scan):
    from framewise.core.video.bounded import MAX_STUCK_READS

    for index in range(MAX_STUCK_READS):
        copy = shutil.copy(counted, tmp_path / f"copy{index}.mp4")
        with pytest.raises(DecodeTimeoutError):
            probe_clip(copy, budget=ReadBudget(start_s=0.1))
    assert len(stuck_reads()) == MAX_STUCK_READS
    with pytest.raises(ReaderStuckError, match=f"{MAX_STUCK_READS} earlier reads are still stuck.*restart Framewise"):
        probe_clip(counted)


# --- the OpenCV fallback is bounded too --------------------------------------------------------------


def test_the_opencv_open_and_reads_get_the_budget_as_timeouts(counted, pyav_fails, monkeypatch):
    opened = []
    real_capture = cv2.VideoCapture

    def recording_capture(*args):
        opened.append(args)
        return real_capture(*args)

    monkeypatch.setattr(cv2, "VideoCapture", recording_capture)
    sampled = sample(counted, budget=ReadBudget(start_s=7.0, per_video_second_s=3.0))

    assert sampled.reader == "opencv"
    (path, backend, parameters), = opened
    options = dict(zip(parameters[::2], parameters[1::2]))
    assert path == str(counted) and backend == cv2.CAP_FFMPEG
    assert 0 < options[cv2.CAP_PROP_OPEN_TIMEOUT_MSEC] <= 7000
    assert options[cv2.CAP_PROP_READ_TIMEOUT_MSEC] == 3000


def test_cancel_reaches_the_opencv_reader_within_half_a_second(counted, pyav_fails, monkeypatch):
    real_frames = opencv_reader.OpenCVClip.frames

    def slow_frames(self):  # 0.2 s per frame: 8 s for the clip
        for decoded in real_frames(self):
            time.sleep(0.2)
            yield decoded

    monkeypatch.setattr(opencv_reader.OpenCVClip, "frames", slow_frames)
    started = time.monotonic()
    with pytest.raises(CancelledError, match="counted.mp4 was cancelled"):
        sample(counted, should_cancel=lambda: time.monotonic() - started > 0.5)
    assert time.monotonic() - started < 1.0
    wait_for_no_decode_threads(within_s=0.5)


def test_opencv_logs_errors_only_unless_asked_otherwise(monkeypatch):
    """OpenCV's own console logging is turned down to errors, through whichever setter its release has."""
    logging = getattr(cv2.utils, "logging", cv2)  # cv2.utils.logging from OpenCV 4.13, cv2 itself before
    monkeypatch.delenv("OPENCV_LOG_LEVEL", raising=False)
    logging.setLogLevel(opencv_reader.OPENCV_LOG_LEVEL_ERROR + 1)
    opencv_reader._quiet_cv2.cache_clear()
    try:
        opencv_reader._quiet_cv2()
        assert logging.getLogLevel() == opencv_reader.OPENCV_LOG_LEVEL_ERROR
    finally:
        opencv_reader._quiet_cv2.cache_clear()
