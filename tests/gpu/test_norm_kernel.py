"""The Triton residual-add-and-layer-norm kernel against torch's add and ``F.layer_norm``, and the
fused forward's bias + tanh-GELU product (cuBLASLt's epilogue) against the written-out formula."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

pytestmark = pytest.mark.gpu
kernel = pytest.importorskip("framewise.core.kernels.add_layer_norm", reason="needs Triton")

from framewise.core.families.qwen3_vl.fused import _linear_gelu  # noqa: E402

DEVICE = "cuda"
EPS = 1e-6


def random_rows(rows: int, width: int, dtype: torch.dtype, seed: int):
    generator = torch.Generator(device=DEVICE).manual_seed(seed)
    hidden, delta = (torch.randn(rows, width, device=DEVICE, generator=generator).mul(4).to(dtype) for _ in range(2))
    weight, bias = (torch.randn(width, device=DEVICE, generator=generator).to(dtype) for _ in range(2))
    return hidden, delta, weight, bias


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(("rows", "width"), [(6272, 1152), (784, 1024), (37, 32), (5, 72), (0, 1152)])
def test_matches_add_then_layer_norm(dtype, rows, width):
    hidden, delta, weight, bias = random_rows(rows, width, dtype, seed=rows + width)
    total, normed = kernel.add_layer_norm(hidden, delta, weight, bias, EPS)
    expected_total = hidden + delta
    assert total.dtype == normed.dtype == dtype and total.is_contiguous() and normed.is_contiguous()
    # The sum is rounded once to the dtype, as torch's add rounds it: equal to the bit.
    assert torch.equal(total, expected_total)
    expected = F.layer_norm(expected_total, (width,), weight, bias, EPS)
    tolerance = {"rtol": 1e-5, "atol": 1e-5} if dtype == torch.float32 else {"rtol": 1.6e-2, "atol": 1.6e-2}
    torch.testing.assert_close(normed, expected, **tolerance)


def test_a_constant_row_normalises_to_the_bias_without_nan():
    hidden = torch.zeros(4, 1152, device=DEVICE, dtype=torch.bfloat16)
    weight, bias = torch.ones(1152, device=DEVICE, dtype=torch.bfloat16), torch.arange(1152, device=DEVICE).bfloat16()
    _, normed = kernel.add_layer_norm(hidden, hidden, weight, bias, EPS)
    assert torch.equal(normed, bias.expand(4, -1))


def test_the_operator_serves_a_compiled_function_at_two_row_counts():
    kernel.register_op()

    @torch.compile(dynamic=True)
    def add_norm(hidden, delta, weight, bias):
        return torch.ops.framewise.add_layer_norm(hidden, delta, weight, bias, EPS)

    for rows in (96, 784):
        hidden, delta, weight, bias = random_rows(rows, 1152, torch.bfloat16, seed=rows)
        total, normed = add_norm(hidden, delta, weight, bias)
        expected_total, expected_normed = kernel.add_layer_norm(hidden, delta, weight, bias, EPS)
        assert torch.equal(total, expected_total) and torch.equal(normed, expected_normed)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_linear_gelu_in_the_epilogue_matches_the_formula(dtype):
    generator = torch.Generator(device=DEVICE).manual_seed(3)
    x = torch.randn(784, 1152, device=DEVICE, generator=generator).to(dtype)
    weight = (torch.randn(4304, 1152, device=DEVICE, generator=generator) / 34).to(dtype)
    bias = torch.randn(4304, device=DEVICE, generator=generator).to(dtype)
    expected = F.gelu(F.linear(x.double(), weight.double(), bias.double()), approximate="tanh")
    out = _linear_gelu(x, weight, bias, "tanh")
    error = float((out.double() - expected).norm() / expected.norm())
    # float32: full-precision products (TF32 is off by default); bfloat16: one rounding of the output.
    assert error < (1e-5 if dtype == torch.float32 else 8e-3)
