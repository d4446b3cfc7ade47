"""Decoding for display: the frame on screen at a time, then the later frames in order, scaled and upright."""

from __future__ import annotations

from pathlib import Path

import av
import numpy as np
import pytest

from framewise.core.errors import ClipNotFoundError, UnreadableClipError
from framewise.core.video.playback import ClipPlayback, fit_within
from tests.conftest import SAMPLE_CLIPS

CLIP = SAMPLE_CLIPS / "red_square_moves_right.mp4"


def _frame_times(path: Path) -> list[float]:
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        start = stream.start_time or 0
        return sorted(float((frame.pts - start) * stream.time_base) for frame in container.decode(stream))


def test_frames_from_a_time_start_with_the_frame_on_screen_then_follow_in_order():
    times = _frame_times(CLIP)
    middle = (times[len(times) // 2] + times[len(times) // 2 + 1]) / 2  # between two frames
    with ClipPlayback(CLIP, max_side=160) as playback:
        assert playback.duration_s == pytest.approx(times[-1] - times[0], abs=0.2)
        shown = [frame.time_s for frame in playback.frames_from(middle)]
    assert shown[0] == pytest.approx(times[len(times) // 2])
    assert shown == pytest.approx(times[len(times) // 2 :])


def test_frame_at_seeks_backwards_and_forwards_and_scales_to_fit():
    times = _frame_times(CLIP)
    with ClipPlayback(CLIP, max_side=160) as playback:
        late = playback.frame_at(times[-2] + 1e-3)
        early = playback.frame_at(0.0)
        past_the_end = playback.frame_at(times[-1] + 10.0)
    assert late.time_s == pytest.approx(times[-2]) and early.time_s == pytest.approx(times[0])
    assert past_the_end.time_s == pytest.approx(times[-1])
    height, width, channels = early.image.shape
    assert max(height, width) <= 160 and channels == 3 and early.image.dtype == np.uint8
    # The red square moves right: its centre of mass is further right late in the clip.
    def red_x(image: np.ndarray) -> float:
        mask = (image[..., 0] > 150) & (image[..., 1] < 90) & (image[..., 2] < 90)
        return float(np.nonzero(mask)[1].mean())
    assert red_x(late.image) > red_x(early.image) + 10


def test_missing_and_unreadable_files_are_typed_errors(tmp_path: Path):
    with pytest.raises(ClipNotFoundError):
        ClipPlayback(tmp_path / "gone.mp4")
    junk = tmp_path / "junk.mp4"
    junk.write_bytes(b"not a video at all" * 64)
    with pytest.raises(UnreadableClipError, match="cannot be played"):
        ClipPlayback(junk)


@pytest.mark.parametrize(("size", "fitted"), [((1920, 1080), (960, 540)), ((320, 240), (320, 240)), ((1081, 3), (960, 2))])
def test_fit_within_keeps_the_aspect_and_even_sides(size, fitted):
    assert fit_within(*size, 960) == fitted
