"""The decode-step Triton kernels against the same arithmetic in torch ops, on fresh random inputs:
float32 to rounding, bfloat16 within a few units of the last place; cache positions other than
the step's own are left alone, and attention ignores every position after the step's."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

pytestmark = pytest.mark.gpu
kernels = pytest.importorskip("framewise.core.kernels.decode_step", reason="needs Triton")

DEVICE = "cuda"
# Relative error bounds: float32 differs only by summation order; bfloat16 results are rounded
# to 8 bits of mantissa, so one unit in the last place is 2**-8 of the value.
TOLERANCE = {torch.float32: 1e-5, torch.bfloat16: 2e-2}


def relative_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    actual, expected = actual.double(), expected.double()
    return float((actual - expected).norm() / expected.norm())


def rms_norm_reference(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """The model's RMSNorm (transformers' Qwen3-VL): normalise in float32, round, scale."""
    x32 = x.float()
    return weight * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(("rows", "columns"), [(40, 256), (37, 768), (1000, 4096)])
def test_rms_norm_linear(dtype: torch.dtype, rows: int, columns: int) -> None:
    x = torch.randn(columns, device=DEVICE, dtype=dtype) * 3
    norm = torch.rand(columns, device=DEVICE, dtype=dtype) + 0.5
    weight = torch.randn(rows, columns, device=DEVICE, dtype=dtype) / math.sqrt(columns)
    expected = F.linear(rms_norm_reference(x, norm, 1e-6), weight)
    assert relative_error(kernels.rms_norm_linear(x, norm, weight, 1e-6), expected) < TOLERANCE[dtype]
    logits = kernels.rms_norm_linear(x, norm, weight, 1e-6, out_dtype=torch.float32)
    assert logits.dtype == torch.float32
    assert relative_error(logits, expected.float()) < TOLERANCE[dtype]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("silu_mul", [False, True])
@pytest.mark.parametrize(("rows", "columns"), [(64, 512), (33, 768)])
def test_linear_residual(dtype: torch.dtype, silu_mul: bool, rows: int, columns: int) -> None:
    x = torch.randn(2 * columns if silu_mul else columns, device=DEVICE, dtype=dtype)
    weight = torch.randn(rows, columns, device=DEVICE, dtype=dtype) / math.sqrt(columns)
    residual = torch.randn(rows, device=DEVICE, dtype=dtype)
    if silu_mul:
        gate, up = x.chunk(2)
        inputs = F.silu(gate) * up
    else:
        inputs = x
    expected = residual + F.linear(inputs, weight)
    actual = kernels.linear_residual(x, weight, residual, silu_mul=silu_mul)
    assert relative_error(actual, expected) < TOLERANCE[dtype]


def rotary_reference(x: torch.Tensor, position: int, inv_freq: torch.Tensor, scaling: float) -> torch.Tensor:
    """x (heads, head_dim) rotated as transformers rotates q and k (cos and sin rounded to x's dtype)."""
    angles = position * inv_freq.float()
    angles = torch.cat((angles, angles))
    cos, sin = (angles.cos() * scaling).to(x.dtype), (angles.sin() * scaling).to(x.dtype)
    first, second = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-second, first), dim=-1) * sin


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(("heads", "kv_heads", "head_dim"), [(4, 2, 64), (32, 8, 128), (16, 8, 128)])
@pytest.mark.parametrize(("view_length", "position"), [(256, 0), (256, 255), (2368, 1700), (2368, 63), (100, 64)])
def test_attend_step(dtype: torch.dtype, heads: int, kv_heads: int, head_dim: int, view_length: int, position: int) -> None:
    max_tokens, rope_position, eps, scale = view_length + 64, 5000, 1e-6, head_dim**-0.5
    qkv = torch.randn((heads + 2 * kv_heads) * head_dim, device=DEVICE, dtype=dtype)
    qk_norms = torch.rand(2, head_dim, device=DEVICE, dtype=dtype) + 0.5
    inv_freq = 1.0 / (5e6 ** (torch.arange(0, head_dim, 2, device=DEVICE).float() / head_dim))
    keys = torch.randn(1, kv_heads, max_tokens, head_dim, device=DEVICE, dtype=dtype)
    values = torch.randn_like(keys)
    # The step's own position and those after it hold values that would show if read: the step's
    # key and value must be written before they are read, and nothing later read at all.
    keys[:, :, position:] = 1e4
    values[:, :, position:] = float("nan")
    keys_before, values_before = keys.clone(), values.clone()
    out = kernels.attend_step(
        qkv, qk_norms, inv_freq, 1.0, torch.tensor([rope_position], device=DEVICE),
        torch.tensor([position], device=DEVICE), keys, values, heads, eps, view_length, scale,
    )
    q, k, v = qkv.split((heads * head_dim, kv_heads * head_dim, kv_heads * head_dim))
    query = rotary_reference(rms_norm_reference(q.view(heads, head_dim), qk_norms[0], eps), rope_position, inv_freq, 1.0)
    key = rotary_reference(rms_norm_reference(k.view(kv_heads, head_dim), qk_norms[1], eps), rope_position, inv_freq, 1.0)
    assert relative_error(keys[0, :, position], key) < TOLERANCE[dtype]
    assert torch.equal(values[0, :, position], v.view(kv_heads, head_dim))
    untouched = torch.arange(max_tokens, device=DEVICE) != position
    torch.testing.assert_close(keys[:, :, untouched], keys_before[:, :, untouched], rtol=0, atol=0, equal_nan=True)
    torch.testing.assert_close(values[:, :, untouched], values_before[:, :, untouched], rtol=0, atol=0, equal_nan=True)

    group = heads // kv_heads
    filled_keys = torch.cat((keys_before[0, :, :position], key[:, None]), dim=1).repeat_interleave(group, dim=0).float()
    filled_values = torch.cat((values_before[0, :, :position], v.view(kv_heads, 1, head_dim)), dim=1)
    filled_values = filled_values.repeat_interleave(group, dim=0).float()
    weights = torch.softmax((query.float()[:, None, :] @ filled_keys.transpose(1, 2)) * scale, dim=-1)
    expected = (weights @ filled_values).reshape(-1)
    assert not out.isnan().any()
    assert relative_error(out, expected) < TOLERANCE[dtype]


