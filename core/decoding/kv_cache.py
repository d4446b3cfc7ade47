"""A static KV cache: every layer's keys and values for a fixed number of positions, allocated once.

The cache stands in for transformers' ``Cache`` inside the language model's attention layers (they
call only ``update``). Where the next forward writes and how much of the cache it reads are set
before the forward: ``write_positions`` (a device tensor, so a captured graph reads it at replay)
and ``view_length`` (a Python int, baked into a graph at capture). A decode step therefore reads
``view_length`` positions, its context-length bucket, never the whole cache.

The entries are kept in a :class:`~framewise.core.quantization.kv_formats.KVCacheFormat`: in the
activations' dtype (``update`` then hands back views of the cache), or as 8-bit values with one
float32 scale per token and head, written with the token (``update`` then hands back the entries
and scales unread, a :class:`~framewise.core.quantization.kv_formats.ScaledEntries`, which the
attention reads back multiplied by their scales one segment of positions at a time: a pass holds
one layer's keys and values over a segment in the activations' dtype, never the whole view's).
The scales are static buffers beside the entries, so a captured graph reads and writes them as it
does the entries.
A decode step whose attention kernel reads the stored entries and scales itself calls only
``write``: nothing is read back.

The cache also remembers which token ids its leading positions hold and what they were computed
with (``owner``: the clip), so a follow-up question re-uses the longest common prefix.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from framewise.core.quantization.kv_formats import FLOAT_KV_CACHE, KVCacheFormat, ScaledEntries

# What ``update`` hands a layer's attention for its keys or values.
CachedEntries = torch.Tensor | ScaledEntries


class StaticKVCache:
    """Keys and values of ``layers`` layers for ``max_tokens`` positions.

    ``keys[layer]`` and ``values[layer]``: (1, kv_heads, max_tokens, head_dim) in the storage dtype
    of ``cache_format`` for activations of ``dtype``; for a scaled format ``key_scales[layer]`` and
    ``value_scales[layer]`` (1, kv_heads, max_tokens) float32 (empty lists otherwise). ``tokens[i]``
    is the id whose entries sit at position ``i``; positions from ``len(tokens)`` on hold nothing
    valid.
    """

    def __init__(
        self, layers: int, kv_heads: int, head_dim: int, max_tokens: int, dtype: torch.dtype, device: torch.device,
        cache_format: KVCacheFormat = FLOAT_KV_CACHE,
    ) -> None:
        shape = (1, kv_heads, max_tokens, head_dim)
        stored = cache_format.storage_dtype(dtype)
        self.keys = [torch.zeros(shape, dtype=stored, device=device) for _ in range(layers)]
        self.values = [torch.zeros(shape, dtype=stored, device=device) for _ in range(layers)]
        scaled_layers = layers if cache_format.scaled else 0
        self.key_scales = [torch.zeros(shape[:3], dtype=torch.float32, device=device) for _ in range(scaled_layers)]
        self.value_scales = [torch.zeros(shape[:3], dtype=torch.float32, device=device) for _ in range(scaled_layers)]
        self.format = cache_format
        self.dtype = dtype
        self.kv_heads, self.head_dim = kv_heads, head_dim
        self.max_tokens = max_tokens
        self.device = device
        self.write_positions = torch.zeros(1, dtype=torch.long, device=device)
        self.view_length = max_tokens
        self.tokens: list[int] = []
        self.owner: Any = None

    @staticmethod
    def bytes_needed(
        layers: int, kv_heads: int, head_dim: int, max_tokens: int, dtype: torch.dtype,
        cache_format: KVCacheFormat = FLOAT_KV_CACHE,
    ) -> int:
        """Device memory a cache of these sizes takes (keys and values, and their scales)."""
        return max_tokens * cache_format.bytes_per_token(layers, kv_heads, head_dim, dtype)

    @property
    def nbytes(self) -> int:
        tensors = (*self.keys, *self.values, *self.key_scales, *self.value_scales)
        return sum(tensor.numel() * tensor.element_size() for tensor in tensors)

    @property
    def bytes_per_token(self) -> int:
        """What one more position of context takes: every layer's key and value, and their scales."""
        return self.format.bytes_per_token(len(self.keys), self.kv_heads, self.head_dim, self.dtype)

    def scales(self, layer: int) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """Layer ``layer``'s key and value scales (1, kv_heads, max_tokens), or Nones for entries
        in the activations' dtype."""
        if not self.key_scales:
            return None, None
        return self.key_scales[layer], self.value_scales[layer]

    @property
    def kv(self) -> StaticKVCache:
        """The cache itself: a model's whole decoder state, whose keys and values are :attr:`kv`'s
        in a hybrid one (see :class:`~framewise.core.decoding.defs.DecoderState`)."""
        return self

    def update(
        self, key: torch.Tensor, value: torch.Tensor, layer_idx: int, *args: Any, **kwargs: Any
    ) -> tuple[CachedEntries, CachedEntries]:
        """Write ``key``/``value`` (1, kv_heads, n, head_dim) at ``write_positions`` (n,) and return the
        layer's first ``view_length`` positions, keys then values: views of the cache when it holds
        the activations' dtype, else :class:`~framewise.core.quantization.kv_formats.ScaledEntries`
        for the attention to read back (:func:`~framewise.core.decoding.attention.attend`)."""
        self.write(key, value, layer_idx)
        key_scales, value_scales = self.scales(layer_idx)
        entries = self.format.entries
        return (
            entries(self.keys[layer_idx], key_scales, self.view_length, self.dtype),
            entries(self.values[layer_idx], value_scales, self.view_length, self.dtype),
        )

    def write(self, key: torch.Tensor, value: torch.Tensor, layer_idx: int) -> None:
        """Write ``key``/``value`` (1, kv_heads, n, head_dim) in the activations' dtype at
        ``write_positions`` (n,) of layer ``layer_idx``, in the cache's format; read nothing back
        (for a reader of the stored entries and scales themselves, as the decode-step kernels are)."""
        key_scales, value_scales = self.scales(layer_idx)
        self.format.write(self.keys[layer_idx], key_scales, self.write_positions, key)
        self.format.write(self.values[layer_idx], value_scales, self.write_positions, value)

    def reusable_prefix(self, owner: Any, token_ids: Sequence[int]) -> int:
        """How many leading positions hold exactly the first tokens of ``token_ids`` computed for
        ``owner``. At least one token is always left to prefill, whose logits start the answer."""
        if owner is not self.owner:
            return 0
        limit = min(len(self.tokens), len(token_ids) - 1)
        same = 0
        while same < limit and self.tokens[same] == token_ids[same]:
            same += 1
        return same

    def reset(self) -> None:
        """Treat every position as empty (a new clip or model state the entries no longer match)."""
        self.tokens = []
        self.owner = None
