"""The vision tower's patch embedding as one product on the CPU computes what the convolution
computes, and loading a model onto the CPU puts it in its tower with the parameters and their names
unchanged; the tower runs in bfloat16 exactly where the CPU multiplies it natively and the dtype
setting leaves the choice, its features then within bfloat16's rounding of the float32 tower's."""

from __future__ import annotations

import copy
import platform
from pathlib import Path

import numpy as np
import pytest
import torch

from framewise.core.encoding import cpu_forms
from framewise.core.encoding.cpu_forms import PatchProduct, cpu_multiplies_bf16, cpu_tower_dtype, use_cpu_forms
from framewise.core.encoding.defs import EncodedItem, VisionItem
from framewise.core.encoding.eager import EagerVisionEncoder
from framewise.core.families.qwen3_vl.adapter import Qwen3VLAdapter
from framewise.core.families.qwen3_vl.geometry import VisionGeometry
from framewise.core.families.qwen3_vl.processor import preprocess_video
from framewise.core.loading import load_model, pick_dtype
from framewise.core.settings import DTYPES, ModelSettings
from tests.core.families.qwen3_vl.references import tiny_tower

# bfloat16 keeps 8 significant bits: one rounding errs by at most this much, relatively.
BF16_ROUNDOFF = 2.0**-8
# The tower in bfloat16 against float32, as the norm of the difference over the float32 features'
# norm: its roundings (each product's result, each norm's and activation's) are independent, so
# their errors add in quadrature, not in full: the tiny tower measured about 1.6 roundoffs, the demo
# tower's features 0.7 to 1.1 on five random clips. Four allow for other seeds and clips. Below a quarter, the
# features went through no bfloat16 rounding at all (float32's own is 65,536 times finer).
BF16_TOLERANCE = 4 * BF16_ROUNDOFF
BF16_AT_LEAST = BF16_ROUNDOFF / 4


def test_the_patch_product_is_the_convolution_whose_kernel_is_its_stride() -> None:
    torch.manual_seed(0)
    conv = torch.nn.Conv3d(3, 24, kernel_size=(2, 16, 16), stride=(2, 16, 16))
    patches = torch.randn(37, 3, 2, 16, 16)
    product = PatchProduct(conv)
    assert product.weight is conv.weight and product.bias is conv.bias
    with torch.no_grad():
        torch.testing.assert_close(product(patches), conv(patches), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="takes"):
        product(torch.randn(2, 3, 2, 32, 32))  # four patches' worth: the convolution's, not a product's


def test_only_patch_embeddings_are_replaced() -> None:
    tower = torch.nn.Sequential(
        torch.nn.Conv3d(3, 8, kernel_size=2, stride=2),
        torch.nn.Conv3d(3, 8, kernel_size=3, stride=1, padding=1),  # overlapping windows: a real convolution
        torch.nn.Conv3d(3, 8, kernel_size=2, stride=2, padding=1),
        torch.nn.Sequential(torch.nn.Conv3d(3, 8, kernel_size=(2, 4, 4), stride=(2, 4, 4))),
    )
    assert use_cpu_forms(tower, torch.float32) == 2
    assert [type(module) for module in tower[:3]] == [PatchProduct, torch.nn.Conv3d, torch.nn.Conv3d]
    assert isinstance(tower[3][0], PatchProduct)


def test_a_model_loaded_onto_the_cpu_encodes_with_them_as_the_stock_tower_does() -> None:
    loaded = load_model(ModelSettings(source="demo", device="cpu", dtype="float32"))
    tower = loaded.family.vision_tower(loaded.model)
    assert not any(isinstance(module, torch.nn.Conv3d) for module in tower.modules())
    assert isinstance(tower.patch_embed.proj, PatchProduct)
    stock = type(loaded.model)._from_config(loaded.model.config, dtype=torch.float32).eval()
    stock.load_state_dict(loaded.model.state_dict())  # the same names and shapes
    geometry = VisionGeometry.from_vision_config(stock.config.vision_config)
    frames = np.random.default_rng(0).integers(0, 256, (8, 64, 96, 3), dtype=np.uint8)
    item = preprocess_video(frames, [index * 0.5 for index in range(8)], geometry).item
    ours, theirs = encoded(tower, item), encoded(stock.model.visual, item)
    torch.testing.assert_close(ours.embeds, theirs.embeds, rtol=1e-5, atol=1e-5)
    for mine, stocks in zip(ours.deepstack, theirs.deepstack, strict=True):
        torch.testing.assert_close(mine, stocks, rtol=1e-5, atol=1e-5)


# model.dtype -> the tower's dtype on the CPU, with and without native bfloat16 products.
TOWER_DTYPES = {
    "auto": (torch.bfloat16, torch.float32),
    "float32": (torch.float32, torch.float32),
    "bfloat16": (torch.bfloat16, torch.bfloat16),
    "float16": (torch.float16, torch.float16),
    "fp8": (torch.bfloat16, torch.float32),  # the language model's linear layers quantized, activations float32
}


