"""Reading clips: probe a file and sample frames uniformly in time, ready for the model.

PyAV is the reader (:mod:`.pyav_reader`); OpenCV is the fallback for files PyAV cannot open or
decode (:mod:`.opencv_reader`). Both hand their frames to one sampling loop
(:mod:`.sampling`), which builds the :class:`ClipInfo` and picks and sizes the frames:

* **How many frames.** ``floor(duration x sampling.fps)``, clamped to ``[min_frames, max_frames]``
  and rounded up to a multiple of the model family's frames per slice (Qwen3-VL encodes frames in
  pairs: an even count). A clip with fewer frames than that count keeps its own frame count
  (rounded up the same way), but never fewer than
  ``min_frames``: a clip with too few frames has frames repeated, evenly spread, so a still or a
  two-frame clip becomes pairs of identical frames, the way Qwen3-VL encodes still images. Such a
  clip gives each of its frames in turn, however far apart they are in time (a timelapse with a
  pause of hours), not the frames on screen at the target times.
* **Which frames.** Target times are the middles of equal slices of the clip; in exact mode each
  target takes the frame on screen at that time (the last frame whose presentation time is at or
  before it). In fast mode (``SamplingSettings.fast_mode``; by default for clips over 10 minutes)
  a target takes the decodable frame nearest it (a keyframe, or the first frame after one) when
  that is within half the sampling interval, else the earliest frame within half the interval
  before it (the least decoding). Presentation timestamps are used throughout, so
  variable frame rate comes out right, and the returned timestamps are the chosen frames' own
  times in seconds from the clip's start. :class:`SampledClip` says which mode was used.
* **Reading.** No frame is decoded twice: groups of pictures are decoded straight through where
  targets are denser than keyframes and reached by seeking where they are sparser, in parallel
  segments, one decoder each, where the file has an index (:mod:`.reads` plans it).
* **Size.** The caller's :class:`FrameSizing` gives the size for the clip and the resampler;
  only the chosen frames are converted, each as it is kept, so a long clip is never held at full
  resolution. In fast mode the decoder's scaler converts and scales a kept frame in one step.
  The model family supplies it (``ModelFamily.frame_sizing``, with its frames per slice), so the
  readers never import the model's code.
* **Bounded** (:mod:`.bounded`): reading runs on a worker thread under a :class:`ReadBudget` that
  follows the work (a time to start, then a time per second of video), reports
  :class:`ReadProgress`, and stops on ``should_cancel`` within a few tens of milliseconds.

Bad input raises the typed errors of :mod:`framewise.core.errors`, with a message that says what to do.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import closing
from pathlib import Path

from framewise.core.errors import UnreadableClipError
from framewise.core.settings import SamplingSettings
from framewise.core.video.bounded import Guard, ReadBudget, ReadProgress, StuckRead, run_bounded, stuck_reads
from framewise.core.video.clip import (
    MAX_FRAME_PIXELS,
    MAX_SIDE,
    ClipInfo,
    FrameSizing,
    Reader,
    Resize,
    ReaderFailed,
    SampledClip,
    SampledFrames,
    existing_file,
    frames_size_and_duration,
)
from framewise.core.video.opencv_reader import OpenCVClip
from framewise.core.video.pyav_reader import PyAVClip
from framewise.core.video.sampling import (
    FrameSink,
    GuardedSink,
    Taken,
    read_clip,
    sample_count,
    sample_times,
    span_count,
)

__all__ = [
    "MAX_FRAME_PIXELS",
    "MAX_SIDE",
    "ClipInfo",
    "FrameSink",
    "FrameSizing",
    "Resize",
    "ReadBudget",
    "ReadProgress",
    "Reader",
    "SampledClip",
    "SampledFrames",
    "StuckRead",
    "probe_clip",
    "sample_clip",
    "sample_count",
    "sample_times",
    "span_count",
    "stuck_reads",
]


def probe_clip(path: str | Path, *, budget: ReadBudget = ReadBudget()) -> ClipInfo:
    """Open ``path`` and describe its video stream (decodes only the first frame).

    Raises the :class:`~framewise.core.errors.ClipError` subclasses described in the module docstring.
    """
    clip_path = existing_file(path)
    info, _, _ = run_bounded(lambda guard: read(clip_path, None, None, guard), clip_path, budget)
    return info


def sample_clip(
    path: str | Path,
    sampling: SamplingSettings,
    sizing: FrameSizing,
    *,
    budget: ReadBudget = ReadBudget(),
    should_cancel: Callable[[], bool] | None = None,
    on_progress: Callable[[ReadProgress], None] | None = None,
    sink: FrameSink | None = None,
    span: tuple[float, float] | None = None,
) -> SampledClip:
    """Sample frames uniformly in time from ``path`` (see the module docstring for the rules), or
    from its ``span`` (start, end) in seconds, as densely as the frame budget allows (a closer look:
    :func:`~framewise.core.video.sampling.span_count`).

    ``should_cancel`` is polled and ``on_progress`` called on the calling thread every few
    milliseconds; when ``should_cancel`` returns True, :class:`~framewise.core.errors.CancelledError`
    is raised. A read that stops making progress within ``budget`` raises
    :class:`~framewise.core.errors.DecodeTimeoutError`. ``sink`` gets each frame as soon as it is
    kept, from the reading threads (see :mod:`.feed`).
    """
    clip_path = existing_file(path)
    info, sampled, reader = run_bounded(
        lambda guard: read(clip_path, sampling, sizing, guard, sink, span), clip_path, budget, should_cancel, on_progress
    )
    return SampledClip(
        frames=sampled.frames,
        timestamps=sampled.times,
        info=info,
        reader=reader,
        mode=sampled.mode,
        frames_decoded=sampled.decoded,
        damage=sampled.damage,
    )


def read(
    path: Path,
    sampling: SamplingSettings | None,
    sizing: FrameSizing | None,
    guard: Guard,
    sink: FrameSink | None = None,
    span: tuple[float, float] | None = None,
) -> tuple[ClipInfo, Taken | None, Reader]:
    """Probe (``sampling`` None) or sample ``path`` (its ``span`` only, when given): PyAV, then
    OpenCV if PyAV cannot read it."""
    sink = GuardedSink(sink, guard) if sink is not None else None
    try:
        with closing(PyAVClip(path, guard)) as clip:
            return (*read_clip(path, clip, sampling, sizing, sink, span), "pyav")
    except ReaderFailed as pyav_failure:
        try:
            with closing(OpenCVClip(path, guard)) as fallback:
                return (*read_clip(path, fallback, sampling, sizing, sink, span), "opencv")
        except ReaderFailed as opencv_failure:
            raise UnreadableClipError(
                f"{path.name} is not a video Framewise can read ({pyav_failure}; {opencv_failure}). "
                "Check that it plays in a media player; if it is truncated or damaged, export or "
                "re-encode it (MP4 with H.264 works everywhere)."
            ) from pyav_failure
