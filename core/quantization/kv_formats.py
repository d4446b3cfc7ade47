"""How a KV cache holds its keys and values: in the activations' dtype, or in e4m3 with one float32
scale per token and key/value head (the setting ``decoding.kv_cache_dtype``, ``auto`` or ``fp8``).

A cache of ``fp8`` writes each new token's key and value of each head as e4m3 values and a scale
that maps the head's largest magnitude to 448 (the per-row layout of
:func:`~framewise.core.quantization.fp8.quantize_per_channel`, a row being one head of one token),
when the token is written: nothing is calibrated, nothing saturates, and a token written in any
prefill chunk or decode step is stored the same way. Readers get the entries back in the
activations' dtype, a pass's attention a segment of at most :data:`READ_SEGMENT_POSITIONS`
positions at a time (:class:`ScaledEntries`; for now the whole context); the Triton decode step reads the e4m3 values and
scales itself and multiplies them in registers. At Qwen3-VL-8B's shapes (36 layers, 8
key/value heads of 128) a token takes 147,456 bytes in bf16 and 73,728 + 2,304 bytes of scales
= 76,032 in this layout, 0.52 of it.

Why per token and head rather than one static scale per head:
``python3 benchmarks/kv_cache_error.py`` on the CPU (float32 activations) measures, layer by layer,
the hidden state's error against the float cache, and the logits' (docs/benchmarks.md, "FP8 KV
cache"): per-token scales had the smaller error on every layer of both models measured, and need
no calibration prompt, whose largest values a later token may exceed (a static scale then
saturates).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from framewise.core.kernels.e4m3 import E4M3
from framewise.core.quantization.fp8 import quantize_per_channel

# One float32 scale per token and head, for keys and for values alike.
SCALE_BYTES = 4
# Positions of a scaled cache a pass reads back at a time (keys and values of one layer), its
# attention over them merged with the other segments' by their log-sum-exp
# (:func:`~framewise.core.decoding.attention.segmented_attention`). Off for now: 262,144 is more
# than any context the families allow, so every pass reads its context whole, as before. On an
# H100 the demo model's passes over 64-position segments gave logits 0.114 apart from one read's
# (tests/gpu/test_kv_cache_gpu.py, docs/benchmarks/log.md h100-2026-12-07-1909). The likely cause,
# found since on the CPU: CUDA's memory-efficient kernel gives a query that sees no key of a
# segment a log-sum-exp of 0, which weighed zeros into the merge; such rows now merge with none.
# The same passes through a CPU stand-in for that kernel were 0.114 off without the fix and
# 0.005 with it; the fix has not run on a GPU yet. With 8,192 a segment of Qwen3-VL-8B (8 key/value heads of
# 128) or Qwen3.5-9B (4 of 256) would be 32 MiB in bf16, a tenth of the whole context's read-back
# at 77,056 positions.
READ_SEGMENT_POSITIONS = 262_144


@dataclass(frozen=True)
class KVCacheFormat:
    """The layout of a KV cache's entries: ``element`` None keeps keys and values in the
    activations' dtype; an 8-bit ``element`` (e4m3) keeps them scaled, one float32 scale per token
    and head. ``setting`` is the value of ``decoding.kv_cache_dtype`` that chooses it. A scaled
    format's entries are read back ``read_segment`` positions at a time (:class:`ScaledEntries`).

    A layer's keys (and values) are stored as (1, kv_heads, max_tokens, head_dim) in
    :meth:`storage_dtype`, their scales as (1, kv_heads, max_tokens) float32."""

    setting: str
    element: torch.dtype | None = None
    read_segment: int = READ_SEGMENT_POSITIONS

    @property
    def scaled(self) -> bool:
        """Whether entries are stored with scales (and read back multiplied by them)."""
        return self.element is not None

    def storage_dtype(self, activations: torch.dtype) -> torch.dtype:
        return self.element or activations

    def bytes_per_token(self, layers: int, kv_heads: int, head_dim: int, activations: torch.dtype) -> int:
        """Bytes one token's keys and values take in ``layers`` layers, scales included."""
        entry = head_dim * self.storage_dtype(activations).itemsize + (SCALE_BYTES if self.scaled else 0)
        return 2 * layers * kv_heads * entry

    def segment_positions(self, length: int) -> int:
        """How many of a layer's ``length`` positions one attention call covers in a pass under a
        mask (a decode step, a follow-up prefill graph): all of them for entries in the
        activations' dtype, at most a segment for scaled ones, which are read back a segment at a
        time (:func:`~framewise.core.decoding.attention.read_segments`; a prefill chunk's last
        segment also holds the chunk's own positions)."""
        return min(length, self.read_segment) if self.scaled else length

    def read_bytes(self, kv_heads: int, head_dim: int, length: int, activations: torch.dtype) -> int:
        """Bytes a pass under a mask holds at its peak to read back one layer's keys and values
        over ``length`` positions: nothing for entries in the activations' dtype (views), else a
        segment's (:meth:`segment_positions`), both in that dtype, and the float32 product of one
        of them."""
        if not self.scaled:
            return 0
        elements = kv_heads * self.segment_positions(length) * head_dim
        return 2 * elements * activations.itemsize + elements * 4

    def describe(self, activations: torch.dtype) -> str:
        """The layout in a few words: ``"bfloat16"``, or ``"fp8 e4m3, a scale per token and head"``."""
        if not self.scaled:
            return str(activations).removeprefix("torch.")
        return f"{self.setting} e4m3, a scale per token and head"

    def write(self, stored: torch.Tensor, scales: torch.Tensor | None, positions: torch.Tensor, x: torch.Tensor) -> None:
        """Put ``x`` (1, kv_heads, n, head_dim) in the activations' dtype at ``positions`` (n,) of
        one layer's ``stored`` entries and their ``scales`` (None when not :attr:`scaled`)."""
        if scales is None:
            stored.index_copy_(2, positions, x)
            return
        quantized, x_scales = quantize_heads(x)
        # index_copy_ has no 8-bit float kernels on every device; bytes are bytes
        stored.view(torch.uint8).index_copy_(2, positions, quantized.view(torch.uint8))
        scales.index_copy_(2, positions, x_scales)

    def entries(
        self, stored: torch.Tensor, scales: torch.Tensor | None, length: int, dtype: torch.dtype
    ) -> torch.Tensor | ScaledEntries:
        """One layer's first ``length`` positions for a pass in activations of ``dtype``: a view of
        ``stored`` (1, kv_heads, length, head_dim) when not :attr:`scaled`, else the entries and
        their ``scales`` unread, for the attention to read back a segment at a time."""
        if scales is None:
            return stored[:, :, :length]
        return ScaledEntries(stored, scales, length, dtype, self.read_segment)


