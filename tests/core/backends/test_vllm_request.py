"""The parts of a request to a vLLM server: the frames' times."""

from __future__ import annotations

import numpy as np

from framewise.core.backends.vllm.request import media_io_kwargs, resize_with_opencv


def test_times_are_milliseconds_of_a_1000_fps_source() -> None:
    assert media_io_kwargs([0.25, 0.75, 1.25]) == {
        "video": {"fps": 1000.0, "frames_indices": [250, 750, 1250], "total_num_frames": 1251, "num_frames": -1}
    }


def test_frames_for_a_server_are_resampled_without_torch_close_to_the_engines_resampler() -> None:
    from framewise.core.families.qwen3_vl.processor import resize_frames

    rows, columns = np.mgrid[0:90, 0:160]
    frame = np.stack([rows * 2, columns, (rows + columns) % 256], axis=-1).astype(np.uint8)
    frames = np.stack([frame, 255 - frame])
    for size in ((64, 96), (128, 224)):  # shrinking and enlarging
        resized = resize_with_opencv(frames, size)
        assert resized.shape == (2, *size, 3) and resized.dtype == np.uint8
        difference = np.abs(resized.astype(int) - resize_frames(frames, size).astype(int))
        assert difference.mean() < 3, size
    assert resize_with_opencv(frames, (90, 160)) is frames
