"""Qwen3-VL preprocessing without torchvision or Pillow.

Turns decoded frames, at the sizes :mod:`~framewise.core.families.qwen3_vl.sizing` gives, into what
the vision tower takes:

- :func:`resize_frames`: bicubic with antialiasing, as torchvision's tensor resize does it; the one
  resampler of sampled frames, used by the clip readers, training, evaluation and the parity test
  (:func:`video_frame_sizing` hands it and the frame size to the readers; :func:`fit_video_frames`
  sizes and resizes a whole clip's frames at once);
- :func:`patchify`: normalize and lay patches out in Qwen's order -> (N, 3*2*16*16) rows and a
  ``(t, h, w)`` grid, one temporal patch per frame pair;
- :func:`preprocess_video` and :func:`preprocess_image`: both steps, with each frame pair's time
  for the prompt's ``<t.t seconds>`` markers.

The prompt is :mod:`~framewise.core.families.qwen3_vl.prompt`'s. The behaviour follows
transformers' ``Qwen3VLVideoProcessor`` and ``Qwen2VLImageProcessor``;
``tests/core/families/qwen3_vl/test_processing_parity.py`` checks it against them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from framewise.core.encoding.defs import VisionItem
from framewise.core.encoding.pruning import Retention
from framewise.core.families.qwen3_vl.geometry import VisionGeometry
from framewise.core.families.qwen3_vl.sizing import (
    IMAGE_MAX_PIXELS,
    IMAGE_MIN_PIXELS,
    frame_sizing,
    image_size,
    pair_timestamps,
)
from framewise.core.settings import SamplingSettings
from framewise.core.video import FrameSizing


@dataclass(frozen=True)
class VideoInputs:
    """A preprocessed clip: the tower's input and one timestamp (seconds) per frame pair.

    ``retention``, when the clip's video tokens were pruned after encoding, says which of its
    merged tokens the prompt keeps (``None``: all of them).
    """

    item: VisionItem
    pair_timestamps: tuple[float, ...]
    retention: Retention | None = None

    def without_pixels(self) -> VideoInputs:
        """The clip once encoded: what its prompt needs (grid, pair times, retention), no pixel rows."""
        return dataclasses.replace(self, item=self.item.without_pixels())


# ---------------------------------------------------------------------------------------------
# Pixels


def resize_frames(frames: np.ndarray | torch.Tensor, size: tuple[int, int]) -> np.ndarray | torch.Tensor:
    """Resize (T, H, W, 3) uint8 frames to (T, h, w, 3) uint8, ``size = (h, w)``.

    Bicubic with antialiasing, computed as torchvision's tensor resize computes it: on a CPU
    torch's uint8 kernel (as torchvision uses there), elsewhere in float32, clamped and rounded
    back to uint8. Returns the input itself when it already has that size, else the same kind
    (numpy array or tensor) as given.
    """
    video = torch.from_numpy(frames) if isinstance(frames, np.ndarray) else frames
    _check_frames(video)
    if tuple(video.shape[1:3]) == tuple(size):
        return frames
    channels_first = video.permute(0, 3, 1, 2)
    if channels_first.device.type == "cpu":
        resized = F.interpolate(channels_first, size=size, mode="bicubic", align_corners=False, antialias=True)
    else:
        resized = F.interpolate(
            channels_first.float(), size=size, mode="bicubic", align_corners=False, antialias=True
        )
        resized = resized.clamp_(0, 255).round_().to(torch.uint8)
    resized = resized.permute(0, 2, 3, 1).contiguous()
    return resized.numpy() if isinstance(frames, np.ndarray) else resized


def video_frame_sizing(sampling: SamplingSettings, geometry: VisionGeometry = VisionGeometry()) -> FrameSizing:
    """How the clip readers size sampled frames for Qwen3-VL: :func:`~.sizing.video_frame_size`
    under ``sampling``'s pixel bounds, resampled by :func:`resize_frames` on one thread (see
    :func:`resize_on_one_thread`)."""
    return frame_sizing(sampling, geometry, resize_on_one_thread)


def resize_on_one_thread(frames: np.ndarray | torch.Tensor, size: tuple[int, int]) -> np.ndarray | torch.Tensor:
    """:func:`resize_frames` with torch's intra-op threads at one on the calling thread.

    Readers resize each frame they keep, between frames FFmpeg's own threads decode on every core:
    a frame is too small to gain from more threads, and after each call torch's OpenMP workers
    spin-wait on those cores, which on a 2-core machine made sampling slower than decoding every
    frame. With OpenMP the thread count is the calling thread's own (other threads keep theirs);
    it is put back after the call.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return resize_frames(frames, size)
    finally:
        torch.set_num_threads(threads)


def fit_video_frames(
    frames: np.ndarray, sampling: SamplingSettings, *, geometry: VisionGeometry = VisionGeometry()
) -> np.ndarray:
    """Resize T sampled frames (T, H, W, 3) uint8 to their Qwen3-VL size (T, h, w, 3).

    ``(h, w)`` is :func:`video_frame_size` for T frames of H x W; the pixels come from
    :func:`resize_frames`, as the clip readers resize each frame they keep.
    """
    sizing = video_frame_sizing(sampling, geometry)
    return sizing.resize(frames, sizing.size(*frames.shape[:3]))


