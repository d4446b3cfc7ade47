"""A static KV cache: every layer's keys and values for a fixed number of positions, allocated once.

The cache stands in for transformers' ``Cache`` inside the language model's attention layers (they
call only ``update``). Where the next forward writes and how much of the cache it reads are set
before the forward: ``write_positions`` (a device tensor, so a captured graph reads it at replay)
and ``view_length`` (a Python int, baked into a graph at capture). A decode step therefore reads
``view_length`` positions, its context-length bucket, never the whole cache.

The cache also remembers which token ids its leading positions hold and what they were computed
with (``owner``: the clip), so a follow-up question re-uses the longest common prefix.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch


class StaticKVCache:
    """Keys and values of ``layers`` layers for ``max_tokens`` positions.

    ``keys[layer]`` and ``values[layer]``: (1, kv_heads, max_tokens, head_dim) in ``dtype``.
    ``tokens[i]`` is the id whose entries sit at position ``i``; positions from ``len(tokens)`` on
    hold nothing valid.
    """

    def __init__(
        self, layers: int, kv_heads: int, head_dim: int, max_tokens: int, dtype: torch.dtype, device: torch.device
    ) -> None:
        shape = (1, kv_heads, max_tokens, head_dim)
        self.keys = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(layers)]
        self.values = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(layers)]
        self.max_tokens = max_tokens
        self.device = device
        self.write_positions = torch.zeros(1, dtype=torch.long, device=device)
        self.view_length = max_tokens
        self.tokens: list[int] = []
        self.owner: Any = None

    @staticmethod
    def bytes_needed(layers: int, kv_heads: int, head_dim: int, max_tokens: int, dtype: torch.dtype) -> int:
        """Device memory a cache of these sizes takes (keys and values)."""
        return 2 * layers * kv_heads * head_dim * max_tokens * torch.empty(0, dtype=dtype).element_size()

    @property
    def nbytes(self) -> int:
        return sum(tensor.numel() * tensor.element_size() for tensor in (*self.keys, *self.values))

    @property
    def kv(self) -> StaticKVCache:
        """The cache itself: a model's whole decoder state, whose keys and values are :attr:`kv`'s
        in a hybrid one (see :class:`~framewise.core.decoding.defs.DecoderState`)."""
        return self

    def update(self, key: torch.Tensor, value: torch.Tensor, layer_idx: int, *args: Any, **kwargs: Any):
        """Write ``key``/``value`` (1, kv_heads, n, head_dim) at ``write_positions`` (n,) and return the
        layer's first ``view_length`` positions, keys then values, as views."""
        self.keys[layer_idx].index_copy_(2, self.write_positions, key)
        self.values[layer_idx].index_copy_(2, self.write_positions, value)
        return self.keys[layer_idx][:, :, : self.view_length], self.values[layer_idx][:, :, : self.view_length]

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
