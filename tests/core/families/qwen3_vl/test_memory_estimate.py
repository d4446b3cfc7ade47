"""The memory estimate against what the demo model actually takes, in bf16 and quantized on load
to FP8 (the demo model's own Qwen3-VL architecture, on the CPU)."""

from __future__ import annotations

import json
import re

import pytest
import torch
from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

from framewise.core.decoding.kv_cache import StaticKVCache
from framewise.core.families import family_for
from framewise.core.families.qwen3_vl import memory
from framewise.core.loading import pick_tower_dtype
from framewise.core.quantization import loading
from framewise.core.quantization.formats import read_tensor_headers
from framewise.core.quantization.linear import Fp8Linear
from framewise.core.quantization.registry import choose_weight_format
from framewise.core.resources import asset_path

DEMO = asset_path("demo_model")
DEMO_CONFIG = json.loads((DEMO / "config.json").read_text())
LANGUAGE_LINEAR = re.compile(r"model\.language_model\.layers\.\d+\.(self_attn|mlp)\.\w+_proj$")
CPU = torch.device("cpu")
# The weight format of each dtype setting, for a float checkpoint.
FORMATS = {setting: choose_weight_format(DEMO_CONFIG, setting, CPU) for setting in ("bfloat16", "fp8")}
# 8B shapes (Qwen3-VL-8B's config), for sizes that must come out as published
EIGHT_B = {
    "tie_word_embeddings": False,
    "text_config": {"hidden_size": 4096, "intermediate_size": 12288, "num_hidden_layers": 36, "num_attention_heads": 32,
                    "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936},
    "vision_config": {"hidden_size": 1152, "intermediate_size": 4304, "depth": 27, "out_hidden_size": 4096,
                      "patch_size": 16, "temporal_patch_size": 2, "in_channels": 3, "num_position_embeddings": 2304,
                      "deepstack_visual_indexes": [8, 16, 24], "spatial_merge_size": 2, "num_heads": 16},
}


def estimate_for(config: dict, setting: str, context_tokens: int, budgets, device_type: str = "cuda",
             activations: torch.dtype = torch.bfloat16, clip_tokens: int = 0):
    """The family's estimate with the weight format and the tower's dtype the dtype ``setting`` chooses."""
    tower = pick_tower_dtype(setting, torch.device(device_type), activations)
    return family_for("qwen3_vl").estimate_memory(
        config, FORMATS[setting], activations, context_tokens, budgets, device_type, clip_tokens, tower_dtype=tower
    )


def stored_bytes(model: torch.nn.Module) -> int:
    """Bytes of the model's distinct weights (a tied head counted once; rotary tables left out)."""
    tensors = {tensor.data_ptr(): tensor for tensor in model.state_dict().values()}
    return sum(tensor.numel() * tensor.element_size() for tensor in tensors.values())


def demo_model(quantize: bool) -> Qwen3VLForConditionalGeneration:
    """The demo model in bf16, its language linear layers quantized on load or not."""
    torch.manual_seed(0)
    model = Qwen3VLForConditionalGeneration(Qwen3VLConfig.from_dict(DEMO_CONFIG)).to(torch.bfloat16).eval()
    report = loading.load_checkpoint(
        model, [DEMO / "model.safetensors"], FORMATS["fp8" if quantize else "bfloat16"], CPU, torch.bfloat16,
        keep_float=lambda name: not LANGUAGE_LINEAR.fullmatch(name),
    )
    model.tie_weights()
    assert report.unexpected == [] and report.mismatched == [] and report.missing == []
    assert len(report.quantized_on_load) == (42 if quantize else 0)  # 6 layers x 7 projections
    return model


def test_bf16_weights_are_the_checkpoints_bytes() -> None:
    stored = sum(2 * torch.Size(header.shape).numel() for header in read_tensor_headers([DEMO / "model.safetensors"]).values())
    estimate = estimate_for(DEMO_CONFIG, "bfloat16", 1024, ())
    assert estimate.weights == stored == stored_bytes(demo_model(quantize=False))


def test_fp8_weights_are_what_quantize_on_load_holds() -> None:
    model = demo_model(quantize=True)
    assert sum(isinstance(module, Fp8Linear) for module in model.modules()) == 42
    assert estimate_for(DEMO_CONFIG, "fp8", 1024, ()).weights == stored_bytes(model)


def test_demo_model_quantized_on_load_answers_like_bf16() -> None:
    tokens = torch.tensor([[826, 5, 17, 300, 42, 99, 7, 128, 64, 3]])
    with torch.no_grad():
        reference = demo_model(quantize=False)(input_ids=tokens).logits.float()
        quantized = demo_model(quantize=True)(input_ids=tokens).logits.float()
    assert float((quantized - reference).norm() / reference.norm()) < 0.05
    assert (quantized.argmax(-1) == reference.argmax(-1)).float().mean() >= 0.8


def test_on_the_cpu_fp8_keeps_the_rest_in_float32_and_the_decoder_captures_no_graphs() -> None:
    from framewise.core.loading import load_model
    from framewise.core.settings import ModelSettings

    model = load_model(ModelSettings(source="demo", device="cpu", dtype="fp8")).model
    estimate = estimate_for(DEMO_CONFIG, "fp8", 4096, (), device_type="cpu", activations=torch.float32)
    assert estimate.weights == stored_bytes(model)
    assert estimate.kv_cache == StaticKVCache(6, 2, 64, 4096, torch.float32, torch.device("cpu")).nbytes
    assert estimate.decode_graphs == 0 < estimate_for(DEMO_CONFIG, "fp8", 4096, ()).decode_graphs


def test_kv_cache_is_the_caches_own_size() -> None:
    estimate = estimate_for(DEMO_CONFIG, "fp8", 4096, ())
    cache = StaticKVCache(6, 2, 64, 4096, torch.bfloat16, torch.device("cpu"))
    assert estimate.kv_cache == cache.nbytes == 6 * 2 * 2 * 64 * 4096 * 2


def test_8b_shapes() -> None:
    """Qwen3-VL-8B: 8.77 billion parameters (8.19 in the language model), about 7.6 GB of FP8
    language weights; the KV cache takes 144 KiB a token."""
    decoder = memory.DecoderShape.from_config(EIGHT_B["text_config"], tied_embeddings=False)
    encoder = memory.EncoderShape.from_config(EIGHT_B["vision_config"])
    language = decoder.layers * sum(n * k for n, k in decoder.linear_shapes()) + decoder.other_parameters()
    assert language == pytest.approx(8.19e9, rel=0.005)
    assert language + encoder.parameters() == pytest.approx(8.77e9, rel=0.005)
    bf16 = estimate_for(EIGHT_B, "bfloat16", 32768, [256, 16384])
    fp8 = estimate_for(EIGHT_B, "fp8", 32768, [256, 16384])
    assert bf16.weights - fp8.weights == pytest.approx(decoder.layers * sum(n * k for n, k in decoder.linear_shapes()), rel=0.001)
    assert fp8.kv_cache == bf16.kv_cache == 32768 * 36 * 2 * 8 * 128 * 2
    assert fp8.total < bf16.total and fp8.encoder_graphs == bf16.encoder_graphs


@pytest.mark.parametrize("tied", [False, True])
def test_on_a_gpu_an_untied_input_embedding_is_held_by_the_host(tied: bool) -> None:
    """The 8B's input embedding (151,936 x 4,096 in bf16) is not the card's when it is not the output
    head; tied to it, the card holds the one table."""
    config = {**EIGHT_B, "tie_word_embeddings": tied}
    card = estimate_for(config, "fp8", 4096, (), device_type="cuda").weights
    cpu = estimate_for(config, "fp8", 4096, (), device_type="cpu").weights  # everything is the host's
    assert cpu - card == (0 if tied else 151936 * 4096 * 2)


@pytest.mark.parametrize("dtype", ["bfloat16", "fp8"])
def test_graph_parts_grow_with_their_settings(dtype: str) -> None:
    small = estimate_for(EIGHT_B, dtype, 8192, [256, 1024])
    large = estimate_for(EIGHT_B, dtype, 8192, [256, 1024, 16384])
    assert large.encoder_graphs > small.encoder_graphs > 0
    assert estimate_for(EIGHT_B, dtype, 8192, ()).encoder_graphs == 0
    assert large.total == large.weights + large.kv_cache + large.encoder_graphs + large.decode_graphs + large.allocator_rounding


def test_an_open_clip_adds_its_features_to_the_estimate_not_to_what_loading_takes() -> None:
    """4,096 video tokens on the 8B: a merged row and three deepstack rows of 4,096 bf16 values a
    token, 128 MiB, which wait on the device."""
    without = estimate_for(EIGHT_B, "fp8", 80_000, [256, 16384])
    with_clip = estimate_for(EIGHT_B, "fp8", 80_000, [256, 16384], clip_tokens=4096)
    assert with_clip.clip_features == 4096 * 4 * 4096 * 2 == 128 * 2**20
    assert with_clip.at_load - with_clip.allocator_rounding == without.at_load - without.allocator_rounding
    assert with_clip.total == with_clip.at_load + with_clip.clip_features
    assert "the largest clip's features 128.0 MiB" in with_clip.describe()


def test_a_long_clips_features_wait_in_the_host_memory_beside_a_gpu() -> None:
    """2,048 frames at 64k video tokens on the 8B: 2 GiB of features, past what waits on a CUDA
    device; on the CPU the host's memory is the device's."""
    on_gpu = estimate_for(EIGHT_B, "fp8", 80_000, [256, 16384], clip_tokens=65536)
    on_cpu = estimate_for(EIGHT_B, "fp8", 80_000, (), device_type="cpu", clip_tokens=65536)
    assert on_gpu.clip_features == 0 and on_gpu.total == on_gpu.at_load
    assert on_cpu.clip_features == 65536 * 4 * 4096 * 2 == 2 * 2**30


def test_encoder_graphs_share_the_largest_budgets_buffers() -> None:
    """Every budget's graph reads views of one set of buffers sized for the largest budget, so
    smaller budgets beside it add nothing."""
    alone = estimate_for(EIGHT_B, "fp8", 8192, [16384])
    with_smaller = estimate_for(EIGHT_B, "fp8", 8192, [256, 1024, 4096, 16384])
    assert with_smaller.encoder_graphs == alone.encoder_graphs
    assert estimate_for(EIGHT_B, "fp8", 8192, [4096]).encoder_graphs < alone.encoder_graphs


def test_decode_graphs_grow_with_the_context_the_prefill_attends_over() -> None:
    """A follow-up prefill's mask holds one bf16 row of 256 a position, and its copy for the 4
    query heads of each key/value head at the 8B shapes four more; no keys or values are copied."""
    short = estimate_for(EIGHT_B, "bfloat16", 4096, ())
    long = estimate_for(EIGHT_B, "bfloat16", 8192, ())
    assert long.decode_graphs - short.decode_graphs == 4096 * (256 * 2 + 4 * 256 * 2)


def test_on_a_gpu_the_allocator_rounding_is_a_share_of_the_parts() -> None:
    estimate = estimate_for(EIGHT_B, "fp8", 2816, [256, 16384])
    parts = estimate.weights + estimate.kv_cache + estimate.encoder_graphs + estimate.decode_graphs
    assert estimate.allocator_rounding == pytest.approx(parts * memory.ALLOCATOR_ROUNDING, abs=1)
    assert estimate.total == parts + estimate.allocator_rounding
    assert "allocator rounding" in estimate.describe()
    assert estimate_for(EIGHT_B, "fp8", 2816, (), device_type="cpu").allocator_rounding == 0
