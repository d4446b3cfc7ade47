"""The FP8 weight formats: e4m3 weights with float32 scales in :class:`~framewise.core.quantization.linear.Fp8Linear`
layers, read from an FP8 checkpoint in either of its layouts (:mod:`.formats`) or quantized while a
float checkpoint loads (dtype setting ``fp8``, per-channel scales: :mod:`.fp8` says why).

Only the layers the family quantizes become FP8; a layer a checkpoint stores in FP8 that the family
keeps in floating point (a vision tower's) is dequantized once after loading.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Literal

import torch
from torch import nn

from framewise.core.kernels.e4m3 import E4M3
from framewise.core.quantization.formats import CheckpointLayout, read_checkpoint_layout, scale_shape
from framewise.core.quantization.fp8 import QUANTIZE_ON_LOAD_SCHEME, dequantize, quantize_onto
from framewise.core.quantization.fp8_products import FP8_PRODUCTS
from framewise.core.quantization.linear import Fp8Linear
from framewise.core.quantization.weight_format import Storage, WeightFormat, linear_bias

# The quant_method values whose FP8 layouts :func:`~.formats.read_checkpoint_layout` reads.
FP8_METHODS = ("fp8", "compressed-tensors")
SCALE_BYTES = 4


class Fp8Weights(WeightFormat):
    """What the FP8 formats share: e4m3 (N, K) weights with float32 scales of ``scheme``."""

    weight_dtype = "fp8"
    scheme: ClassVar[Literal["block", "channel"]]

    @property
    def products(self):  # type: ignore[override]
        return FP8_PRODUCTS[self.scheme]

    def storage(self, weight_shape: tuple[int, int]) -> Storage:
        return (E4M3, weight_shape), (torch.float32, scale_shape(self.scheme, weight_shape))

    def float_linear(self, module: nn.Module, dtype: torch.dtype) -> nn.Linear:
        assert isinstance(module, Fp8Linear)
        linear = nn.Linear(module.in_features, module.out_features, bias=module.bias is not None, device="meta", dtype=dtype)
        linear.weight = nn.Parameter(dequantize(module.weight, module.weight_scale, module.scheme, dtype), requires_grad=False)
        if module.bias is not None:
            linear.bias = nn.Parameter(module.bias.to(dtype), requires_grad=False)
        return linear

    def linear_bytes(self, weight_shape: tuple[int, int], activations: torch.dtype) -> int:
        rows, columns = weight_shape
        return rows * columns + math.prod(scale_shape(self.scheme, weight_shape)) * SCALE_BYTES


class Fp8Checkpoint(Fp8Weights):
    """An FP8 checkpoint's linear layers as it stores them, in the ``layout`` its config.json declares."""

    def __init__(self, layout: CheckpointLayout) -> None:
        self.layout = layout
        self.name = layout.description

    @classmethod
    def declared(cls, config: Mapping[str, Any]) -> WeightFormat | None:
        quantization = config.get("quantization_config")
        if not isinstance(quantization, Mapping) or quantization.get("quant_method") not in FP8_METHODS:
            return None
        layout = read_checkpoint_layout(config)
        return cls(layout) if layout.scheme == cls.scheme else None

    def stored_linear(
        self, module: nn.Linear, weight: torch.Tensor, scale: torch.Tensor, device: torch.device,
        out: tuple[torch.Tensor, torch.Tensor] | None,
    ) -> Fp8Linear:
        scale = scale.reshape(self.layout.scale_shape(tuple(weight.shape)))
        if out is None:
            weight, scale = weight.to(device), scale.to(device, torch.float32)
        else:
            out[0].copy_(weight)
            out[1].copy_(scale)
            weight, scale = out
        return Fp8Linear(weight, scale, self.scheme, linear_bias(module))


class BlockFp8Checkpoint(Fp8Checkpoint):
    """Qwen's block-wise FP8 (``weight_scale_inv``), or compressed-tensors' 128x128-block strategy."""

    scheme = "block"


class ChannelFp8Checkpoint(Fp8Checkpoint):
    """compressed-tensors' per-channel FP8 (``FP8_DYNAMIC``, ``weight_scale``)."""

    scheme = "channel"


class Fp8QuantizedOnLoad(Fp8Weights):
    """A float checkpoint whose linear layers (those the family does not keep in floating point)
    are quantized to e4m3 with per-channel scales as they load."""

    name = "FP8 quantized on load"
    setting = "fp8"
    scheme = QUANTIZE_ON_LOAD_SCHEME

    def should_quantize(self, module_name: str, keep_float: Callable[[str], bool]) -> bool:
        return not keep_float(module_name)

    def quantized_linear(
        self, module: nn.Linear, weight: torch.Tensor, device: torch.device,
        out: tuple[torch.Tensor, torch.Tensor] | None,
    ) -> Fp8Linear:
        quantized, scales = quantize_onto(weight, self.scheme, device, out=out)
        return Fp8Linear(quantized, scales, self.scheme, linear_bias(module))