@dataclass(frozen=True)
class ScaledEntries:
    """One layer's keys (or values) in a scaled cache as a pass hands them to its attention: the
    e4m3 ``stored`` entries (1, kv_heads, max_tokens, head_dim) and their float32 ``scales``
    (1, kv_heads, max_tokens), of which the pass attends over the first ``length`` positions in
    activations of ``dtype``, read back at most ``segment`` positions at a time."""

    stored: torch.Tensor
    scales: torch.Tensor
    length: int
    dtype: torch.dtype
    segment: int

    def read(self, begin: int = 0, end: int | None = None) -> torch.Tensor:
        """Positions ``begin`` to ``end`` (default: :attr:`length`) multiplied by their scales,
        (1, kv_heads, end - begin, head_dim) in :attr:`dtype`."""
        end = self.length if end is None else end
        return dequantize_heads(self.stored[:, :, begin:end], self.scales[:, :, begin:end], self.dtype)


def quantize_heads(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Keys or values ``x`` (1, kv_heads, n, head_dim) -> their e4m3 values (same shape) and float32
    scales (1, kv_heads, n), one per token and head (each head's row quantized as a weight's row)."""
    quantized, scales = quantize_per_channel(x.reshape(-1, x.shape[-1]))
    return quantized.view(x.shape), scales.view(x.shape[:-1])


def dequantize_heads(quantized: torch.Tensor, scales: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """e4m3 entries (1, kv_heads, n, head_dim) times their ``scales`` (1, kv_heads, n), in ``dtype``:
    the product in float32, rounded once (as the decode-step kernel rounds it). Every e4m3 value is
    exact in bf16 and in float16, and the in-place product computes each element in float32 before
    rounding it, so no float32 copy of the entries is made: over a long context that copy was the
    largest thing a pass held."""
    product = quantized.to(dtype)
    product.mul_(scales[..., None])
    return product


FLOAT_KV_CACHE = KVCacheFormat("auto")
E4M3_KV_CACHE = KVCacheFormat("fp8", E4M3)
KV_CACHE_FORMATS = {cache_format.setting: cache_format for cache_format in (FLOAT_KV_CACHE, E4M3_KV_CACHE)}


def kv_cache_format(setting: str) -> KVCacheFormat:
    """The layout ``decoding.kv_cache_dtype`` = ``setting`` chooses. Raises ValueError for another value."""
    try:
        return KV_CACHE_FORMATS[setting]
    except KeyError:
        raise ValueError(f"no KV cache layout {setting!r}: choose one of {', '.join(KV_CACHE_FORMATS)}") from None
