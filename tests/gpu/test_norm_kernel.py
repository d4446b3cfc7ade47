"""The Triton residual-add-and-layer-norm kernel against torch's add and ``F.layer_norm``; the
scaled RMS norm kernel (Qwen3.5's zero-centred norms, alone and after a residual add) and the
gated RMS norm kernel against the same norms as torch ops, bit for bit; and the fused forward's
bias + tanh-GELU product (cuBLASLt's epilogue) against the written-out formula."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

pytestmark = pytest.mark.gpu
kernel = pytest.importorskip("framewise.core.kernels.add_layer_norm", reason="needs Triton")

from framewise.core.families.qwen3_5.mixers import (  # noqa: E402
    add_zero_centred_rms_norm,
    gated_rms_norm,
    zero_centred_rms_norm,
)
from framewise.core.families.qwen3_vl.fused import _linear_gelu  # noqa: E402
from framewise.core.kernels.scaled_rms_norm import add_scaled_rms_norm, scaled_rms_norm  # noqa: E402

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


def zero_centred_inputs(rows: int, width: int, dtype: torch.dtype, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows (rows, width) of ``dtype`` and a float32 scale (width,) as 1 + a norm's weight."""
    generator = torch.Generator(device=DEVICE).manual_seed(seed)
    x = (torch.randn(rows, width, device=DEVICE, generator=generator) * 4).to(dtype)
    return x, torch.randn(width, device=DEVICE, generator=generator) * 0.3 + 1


SCALED_DTYPES = [torch.bfloat16, torch.float16, torch.float32]


# The kernel does what torch's vectorized CUDA norm does, operation for operation and in its order
# (core/kernels/scaled_rms_norm.py): the results are the same bits, not merely close.
@pytest.mark.parametrize("dtype", SCALED_DTYPES)
@pytest.mark.parametrize(("rows", "width"), [(1133, 4096), (7, 4096), (1, 4096), (18131, 256), (37, 256), (1, 256)])
def test_the_scaled_rms_norm_is_torchs_to_the_bit(dtype, rows, width):
    x, scale = zero_centred_inputs(rows, width, dtype, seed=rows + width)
    got = scaled_rms_norm(x, scale, EPS)
    assert got.dtype == dtype and got.is_contiguous()
    assert torch.equal(got, zero_centred_rms_norm(x, scale, EPS))


@pytest.mark.parametrize("dtype", SCALED_DTYPES)
def test_heads_read_out_of_a_stacked_product_are_normed_to_the_bit(dtype):
    """Qwen3.5's per-head norms: each head's query out of q_proj's (query, gate) halves, the keys out
    of a stacked product, read where they lie."""
    heads, kv_heads, head_dim, tokens = 16, 4, 256, 1133
    product, scale = zero_centred_inputs(tokens, (2 * heads + 2 * kv_heads) * head_dim + 64, dtype, seed=5)
    product = product[None]
    query = product[..., : 2 * heads * head_dim].view(1, tokens, heads, 2 * head_dim).chunk(2, dim=-1)[0]
    key = product[..., 2 * heads * head_dim : (2 * heads + kv_heads) * head_dim].view(1, tokens, kv_heads, head_dim)
    for heads_view in (query, key):
        assert torch.equal(scaled_rms_norm(heads_view, scale[:head_dim], EPS),
                           zero_centred_rms_norm(heads_view, scale[:head_dim], EPS))


@pytest.mark.parametrize("dtype", SCALED_DTYPES)
@pytest.mark.parametrize("rows", [1133, 33, 1])
def test_the_residual_add_and_its_scaled_norm_are_torchs_to_the_bit(dtype, rows):
    hidden, scale = zero_centred_inputs(rows, 4096, dtype, seed=rows)
    delta, _ = zero_centred_inputs(rows, 4096, dtype, seed=rows + 1)
    total, normed = add_scaled_rms_norm(hidden[None], delta[None], scale, EPS)
    expected_total, expected = add_zero_centred_rms_norm(hidden[None], delta[None], scale, EPS)
    assert torch.equal(total, expected_total) and torch.equal(normed, expected)


@pytest.mark.parametrize("dtype", SCALED_DTYPES)
@pytest.mark.parametrize(("rows", "dim"), [(1133 * 32, 128), (32, 128), (3, 100)])
def test_the_gated_rms_norm_kernel_is_torchs_to_the_bit(dtype, rows, dim):
    """Qwen3.5's gated norm (a prefill's rows, a decode step's) through its kernel, against the
    module's arithmetic as torch ops: the same sums, libdevice's expf as torch's SiLU computes it."""
    from framewise.core.kernels.gated_rms_norm import gated_rms_norm as kernel

    x, _ = zero_centred_inputs(rows, dim, dtype, seed=rows)
    gate, _ = zero_centred_inputs(rows, dim, dtype, seed=rows + 1)
    norm = torch.nn.Module()
    norm.weight = torch.nn.Parameter(torch.rand(dim, device=DEVICE).to(dtype) + 0.5)
    norm.variance_epsilon = EPS
    assert torch.equal(kernel(x, gate, norm.weight, EPS), gated_rms_norm(x, gate, norm))
    if rows % 32 == 0:  # a prefill's gate: each token's 32 heads a view of in_proj_z's rows of a wider product
        product, _ = zero_centred_inputs(rows // 32, 3 * 32 * dim, dtype, seed=rows + 2)
        gate = product[:, 32 * dim : 64 * dim].view(rows // 32, 32, dim)
        x = x.view(rows // 32, 32, dim)
        assert torch.equal(kernel(x, gate, norm.weight, EPS), gated_rms_norm(x, gate, norm))


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
