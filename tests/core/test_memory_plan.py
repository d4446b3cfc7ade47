"""The memory check before loading: the estimate from config.json against the device's memory,
and the settings the refusal names (on the CPU, the CUDA device's memory is stood in)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from framewise.core import loading
from framewise.core.errors import ModelLoadError
from framewise.core.settings import AppSettings
from tests.core.families.qwen3_vl.test_memory_estimate import EIGHT_B
from tests.core.families.released_configs import RELEASED

GIB = 2**30


@pytest.fixture()
def eight_b(tmp_path: Path) -> AppSettings:
    """Settings naming a folder with the 8B config.json (no weights: the estimate needs none)."""
    (tmp_path / "config.json").write_text(json.dumps({**EIGHT_B, "model_type": "qwen3_vl"}))
    settings = AppSettings().replace("model", source=str(tmp_path), device="cuda", dtype="bfloat16")
    return settings.replace("decoding", max_context_tokens=16384)


def on_a_card_with(monkeypatch: pytest.MonkeyPatch, free: int) -> None:
    monkeypatch.setattr(loading, "pick_device", lambda name: torch.device("cuda"))
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (free, 80 * GIB))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: 0)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *args, **kwargs: True)


def test_the_estimate_follows_the_dtype(eight_b: AppSettings, monkeypatch: pytest.MonkeyPatch) -> None:
    on_a_card_with(monkeypatch, 80 * GIB)
    bf16 = loading.estimate_memory(eight_b)
    fp8 = loading.estimate_memory(eight_b.replace("model", dtype="fp8"))
    assert bf16.weights > 14 * GIB > fp8.weights > 7 * GIB  # the 8B, its input embedding on the host
    assert bf16.kv_cache == fp8.kv_cache == 16384 * 36 * 2 * 8 * 128 * 2
    assert "weights" in bf16.describe() and "KV cache" in bf16.describe()
    loading.check_memory_fits(eight_b)  # fits an 80 GiB card


def test_a_model_too_large_is_refused_with_the_dtype_that_fits(eight_b: AppSettings, monkeypatch: pytest.MonkeyPatch) -> None:
    on_a_card_with(monkeypatch, 80 * GIB)
    bf16, fp8 = loading.estimate_memory(eight_b).total, loading.estimate_memory(eight_b.replace("model", dtype="fp8")).total
    on_a_card_with(monkeypatch, (bf16 + fp8) // 2)
    with pytest.raises(ModelLoadError, match=r"in bfloat16 needs about .* GiB.*To fit, choose dtype fp8") as refusal:
        loading.check_memory_fits(eight_b)
    assert "encoder's CUDA graphs off" not in str(refusal.value)  # it alone would not fit
    loading.check_memory_fits(eight_b.replace("model", dtype="fp8"))


def test_nothing_fits_names_the_cpu(eight_b: AppSettings, monkeypatch: pytest.MonkeyPatch) -> None:
    on_a_card_with(monkeypatch, 2 * GIB)
    with pytest.raises(ModelLoadError, match="No smaller setting fits.*device cpu"):
        loading.check_memory_fits(eight_b)


def test_the_cpu_is_not_checked(eight_b: AppSettings) -> None:
    loading.check_memory_fits(eight_b.replace("model", device="cpu"))


def test_the_settings_page_line_words_the_estimate_or_why_there_is_none(eight_b: AppSettings) -> None:
    line = loading.memory_estimate_text(eight_b.replace("model", device="cpu", dtype="fp8"))
    assert line.startswith("A Qwen3-VL checkpoint: 36 full-attention layers, 288.0 KiB of keys and values a token.")
    assert " Needs about" in line and line.endswith("on the CPU.")  # float32 keys and values on the CPU
    missing = loading.memory_estimate_text(eight_b.replace("model", source="/nonexistent/model", device="cpu"))
    assert missing.startswith("No memory estimate:") and "does not exist" in missing


def test_a_source_without_a_config_is_left_to_the_load_to_report(eight_b: AppSettings, monkeypatch: pytest.MonkeyPatch) -> None:
    on_a_card_with(monkeypatch, 2 * GIB)
    loading.check_memory_fits(eight_b.replace("model", source="/nonexistent/model"))


def test_on_a_gpu_the_settings_page_line_says_what_is_available(eight_b: AppSettings, monkeypatch: pytest.MonkeyPatch) -> None:
    on_a_card_with(monkeypatch, 80 * GIB)
    line = loading.memory_estimate_text(eight_b)
    assert line.startswith("A Qwen3-VL checkpoint: 36 full-attention layers, 144.0 KiB of keys and values a token.")
    assert " Needs about" in line and line.endswith("on the GPU, of the 80.0 GiB available there.")


def test_the_settings_page_line_gives_the_refusal_before_the_load_would(eight_b: AppSettings, monkeypatch: pytest.MonkeyPatch) -> None:
    """Too little memory shows, before the settings are applied, what the load would refuse with."""
    on_a_card_with(monkeypatch, 80 * GIB)
    bf16, fp8 = loading.estimate_memory(eight_b).total, loading.estimate_memory(eight_b.replace("model", dtype="fp8")).total
    on_a_card_with(monkeypatch, (bf16 + fp8) // 2)
    line = loading.memory_estimate_text(eight_b)
    with pytest.raises(ModelLoadError) as refusal:
        loading.check_memory_fits(eight_b)
    assert line.endswith(" " + str(refusal.value)) and "To fit, choose dtype fp8" in line


def test_a_qwen3_5_checkpoint_is_named_with_its_layers_and_its_estimate(tmp_path: Path, monkeypatch) -> None:
    """The Qwen3.5-9B shapes: one layer in four keeps keys and values; refused as a Qwen3-VL would be."""
    (tmp_path / "config.json").write_text(json.dumps(RELEASED["Qwen3.5-9B"]))
    settings = AppSettings().replace("model", source=str(tmp_path), device="cuda", dtype="bfloat16")
    on_a_card_with(monkeypatch, 80 * GIB)
    line = loading.memory_estimate_text(settings)
    needed = loading.estimate_memory(settings).total / GIB
    assert line.startswith("A Qwen3.5 checkpoint: 24 linear-attention + 8 full-attention layers, 32.0 KiB of keys and "
                           f"values a token. Needs about {needed:.1f} GiB")
    on_a_card_with(monkeypatch, 16 * GIB)
    with pytest.raises(ModelLoadError, match="To fit, choose dtype fp8"):
        loading.check_memory_fits(settings)


def test_a_long_clip_too_large_for_the_card_is_offered_the_released_pixel_budget(
    eight_b: AppSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """2,048 frames at 224k video tokens: the context of such a clip is what does not fit (its 7 GiB
    of features wait in the host's memory), so the refusal offers Qwen3-VL's released budget, not a
    context the clip cannot fit."""
    on_a_card_with(monkeypatch, 80 * GIB)
    long = eight_b.replace("model", dtype="fp8").replace("decoding", max_context_tokens=0)
    long = long.replace("sampling", max_frames=2048, max_pixels=224 * 1024 * 2048)
    released = long.replace("sampling", max_pixels=24576 * 1024)
    needed, fitting = loading.estimate_memory(long), loading.estimate_memory(released)
    assert needed.clip_features == 0
    on_a_card_with(monkeypatch, (needed.total + fitting.total) // 2)
    with pytest.raises(ModelLoadError) as refusal:
        loading.check_memory_fits(long)
    assert "lower sampling max pixels to 25,165,824 (12,288 video tokens" in str(refusal.value)
    assert "lower the context to 4096" not in str(refusal.value)  # one question about the clip needs more
    loading.check_memory_fits(released)
