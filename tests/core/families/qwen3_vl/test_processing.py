"""Qwen3-VL preprocessing: frame sizes, resize, patch layout, prompt expansion.

The tokenizer is built here (byte-level, no merges, Qwen's special tokens and a Qwen-format chat
template) so the tests need no model files. ``test_processing_parity.py`` reuses it.
"""

from __future__ import annotations

import math
import re
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from framewise.core.errors import ClipTooLargeError, FramewiseError, ModelLoadError
from framewise.core.families.qwen3_vl.geometry import VisionGeometry
from framewise.core.families.qwen3_vl.processor import (
    fit_video_frames,
    patchify,
    preprocess_image,
    preprocess_video,
    resize_frames,
)
from framewise.core.families.qwen3_vl.sizing import image_size, smart_resize, video_frame_size
from framewise.core.families.qwen3_vl.prompt import ChatInputs, build_chat_inputs
from framewise.core.settings import SamplingSettings

SPECIAL_TOKENS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
)

# Qwen's chat format: each turn is <|im_start|>role\n ... <|im_end|>\n; visual parts are
# <|vision_start|><|X_pad|><|vision_end|>.
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{ '<|im_start|>' + message.role + '\\n' }}"
    "{%- if message.content is string -%}{{ message.content }}"
    "{%- else -%}{%- for part in message.content -%}"
    "{%- if part.type == 'video' -%}{{ '<|vision_start|><|video_pad|><|vision_end|>' }}"
    "{%- elif part.type == 'image' -%}{{ '<|vision_start|><|image_pad|><|vision_end|>' }}"
    "{%- else -%}{{ part.text }}{%- endif -%}"
    "{%- endfor -%}{%- endif -%}"
    "{{ '<|im_end|>\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}"
)