@pytest.mark.parametrize("native", [True, False], ids=["native bf16", "no native bf16"])
def test_the_tower_runs_in_bfloat16_where_the_cpu_multiplies_it_and_the_setting_leaves_the_choice(
    monkeypatch: pytest.MonkeyPatch, native: bool
) -> None:
    monkeypatch.setattr(cpu_forms, "cpu_multiplies_bf16", lambda: native)
    assert set(TOWER_DTYPES) == set(DTYPES)
    chosen = {setting: cpu_tower_dtype(setting, pick_dtype(setting, torch.device("cpu"))) for setting in DTYPES}
    assert chosen == {setting: dtypes[0 if native else 1] for setting, dtypes in TOWER_DTYPES.items()}


@pytest.mark.skipif(
    platform.machine() not in ("x86_64", "AMD64") or not Path("/proc/cpuinfo").is_file(),
    reason="compares with the CPU flags Linux lists for an x86 CPU",
)
def test_native_bfloat16_is_what_the_cpu_flags_say() -> None:
    flags = {
        flag for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags") for flag in line.split()
    }
    assert cpu_multiplies_bf16() == bool(flags & {"avx512_bf16", "amx_bf16"})


def test_a_tower_in_bfloat16_gives_float32_features_within_its_rounding_of_the_float32_tower() -> None:
    torch.manual_seed(0)
    tower = tiny_tower()
    reference = copy.deepcopy(tower)
    use_cpu_forms(tower, torch.bfloat16)
    assert {parameter.dtype for parameter in tower.parameters()} == {torch.bfloat16}
    assert {buffer.dtype for buffer in tower.buffers()} == {torch.float32}  # the rotary frequencies
    item = VisionItem(torch.randn(2 * 16 * 24, 3 * 2 * 16 * 16), (2, 16, 24), "video")  # type: ignore[arg-type]
    assert_within_bf16_rounding(encoded(tower, item), encoded(reference, item))


def test_the_demo_model_loaded_onto_a_cpu_with_native_bf16_encodes_in_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cpu_forms, "cpu_multiplies_bf16", lambda: True)
    fast = load_model(ModelSettings(source="demo", device="cpu", dtype="auto"))
    exact = load_model(ModelSettings(source="demo", device="cpu", dtype="float32"))
    assert fast.dtype == exact.dtype == torch.float32  # the language model's, untouched
    assert next(fast.family.vision_tower(fast.model).parameters()).dtype == torch.bfloat16
    assert next(exact.family.vision_tower(exact.model).parameters()).dtype == torch.float32
    geometry = VisionGeometry.from_vision_config(fast.model.config.vision_config)
    frames = np.random.default_rng(1).integers(0, 256, (8, 192, 320, 3), dtype=np.uint8)
    item = preprocess_video(frames, [index * 0.5 for index in range(8)], geometry).item
    towers = (fast.family.vision_tower(fast.model), exact.family.vision_tower(exact.model))
    assert_within_bf16_rounding(*(encoded(tower, item) for tower in towers))


def encoded(tower: torch.nn.Module, item: VisionItem) -> EncodedItem:
    return EagerVisionEncoder(Qwen3VLAdapter(tower)).encode([item]).items[0]


def assert_within_bf16_rounding(ours: EncodedItem, exact: EncodedItem) -> None:
    """Merged tokens and deepstack features, each (tokens, out_hidden): float32, and off the
    float32 tower's by between :data:`BF16_AT_LEAST` and :data:`BF16_TOLERANCE` of their norm."""
    assert len(ours.deepstack) == len(exact.deepstack) > 0
    for mine, reference in zip([ours.embeds, *ours.deepstack], [exact.embeds, *exact.deepstack], strict=True):
        assert mine.dtype == torch.float32
        error = float((mine - reference).norm() / reference.norm())
        assert BF16_AT_LEAST < error < BF16_TOLERANCE, f"relative error {error:.2e}"


def test_a_tower_run_in_bfloat16_takes_and_gives_what_it_did_before() -> None:
    """A family's adapter passes float32 inputs and gets float32 outputs whatever the tower runs in."""
    tower = torch.nn.Sequential(torch.nn.Linear(4, 3))
    rows = torch.randn(5, 4)
    expected = tower(rows)
    use_cpu_forms(tower, torch.bfloat16)
    out = tower(rows)
    assert tower[0].weight.dtype == torch.bfloat16 and out.dtype == torch.float32
    torch.testing.assert_close(out, expected, rtol=2 * BF16_ROUNDOFF, atol=2 * BF16_ROUNDOFF)
    assert not torch.equal(out, expected)  # it did run in bfloat16
