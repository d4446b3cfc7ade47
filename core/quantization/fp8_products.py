"""The products the dense decoder passes call for FP8 linear layers: in a prefill, FP8 tensor cores
where the card has them, else the weight dequantized (:func:`~framewise.core.quantization.matmul.fp8_linear`);
in a decode step, the weight dequantized in torch ops, or the FP8 matrix-vector kernels
(:mod:`framewise.core.kernels.fp8_gemv`), whose activations stay unquantized."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import ClassVar, Literal

import torch

from framewise.core.kernels.e4m3 import BLOCK_SIZE
from framewise.core.quantization.matmul import fp8_linear
from framewise.core.quantization.weight_format import Norm, StepProducts


@dataclass(frozen=True)
class Fp8Products:
    """Products with e4m3 weights and float32 scales of ``scheme`` ((N, 1) per channel,
    (ceil(N/128), ceil(K/128)) per 128x128 block)."""

    scheme: Literal["block", "channel"]
    weight_dtype: ClassVar[str] = "fp8"
    has_step_kernels: ClassVar[bool] = True

    def stackable(self, rows: Sequence[int]) -> bool:
        """Block scales stack only when every layer but the last fills whole blocks."""
        return self.scheme != "block" or all(count % BLOCK_SIZE == 0 for count in rows[:-1])

    def prefill(
        self, x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor | None, *,
        norm: Norm | None = None, silu_mul: bool = False,
    ) -> torch.Tensor:
        assert scale is not None
        return fp8_linear(x, weight, scale, self.scheme, norm=norm, silu_mul=silu_mul)

    def step(
        self, x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor | None, *,
        norm: Norm | None = None, silu_mul: bool = False,
    ) -> torch.Tensor:
        assert scale is not None
        return fp8_linear(x, weight, scale, self.scheme, path="dequantize", norm=norm, silu_mul=silu_mul)

    def step_kernels(self, kernels: ModuleType) -> StepProducts:
        """The FP8 gemv kernels; the gate/up kernel forms ``silu(gate) * up`` itself."""
        from framewise.core.kernels import fp8_gemv

        def mlp(hidden, post_norm, gate_up, gate_up_scale, down, down_scale, eps):
            activation = fp8_gemv.fp8_rms_norm_silu_gate_up(hidden, post_norm, gate_up, gate_up_scale, eps)
            return fp8_gemv.fp8_linear_residual(activation, down, down_scale, hidden)

        return StepProducts(fp8_gemv.fp8_rms_norm_linear, fp8_gemv.fp8_linear_residual, mlp)


FP8_PRODUCTS = {"block": Fp8Products("block"), "channel": Fp8Products("channel")}