def make_tokenizer(special_tokens=SPECIAL_TOKENS, chat_template=CHAT_TEMPLATE):
    """A transformers tokenizer: one token per byte, plus ``special_tokens`` kept whole."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    backend = Tokenizer(models.BPE(vocab={char: i for i, char in enumerate(alphabet)}, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    backend.add_special_tokens([AddedToken(token, special=True, normalized=False) for token in special_tokens])
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, chat_template=chat_template, eos_token="<|im_end|>", pad_token="<|endoftext|>"
    )


@pytest.fixture(scope="module")
def tokenizer():
    return make_tokenizer()


GEOMETRY = VisionGeometry()


def random_frames(count: int, height: int, width: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, size=(count, height, width, 3), dtype=np.uint8)


# ---------------------------------------------------------------------------------------------
# Geometry


def test_geometry_defaults():
    assert (GEOMETRY.factor, GEOMETRY.patch_dim, GEOMETRY.merge_area) == (32, 1536, 4)


def test_geometry_from_vision_config_object_dict_and_transformers_config():
    from transformers.models.qwen3_vl.configuration_qwen3_vl import Qwen3VLVisionConfig

    custom = SimpleNamespace(patch_size=14, temporal_patch_size=2, spatial_merge_size=2)
    assert VisionGeometry.from_vision_config(custom).factor == 28
    assert VisionGeometry.from_vision_config({"patch_size": 14, "spatial_merge_size": 3}).factor == 42
    assert VisionGeometry.from_vision_config(Qwen3VLVisionConfig()) == VisionGeometry()


# ---------------------------------------------------------------------------------------------
# Frame sizes


def test_smart_resize_known_value():
    # 32 frames of 1080p in the default 32x256x256 budget: beta = sqrt(32*1080*1920 / 2097152) = 5.625,
    # so 1080/5.625 = 192 and 1920/5.625 = 341.3, floored to multiples of 32.
    assert smart_resize(32, 1080, 1920, min_pixels=32 * 64 * 64, max_pixels=32 * 256 * 256) == (192, 320)
    # Already within bounds: only rounded to the nearest multiples of 32.
    assert smart_resize(4, 100, 200, min_pixels=1024, max_pixels=10**9) == (96, 192)


@settings(max_examples=300, deadline=None)
@given(
    num_frames=st.integers(1, 64).map(lambda n: 2 * n),
    height=st.integers(1, 5000),
    aspect=st.floats(0.05, 20),
    per_frame_min=st.integers(32 * 32, 128 * 128),
    per_frame_max=st.integers(4 * 32 * 32, 1024 * 1024),
)
def test_smart_resize_properties(num_frames, height, aspect, per_frame_min, per_frame_max):
    width = max(1, round(height * aspect))
    min_pixels = per_frame_min * num_frames
    max_pixels = max(per_frame_max, 4 * per_frame_min) * num_frames
    h, w = smart_resize(num_frames, height, width, min_pixels=min_pixels, max_pixels=max_pixels)

    assert h % 32 == 0 and w % 32 == 0 and h >= 32 and w >= 32
    clip_pixels = num_frames * h * w
    assert clip_pixels >= min_pixels
    if min(h, w) > 32:  # a side clamped at one block may push a very elongated clip over the budget
        assert clip_pixels <= max_pixels
    if min(h, w) >= 128 and min(height, width) >= 32:
        # Every side is within one 32-pixel step of the same scale of the source.
        assert 0.5 <= (h / w) / (height / width) <= 2.0


def test_smart_resize_more_frames_give_smaller_frames():
    budget = dict(min_pixels=1024, max_pixels=16 * 256 * 256)
    areas = [math.prod(smart_resize(n, 720, 1280, **budget)) for n in (4, 8, 16, 32, 64)]
    assert areas == sorted(areas, reverse=True) and areas[0] > areas[-1]


def test_smart_resize_scales_tiny_frames_up_to_the_minimum():
    h, w = smart_resize(8, 10, 20, min_pixels=8 * 64 * 64, max_pixels=8 * 512 * 512)
    assert 8 * h * w >= 8 * 64 * 64 and w > h


def test_smart_resize_counts_a_single_frame_as_one_pair():
    assert smart_resize(1, 64, 64, min_pixels=1024, max_pixels=2 * 64 * 64) == (64, 64)
    assert smart_resize(1, 64, 64, min_pixels=1024, max_pixels=2 * 64 * 64 - 1) == (32, 32)


@pytest.mark.parametrize("height,width", [(10, 2010), (4000, 19)])
def test_extreme_aspect_ratio_is_a_clip_error(height, width):
    with pytest.raises(ClipTooLargeError, match="200"):
        smart_resize(4, height, width, min_pixels=1024, max_pixels=10**8)
    with pytest.raises(ClipTooLargeError, match="Crop"):
        image_size(height, width, GEOMETRY)


@pytest.mark.parametrize(
    "height,width,words",
    [(16, 4000, "4000x16 pixels, 250 times wider than it is tall"), (4000, 16, "16x4000 pixels, 250 times taller than it is wide")],
)
def test_extreme_aspect_ratio_message_names_the_files_own_size_and_shape(height, width, words):
    """Sides under the 32-pixel factor are scaled up before resizing; the message still names the file's size."""
    with pytest.raises(ClipTooLargeError) as raised:
        smart_resize(4, height, width, min_pixels=1024, max_pixels=10**8)
    assert words in str(raised.value)


def test_video_frame_size_uses_the_whole_clip_budget_and_per_frame_minimum():
    sampling = SamplingSettings(max_pixels=16 * 128 * 128, min_pixels_per_frame=96 * 96)
    assert video_frame_size(16, 720, 1280, sampling) == smart_resize(
        16, 720, 1280, min_pixels=16 * 96 * 96, max_pixels=16 * 128 * 128
    )
    h, w = video_frame_size(16, 720, 1280, sampling)
    assert 16 * h * w <= sampling.max_pixels
    h, w = video_frame_size(4, 40, 40, sampling)
    assert h * w >= sampling.min_pixels_per_frame


def test_image_size_keeps_in_range_images_and_bounds_large_ones():
    assert image_size(480, 640, GEOMETRY) == (480, 640)
    h, w = image_size(6000, 8000, GEOMETRY, max_pixels=1024 * 1024)
    assert h * w <= 1024 * 1024 and h % 32 == 0 and w % 32 == 0 and w > h
    h, w = image_size(50, 50, GEOMETRY, min_pixels=128 * 128)
    assert h * w >= 128 * 128


# ---------------------------------------------------------------------------------------------
# Resize


def test_resize_is_a_no_op_at_the_same_size():
    frames = random_frames(2, 64, 96)
    assert resize_frames(frames, (64, 96)) is frames


def test_resize_keeps_the_container_kind_shape_and_dtype():
    frames = random_frames(3, 50, 70)
    out = resize_frames(frames, (32, 64))
    assert isinstance(out, np.ndarray) and out.shape == (3, 32, 64, 3) and out.dtype == np.uint8
    out = resize_frames(torch.from_numpy(frames), (96, 128))
    assert isinstance(out, torch.Tensor) and out.shape == (3, 96, 128, 3) and out.dtype == torch.uint8


