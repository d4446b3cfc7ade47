"""The decode step's split attention over a filled cache (``attend_cached``) on the CPU, through
Triton's interpreter in float32, against attention in float64: a cache in the activations' dtype
and an e4m3 cache read with its scales, one split and several (positions at a split's first and
last key and in a partly filled block), nothing read after the step's position, nothing written.
The GPU tests (tests/gpu/test_step_kernels.py) hold it in bf16 against torch's attention."""

from __future__ import annotations

import pytest
import torch

from framewise.core.quantization.kv_formats import dequantize_heads, quantize_heads
from tests.core.kernels.interpreted import only_interpreted

pytestmark = only_interpreted

VIEW_LENGTH = 256
MAX_TOKENS = VIEW_LENGTH + 32
# float32 throughout: the kernel and the reference differ only in the order of their sums.
RELATIVE = 1e-5


@pytest.fixture(scope="module")
def kernels():
    from framewise.core.kernels import decode_step

    return decode_step


def reference(
    query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, position: int, scale: float
) -> torch.Tensor:
    """``query`` (heads, head_dim) over positions 0..``position`` of ``keys``/``values``
    (1, kv_heads, max_tokens, head_dim), in float64: (heads * head_dim,)."""
    group = query.shape[0] // keys.shape[1]
    keys = keys[0, :, : position + 1].double().repeat_interleave(group, dim=0)
    values = values[0, :, : position + 1].double().repeat_interleave(group, dim=0)
    weights = torch.softmax((query.double()[:, None, :] @ keys.transpose(1, 2))[:, 0] * scale, dim=-1)
    return (weights[:, None, :] @ values)[:, 0].reshape(-1)


def relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got.double() - want).norm() / want.norm())


def random_cache(
    kv_heads: int, head_dim: int, position: int, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Random keys and values (1, kv_heads, MAX_TOKENS, head_dim) float32, the positions after
    ``position`` holding what would show if read: huge keys, NaN values."""
    keys = torch.randn(1, kv_heads, MAX_TOKENS, head_dim, generator=generator) * 2
    values = torch.randn(1, kv_heads, MAX_TOKENS, head_dim, generator=generator)
    keys[:, :, position + 1 :] = 1e4
    values[:, :, position + 1 :] = float("nan")
    return keys, values


@pytest.mark.parametrize("scaled", [False, True], ids=["cache-in-dtype", "e4m3-cache"])
@pytest.mark.parametrize(("heads", "kv_heads", "head_dim"), [(4, 2, 64), (8, 2, 256), (16, 2, 128)])
@pytest.mark.parametrize("programs_per_sm", [2, 8], ids=["one-split", "four-splits"])
@pytest.mark.parametrize("position", [0, 63, 64, 200])
def test_attend_cached_is_attention_over_the_filled_positions(
    kernels, monkeypatch, scaled: bool, heads: int, kv_heads: int, head_dim: int, programs_per_sm: int, position: int
) -> None:
    # The interpreter counts one multiprocessor: 2 programs a multiprocessor over 2 key/value heads
    # is one split of the whole view; 8 is four splits of 64 positions.
    monkeypatch.setattr(kernels, "ATTENTION_PROGRAMS_PER_SM", programs_per_sm)
    splits = kernels._Splits.of(heads, kv_heads, VIEW_LENGTH, torch.device("cpu"))
    assert splits.count == (1 if programs_per_sm == 2 else 4)
    generator = torch.Generator().manual_seed(position + head_dim)
    query = torch.randn(heads, head_dim, generator=generator)
    keys, values = random_cache(kv_heads, head_dim, position, generator)
    scale = head_dim**-0.5
    if scaled:
        keys, key_scales = quantize_heads(keys.nan_to_num())
        values, value_scales = quantize_heads(values.nan_to_num())
        value_scales[:, :, position + 1 :] = float("nan")
        stored = [tensor.clone() for tensor in (keys, values, key_scales, value_scales)]
        out = kernels.attend_cached(
            query, torch.tensor([position]), keys, values, VIEW_LENGTH, scale, key_scales, value_scales
        )
        keys = dequantize_heads(keys, key_scales, torch.float32)
        values = dequantize_heads(values, value_scales, torch.float32)
        after = (*stored[:2], key_scales, value_scales)
    else:
        stored = [keys.clone(), values.clone()]
        out = kernels.attend_cached(query, torch.tensor([position]), keys, values, VIEW_LENGTH, scale)
        after = (keys, values)
    assert out.shape == (heads * head_dim,) and out.dtype == torch.float32
    assert not out.isnan().any()
    assert relative_error(out, reference(query, keys, values, position, scale)) < RELATIVE
    for now, before in zip(after, stored):  # the cache is only read
        assert torch.equal(now.view(torch.uint8), before.view(torch.uint8))
