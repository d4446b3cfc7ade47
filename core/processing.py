"""Qwen3-VL preprocessing without torchvision or Pillow.

Turns decoded frames into what the vision tower and the language model take:

- frame sizes: :func:`smart_resize` (video, a pixel budget for the whole clip) and
  :func:`image_size` (still image), multiples of ``patch_size * merge_size`` (32);
- :func:`resize_frames`: bicubic with antialiasing, as torchvision's tensor resize does it; the one
  resampler of sampled frames, used by the clip readers, training, evaluation and the parity test
  (:func:`video_frame_sizing` hands it and the frame size to the readers; :func:`fit_video_frames`
  sizes and resizes a whole clip's frames at once);
- :func:`patchify`: normalize and lay patches out in Qwen's order -> (N, 3*2*16*16) rows and a
  ``(t, h, w)`` grid, one temporal patch per frame pair;
- :func:`build_chat_inputs`: the chat prompt, its placeholders expanded (one ``<t.t seconds>``
  marker and one vision block per frame pair), token ids and ``mm_token_type_ids``.

The behaviour follows transformers' ``Qwen3VLVideoProcessor``, ``Qwen2VLImageProcessor`` and
``Qwen3VLProcessor``; ``tests/core/test_processing_parity.py`` checks it against them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from framewise.core.encoding.defs import VisionItem
from framewise.core.errors import ClipTooLargeError, FramewiseError, ModelLoadError
from framewise.core.families.qwen3_vl.geometry import VisionGeometry
from framewise.core.settings import SamplingSettings
from framewise.core.video import FrameSizing

MAX_ASPECT_RATIO = 200
# Image bounds of the released Qwen3-VL checkpoints' image processor (256x256 to 4096x4096 pixels).
IMAGE_MIN_PIXELS = 64 * 32 * 32
IMAGE_MAX_PIXELS = 16384 * 32 * 32

VISION_START = "<|vision_start|>"
VISION_END = "<|vision_end|>"
IMAGE_PAD = "<|image_pad|>"
VIDEO_PAD = "<|video_pad|>"

# Values of mm_token_type_ids.
TEXT_TOKEN, IMAGE_TOKEN, VIDEO_TOKEN = 0, 1, 2


@dataclass(frozen=True)
class VideoInputs:
    """A preprocessed clip: the tower's input and one timestamp (seconds) per frame pair."""

    item: VisionItem
    pair_timestamps: tuple[float, ...]


