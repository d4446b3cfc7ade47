"""Qwen3.5's memory estimate: against what loading a tiny checkpoint holds on the CPU (float and
quantized on load) and the decoder state it makes, and at the released shapes (parameter counts
as published, keys and values of one layer in four)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch

from framewise.core.decoding import Decoder
from framewise.core.families import family_for
from framewise.core.families.qwen3_5.memory import HybridShape
from framewise.core.families.qwen3_vl.memory import (
    CLIP_PREFILL_TOKENS,
    PREFILL_TOKENS,
    EncoderShape,
    prefill_pool_bytes,
)
from framewise.core.loading import load_model, pick_tower_dtype
from framewise.core.quantization.kv_formats import E4M3_KV_CACHE, FLOAT_KV_CACHE
from framewise.core.quantization.registry import choose_weight_format
from framewise.core.seam import LanguageLayout
from framewise.core.settings import ModelSettings
from tests.core.families.qwen3_5.checkpoint import write_tiny_checkpoint
from tests.core.families.qwen3_vl.test_memory_estimate import stored_bytes
from tests.core.families.released_configs import RELEASED

QWEN3_5 = family_for("qwen3_5")
CPU = torch.device("cpu")
FLOAT = choose_weight_format({}, "bfloat16", CPU)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    return write_tiny_checkpoint(tmp_path_factory.mktemp("memory") / "tiny", seed=3)


def estimate(config: dict, setting: str, context: int, budgets=(), device_type: str = "cuda",
             activations: torch.dtype = torch.bfloat16):
    weight_format = choose_weight_format(config, setting, CPU)
    tower = pick_tower_dtype(setting, torch.device(device_type), activations)
    return QWEN3_5.estimate_memory(config, weight_format, activations, context, budgets, device_type, tower_dtype=tower)


@pytest.mark.parametrize("setting", ["bfloat16", "fp8"])
def test_the_weights_are_what_loading_holds(checkpoint: Path, setting: str) -> None:
    model = load_model(ModelSettings(source=str(checkpoint), device="cpu", dtype=setting))
    config = json.loads((checkpoint / "config.json").read_text())
    assert estimate(config, setting, 64, device_type="cpu", activations=model.dtype).weights == stored_bytes(model.model)


def test_the_state_is_what_the_decoder_holds_with_its_snapshots(checkpoint: Path) -> None:
    """Keys and values of the one full-attention layer for the context, and four copies (the live
    state, three snapshots) of the two linear layers' convolution and recurrent states."""
    language = load_model(ModelSettings(source=str(checkpoint), device="cpu", dtype="float32")).adapter.language_model()
    decoder = Decoder(language, 320, 16, use_graphs=False)  # a whole number of the decoder's 64-token alignment
    config = json.loads((checkpoint / "config.json").read_text())
    parts = estimate(config, "float32", 320, device_type="cpu", activations=torch.float32)
    assert parts.kv_cache == decoder.state_bytes
    assert decoder.state.kv.nbytes == 320 * 2 * 2 * 64 * 4  # one layer's keys and values: 2 heads of 64, float32
    assert parts.decode_graphs == parts.encoder_graphs == parts.allocator_rounding == 0


def test_released_sizes_count_the_published_parameters() -> None:
    """Qwen3.5-9B: 8.95 billion parameters in the language model (its GGUF's count), untied head;
    Qwen3.5-4B: 4.54 billion in all; Qwen3-VL-4B: 4.438 billion in all."""
    for name, billions, part in [("Qwen3.5-9B", 8.95, "language"), ("Qwen3.5-4B", 4.54, "all"),
                                 ("Qwen3-VL-4B", 4.438, "all")]:
        config = RELEASED[name]
        family = family_for(config["model_type"])
        weights = family.estimate_memory(config, choose_weight_format(config, "bfloat16", CPU), torch.bfloat16, 0, (),
                                         "cpu").weights / 2
        if part == "language":
            weights -= EncoderShape.from_config(config["vision_config"]).parameters()
        assert weights == pytest.approx(billions * 1e9, rel=0.002), name


def bf16_bytes_per_token(layout: LanguageLayout) -> int:
    return FLOAT_KV_CACHE.bytes_per_token(layout.kv_layers, layout.kv_heads, layout.head_dim, torch.bfloat16)


def test_the_9b_keeps_32_kib_a_token_against_144_for_qwen3_vl_8b() -> None:
    nine_b, eight_b = RELEASED["Qwen3.5-9B"], RELEASED["Qwen3-VL-8B"]
    layout = QWEN3_5.language_layout(nine_b)
    assert layout.describe() == "24 linear-attention + 8 full-attention layers"
    assert bf16_bytes_per_token(layout) == 32 * 1024
    assert bf16_bytes_per_token(family_for("qwen3_vl").language_layout(eight_b)) == 144 * 1024
    growth = estimate(nine_b, "bfloat16", 2_000, device_type="cpu").kv_cache - estimate(
        nine_b, "bfloat16", 1_000, device_type="cpu").kv_cache
    assert growth == 1_000 * 32 * 1024
    # The fixed part: 24 linear layers' states (the convolution's 8,192 channels x 4 taps in bf16,
    # 32 heads of 128 x 128 in float32), live and in three snapshots.
    fixed = estimate(nine_b, "bfloat16", 0, device_type="cpu").kv_cache
    assert fixed == 4 * 24 * (8192 * 4 * 2 + 32 * 128 * 128 * 4)


