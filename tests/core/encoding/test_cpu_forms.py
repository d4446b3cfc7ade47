"""The vision tower's patch embedding as one product on the CPU computes what the convolution
computes, and loading a model onto the CPU puts it in its tower with the parameters and their names
unchanged."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from framewise.core.encoding.cpu_forms import PatchProduct, use_cpu_forms
from framewise.core.encoding.eager import EagerVisionEncoder
from framewise.core.families.qwen3_vl.adapter import Qwen3VLAdapter
from framewise.core.families.qwen3_vl.geometry import VisionGeometry
from framewise.core.families.qwen3_vl.processor import preprocess_video
from framewise.core.loading import load_model
from framewise.core.settings import ModelSettings


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
    assert use_cpu_forms(tower) == 2
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
    ours = EagerVisionEncoder(Qwen3VLAdapter(tower)).encode([item]).items[0]
    theirs = EagerVisionEncoder(Qwen3VLAdapter(stock.model.visual)).encode([item]).items[0]
    torch.testing.assert_close(ours.embeds, theirs.embeds, rtol=1e-5, atol=1e-5)
    for mine, stocks in zip(ours.deepstack, theirs.deepstack, strict=True):
        torch.testing.assert_close(mine, stocks, rtol=1e-5, atol=1e-5)
