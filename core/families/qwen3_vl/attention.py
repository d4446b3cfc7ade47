"""Attention backends for the vision tower that run inside a CUDA graph.

Stock transformers ``sdpa``/``eager`` attention splits the packed rows per sequence with
``.tolist()``: a host sync and a Python loop, which a graph cannot capture. The functions here
take the boundaries ``cu_seqlens`` as a device tensor instead. The vision attention hands
``cu_seqlens``/``max_seqlen`` to the attention function only when the implementation's name
contains "flash", hence the registered names; set one on the vision config *after* loading.

Every function has transformers' attention signature: ``query``/``key``/``value`` are
(1, heads, rows, head_dim) and the result is ((1, rows, heads, head_dim), None).
"""

from __future__ import annotations

import importlib.util
import inspect
from contextlib import contextmanager
from typing import Iterator

import torch
import torch.nn.functional as F
from transformers import AttentionInterface

from framewise.core.errors import EncoderError

REGISTERED_NAMES = {
    "triton": "framewise_flash_triton",
    "varlen": "framewise_flash_varlen",
    "flash_attn": "framewise_flash_attn",
    "sdpa_masked": "framewise_flash_sdpa_masked",
}
HALF_DTYPES = (torch.bfloat16, torch.float16)


def _varlen_attn():
    """``torch.nn.attention.varlen.varlen_attn``, or ``None`` in a torch without it."""
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        return None
    return varlen_attn


def _packed(tensor: torch.Tensor) -> torch.Tensor:
    """(1, heads, rows, head_dim) -> (rows, heads, head_dim), a view."""
    return tensor.squeeze(0).transpose(0, 1)


def varlen_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """One flash kernel (shipped inside PyTorch) over all sequences, boundaries read on the device."""
    varlen_attn = _varlen_attn()
    cu_seqlens, max_seqlen = kwargs["cu_seq_lens_q"], kwargs["max_length_q"]
    options = {}
    if scaling is not None:
        if "scale" in inspect.signature(varlen_attn).parameters:
            options["scale"] = scaling
        elif abs(scaling - query.shape[-1] ** -0.5) > 1e-12:
            raise EncoderError("This torch's varlen attention has no scale argument; choose sdpa_masked.")
    output = varlen_attn(
        _packed(query), _packed(key), _packed(value), cu_seqlens, cu_seqlens, max_seqlen, max_seqlen, **options
    )
    return output.unsqueeze(0), None


def triton_tile_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """Framewise's Triton tile kernel (:mod:`~framewise.core.families.qwen3_vl.tile_attention`); the tile
    list is made anew in every layer here (the fused forward makes it once a pass)."""
    from framewise.core.families.qwen3_vl.tile_attention import tile_attention
    from framewise.core.families.qwen3_vl.tile_schedule import tile_schedule

    cu_seqlens = kwargs["cu_seq_lens_q"]
    scale = query.shape[-1] ** -0.5 if scaling is None else scaling
    schedule = tile_schedule(cu_seqlens, query.shape[2])
    output = tile_attention(_packed(query), _packed(key), _packed(value), cu_seqlens, schedule, scale)
    return output.unsqueeze(0), None


def flash_attn_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """The flash-attn package's variable-length kernel."""
    from flash_attn import flash_attn_varlen_func

    cu_seqlens, max_seqlen = kwargs["cu_seq_lens_q"], kwargs["max_length_q"]
    output = flash_attn_varlen_func(
        _packed(query), _packed(key), _packed(value), cu_seqlens, cu_seqlens, max_seqlen, max_seqlen,
        dropout_p=0.0, softmax_scale=scaling, causal=False,
    )
    return output.unsqueeze(0), None


def segment_ids(cu_seqlens: torch.Tensor, rows: int) -> torch.Tensor:
    """(rows,) index of the sequence each row belongs to; zero-length sequences own no row."""
    positions = torch.arange(rows, device=cu_seqlens.device, dtype=cu_seqlens.dtype)
    return torch.searchsorted(cu_seqlens[1:].contiguous(), positions, right=True)


def sdpa_masked_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """One dense SDPA over all rows with a block-diagonal mask: runs anywhere, costs O(rows^2)."""
    segments = segment_ids(kwargs["cu_seq_lens_q"], query.shape[2])
    mask = segments[:, None] == segments[None, :]
    output = F.scaled_dot_product_attention(query, key, value, attn_mask=mask[None, None], scale=scaling)
    return output.transpose(1, 2), None


_FUNCTIONS = {
    "triton": triton_tile_attention,
    "varlen": varlen_attention,
    "flash_attn": flash_attn_attention,
    "sdpa_masked": sdpa_masked_attention,
}


def register_backends() -> None:
    """Register every backend with transformers' global AttentionInterface (idempotent)."""
    for backend, name in REGISTERED_NAMES.items():
        AttentionInterface.register(name, _FUNCTIONS[backend])


def available_attention_backends() -> list[str]:
    """The backends that can run here, graph-safe ones first; ``eager`` (transformers' own) is always there."""
    backends = []
    if torch.cuda.is_available() and importlib.util.find_spec("triton") is not None:
        backends.append("triton")
    if torch.cuda.is_available() and _varlen_attn() is not None:
        backends.append("varlen")
    if torch.cuda.is_available() and importlib.util.find_spec("flash_attn") is not None:
        backends.append("flash_attn")
    return backends + ["sdpa_masked", "eager"]


def resolve_backend(
    requested: str, device: torch.device, dtype: torch.dtype, excluded: tuple[str, ...] = ()
) -> str:
    """The graph-safe backend to use for ``requested`` (``auto`` or a name), or raise EncoderError.

    ``auto`` picks triton on a GPU (any dtype), else varlen, then flash_attn in bfloat16/float16,
    else sdpa_masked; it passes over the ``excluded`` backends (sdpa_masked, which runs anywhere,
    is its answer when every other is excluded).
    """
    available = available_attention_backends() if device.type == "cuda" else ["sdpa_masked", "eager"]
    if requested == "auto":
        candidates = [name for name in available if name not in excluded]
        flash_kinds = [name for name in ("varlen", "flash_attn") if name in candidates]
        if "triton" in candidates:
            return "triton"
        return flash_kinds[0] if flash_kinds and dtype in HALF_DTYPES else "sdpa_masked"
    flash_kinds = [name for name in ("varlen", "flash_attn") if name in available]
    if requested not in REGISTERED_NAMES:
        raise EncoderError(
            f"Attention backend {requested!r} does not run inside CUDA graphs; choose triton, varlen or sdpa_masked."
        )
    if requested not in available:
        raise EncoderError(
            f"Attention backend {requested!r} is not available here (available: {', '.join(available)}); "
            "choose another in the encoder settings."
        )
    if requested in flash_kinds and dtype not in HALF_DTYPES:
        raise EncoderError(
            f"Attention backend {requested!r} needs bfloat16 or float16 weights, not {dtype}; "
            "choose sdpa_masked or a half-precision dtype."
        )
    return requested


@contextmanager
def stock_attention(visual: torch.nn.Module) -> Iterator[None]:
    """Run ``visual`` with transformers' own ``sdpa`` attention inside the block (the eager reference)."""
    saved = visual.config._attn_implementation
    visual.config._attn_implementation = "sdpa"
    try:
        yield
    finally:
        visual.config._attn_implementation = saved