def test_at_a_hundred_thousand_tokens_the_9b_keeps_a_quarter_of_the_8bs_cache() -> None:
    """A hundred thousand tokens of context: 3.1 GiB of keys and values on the 9B (and 0.2 GiB of
    linear states), 13.7 GiB on Qwen3-VL-8B."""
    nine_b = estimate(RELEASED["Qwen3.5-9B"], "fp8", 100_000, [256, 16384])
    eight_b = family_for("qwen3_vl").estimate_memory(
        RELEASED["Qwen3-VL-8B"], choose_weight_format(RELEASED["Qwen3-VL-8B"], "fp8", CPU), torch.bfloat16, 100_000,
        [256, 16384], "cuda",
    )
    fixed = estimate(RELEASED["Qwen3.5-9B"], "fp8", 0, device_type="cpu").kv_cache
    assert nine_b.kv_cache - fixed == 100_000 * 32 * 1024 and eight_b.kv_cache == 100_000 * 144 * 1024
    assert eight_b.total - nine_b.total > 8 * 2**30


def test_graph_parts_grow_with_their_settings() -> None:
    nine_b = RELEASED["Qwen3.5-9B"]
    short, long = estimate(nine_b, "fp8", 4096, [256, 1024]), estimate(nine_b, "fp8", 8192, [256, 1024, 16384])
    assert long.encoder_graphs > short.encoder_graphs > 0 and long.decode_graphs >= short.decode_graphs > 0
    # The shared pool holds at least a first question's clip pass through its largest graph.
    clip_pass = prefill_pool_bytes(HybridShape.from_config(nine_b), torch.bfloat16, CLIP_PREFILL_TOKENS,
                                   CLIP_PREFILL_TOKENS, FLOAT_KV_CACHE)
    assert short.decode_graphs > clip_pass
    # Over a long context the follow-up prefill's mask sets it: one bf16 row of 256 a position, and
    # its copy for the 4 query heads of each key/value head four more.
    far, farther = (estimate(nine_b, "fp8", context, [256]) for context in (200_000, 204_096))
    assert farther.decode_graphs - far.decode_graphs == 4096 * (256 * 2 + 4 * 256 * 2)
    assert long.total == long.weights + long.kv_cache + long.encoder_graphs + long.decode_graphs + long.allocator_rounding


def test_with_an_e4m3_cache_a_follow_up_graph_reads_back_a_segment_however_long_the_context() -> None:
    """The 9B's follow-up prefill graph (256 tokens; 16 query heads over 4 key/value heads of 256)
    over an e4m3 cache attends a segment of positions at a time: past one segment its pool grows
    only by the mask's bf16 row of 256 a position, and beside the float cache's it holds one
    layer's keys and values read back over a segment (bf16, and one float32 product) and the
    segments' merge (the float32 output, a segment's output and its regrouped copy) instead of the
    mask's copy for the group beyond a segment. At 77,056 positions that leaves the first
    question's clip graph to set the shared pool."""
    nine_b = RELEASED["Qwen3.5-9B"]
    shape = HybridShape.from_config(nine_b)

    def follow_up(context: int, cache_format) -> int:
        return prefill_pool_bytes(shape, torch.bfloat16, PREFILL_TOKENS, context, cache_format)

    # a cache read back 8,192 positions at a time (the default reads the context whole for now)
    segmented = dataclasses.replace(E4M3_KV_CACHE, read_segment=8192)
    segment = segmented.read_segment
    assert follow_up(8 * segment + 4096, segmented) - follow_up(8 * segment, segmented) == 4096 * 256 * 2
    context = 77_056
    read_back = 4 * segment * 256 * (2 * 2 + 4)
    smaller_mask_copy = 4 * 256 * (context - segment) * 2
    merge = 256 * 16 * 256 * (4 + 2 * 2)
    float_cache = follow_up(context, FLOAT_KV_CACHE)
    assert follow_up(context, segmented) - float_cache == read_back - smaller_mask_copy + merge
    # the segment is the format's: a format reading back the whole context counts all of it
    whole = dataclasses.replace(segmented, read_segment=context)
    assert follow_up(context, whole) - float_cache == 4 * context * 256 * (2 * 2 + 4)
    clip_pass = prefill_pool_bytes(shape, torch.bfloat16, CLIP_PREFILL_TOKENS, 2 * CLIP_PREFILL_TOKENS, segmented)
    weight_format = choose_weight_format(nine_b, "fp8", CPU)
    parts = QWEN3_5.estimate_memory(nine_b, weight_format, torch.bfloat16, context, [256], "cuda",
                                    cache_format=segmented)
    assert follow_up(context, segmented) < clip_pass < parts.decode_graphs < follow_up(context, whole)


def test_an_open_clip_keeps_one_merged_row_a_token() -> None:
    """The tower has no deepstack layers: 4,096 bf16 values a video token at the 9B's width,
    against four times that on Qwen3-VL-8B."""
    nine_b = QWEN3_5.estimate_memory(RELEASED["Qwen3.5-9B"], FLOAT, torch.bfloat16, 4096, (), "cpu", 12_288)
    eight_b = family_for("qwen3_vl").estimate_memory(RELEASED["Qwen3-VL-8B"], FLOAT, torch.bfloat16, 4096, (), "cpu",
                                                     12_288)
    assert nine_b.clip_features == 12_288 * 4096 * 2 and eight_b.clip_features == 4 * nine_b.clip_features
    assert nine_b.total == nine_b.at_load + nine_b.clip_features
