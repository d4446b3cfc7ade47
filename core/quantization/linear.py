"""``Fp8Linear``: a linear layer whose weight is held in e4m3 with its scales."""

from __future__ import annotations

from typing import Literal

import torch
from torch import nn

from framewise.core.quantization.fp8 import quantize
from framewise.core.quantization.fp8_products import FP8_PRODUCTS, Fp8Products
from framewise.core.quantization.matmul import MatmulPath, fp8_linear


class Fp8Linear(nn.Module):
    """Stands in for an ``nn.Linear``: ``weight`` e4m3 (out_features, in_features), ``weight_scale``
    float32 ((out_features, 1) per channel, (ceil(out/128), ceil(in/128)) per 128x128 block), and
    the bias, if any, in the activations' dtype.

    The weight and scale are buffers, not parameters: they take no gradient, and code that reads a
    model's dtype from its parameters keeps seeing the activations' dtype. ``forward`` takes
    (..., in_features) and returns (..., out_features) in the input's dtype, through FP8 tensor
    cores where the card has them, else by dequantizing the weight to the input's dtype
    (:func:`~framewise.core.quantization.matmul.fp8_linear`). ``path`` forces one of the two.
    ``products`` are what the dense decoder passes multiply its stacked weights with.
    """

    weight: torch.Tensor
    weight_scale: torch.Tensor

    def __init__(
        self,
        weight: torch.Tensor,
        weight_scale: torch.Tensor,
        scheme: Literal["block", "channel"],
        bias: torch.Tensor | None = None,
        path: MatmulPath | None = None,
    ) -> None:
        super().__init__()
        self.out_features, self.in_features = weight.shape
        self.scheme = scheme
        self.path = path
        self.register_buffer("weight", weight)
        self.register_buffer("weight_scale", weight_scale.float())
        self.bias = None if bias is None else nn.Parameter(bias, requires_grad=False)

    @classmethod
    def from_linear(cls, linear: nn.Linear, scheme: Literal["block", "channel"]) -> Fp8Linear:
        """Quantize an ``nn.Linear``'s weight (on its own device) into a new layer."""
        weight, scales = quantize(linear.weight.detach(), scheme)
        bias = None if linear.bias is None else linear.bias.detach()
        return cls(weight, scales, scheme, bias)

    @property
    def products(self) -> Fp8Products:
        return FP8_PRODUCTS[self.scheme]

    def _apply(self, fn, recurse=True):  # type: ignore[no-untyped-def]
        """Moves between devices as any module does, but keeps the e4m3 weight and its float32
        scales through a dtype cast (``model.to(torch.bfloat16)``), which would otherwise turn
        them into full-size bf16 tensors."""
        weight, scale = self.weight, self.weight_scale
        super()._apply(fn, recurse)
        if self.weight.dtype != weight.dtype:
            self.weight = weight.to(self.weight.device)
        if self.weight_scale.dtype != scale.dtype:
            self.weight_scale = scale.to(self.weight_scale.device)
        return self

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return fp8_linear(x, self.weight, self.weight_scale, self.scheme, self.bias, self.path)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, scheme={self.scheme}"
