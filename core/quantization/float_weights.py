"""Float weights: linear layers stay ``nn.Linear`` in the activations' dtype (bfloat16, float16 or
float32, as the dtype setting picks), what every float checkpoint loads as unless a setting
chooses a format that quantizes it."""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType

import torch
import torch.nn.functional as F

from framewise.core.quantization.weight_format import Norm, StepProducts, WeightFormat, product_input


class FloatProducts:
    """Products with float weights: ``F.linear``, in a prefill and a step alike; the step kernels
    are the dense step's own matrix-vector products (they take no scale)."""

    weight_dtype = None
    has_step_kernels = True

    def stackable(self, rows: Sequence[int]) -> bool:
        return True

    def prefill(
        self, x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor | None, *,
        norm: Norm | None = None, silu_mul: bool = False,
    ) -> torch.Tensor:
        return F.linear(product_input(x, norm, silu_mul), weight)

    step = prefill

    def step_kernels(self, kernels: ModuleType) -> StepProducts:
        """The bf16 step kernels; the down kernel forms ``silu(gate) * up`` as it reads the gate/up
        product."""

        def norm_linear(x, norm, weight, scale, eps):
            return kernels.rms_norm_linear(x, norm, weight, eps)

        def linear_residual(x, weight, scale, residual):
            return kernels.linear_residual(x, weight, residual)

        def mlp(hidden, post_norm, gate_up, gate_up_scale, down, down_scale, eps):
            activation = kernels.rms_norm_linear(hidden, post_norm, gate_up, eps)
            return kernels.linear_residual(activation, down, hidden, silu_mul=True)

        return StepProducts(norm_linear, linear_residual, mlp)


FLOAT_PRODUCTS = FloatProducts()


class FloatWeights(WeightFormat):
    """The checkpoint's linear layers as ``nn.Linear`` in the activations' dtype."""

    name = "float weights"
    products = FLOAT_PRODUCTS


FLOAT_WEIGHTS = FloatWeights()