@dataclass(frozen=True)
class ChatInputs:
    """Token inputs of the language model, all shaped (1, L).

    ``mm_token_type_ids`` marks each token: 0 text, 1 image pad, 2 video pad. ``prompt_text`` is
    the text that was tokenized, placeholders expanded.
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    mm_token_type_ids: torch.Tensor
    prompt_text: str


# ---------------------------------------------------------------------------------------------
# Frame sizes


def smart_resize(
    num_frames: int,
    height: int,
    width: int,
    *,
    factor: int = 32,
    min_pixels: int,
    max_pixels: int,
    temporal_factor: int = 2,
) -> tuple[int, int]:
    """Frame size (h, w) for a clip of ``num_frames`` frames of ``height`` x ``width``.

    Both sides are multiples of ``factor``, the aspect ratio is kept as closely as that allows,
    and the whole clip -- the frame count rounded to a multiple of ``temporal_factor``, times
    h x w -- stays within [min_pixels, max_pixels]. Sides shorter than ``factor`` are first
    scaled up to it. This is transformers' Qwen3-VL video ``smart_resize`` (odd counts included:
    the count is rounded half to even), except that a clip of fewer frames than
    ``temporal_factor`` counts as that many, as it is padded to (transformers refuses it).

    Raises ClipTooLargeError when one side is more than 200 times the other.
    """
    _require_positive(num_frames=num_frames, height=height, width=width)
    if height < factor or width < factor:
        scale = max(factor / height, factor / width)
        height, width = int(height * scale), int(width * scale)
    _check_aspect_ratio(height, width)
    num_frames = max(num_frames, temporal_factor)  # a lone frame is padded to a pair
    budget_frames = round(num_frames / temporal_factor) * temporal_factor
    return _fit_to_budget(
        height, width, factor=factor, frames=num_frames, budget_frames=budget_frames,
        min_pixels=min_pixels, max_pixels=max_pixels,
    )


def image_size(
    height: int,
    width: int,
    geometry: VisionGeometry,
    *,
    min_pixels: int = IMAGE_MIN_PIXELS,
    max_pixels: int = IMAGE_MAX_PIXELS,
) -> tuple[int, int]:
    """Size (h, w) a still image is resized to: transformers' Qwen2-VL image ``smart_resize``.

    Raises ClipTooLargeError when one side is more than 200 times the other.
    """
    _require_positive(height=height, width=width)
    _check_aspect_ratio(height, width)
    return _fit_to_budget(
        height, width, factor=geometry.factor, frames=1, budget_frames=1,
        min_pixels=min_pixels, max_pixels=max_pixels,
    )


def video_frame_size(
    num_frames: int,
    height: int,
    width: int,
    sampling: SamplingSettings,
    *,
    geometry: VisionGeometry = VisionGeometry(),
) -> tuple[int, int]:
    """Frame size (h, w) for ``num_frames`` sampled frames of a ``height`` x ``width`` clip.

    ``sampling.max_pixels`` bounds the whole clip (frames x h x w), so more frames get smaller
    frames; ``sampling.min_pixels_per_frame * num_frames`` is the lower bound, so a clip of small
    frames is scaled up to at least that many pixels per frame.
    """
    return smart_resize(
        num_frames,
        height,
        width,
        factor=geometry.factor,
        min_pixels=sampling.min_pixels_per_frame * num_frames,
        max_pixels=sampling.max_pixels,
        temporal_factor=geometry.temporal_patch_size,
    )


def _fit_to_budget(
    height: int, width: int, *, factor: int, frames: int, budget_frames: int, min_pixels: int, max_pixels: int
) -> tuple[int, int]:
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    if budget_frames * h_bar * w_bar > max_pixels:
        beta = math.sqrt(frames * height * width / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif budget_frames * h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (frames * height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def _check_aspect_ratio(height: int, width: int) -> None:
    ratio = max(height, width) / min(height, width)
    if ratio > MAX_ASPECT_RATIO:
        raise ClipTooLargeError(
            f"The picture is {width}x{height} pixels, {ratio:.0f} times longer than it is wide; "
            f"Qwen3-VL accepts at most {MAX_ASPECT_RATIO}:1. Crop it to a less extreme shape."
        )


def _require_positive(**sizes: int) -> None:
    for name, value in sizes.items():
        if value < 1:
            raise ValueError(f"{name} must be at least 1, got {value}")


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
    """How the clip readers size sampled frames for Qwen3-VL: :func:`video_frame_size` under
    ``sampling``'s pixel bounds, and :func:`resize_frames`."""

    def size(count: int, height: int, width: int) -> tuple[int, int]:
        return video_frame_size(count, height, width, sampling, geometry=geometry)

    return FrameSizing(size=size, resize=resize_frames)


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

    # (x/255 - mean)/std, written as one subtraction and one division on the 0..255 scale.
    mean = torch.tensor(geometry.image_mean, device=video.device).mul(255.0).view(3, 1, 1)
    std = torch.tensor(geometry.image_std, device=video.device).mul(255.0).view(3, 1, 1)
    pixels = (video.permute(0, 3, 1, 2).float() - mean) / std  # (T, 3, h, w)

    t, gh, gw = grid
    pixels = pixels.view(t, tp, channels, gh // m, m, p, gw // m, m, p)
    # -> (t, gh/m, gw/m, m, m, channel, frame, p, p)
    pixels = pixels.permute(0, 3, 6, 4, 7, 2, 1, 5, 8)
    return pixels.reshape(t * gh * gw, channels * tp * p * p), grid


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
        pair_timestamps=_pair_timestamps(timestamps, geometry.temporal_patch_size),
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


def _pair_timestamps(timestamps: Sequence[float], temporal_patch_size: int) -> tuple[float, ...]:
    times = [float(t) for t in timestamps]
    times += times[-1:] * (-len(times) % temporal_patch_size)
    return tuple(
        (times[i] + times[i + temporal_patch_size - 1]) / 2 for i in range(0, len(times), temporal_patch_size)
    )


def _check_frames(video: torch.Tensor) -> None:
    if video.dim() != 4 or video.shape[-1] != 3 or video.dtype != torch.uint8:
        raise ValueError(f"expected (T, H, W, 3) uint8 frames, got {tuple(video.shape)} {video.dtype}")
    if video.shape[0] == 0:
        raise ValueError("expected at least one frame")


# ---------------------------------------------------------------------------------------------
# Prompt


def chat_messages(
    question: str, *, video: bool, image_count: int = 0, history: Sequence[tuple[str, str]] = ()
) -> list[dict[str, Any]]:
    """Chat messages in the transformers format: the visual content (video first, then the
    images) opens the first user turn, earlier (question, answer) turns follow in order, and
    ``question`` is the last user turn."""
    visuals: list[dict[str, Any]] = [{"type": "video"}] if video else []
    visuals += [{"type": "image"} for _ in range(image_count)]
    turns = [*history, (question, None)]
    messages: list[dict[str, Any]] = []
    for index, (asked, answer) in enumerate(turns):
        if index == 0:
            messages.append({"role": "user", "content": [*visuals, {"type": "text", "text": asked}]})
        else:
            messages.append({"role": "user", "content": asked})
        if answer is not None:
            messages.append({"role": "assistant", "content": answer})
    return messages


def build_chat_inputs(
    tokenizer: Any,
    question: str,
    *,
    video: VideoInputs | None,
    images: Sequence[VisionItem] = (),
    history: Sequence[tuple[str, str]] = (),
    geometry: VisionGeometry = VisionGeometry(),
) -> ChatInputs:
    """Token inputs for asking ``question`` about ``video`` and/or ``images``.

    The prompt comes from the tokenizer's chat template (:func:`chat_messages` lays out the
    turns). Then, as transformers' Qwen3VLProcessor does, the template's video pad becomes, per
    frame pair, ``<t.t seconds>`` + vision start + video pad x (h*w/merge^2) + vision end (the
    template's own vision start/end stay around the whole), and each image pad becomes
    (h*w/merge^2) image pads. Special-token ids are looked up in the tokenizer.

    Raises FramewiseError when a question or answer contains one of the reserved vision
    markers, and ModelLoadError when the tokenizer or its chat template lacks them.
    """
    tokens = _VisionTokens.of(tokenizer)
    for text in (question, *(part for turn in history for part in turn)):
        for marker in tokens.reserved:
            if marker in text:
                raise FramewiseError(f"The text contains the reserved marker {marker}; remove it and ask again.")

    messages = chat_messages(question, video=video is not None, image_count=len(images), history=history)
    template_text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    prompt_text = _expand_placeholders(template_text, tokens, video, images, geometry.merge_area)

    ids = torch.tensor([tokenizer.encode(prompt_text, add_special_tokens=False)], dtype=torch.long)
    token_types = torch.full_like(ids, TEXT_TOKEN)
    token_types[ids == tokens.image_pad_id] = IMAGE_TOKEN
    token_types[ids == tokens.video_pad_id] = VIDEO_TOKEN
    expected = {
        IMAGE_TOKEN: sum(item.patches for item in images) // geometry.merge_area,
        VIDEO_TOKEN: video.item.patches // geometry.merge_area if video is not None else 0,
    }
    for token_type, count in expected.items():
        if int((token_types == token_type).sum()) != count:
            raise ModelLoadError(
                f"The tokenizer splits the vision pad tokens ({tokens.image_pad}, {tokens.video_pad}); "
                "use the tokenizer that came with the model."
            )
    return ChatInputs(
        input_ids=ids,
        attention_mask=torch.ones_like(ids),
        mm_token_type_ids=token_types,
        prompt_text=prompt_text,
    )


@dataclass(frozen=True)
class _VisionTokens:
    """The tokenizer's vision marker tokens and the ids of its two pad tokens."""

    vision_start: str
    vision_end: str
    image_pad: str
    video_pad: str
    image_pad_id: int
    video_pad_id: int

    @property
    def reserved(self) -> tuple[str, ...]:
        return (self.vision_start, self.vision_end, self.image_pad, self.video_pad)

    @classmethod
    def of(cls, tokenizer: Any) -> _VisionTokens:
        # A tokenizer may name its own vision tokens; transformers reads the same attributes.
        names = [
            getattr(tokenizer, attribute, None) or default
            for attribute, default in (
                ("vision_start_token", VISION_START),
                ("vision_end_token", VISION_END),
                ("image_token", IMAGE_PAD),
                ("video_token", VIDEO_PAD),
            )
        ]
        ids = []
        for token in names:
            token_id = tokenizer.convert_tokens_to_ids(token)
            if token_id is None or token_id == tokenizer.unk_token_id:
                raise ModelLoadError(
                    f"The tokenizer has no {token} token, so it cannot take pictures or clips; "
                    "use a Qwen3-VL checkpoint's tokenizer."
                )
            ids.append(token_id)
        return cls(*names, image_pad_id=ids[2], video_pad_id=ids[3])


def _expand_placeholders(
    text: str, tokens: _VisionTokens, video: VideoInputs | None, images: Sequence[VisionItem], merge_area: int
) -> str:
    found_videos = text.count(tokens.video_pad)
    found_images = text.count(tokens.image_pad)
    if found_videos != (video is not None) or found_images != len(images):
        raise ModelLoadError(
            f"The chat template placed {found_videos} clip(s) and {found_images} image(s) where "
            f"{int(video is not None)} and {len(images)} were given; use a Qwen3-VL chat template."
        )
    replacements = iter(tokens.image_pad * (item.patches // merge_area) for item in images)

    def expand(match: re.Match[str]) -> str:
        if match.group() == tokens.image_pad:
            return next(replacements)
        return _video_blocks(tokens, video, merge_area)

    pattern = "|".join(re.escape(token) for token in (tokens.video_pad, tokens.image_pad))
    return re.sub(pattern, expand, text)


def _video_blocks(tokens: _VisionTokens, video: VideoInputs | None, merge_area: int) -> str:
    assert video is not None, "a video pad is only expanded when a video was given"
    t, h, w = video.item.grid_thw
    if len(video.pair_timestamps) != t:
        raise ValueError(f"{len(video.pair_timestamps)} pair timestamps for {t} frame pairs")
    pads = tokens.video_pad * (h * w // merge_area)
    return "".join(
        f"<{seconds:.1f} seconds>{tokens.vision_start}{pads}{tokens.vision_end}" for seconds in video.pair_timestamps
    )