def test_resize_keeps_flat_colour_and_filters_before_downscaling():
    flat = np.full((1, 90, 120, 3), (10, 128, 250), dtype=np.uint8)
    assert (resize_frames(flat, (32, 64)) == flat[:, :32, :64]).all()
    # A one-pixel checkerboard shrunk 4x: antialiasing averages it to grey; plain bicubic would alias.
    checker = ((np.indices((128, 128)).sum(axis=0) % 2) * 255).astype(np.uint8)
    frames = np.repeat(checker[None, :, :, None], 3, axis=3)
    grey = resize_frames(frames, (32, 32)).astype(int)
    assert abs(grey[0, 4:-4, 4:-4] - 127.5).max() <= 2


def test_resize_matches_float_bicubic_on_smooth_content():
    y, x = np.mgrid[0:120, 0:160]
    smooth = (127 + 100 * np.sin(x / 9.0) * np.cos(y / 13.0)).astype(np.uint8)
    frames = np.stack([smooth, smooth.T[:120, :120].repeat(2, axis=1)[:, :160], 255 - smooth], axis=-1)[None]
    reference = torch.nn.functional.interpolate(
        torch.from_numpy(frames).permute(0, 3, 1, 2).float(), size=(64, 96), mode="bicubic", antialias=True
    )
    reference = reference.clamp(0, 255).round().permute(0, 2, 3, 1).numpy()
    assert np.abs(resize_frames(frames, (64, 96)).astype(float) - reference).max() <= 1


def test_fit_video_frames_resizes_to_the_clip_size_frame_by_frame():
    sampling = SamplingSettings(max_pixels=4 * 64 * 64, min_pixels_per_frame=32 * 32)
    frames = random_frames(4, 90, 160)
    fitted = fit_video_frames(frames, sampling)

    size = video_frame_size(4, 90, 160, sampling)
    assert fitted.shape == (4, *size, 3) and size != (90, 160)
    for frame, fitted_frame in zip(frames, fitted):  # as the clip readers resize each kept frame
        assert np.array_equal(resize_frames(frame[None], size)[0], fitted_frame)


def test_resize_rejects_frames_that_are_not_uint8_rgb():
    with pytest.raises(ValueError, match="uint8"):
        resize_frames(np.zeros((1, 8, 8, 3), dtype=np.float32), (4, 4))
    with pytest.raises(ValueError, match=r"\(T, H, W, 3\)"):
        resize_frames(np.zeros((8, 8, 3), dtype=np.uint8), (4, 4))


# ---------------------------------------------------------------------------------------------
# Patches


