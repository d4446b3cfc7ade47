"""Qwen3-VL with FP8 language weights on the CPU: the demo model quantized on load, and small
checkpoints written in each FP8 format, loaded through the family and stepped by the decoder."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from framewise.core.decoding.dense_layers import step_weights_note
from framewise.core.decoding.kv_cache import StaticKVCache
from framewise.core.encoding.cpu_forms import cpu_multiplies_bf16
from framewise.core.errors import QuantizationFormatError
from framewise.core.families.qwen3_vl.language import Qwen3VLLanguageModel
from framewise.core.loading import DEMO_MODEL_DIR, estimate_memory, load_model
from framewise.core.quantization.linear import Fp8Linear
from framewise.core.settings import AppSettings, EncoderSettings, ModelSettings
from framewise.core.settings import SamplingSettings
from safetensors.torch import save_file
from tests.core.families.qwen3_vl.test_memory_estimate import stored_bytes
from tests.core.quantization.fp8_checkpoints import BLOCK_CONFIG, CHANNEL_CONFIG, block_fp8, channel_fp8
from training.evaluate import HELD_OUT_SEEDS, Answerer, normalize

CLIPS = 3


def demo_in(folder: Path, fmt: str) -> Path:
    """The demo checkpoint copied into ``folder`` with its decoder layers' linear weights stored in
    ``fmt`` (``"block"``: Qwen's ``weight_scale_inv``; ``"channel"``: compressed-tensors)."""
    for item in DEMO_MODEL_DIR.iterdir():
        if item.suffix != ".safetensors":
            shutil.copy(item, folder / item.name)
    stored = {}
    for name, tensor in load_file(DEMO_MODEL_DIR / "model.safetensors").items():
        module = name.removesuffix(".weight")
        if name.startswith("model.language_model.layers.") and name.endswith("_proj.weight"):
            if fmt == "block":
                stored[name], stored[f"{module}.weight_scale_inv"] = block_fp8(tensor)
            else:
                stored[name], stored[f"{module}.weight_scale"] = channel_fp8(tensor)
        else:
            stored[name] = tensor
    save_file({name: tensor.contiguous() for name, tensor in stored.items()}, folder / "model.safetensors")
    config = json.loads((DEMO_MODEL_DIR / "config.json").read_text())
    config["quantization_config"] = BLOCK_CONFIG if fmt == "block" else CHANNEL_CONFIG
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def fp8_linears(model: torch.nn.Module) -> list[str]:
    return [name for name, module in model.named_modules() if isinstance(module, Fp8Linear)]


def test_fp8_setting_quantizes_only_the_decoder_layers() -> None:
    loaded = load_model(ModelSettings(source="demo", device="cpu", dtype="fp8"))
    names = fp8_linears(loaded.model)
    assert loaded.weight_format.weight_dtype == "fp8" and loaded.dtype == torch.float32  # the activations' dtype on the CPU
    layers = loaded.model.config.text_config.num_hidden_layers
    assert len(names) == 7 * layers
    assert all(name.startswith("model.language_model.layers.") for name in names)
    # the tower in bfloat16 on a CPU that multiplies it natively (test_cpu_forms.py), else float32
    tower = torch.bfloat16 if cpu_multiplies_bf16() else torch.float32
    assert loaded.model.model.visual.blocks[0].attn.qkv.weight.dtype == tower
    assert loaded.model.lm_head.weight is loaded.model.model.language_model.embed_tokens.weight
    assert loaded.model.generation_config.eos_token_id == [828, 826]  # the checkpoint's, as from_pretrained reads


@pytest.mark.parametrize("dtype", ["float32", "fp8"])
def test_every_loaded_parameter_is_frozen_whatever_the_dtype(dtype: str) -> None:
    """torch.compile guards on requires_grad: models loaded in one process must agree on it, or the
    fused encoder kernels are compiled again for each until the recompile limit leaves them eager."""
    model = load_model(ModelSettings(source="demo", device="cpu", dtype=dtype)).model
    assert not any(parameter.requires_grad for parameter in model.parameters())


def test_fused_fp8_step_matches_the_models_own_layers() -> None:
    from framewise.core.decoding.kv_cache import StaticKVCache

    model = load_model(ModelSettings(source="demo", device="cpu", dtype="fp8")).model
    fused, own = Qwen3VLLanguageModel(model), Qwen3VLLanguageModel(model, fused_steps=False)
    assert fused.fused_steps and fused._dense[0].qkv.dtype == torch.float8_e4m3fn
    assert step_weights_note(fused._dense) == " (FP8 weights)"  # how a GPU's kernel step is described
    # q/k/v are views into the stacked e4m3 matrix, not copies
    attention = model.model.language_model.layers[0].self_attn
    assert attention.k_proj.weight.data_ptr() == fused._dense[0].qkv[attention.q_proj.out_features].data_ptr()
    logits = []
    for language in (fused, own):
        cache = StaticKVCache(language.layers, language.kv_heads, language.head_dim, 16, torch.float32,
                              torch.device("cpu"))
        tokens = torch.tensor([[5, 17, 99]])
        language.prefill(cache, 0, tokens, torch.arange(3).expand(3, 3), None)
        logits.append(language.step(cache, language.embed(torch.tensor([[42]])), torch.tensor([3]), torch.tensor([3])))
    torch.testing.assert_close(logits[0], logits[1], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("source", ["quantized on load", "channel"])
def test_the_decoder_multiplies_by_the_stacks_the_loader_wrote(tmp_path: Path, source: str) -> None:
    """The FP8 loader writes q/k/v and gate/up as one tensor each; building the fused decoder finds
    them laid out and copies nothing (a copy would leave the loaded tensors' memory behind on a GPU)."""
    settings = (ModelSettings(source="demo", device="cpu", dtype="fp8") if source == "quantized on load" else
                ModelSettings(source=str(demo_in(tmp_path, source)), device="cpu", dtype="float32"))
    model = load_model(settings).model
    layers = model.model.language_model.layers
    loaded = [(layer.self_attn.q_proj, layer.mlp.gate_proj) for layer in layers]
    pointers = [(q.weight.data_ptr(), q.weight_scale.data_ptr(), gate.weight.data_ptr(), gate.weight_scale.data_ptr())
                for q, gate in loaded]
    dense = Qwen3VLLanguageModel(model)._dense
    assert [(layer.qkv.data_ptr(), layer.qkv_scale.data_ptr(), layer.gate_up.data_ptr(), layer.gate_up_scale.data_ptr())
            for layer in dense] == pointers
    attention = layers[0].self_attn
    rows = attention.q_proj.out_features + attention.k_proj.out_features + attention.v_proj.out_features
    assert dense[0].qkv.shape == (rows, attention.q_proj.in_features)
    assert torch.equal(dense[0].qkv[-attention.v_proj.out_features :].view(torch.uint8),
                       attention.v_proj.weight.view(torch.uint8))


@pytest.mark.timeout(600)
def test_demo_model_in_fp8_answers_the_clips_as_in_full_precision() -> None:
    encoder = EncoderSettings(use_graphs=False)
    answers = {}
    for dtype in ("float32", "fp8"):
        answerer = Answerer(ModelSettings(source="demo", device="cpu", dtype=dtype), encoder)
        answers[dtype] = [normalize(a.answer) for seed in HELD_OUT_SEEDS[:CLIPS]
                          for a in answerer.answer_all(seed, SamplingSettings(), paraphrased=False)]
    agree = sum(a == b for a, b in zip(answers["float32"], answers["fp8"]))
    assert len(answers["fp8"]) >= 8
    assert agree >= 0.9 * len(answers["fp8"]), (answers["float32"], answers["fp8"])


@pytest.mark.parametrize("fmt", ["block", "channel"])
def test_fp8_checkpoint_of_each_format_loads_and_answers_like_its_source(tmp_path: Path, fmt: str) -> None:
    folder = demo_in(tmp_path, fmt)
    loaded = load_model(ModelSettings(source=str(folder), device="cpu", dtype="auto"))
    names = fp8_linears(loaded.model)
    assert loaded.weight_format.weight_dtype == "fp8" and loaded.weight_format.scheme == fmt  # the checkpoint's own, with no fp8 setting
    assert names and all(name.startswith("model.language_model.layers.") for name in names)
    reference_loaded = load_model(ModelSettings(source="demo", device="cpu", dtype="float32"))
    assert not reference_loaded.weight_format.quantized
    reference = reference_loaded.model
    tokens = torch.tensor([[5, 17, 99, 3]])
    with torch.no_grad():
        got = loaded.model(input_ids=tokens).logits
        want = reference(input_ids=tokens).logits
    assert torch.nn.functional.cosine_similarity(got.flatten(), want.flatten(), dim=0) > 0.99


@pytest.mark.parametrize("fmt", ["block", "channel"])
@pytest.mark.parametrize("dtype", ["auto", "bfloat16", "fp8"])
def test_the_estimate_of_an_fp8_checkpoint_is_what_loading_it_holds(tmp_path: Path, fmt: str, dtype: str) -> None:
    """The estimate takes the activations' dtype the setting gives (not float32 whatever it says
    on the CPU) and the checkpoint's own scales."""
    settings = AppSettings().replace("model", source=str(demo_in(tmp_path, fmt)), device="cpu", dtype=dtype)
    settings = settings.replace("decoding", max_context_tokens=1024)
    loaded = load_model(settings.model)
    estimate = estimate_memory(settings)
    assert estimate.weights == stored_bytes(loaded.model)
    text = loaded.model.config.text_config
    kv_cache = StaticKVCache.bytes_needed(text.num_hidden_layers, text.num_key_value_heads, text.head_dim, 1024, loaded.dtype)
    assert estimate.kv_cache == kv_cache


def test_unsupported_quantization_is_a_typed_error_with_advice(tmp_path: Path) -> None:
    folder = demo_in(tmp_path, "channel")
    config = json.loads((folder / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "awq", "bits": 4}
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(QuantizationFormatError, match="awq.*dtype fp8"):
        load_model(ModelSettings(source=str(folder), device="cpu"))