CACHED_VIEW_LENGTH = 2368


def cached_position(where: str, split_size: int) -> int:
    """The step's position ``where`` in a view of CACHED_VIEW_LENGTH split in ``split_size``s."""
    return {"first": 0, "last-of-a-split": split_size - 1, "first-of-a-split": split_size,
            "late": CACHED_VIEW_LENGTH - 37}[where]


@pytest.mark.parametrize("cache", ["bf16", "e4m3"])
@pytest.mark.parametrize(("heads", "kv_heads", "head_dim"), [(16, 4, 256), (32, 4, 256), (16, 4, 128), (32, 4, 128)])
@pytest.mark.parametrize("where", ["first", "last-of-a-split", "first-of-a-split", "late"])
def test_attend_cached_is_sdpa_over_the_filled_cache(
    cache: str, heads: int, kv_heads: int, head_dim: int, where: str
) -> None:
    """Qwen3.5's step attention (4 and 8 query heads a key/value head, heads of 256 and 128) over a
    random cache in bf16 or e4m3 with its scales, against torch's attention over the cache as
    the torch step reads it back (the format's entries read whole): the positions after the step's hold what
    would show if read, and the cache is left as it was."""
    from framewise.core.decoding.attention import read_whole
    from framewise.core.quantization.kv_formats import E4M3_KV_CACHE, FLOAT_KV_CACHE

    if cache == "e4m3" and torch.cuda.get_device_capability() < (8, 9):
        pytest.skip("the step kernels convert e4m3 in hardware, which needs compute capability 8.9")
    device, max_tokens, scale = torch.device(DEVICE), CACHED_VIEW_LENGTH + 64, head_dim**-0.5
    splits = kernels._Splits.of(heads, kv_heads, CACHED_VIEW_LENGTH, device)
    assert splits.count > 1
    position = cached_position(where, splits.size)
    query = torch.randn(heads, head_dim, device=device, dtype=torch.bfloat16)
    keys = torch.randn(1, kv_heads, max_tokens, head_dim, device=device) * 3
    values = torch.randn(1, kv_heads, max_tokens, head_dim, device=device)
    cache_format = E4M3_KV_CACHE if cache == "e4m3" else FLOAT_KV_CACHE
    stored = [torch.zeros_like(keys, dtype=cache_format.storage_dtype(torch.bfloat16)) for _ in range(2)]
    scales = [torch.zeros(keys.shape[:3], device=device) for _ in range(2)] if cache_format.scaled else [None, None]
    every = torch.arange(max_tokens, device=device)
    for entries, entry_scales, written in zip(stored, scales, (keys, values)):
        cache_format.write(entries, entry_scales, every, written.to(torch.bfloat16))
    # What a read past the step's position would show: huge keys, NaN values (or NaN value scales).
    stored[0][:, :, position + 1 :] = 448 if cache_format.scaled else 1e4
    if cache_format.scaled:
        scales[1][:, :, position + 1 :] = float("nan")
    else:
        stored[1][:, :, position + 1 :] = float("nan")
    before = [tensor.clone() for tensor in (*stored, *scales) if tensor is not None]
    at = torch.tensor([position], device=device)
    out = kernels.attend_cached(query, at, *stored, CACHED_VIEW_LENGTH, scale, *scales)
    read_keys, read_values = (
        read_whole(cache_format.entries(entries, entry_scales, position + 1, torch.bfloat16))
        for entries, entry_scales in zip(stored, scales)
    )
    expected = F.scaled_dot_product_attention(
        query[None, :, None], read_keys, read_values, scale=scale, enable_gqa=True
    ).reshape(-1)
    assert out.shape == (heads * head_dim,) and out.dtype == torch.bfloat16 and not out.isnan().any()
    assert relative_error(out, expected) < TOLERANCE[torch.bfloat16]
    for now, then in zip((tensor for tensor in (*stored, *scales) if tensor is not None), before):  # only read
        assert torch.equal(now.view(torch.uint8), then.view(torch.uint8))
