"""The norm kernels (core.kernels.scaled_rms_norm, core.kernels.gated_rms_norm) through Triton's
interpreter on the CPU, against Qwen3.5's norms in torch ops. Collected only by
``test_norm_kernels_interpreted.py``, which runs this file in a process of its own with
``TRITON_INTERPRET=1`` (set before Triton is imported, and not to leak into other tests). The
interpreter computes in numpy: float32 and float16 tensors, no bfloat16, and no libdevice
function (numpy's exp stands in for libdevice's in the gated norm's SiLU)."""

from __future__ import annotations

import os

import pytest
import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice

assert os.environ.get("TRITON_INTERPRET") == "1", "run through test_norm_kernels_interpreted.py"
libdevice.exp = lambda x: tl.math.exp(x)  # looked up when the interpreter runs, once it has patched tl.math

from framewise.core.families.qwen3_5.mixers import (  # noqa: E402
    add_zero_centred_rms_norm,
    gated_rms_norm,
    zero_centred_rms_norm,
)
from framewise.core.kernels import scaled_rms_norm as scaled_rms_norm_kernel  # noqa: E402
from framewise.core.kernels.gated_rms_norm import gated_rms_norm as gated_kernel  # noqa: E402
from framewise.core.kernels.scaled_rms_norm import add_scaled_rms_norm, scaled_rms_norm  # noqa: E402

EPS = 1e-6