def patchify(
    frames: np.ndarray | torch.Tensor, geometry: VisionGeometry
) -> tuple[torch.Tensor, tuple[int, int, int]]:
    """Normalize (T, h, w, 3) uint8 frames and cut them into patch rows in Qwen's order.

    h and w must be multiples of ``geometry.factor``. T is padded to a multiple of the temporal
    patch size by repeating the last frame. Returns ``pixel_values`` (t*gh*gw, 3*tp*p*p) float32
    and the grid ``(t, gh, gw)`` = (T/tp, h/p, w/p). Rows run over t, then 2x2 merge blocks in
    raster order (gh/m, gw/m), then the patches inside a block (m, m); each row holds channel,
    then frame, then the p x p pixels. Pixel values are ``(x/255 - mean) / std``.
    """
    video = torch.from_numpy(frames) if isinstance(frames, np.ndarray) else frames
    _check_frames(video)
    num_frames, height, width, channels = video.shape
    if height % geometry.factor or width % geometry.factor:
        raise ValueError(
            f"frames are {width}x{height}; both sides must be multiples of {geometry.factor} "
            "(resize them with video_frame_size/image_size and resize_frames first)"
        )
    tp, p, m = geometry.temporal_patch_size, geometry.patch_size, geometry.merge_size
    if pad := -num_frames % tp:
        video = torch.cat([video, video[-1:].expand(pad, -1, -1, -1)])
    grid = ((num_frames + pad) // tp, height // p, width // p)

    # The rows are gathered while the values are still bytes (a quarter of the floats' traffic),
    # then made (x/255 - mean)/std in place, as one subtraction and one division on the 0..255 scale.
    t, gh, gw = grid
    rows = video.reshape(t, tp, gh // m, m, p, gw // m, m, p, channels)
    # -> (t, gh/m, gw/m, m, m, channel, frame, p, p)
    rows = rows.permute(0, 2, 5, 3, 6, 8, 1, 4, 7)
    rows = rows.reshape(t * gh * gw, channels, tp * p * p).float()
    mean = torch.tensor(geometry.image_mean, device=video.device).mul(255.0).view(1, channels, 1)
    std = torch.tensor(geometry.image_std, device=video.device).mul(255.0).view(1, channels, 1)
    return rows.sub_(mean).div_(std).view(t * gh * gw, channels * tp * p * p), grid


def preprocess_video(
    frames: np.ndarray | torch.Tensor, timestamps: Sequence[float], geometry: VisionGeometry
) -> VideoInputs:
    """Patchify sampled frames (T, h, w, 3) uint8, already at their Qwen3-VL size.

    ``timestamps`` gives each frame's time in seconds. A frame pair's timestamp is the mean of
    its first and last frame's, as transformers' Qwen3VLProcessor computes it; an odd last frame
    is paired with itself.
    """
    if len(timestamps) != frames.shape[0]:
        raise ValueError(f"{frames.shape[0]} frames but {len(timestamps)} timestamps")
    pixel_values, grid = patchify(frames, geometry)
    repeated = grid[0] * geometry.temporal_patch_size - frames.shape[0]
    return VideoInputs(
        item=VisionItem(pixel_values=pixel_values, grid_thw=grid, modality="video", repeated_frames=repeated),
        pair_timestamps=pair_timestamps(timestamps, geometry.temporal_patch_size),
    )


def join_videos(parts: Sequence[VideoInputs]) -> VideoInputs:
    """One clip from consecutive parts preprocessed on their own (each but the last a whole
    number of frame pairs): the same rows, grid and pair times as preprocessing it at once."""
    first, last = parts[0].item, parts[-1].item
    grid = (sum(part.item.grid_thw[0] for part in parts), *first.grid_thw[1:])
    return VideoInputs(
        item=VisionItem(
            pixel_values=torch.cat([part.item.pixel_values for part in parts]),
            grid_thw=grid,
            modality="video",
            repeated_frames=last.repeated_frames,
        ),
        pair_timestamps=tuple(time_s for part in parts for time_s in part.pair_timestamps),
    )


def preprocess_image(
    image: np.ndarray | torch.Tensor,
    geometry: VisionGeometry,
    *,
    min_pixels: int = IMAGE_MIN_PIXELS,
    max_pixels: int = IMAGE_MAX_PIXELS,
) -> VisionItem:
    """Resize (see :func:`image_size`) and patchify one (H, W, 3) uint8 image.

    The image counts as one frame repeated to fill a temporal patch: grid ``(1, h/p, w/p)``.
    """
    height, width = image.shape[:2]
    size = image_size(height, width, geometry, min_pixels=min_pixels, max_pixels=max_pixels)
    pixel_values, grid = patchify(resize_frames(image[None], size), geometry)
    return VisionItem(pixel_values=pixel_values, grid_thw=grid, modality="image")


def _check_frames(video: torch.Tensor) -> None:
    if video.dim() != 4 or video.shape[-1] != 3 or video.dtype != torch.uint8:
        raise ValueError(f"expected (T, H, W, 3) uint8 frames, got {tuple(video.shape)} {video.dtype}")
    if video.shape[0] == 0:
        raise ValueError("expected at least one frame")
