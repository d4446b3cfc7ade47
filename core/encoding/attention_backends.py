"""Variable-length attention backends for a vision tower that run inside a CUDA graph, beside the
encoder manager that captures them: the one place both a tower's own forward (through
transformers' attention interface) and a family's fused forward get them from. Their names are
the settings' (:data:`~framewise.core.settings.GRAPH_SAFE_ATTENTION_BACKENDS`), which need no torch.

Stock transformers ``sdpa``/``eager`` attention splits the packed rows per sequence with
``.tolist()``: a host sync and a Python loop, which a graph cannot capture. The functions here
take the boundaries ``cu_seqlens`` as a device tensor instead.

- :func:`varlen_rows`, :func:`flash_attn_rows`, :func:`masked_rows`, :func:`triton_rows`: packed rows in and out,
  ``query``/``key``/``value`` and the result (rows, heads, head_dim), with ``boundaries`` =
  (``cu_seqlens``, ``max_seqlen``); the fused forward calls them directly.
- :func:`register_backends`: the same behind transformers' attention signature, ``query``/``key``/``value``
  (1, heads, rows, head_dim) in, ((1, rows, heads, head_dim), None) out. The vision attention
  hands ``cu_seqlens``/``max_seqlen`` to the attention function only when the implementation's
  name contains "flash", hence the registered names; set one on the vision config *after* loading.
"""

from __future__ import annotations

import importlib.util
import inspect
from typing import Callable

import torch
import torch.nn.functional as F
from transformers import AttentionInterface

from framewise.core.errors import EncoderError
from framewise.core.settings import GRAPH_SAFE_ATTENTION_BACKENDS

# The name each backend is registered under with transformers ("flash" in it makes the vision
# attention hand over cu_seqlens; see the module docstring).
REGISTERED_NAMES = {name: "framewise_flash_" + name.removeprefix("flash_") for name in GRAPH_SAFE_ATTENTION_BACKENDS}
HALF_DTYPES = (torch.bfloat16, torch.float16)


try:
    from torch.nn.attention.varlen import varlen_attn
except ImportError:  # a torch without it: the varlen backend is not offered
    varlen_attn = None
# Some torch releases' varlen_attn has no scale argument: it always scales by head_dim ** -0.5.
_VARLEN_TAKES_SCALE = varlen_attn is not None and "scale" in inspect.signature(varlen_attn).parameters
_flash_varlen: Callable | None = None  # flash-attn's kernel, imported by flash_attn_kernel()

Boundaries = tuple[torch.Tensor, int]


def varlen_rows(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, boundaries: Boundaries, scale: float):
    """PyTorch's own flash kernel over every sequence at once, boundaries read on the device.

    Raises EncoderError for a scale other than head_dim ** -0.5 where varlen_attn takes none."""
    cu_seqlens, max_seqlen = boundaries
    if _VARLEN_TAKES_SCALE:
        options = {"scale": scale}
    elif abs(scale - query.shape[-1] ** -0.5) > 1e-12:
        raise EncoderError("This torch's varlen attention has no scale argument; choose sdpa_masked.")
    else:
        options = {}
    return varlen_attn(query, key, value, cu_seqlens, cu_seqlens, max_seqlen, max_seqlen, **options)


def flash_attn_kernel() -> Callable:
    """The flash-attn package's variable-length kernel, imported once (outside any compiled code)."""
    global _flash_varlen
    if _flash_varlen is None:
        from flash_attn import flash_attn_varlen_func

        _flash_varlen = flash_attn_varlen_func
    return _flash_varlen


def flash_attn_rows(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, boundaries: Boundaries, scale: float):
    """The flash-attn package's variable-length kernel."""
    cu_seqlens, max_seqlen = boundaries
    return flash_attn_kernel()(
        query, key, value, cu_seqlens, cu_seqlens, max_seqlen, max_seqlen, softmax_scale=scale, causal=False
    )


def triton_rows(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, boundaries: Boundaries, scale: float):
    """Framewise's Triton tile kernel (:mod:`~framewise.core.kernels.vision_attention`); the tile
    list is made anew in every call here (a fused forward makes it once a pass)."""
    from framewise.core.kernels.vision_attention import tile_attention
    from framewise.core.kernels.tile_schedule import tile_schedule

    cu_seqlens = boundaries[0]
    return tile_attention(query, key, value, cu_seqlens, tile_schedule(cu_seqlens, query.shape[0]), scale)


def masked_rows(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, boundaries: Boundaries, scale: float):
    """One dense SDPA with a block-diagonal mask built from cu_seqlens (runs anywhere, O(rows^2))."""
    segments = segment_ids(boundaries[0], query.shape[0])
    mask = (segments[:, None] == segments[None, :])[None]
    output = F.scaled_dot_product_attention(
        query.transpose(0, 1), key.transpose(0, 1), value.transpose(0, 1), attn_mask=mask, scale=scale
    )
    return output.transpose(0, 1)


def _packed(tensor: torch.Tensor) -> torch.Tensor:
    """(1, heads, rows, head_dim) -> (rows, heads, head_dim), a view."""
    return tensor.squeeze(0).transpose(0, 1)


def _interface(rows_attention: Callable) -> Callable:
    """``rows_attention`` behind transformers' attention signature (see the module docstring)."""

    def attention(
        module: torch.nn.Module,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        attention_mask: torch.Tensor | None,
        scaling: float | None = None,
        dropout: float = 0.0,
        **kwargs,
    ) -> tuple[torch.Tensor, None]:
        boundaries = (kwargs["cu_seq_lens_q"], kwargs["max_length_q"])
        scale = query.shape[-1] ** -0.5 if scaling is None else scaling
        output = rows_attention(_packed(query), _packed(key), _packed(value), boundaries, scale)
        return output.unsqueeze(0), None

    attention.__doc__ = rows_attention.__doc__
    return attention


_FUNCTIONS = {
    "triton": _interface(triton_rows),
    "varlen": _interface(varlen_rows),
    "flash_attn": _interface(flash_attn_rows),
    "sdpa_masked": _interface(masked_rows),
}


def segment_ids(cu_seqlens: torch.Tensor, rows: int) -> torch.Tensor:
    """(rows,) index of the sequence each row belongs to; zero-length sequences own no row."""
    positions = torch.arange(rows, device=cu_seqlens.device, dtype=cu_seqlens.dtype)
    return torch.searchsorted(cu_seqlens[1:].contiguous(), positions, right=True)


def register_backends() -> None:
    """Register every backend with transformers' global AttentionInterface (idempotent)."""
    for backend, name in REGISTERED_NAMES.items():
        AttentionInterface.register(name, _FUNCTIONS[backend])


def available_attention_backends() -> list[str]:
    """The backends that can run here, graph-safe ones first; ``eager`` (transformers' own) is always there."""
    backends = []
    if torch.cuda.is_available() and importlib.util.find_spec("triton") is not None:
        backends.append("triton")
    if torch.cuda.is_available() and varlen_attn is not None:
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
