"""The parts of a request to a vLLM server: the frames' times."""

from __future__ import annotations

from framewise.core.backends.vllm_request import media_io_kwargs


def test_times_are_milliseconds_of_a_1000_fps_source() -> None:
    assert media_io_kwargs([0.25, 0.75, 1.25]) == {
        "video": {"fps": 1000.0, "frames_indices": [250, 750, 1250], "total_num_frames": 1251, "num_frames": -1}
    }
