"""The window stays responsive while a clip of 2,048 frames arrives: its frames are read (reported
to the window as they come), then the strip shows the finished clip, and no turn of the event loop
takes over 100 ms."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
from PySide6.QtCore import QTimer

from framewise.core.events import EncodeDone, ResetReason
from framewise.core.video import SampledFrames
from framewise.core.video.thumbnails import frames_read, thumbnail
from framewise.ui.frames import format_timestamp
from tests.ui import probes
from tests.ui.fake_engine import FakeEngine
from tests.ui.test_main_window import drop_file, wait_ready

FRAMES = 2048
# The frame size the engine reads a 1080p clip at for 2,048 frames under Qwen3-VL's largest clip
# (224k video tokens: 224 merge blocks a frame); its thumbnails are the largest the window gets.
FRAME_SHAPE = (352, 640, 3)
FRAMES_PER_REPORT = 64  # what one FramesRead brings while the encoder holds the engine's thread
MAX_STALL_MS = 100.0  # a window that pauses longer than this feels stuck


class LongClipEngine(FakeEngine):
    """Opens any file as a clip of :data:`FRAMES` frames, reported as the engine reports a clip being
    read (FramesRead in batches, with thumbnails made by core), then encoded in passes of 128."""

    frames_per_pass = 128

    def _read(
        self, path: Path, reason: ResetReason | None, call: str, span: tuple[float, float] | None = None
    ) -> EncodeDone:
        frame = np.full(FRAME_SHAPE, 90, np.uint8)
        times = tuple(0.9 + 1.75 * index for index in range(FRAMES))
        for first in range(0, FRAMES, FRAMES_PER_REPORT):
            arrived = [(index, frame, times[index]) for index in range(first, first + FRAMES_PER_REPORT)]
            self._emit(frames_read(path.name, FRAMES, arrived))
            time.sleep(0.002)
        small = thumbnail(frame, FRAMES)
        thumbnails = np.broadcast_to(small, (FRAMES, *small.shape))  # one picture, 2,048 times
        sampled = SampledFrames(thumbnails, times, path.name, path, 5.0, (1920, 1080, 3600.0))
        return self._encode(sampled, reason, span)


class StallMeter:
    """The longest gap between ticks of a 5 ms timer on the GUI thread, in milliseconds: ``longest_ms``
    as the clock on the wall sees it, ``longest_own_ms`` less the time the GUI thread waited for a
    CPU that other processes held (Linux's per-thread run-queue wait), which on a shared machine is
    the machine's stall, not the window's. Waits for Python's lock held by the engine's thread
    count: they are the window's."""

    def __init__(self) -> None:
        self.longest_ms = 0.0
        self.longest_own_ms = 0.0
        self._schedstat = Path(f"/proc/self/task/{threading.get_native_id()}/schedstat")
        self._last = (time.perf_counter(), self._queued_s())
        self._timer = QTimer()
        self._timer.setInterval(5)
        self._timer.timeout.connect(self._tick)

    def start(self) -> None:
        self._last = (time.perf_counter(), self._queued_s())
        self._timer.start()

    def stop(self) -> None:
        self._timer.stop()
        self._tick()

    def _tick(self) -> None:
        now = (time.perf_counter(), self._queued_s())
        gap_ms = (now[0] - self._last[0]) * 1e3
        self.longest_ms = max(self.longest_ms, gap_ms)
        self.longest_own_ms = max(self.longest_own_ms, gap_ms - (now[1] - self._last[1]) * 1e3)
        self._last = now

    def _queued_s(self) -> float:
        """Seconds this thread has spent runnable but waiting for a CPU (0 where the kernel does not say)."""
        try:
            return int(self._schedstat.read_text().split()[1]) / 1e9
        except (OSError, IndexError, ValueError):
            return 0.0


def test_2048_frames_arrive_without_stalling_the_window(qtbot, make_window, sample_clip):
    window = make_window(LongClipEngine)
    wait_ready(qtbot, window)
    meter = StallMeter()
    meter.start()
    drop_file(window.clip_section.preview.view, sample_clip)
    session = window.session
    qtbot.waitUntil(
        lambda: session.clip is not None and len(session.clip.timestamps) == FRAMES and not session.opening_clip,
        timeout=60_000,
    )
    qtbot.wait(200)  # the strip's pictures and the first paints after the clip is shown
    meter.stop()

    captions = probes.item_texts(window.clip_section.strip)
    assert len(captions) == FRAMES and captions[-1] == format_timestamp(0.9 + 1.75 * (FRAMES - 1))
    assert meter.longest_own_ms < MAX_STALL_MS, (
        f"the event loop stalled {meter.longest_own_ms:.0f} ms ({meter.longest_ms:.0f} ms on the wall clock, "
        "waits for a CPU included)"
    )