def unpatchify(pixel_values: torch.Tensor, grid: tuple[int, int, int], geometry: VisionGeometry) -> torch.Tensor:
    """Inverse of patchify written by index arithmetic, row by row: (t*tp, h, w, 3) normalized frames."""
    t, gh, gw = grid
    p, tp, m = geometry.patch_size, geometry.temporal_patch_size, geometry.merge_size
    frames = torch.empty(t * tp, gh * p, gw * p, 3)
    for row in range(pixel_values.shape[0]):
        pair, within = divmod(row, gh * gw)
        block, inner = divmod(within, m * m)
        block_row, block_col = divmod(block, gw // m)
        patch_row = block_row * m + inner // m
        patch_col = block_col * m + inner % m
        values = pixel_values[row].view(3, tp, p, p)  # channel, frame, y, x
        for frame in range(tp):
            frames[pair * tp + frame, patch_row * p : (patch_row + 1) * p, patch_col * p : (patch_col + 1) * p] = (
                values[:, frame].permute(1, 2, 0)
            )
    return frames


def normalized(frames: np.ndarray) -> torch.Tensor:
    return (torch.from_numpy(frames).float() / 255 - 0.5) / 0.5


def test_patchify_shape_and_round_trip():
    frames = random_frames(4, 64, 96)
    pixel_values, grid = patchify(frames, GEOMETRY)
    assert grid == (2, 4, 6)
    assert pixel_values.shape == (2 * 4 * 6, 1536) and pixel_values.dtype == torch.float32
    torch.testing.assert_close(unpatchify(pixel_values, grid, GEOMETRY), normalized(frames))


def test_patchify_gathers_bytes_then_normalizes_to_the_same_bits_as_normalizing_first():
    frames = random_frames(6, 64, 96)
    pixel_values, (t, gh, gw) = patchify(frames, GEOMETRY)
    tp, p, m = GEOMETRY.temporal_patch_size, GEOMETRY.patch_size, GEOMETRY.merge_size
    mean = torch.tensor(GEOMETRY.image_mean).mul(255.0).view(3, 1, 1)
    std = torch.tensor(GEOMETRY.image_std).mul(255.0).view(3, 1, 1)
    first = (torch.from_numpy(frames).permute(0, 3, 1, 2).float() - mean) / std  # (T, 3, h, w)
    first = first.view(t, tp, 3, gh // m, m, p, gw // m, m, p).permute(0, 3, 6, 4, 7, 2, 1, 5, 8)
    assert torch.equal(pixel_values, first.reshape(t * gh * gw, 3 * tp * p * p))


def test_patchify_puts_a_pixel_in_its_row_and_column():
    frames = np.zeros((4, 64, 96, 3), dtype=np.uint8)
    frames[3, 40, 70, 1] = 255  # frame 3 = second of pair 1; patch (2, 4) = merge block (1, 2), top-left
    pixel_values, _ = patchify(frames, GEOMETRY)
    rows, cols = torch.nonzero(pixel_values == 1.0, as_tuple=True)
    # row: pair 1 (24 rows each) + block 1*3+2 (4 rows each) + inner 0; column: channel 1, frame 1, y 8, x 6.
    assert (rows.tolist(), cols.tolist()) == ([24 + 5 * 4], [1 * 512 + 1 * 256 + 8 * 16 + 6])


def test_patchify_normalizes_to_minus_one_one():
    frames = np.zeros((2, 32, 32, 3), dtype=np.uint8)
    frames[..., 1] = 255
    frames[..., 2] = 51
    pixel_values, _ = patchify(frames, GEOMETRY)
    by_channel = pixel_values.view(-1, 3, 512)
    assert torch.all(by_channel[:, 0] == -1.0) and torch.all(by_channel[:, 1] == 1.0)
    torch.testing.assert_close(by_channel[:, 2], torch.full_like(by_channel[:, 2], -0.6))


def test_patchify_pads_an_odd_frame_count_with_the_last_frame():
    frames = random_frames(3, 32, 64)
    pixel_values, grid = patchify(frames, GEOMETRY)
    assert grid == (2, 2, 4)
    restored = unpatchify(pixel_values, grid, GEOMETRY)
    torch.testing.assert_close(restored[:3], normalized(frames))
    torch.testing.assert_close(restored[3], restored[2])


def test_patchify_rejects_sizes_off_the_grid():
    with pytest.raises(ValueError, match="multiples of 32"):
        patchify(random_frames(2, 48, 64), GEOMETRY)


def test_preprocess_video_pairs_timestamps():
    video = preprocess_video(random_frames(4, 64, 64), [0.0, 0.5, 1.0, 1.6], GEOMETRY)
    assert video.item.modality == "video" and video.item.grid_thw == (2, 4, 4)
    assert video.pair_timestamps == pytest.approx((0.25, 1.3))
    odd = preprocess_video(random_frames(5, 32, 32), [0.0, 1.0, 2.0, 3.0, 4.0], GEOMETRY)
    assert odd.item.grid_thw[0] == 3 and odd.pair_timestamps == pytest.approx((0.5, 2.5, 4.0))
    with pytest.raises(ValueError, match="timestamps"):
        preprocess_video(random_frames(4, 32, 32), [0.0, 1.0], GEOMETRY)


def test_preprocess_image_is_one_frame_repeated_over_a_pair():
    image = random_frames(1, 100, 150)[0]
    item = preprocess_image(image, GEOMETRY, min_pixels=32 * 32, max_pixels=256 * 256)
    h, w = image_size(100, 150, GEOMETRY, min_pixels=32 * 32, max_pixels=256 * 256)
    assert item.modality == "image" and item.grid_thw == (1, h // 16, w // 16)
    frames = unpatchify(item.pixel_values, item.grid_thw, GEOMETRY)
    torch.testing.assert_close(frames[0], frames[1])
    torch.testing.assert_close(frames[0], normalized(resize_frames(image[None], (h, w))[0]))


# ---------------------------------------------------------------------------------------------
# Prompt


def video_inputs(pairs: int = 3, height: int = 64, width: int = 96):
    timestamps = [0.25 * i for i in range(2 * pairs)]
    return preprocess_video(random_frames(2 * pairs, height, width), timestamps, GEOMETRY)


def image_item(height: int = 64, width: int = 64):
    image = random_frames(1, height, width)[0]
    return preprocess_image(image, GEOMETRY, min_pixels=32 * 32, max_pixels=height * width)


def ids_of(tokenizer, token: str) -> int:
    return tokenizer.convert_tokens_to_ids(token)


def test_video_prompt_expansion(tokenizer):
    video = video_inputs(pairs=3, height=64, width=96)
    inputs = build_chat_inputs(tokenizer, "What moves?", videos=[video])
    assert isinstance(inputs, ChatInputs)
    t, h, w = video.item.grid_thw
    video_pads = inputs.input_ids == ids_of(tokenizer, "<|video_pad|>")
    assert int(video_pads.sum()) == t * h * w // 4 == 3 * 24 // 4

    # One marker per pair, at the pair's mean time, each opening its own block of h*w/4 pads;
    # the template's own vision start/end stay around the whole clip.
    block = r"<(\d+\.\d) seconds><\|vision_start\|>((?:<\|video_pad\|>)+)<\|vision_end\|>"
    blocks = re.findall(block, inputs.prompt_text)
    assert [seconds for seconds, _ in blocks] == ["0.1", "0.6", "1.1"]
    assert [pads.count("<|video_pad|>") for _, pads in blocks] == [6, 6, 6]
    assert "<|vision_start|><0.1 seconds><|vision_start|>" in inputs.prompt_text
    assert "<|vision_end|><|vision_end|>What moves?" in inputs.prompt_text


def test_token_tensors_match_the_prompt(tokenizer):
    inputs = build_chat_inputs(tokenizer, "What moves?", videos=[video_inputs()], images=[image_item()])
    length = inputs.input_ids.shape[1]
    for tensor in (inputs.input_ids, inputs.attention_mask, inputs.mm_token_type_ids):
        assert tensor.shape == (1, length) and tensor.dtype == torch.long
    assert torch.all(inputs.attention_mask == 1)
    assert tokenizer.decode(inputs.input_ids[0]) == inputs.prompt_text


def test_mm_token_type_ids_mark_exactly_the_pads(tokenizer):
    video, images = video_inputs(), [image_item(64, 64), image_item(32, 96)]
    inputs = build_chat_inputs(tokenizer, "Compare.", videos=[video], images=images)
    ids, types = inputs.input_ids, inputs.mm_token_type_ids
    assert torch.equal(types == 2, ids == ids_of(tokenizer, "<|video_pad|>"))
    assert torch.equal(types == 1, ids == ids_of(tokenizer, "<|image_pad|>"))
    assert int((types == 1).sum()) == sum(item.patches for item in images) // 4 == 4 + 3
    assert int((types == 2).sum()) == video.item.patches // 4
    assert set(types.unique().tolist()) == {0, 1, 2}


def test_spans_place_every_frame_pair_and_image_on_its_pads_in_item_order(tokenizer):
    """Two clips and an image: items numbered clips first; a clip has one span per frame pair,
    whose rows follow on from the previous pair's; every pad is in exactly one span."""
    clips, image = [video_inputs(pairs=3), video_inputs(pairs=2, height=32)], image_item(64, 32)
    inputs = build_chat_inputs(tokenizer, "Compare.", videos=clips, images=[image])
    assert inputs.grids == (("video", (3, 4, 6)), ("video", (2, 2, 6)), ("image", (1, 4, 2)))
    spans = inputs.spans
    assert [(span.item, span.row, span.length) for span in spans] == [
        (0, 0, 6), (0, 6, 6), (0, 12, 6), (1, 0, 3), (1, 3, 3), (2, 0, 2),
    ]
    covered = torch.zeros_like(inputs.input_ids[0], dtype=torch.bool)
    for span in spans:
        assert not covered[span.start : span.end].any()
        covered[span.start : span.end] = True
    assert torch.equal(covered, inputs.mm_token_type_ids[0] > 0)
    assert all(earlier.end < later.start for earlier, later in zip(spans, spans[1:]))  # markers between pairs


def test_a_tokenizer_that_merges_pads_is_refused(tokenizer):
    """Spans need one token per pad; a pad run of the wrong length means the tokenizer merged them."""
    from framewise.core.families.qwen3_vl.prompt import vision_spans

    inputs = build_chat_inputs(tokenizer, "What moves?", videos=[video_inputs(pairs=1)])
    grids = (("video", (1, 4, 8)),)  # 8 tokens expected where the prompt holds 6 pads
    assert vision_spans(inputs.mm_token_type_ids, grids, 4) is None
    assert vision_spans(inputs.mm_token_type_ids, inputs.grids, 4) == inputs.spans


def test_images_only_prompt(tokenizer):
    images = [image_item(64, 64), image_item(64, 128)]
    inputs = build_chat_inputs(tokenizer, "Which is wider?", videos=(), images=images)
    pad_runs = re.findall(r"<\|vision_start\|>((?:<\|image_pad\|>)+)<\|vision_end\|>", inputs.prompt_text)
    assert [run.count("<|image_pad|>") for run in pad_runs] == [4, 8]
    assert "seconds>" not in inputs.prompt_text and not torch.any(inputs.mm_token_type_ids == 2)


def test_text_only_prompt(tokenizer):
    inputs = build_chat_inputs(tokenizer, "Hello", videos=())
    assert inputs.prompt_text == "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n"
    assert not torch.any(inputs.mm_token_type_ids)


def test_history_turns_in_order_with_the_clip_in_the_first(tokenizer):
    history = [("What is red?", "A ball."), ("Where does it go?", "Left.")]
    inputs = build_chat_inputs(tokenizer, "And then?", videos=[video_inputs(pairs=1)], history=history)
    text = inputs.prompt_text
    turns = re.findall(r"<\|im_start\|>(\w+)\n(.*?)<\|im_end\|>", text, flags=re.S)
    assert [role for role, _ in turns] == ["user", "assistant", "user", "assistant", "user"]
    assert [body.split("<|vision_end|>")[-1] for _, body in turns] == [
        "What is red?", "A ball.", "Where does it go?", "Left.", "And then?"
    ]
    assert text.count("seconds>") == 1 and "<|video_pad|>" in turns[0][1]
    assert text.endswith("<|im_start|>assistant\n")


def test_unicode_question_round_trips(tokenizer):
    question = "¿Qué pasa aquí? 日本語の説明 🎬"
    inputs = build_chat_inputs(tokenizer, question, videos=[video_inputs(pairs=1)])
    assert question in inputs.prompt_text
    assert tokenizer.decode(inputs.input_ids[0]) == inputs.prompt_text


def test_reserved_markers_in_text_are_refused(tokenizer):
    with pytest.raises(FramewiseError, match="reserved marker"):
        build_chat_inputs(tokenizer, "what is <|video_pad|>?", videos=[video_inputs(pairs=1)])
    with pytest.raises(FramewiseError, match="reserved marker"):
        build_chat_inputs(tokenizer, "ok", videos=(), history=[("q", "a <|vision_start|>")])


def test_tokenizer_without_vision_tokens_is_a_model_error():
    plain = make_tokenizer(special_tokens=("<|endoftext|>", "<|im_start|>", "<|im_end|>"))
    with pytest.raises(ModelLoadError, match="no <\\|vision_start\\|> token"):
        build_chat_inputs(plain, "Hi", videos=())


def test_template_that_drops_the_clip_is_a_model_error():
    text_only = make_tokenizer(
        chat_template="{%- for m in messages -%}{{ m.role }}{%- endfor -%}{{ 'assistant' }}"
    )
    with pytest.raises(ModelLoadError, match="chat template placed 0 clip"):
        build_chat_inputs(text_only, "Hi", videos=[video_inputs(pairs=1)])


def test_readers_resize_each_kept_frame_on_one_torch_thread_and_the_count_is_put_back(monkeypatch):
    """Beside FFmpeg's decoder threads, torch's OpenMP workers spin between per-frame resizes and
    take the cores the decoder needs; the reader's resampler runs on the calling thread alone."""
    from framewise.core.families.qwen3_vl import processor

    seen: list[int] = []
    real = processor.resize_frames

    def counting(frames, size):
        seen.append(torch.get_num_threads())
        return real(frames, size)

    monkeypatch.setattr(processor, "resize_frames", counting)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        frame = np.random.default_rng(0).integers(0, 256, (1, 64, 96, 3), dtype=np.uint8)
        resized = processor.video_frame_sizing(SamplingSettings()).resize(frame, (32, 48))
        after = torch.get_num_threads()
    finally:
        torch.set_num_threads(before)

    assert seen == [1] and after == 2
    np.testing.assert_array_equal(resized, real(frame, (32, 48)))
