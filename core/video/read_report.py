"""What a backend tells the window while it reads a clip: how far reading has got, and the frames
read so far (for the strip to fill). Both backends report alike, through their one read flow
(:mod:`framewise.core.backends.reading`), which needs neither torch nor transformers."""

from __future__ import annotations

from framewise.core.events import FramesRead, Progress
from framewise.core.video.bounded import ReadProgress
from framewise.core.video.feed import FrameArrivals
from framewise.core.video.thumbnails import frames_read


def decode_progress(
    name: str, progress: ReadProgress, frames_read: tuple[int, int | None] = (0, None), elapsed_s: float = 0.0
) -> Progress:
    """How far reading a clip has got, in whole seconds of video (of the total when known); the
    message adds the frames read of the clip's frames and, once a tenth of the video is read, the
    seconds left at the pace so far."""
    seconds, total = int(progress.seconds), int(progress.total_s or 0)
    verb = "Measuring" if progress.stage == "scan" else "Reading"
    of_total = f" of {total}" if total else ""
    current = min(seconds, total) if total else seconds
    read, count = frames_read
    frames = f"{read} of {count} frames, " if count else ""
    left = ""
    if progress.stage == "decode" and total and progress.seconds >= total / 10:
        left = f", about {max(elapsed_s * (total - progress.seconds) / progress.seconds, 0.0):.0f} s left"
    return Progress("decode", current, total, f"{verb} {name}: {frames}{seconds}{of_total} s of video{left}")


def reading_events(
    name: str, progress: ReadProgress | None, arrivals: FrameArrivals, elapsed_s: float
) -> list[Progress | FramesRead]:
    """The events of a report while ``name`` is read: its progress, when there is news of it, then
    the frames that arrived since the last report, with their thumbnails."""
    events: list[Progress | FramesRead] = []
    if progress is not None:
        events.append(decode_progress(name, progress, arrivals.frames_read, elapsed_s))
    arrived = arrivals.take_arrived()
    total = arrivals.frames_read[1]
    if arrived and total is not None:
        events.append(frames_read(name, total, arrived))
    return events