def random_rows(rows: int, width: int, dtype: torch.dtype, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows (rows, width) of ``dtype`` and a float32 scale (width,) around 1, as 1 + a norm's weight."""
    generator = torch.Generator().manual_seed(seed)
    x = (torch.randn(rows, width, generator=generator) * 3).to(dtype)
    return x, torch.rand(width, generator=generator) + 0.5


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize(("rows", "width"), [(9, 256), (3, 4096), (1, 4096), (5, 96), (2, 4100)])
def test_rows_of_any_width_are_the_torch_norm(dtype: torch.dtype, rows: int, width: int) -> None:
    """Widths of Qwen3.5's per-head norms (256, several rows to a program, more rows than one holds)
    and of its layer norms (4096), and widths no thread count divides."""
    x, scale = random_rows(rows, width, dtype, seed=rows * width)
    got = scaled_rms_norm(x, scale, EPS)
    assert got.dtype == dtype and got.shape == x.shape and got.is_contiguous()
    # torch's CPU norm sums in another order than the kernel (torch's CUDA one): float32 agrees to
    # its own rounding, float16 to one rounding of that.
    torch.testing.assert_close(got, zero_centred_rms_norm(x, scale, EPS))


def cuda_order_sum_of_squares(row: torch.Tensor) -> torch.Tensor:
    """The float32 sum of ``row``'s squares in the order of torch's vectorized CUDA norm kernel:
    128 threads, each over its groups of 4 consecutive columns (group t, t + 128, ...), then lane l
    plus lane l + offset within each warp of 32 for offsets 16 to 1, then warp w plus w + offset."""
    width = row.shape[0]
    partial = torch.zeros(128)
    for group in range(0, width, 512):
        for column in range(4):
            columns = group + torch.arange(128) * 4 + column
            value = torch.where(columns < width, row[columns.clamp(max=width - 1)], 0.0)
            partial = partial + value * value  # as a fused multiply-add: the squares here are exact
    sums = partial.view(4, 32)
    for half in (16, 8, 4, 2, 1):
        sums = sums[:, :half] + sums[:, half : 2 * half]
    sums = sums.view(4)
    sums = sums[:2] + sums[2:]
    return sums[0] + sums[1]


@triton.jit
def _sums_of_squares_kernel(x_ptr, out_ptr, row_count, WIDTH: tl.constexpr, ROWS: tl.constexpr):
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    sums = scaled_rms_norm_kernel.row_sums_of_squares(x_ptr, x_ptr, rows * WIDTH, rows, row_count, WIDTH, ROWS, False)
    tl.store(out_ptr + rows, sums, mask=rows < row_count)


def order_revealing_rows(width: int) -> torch.Tensor:
    """float32 rows whose sums of squares come out differently in different orders: ones with one
    4096 (a square of 2^24, past which float32 drops a 1 added to it); each thread's first column
    small integers with one 8192 (2^26: a sum past it rounds to 8), so that which partial sums meet
    it, and when, shows in the total."""
    threads = min(128, width // 4)
    rows = []
    for seed in (1, 2, 3):
        generator = torch.Generator().manual_seed(seed)
        for big in (0, 1, threads // 2 + 1, threads - 1):
            ones = torch.ones(width)
            ones[big * 4 + 1] = 4096.0
            small = torch.zeros(width)
            small[torch.arange(threads) * 4] = torch.randint(1, 32, (threads,), generator=generator).float()
            small[big * 4] = 8192.0
            rows += [ones, small]
    return torch.stack(rows)


@pytest.mark.parametrize("rows_per_program", [1, 2])
@pytest.mark.parametrize("width", [4096, 256])
def test_the_squares_are_summed_in_the_order_torchs_cuda_kernel_sums_them(width: int, rows_per_program: int) -> None:
    """The kernel's sums of squares are those of torch's CUDA norm to the bit (what makes the norm
    bit for bit torch's on the GPU: the rest is one operation at a time, the same ones)."""
    x = order_revealing_rows(width)
    got = torch.zeros(x.shape[0])
    grid = (triton.cdiv(x.shape[0], rows_per_program),)
    _sums_of_squares_kernel[grid](x, got, x.shape[0], WIDTH=width, ROWS=rows_per_program)
    expected = torch.stack([cuda_order_sum_of_squares(row) for row in x])
    assert torch.equal(got, expected)
    assert not torch.equal(expected, (x * x).sum(dim=-1))  # the rows tell the orders apart


def test_heads_viewed_out_of_a_wider_product_are_read_where_they_lie() -> None:
    """Qwen3.5's per-head norms read each head's query out of q_proj's product (a query then its
    gate, per head) and the keys out of a stacked product: strided rows, normed as the torch
    function norms them, into a contiguous result."""
    generator = torch.Generator().manual_seed(3)
    heads, kv_heads, head_dim, tokens = 4, 2, 256, 5
    product = torch.randn(1, tokens, heads * 2 * head_dim + kv_heads * head_dim + 40, generator=generator)
    query = product[..., : heads * 2 * head_dim].view(1, tokens, heads, 2 * head_dim).chunk(2, dim=-1)[0]
    key = product[..., heads * 2 * head_dim : (heads * 2 + kv_heads) * head_dim].view(1, tokens, kv_heads, head_dim)
    scale = torch.rand(head_dim, generator=generator) + 0.5
    for heads_view in (query, key, query.transpose(1, 2)):
        got = scaled_rms_norm(heads_view, scale, EPS)
        assert got.shape == heads_view.shape and got.is_contiguous()
        torch.testing.assert_close(got, zero_centred_rms_norm(heads_view, scale, EPS))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_the_residual_add_rounds_its_sum_once_and_norms_it(dtype: torch.dtype) -> None:
    hidden, scale = random_rows(7, 4096, dtype, seed=4)
    delta, _ = random_rows(7, 4096, dtype, seed=5)
    total, normed = add_scaled_rms_norm(hidden.view(1, 7, -1), delta.view(1, 7, -1), scale, EPS)
    expected_total, expected = add_zero_centred_rms_norm(hidden.view(1, 7, -1), delta.view(1, 7, -1), scale, EPS)
    assert torch.equal(total, expected_total)
    torch.testing.assert_close(normed, expected)


def test_no_rows_make_no_launch() -> None:
    x, scale = random_rows(0, 256, torch.float32, seed=6)
    assert scaled_rms_norm(x, scale, EPS).shape == (0, 256)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize(("rows", "dim"), [(37, 128), (4, 16), (3, 100)])
def test_the_gated_norm_is_the_torch_gated_norm(dtype: torch.dtype, rows: int, dim: int) -> None:
    """Rows of Qwen3.5's gated norm (128 wide; several rows to a program, more than one holds) and
    widths no thread count divides: the torch function's roundings, sums in torch's CUDA order."""
    x, _ = random_rows(rows, dim, dtype, seed=rows)
    gate, _ = random_rows(rows, dim, dtype, seed=rows + 1)
    norm = torch.nn.Module()
    norm.weight = torch.nn.Parameter((torch.rand(dim, generator=torch.Generator().manual_seed(dim)) + 0.5).to(dtype))
    norm.variance_epsilon = EPS
    got = gated_kernel(x, gate, norm.weight, EPS)
    assert got.dtype == dtype and got.shape == x.shape
    torch.testing.assert_close(got, gated_rms_norm(x, gate, norm))


def test_the_gated_norms_gate_is_read_out_of_a_wider_product() -> None:
    """A prefill's gate: in_proj_z's rows of a stacked product, each token's heads a view of it."""
    generator = torch.Generator().manual_seed(7)
    tokens, heads, dim = 5, 4, 128
    product = torch.randn(1, tokens, 3 * heads * dim + 8, generator=generator)
    gate = product[..., heads * dim : 2 * heads * dim].view(tokens, heads, dim)
    x = torch.randn(tokens, heads, dim, generator=generator)
    norm = torch.nn.Module()
    norm.weight = torch.nn.Parameter(torch.rand(dim, generator=generator) + 0.5)
    norm.variance_epsilon = EPS
    got = gated_kernel(x, gate, norm.weight, EPS)
    assert got.shape == x.shape and got.is_contiguous()
    torch.testing.assert_close(got, gated_rms_norm(x, gate, norm))
