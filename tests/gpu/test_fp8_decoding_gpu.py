"""FP8 language weights through the Qwen3-VL decode path on CUDA: the step through the FP8 gemv
kernels (hardware e4m3 and the bit-decoding path Ampere takes) against the same step in torch
ops, the prefill through FP8 tensor cores and through dequantized weights, and building the
step's stacked weights without a memory transient (bf16 and FP8)."""

from __future__ import annotations

import pytest
import torch
from transformers import Qwen3VLForConditionalGeneration

from framewise.core.decoding import Decoder
from framewise.core.decoding.kv_cache import StaticKVCache
from framewise.core.families.qwen3_vl.language import Qwen3VLLanguageModel
from framewise.core.loading import load_model
from framewise.core.quantization.linear import Fp8Linear
from framewise.core.quantization.matmul import FORCE_PATH_VARIABLE
from framewise.core.settings import ModelSettings
from training.demo_model import build_demo_config, build_demo_tokenizer, special_token_ids

pytestmark = pytest.mark.gpu
pytest.importorskip("triton", reason="the decode step kernels need Triton")

PROMPT = torch.tensor([[5, 17, 99, 3, 250, 61, 7, 401]])
STEPS = 6
STEP_TOKENS = (42, 7, 313, 99, 5, 600)


@pytest.fixture(scope="module")
def demo_fp8() -> torch.nn.Module:
    loaded = load_model(ModelSettings(source="demo", device="cuda", dtype="fp8"))
    assert loaded.dtype == torch.bfloat16
    return loaded.model


def step_logits(language: Qwen3VLLanguageModel, steps: int = STEPS) -> torch.Tensor:
    """Logits (steps + 1, vocab) of a prefill of PROMPT and ``steps`` decode steps of the fixed
    tokens STEP_TOKENS (the same inputs whatever the logits, so that paths compare step by step)."""
    cache = StaticKVCache(language.layers, language.kv_heads, language.head_dim, 64, torch.bfloat16, language.device)
    count = PROMPT.shape[1]
    with torch.inference_mode():
        logits = [language.prefill(cache, 0, PROMPT, torch.arange(count).expand(3, count), None)]
        for position, token in zip(range(count, count + steps), STEP_TOKENS):
            at = torch.tensor([position], device=language.device)
            cache.view_length = position + 1
            logits.append(language.step(cache, language.embed(torch.tensor([[token]])), at, at))
    return torch.cat(logits)


def relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got - want).norm() / want.norm())


@pytest.mark.parametrize("native", ["1", "0"], ids=["hardware-e4m3", "bit-decoded-e4m3"])
def test_fp8_step_kernels_match_the_torch_step(demo_fp8, native: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if native == "1" and torch.cuda.get_device_capability() < (8, 9):
        pytest.skip("hardware e4m3 conversion needs compute capability 8.9")
    monkeypatch.setenv("FRAMEWISE_FP8_NATIVE", native)
    kernels = Qwen3VLLanguageModel(demo_fp8)
    assert kernels.step_kernels and kernels._dense[0].qkv.dtype == torch.float8_e4m3fn
    torch_ops = Qwen3VLLanguageModel(demo_fp8, step_kernels=False)
    got, want = step_logits(kernels), step_logits(torch_ops)
    # the same e4m3 weights and bf16 activations: the two differ by summation order and roundings
    assert relative_error(got, want) < 2e-2
    assert (got.argmax(-1) == want.argmax(-1)).float().mean() >= 6 / 7


def test_prefill_through_fp8_tensor_cores_matches_dequantized_weights(demo_fp8, monkeypatch: pytest.MonkeyPatch) -> None:
    if torch.cuda.get_device_capability() < (8, 9):
        pytest.skip("FP8 tensor cores need compute capability 8.9")
    results = {}
    for path in ("tensor_cores", "dequantize"):
        monkeypatch.setenv(FORCE_PATH_VARIABLE, path)
        results[path] = step_logits(Qwen3VLLanguageModel(demo_fp8), steps=0)
    # activations quantized to e4m3 per token cost a few per cent of the logits, not the answer
    error = relative_error(results["tensor_cores"], results["dequantize"])
    assert 0 < error < 0.1
    assert torch.equal(results["tensor_cores"].argmax(-1), results["dequantize"].argmax(-1))


def mid_sized_model(fp8: bool) -> torch.nn.Module:
    """A random Qwen3-VL on CUDA in bf16 whose language model is ~2.2 GB (24 layers of 2048 hidden),
    its decoder linear layers quantized one at a time when ``fp8``."""
    tokenizer = build_demo_tokenizer()
    config = build_demo_config(
        len(tokenizer), special_token_ids(tokenizer), depth=1, deepstack_visual_indexes=(0,),
        text_hidden=2048, text_intermediate=6144, text_layers=24, text_heads=16, text_kv_heads=4, head_dim=128,
    )
    with torch.device("cuda"):
        model = Qwen3VLForConditionalGeneration._from_config(config, dtype=torch.bfloat16).eval()
    if fp8:
        for name, module in list(model.model.language_model.layers.named_modules()):
            if isinstance(module, torch.nn.Linear):
                parent, _, child = name.rpartition(".")
                setattr(model.model.language_model.layers.get_submodule(parent), child, Fp8Linear.from_linear(module, "channel"))
    torch.cuda.synchronize()
    return model


@pytest.mark.parametrize("fp8", [False, True], ids=["bf16", "fp8"])
def test_building_the_decoder_holds_no_second_copy(fp8: bool) -> None:
    model = mid_sized_model(fp8)
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    language = Qwen3VLLanguageModel(model)
    decoder = Decoder(language, 2048, 256, use_graphs=True)  # the KV cache and the step and prefill graphs
    assert decoder.graphs_enabled, decoder.graphs_reason
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    steady, peak = torch.cuda.memory_reserved(), torch.cuda.max_memory_reserved()
    assert language.fused_steps
    layer = model.model.language_model.layers[3]
    assert layer.mlp.up_proj.weight.data_ptr() == language._dense[3].gate_up[layer.mlp.gate_proj.out_features].data_ptr()
    assert peak <= 1.05 * steady, f"peak {peak / 2**20:.0f} MiB against {steady / 2**20:.0f} MiB steady"
    decoder.close()
    del decoder, language, model
    torch.cuda.empty_cache()
