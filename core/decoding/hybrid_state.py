"""The decoder state of a hybrid language model, whose layers are full attention or linear
attention (Gated DeltaNet), allocated once for a maximum context.

Full-attention layers keep keys and values in a :class:`StaticKVCache` holding those layers only;
:class:`HybridState` stands in for transformers' cache inside them (``update`` with the model's
layer index). Each linear-attention layer keeps a convolution state (the last ``kernel`` inputs
of its q/k/v channels) and a recurrent state (key_dim x value_dim per head, float32), the same
size at any context length.

A KV cache is cut back by writing over positions after a prefix; a linear layer's state cannot be
cut back, it has absorbed every token. :meth:`HybridState.snapshot` copies the linear states and
records which tokens they hold; :meth:`HybridState.restore` puts them back, so that a stopped
answer, an edited follow-up or a changed setting continues from exactly that prefix. The keys and
values of the prefix are not copied: positions before it are never written again while the cache
keeps that prefix, which :meth:`HybridState.restorable` checks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import torch

from framewise.core.decoding.kv_cache import StaticKVCache
from framewise.core.quantization.kv_formats import FLOAT_KV_CACHE, KVCacheFormat

FULL_ATTENTION = "full_attention"
LINEAR_ATTENTION = "linear_attention"


@dataclass(frozen=True)
class LinearLayerShape:
    """The state sizes of one linear-attention layer: ``conv_channels`` (query, key and value
    channels together) by ``conv_kernel`` taps; ``heads`` value heads of ``key_dim`` x ``value_dim``."""

    conv_channels: int
    conv_kernel: int
    heads: int
    key_dim: int
    value_dim: int

    def state_bytes(self, dtype: torch.dtype) -> int:
        """Bytes of one layer's states: the convolution's in ``dtype``, the recurrent one in float32."""
        conv = self.conv_channels * self.conv_kernel * torch.empty(0, dtype=dtype).element_size()
        return conv + self.heads * self.key_dim * self.value_dim * 4


@dataclass(frozen=True)
class HybridSnapshot:
    """Copies of every linear layer's states taken after ``tokens`` (for ``owner``); ``conv`` and
    ``recurrent`` in layer order, shaped as :class:`HybridState`'s."""

    tokens: tuple[int, ...]
    owner: Any
    conv: tuple[torch.Tensor, ...]
    recurrent: tuple[torch.Tensor, ...]

    @property
    def length(self) -> int:
        """How many positions the snapshot's states hold."""
        return len(self.tokens)


class HybridState:
    """The state of a model whose layer ``i`` is ``layer_kinds[i]`` (:data:`FULL_ATTENTION` or
    :data:`LINEAR_ATTENTION`), for ``max_tokens`` positions.

    ``kv``: a :class:`StaticKVCache` of the full-attention layers, in their order, its entries in
    ``cache_format``. ``conv_states[j]``
    (1, conv_channels, conv_kernel) in ``dtype`` and ``recurrent_states[j]`` (1, heads, key_dim,
    value_dim) float32 belong to the j-th linear layer. ``kv.tokens`` and ``kv.owner`` say which
    tokens, computed for which items, the whole state holds.
    """

    def __init__(
        self,
        layer_kinds: Sequence[str],
        kv_heads: int,
        head_dim: int,
        linear: LinearLayerShape,
        max_tokens: int,
        dtype: torch.dtype,
        device: torch.device,
        cache_format: KVCacheFormat = FLOAT_KV_CACHE,
    ) -> None:
        unknown = set(layer_kinds) - {FULL_ATTENTION, LINEAR_ATTENTION}
        if unknown:
            raise ValueError(f"unknown layer kinds {sorted(unknown)}: a hybrid state holds {FULL_ATTENTION} "
                             f"and {LINEAR_ATTENTION} layers")
        self.layer_kinds = tuple(layer_kinds)
        self._kv_slot = _slots(layer_kinds, FULL_ATTENTION)
        self._linear_slot = _slots(layer_kinds, LINEAR_ATTENTION)
        self.kv = StaticKVCache(len(self._kv_slot), kv_heads, head_dim, max_tokens, dtype, device, cache_format)
        self.linear = linear
        conv_shape = (1, linear.conv_channels, linear.conv_kernel)
        recurrent_shape = (1, linear.heads, linear.key_dim, linear.value_dim)
        self.conv_states = [torch.zeros(conv_shape, dtype=dtype, device=device) for _ in self._linear_slot]
        self.recurrent_states = [
            torch.zeros(recurrent_shape, dtype=torch.float32, device=device) for _ in self._linear_slot
        ]
        self.device = device

    @staticmethod
    def bytes_needed(
        layer_kinds: Sequence[str], kv_heads: int, head_dim: int, linear: LinearLayerShape, max_tokens: int,
        dtype: torch.dtype, cache_format: KVCacheFormat = FLOAT_KV_CACHE,
    ) -> int:
        """Device memory a state of these sizes takes: keys and values of the full-attention layers
        for ``max_tokens`` positions in ``cache_format``, and the linear layers' states (the same at
        any length)."""
        full = sum(kind == FULL_ATTENTION for kind in layer_kinds)
        linear_layers = sum(kind == LINEAR_ATTENTION for kind in layer_kinds)
        kv = StaticKVCache.bytes_needed(full, kv_heads, head_dim, max_tokens, dtype, cache_format)
        return kv + linear_layers * linear.state_bytes(dtype)

    @property
    def nbytes(self) -> int:
        linear = sum(t.numel() * t.element_size() for t in (*self.conv_states, *self.recurrent_states))
        return self.kv.nbytes + linear

    @property
    def max_tokens(self) -> int:
        return self.kv.max_tokens

    # ------------------------------------------------------------------ per layer

    def conv_state(self, layer: int) -> torch.Tensor:
        """The convolution state (1, conv_channels, conv_kernel) of the model's linear layer ``layer``."""
        return self.conv_states[self._linear_slot[layer]]

    def recurrent_state(self, layer: int) -> torch.Tensor:
        """The recurrent state (1, heads, key_dim, value_dim) of the model's linear layer ``layer``."""
        return self.recurrent_states[self._linear_slot[layer]]

    def update(self, key: torch.Tensor, value: torch.Tensor, layer_idx: int, *args: Any, **kwargs: Any):
        """transformers' cache call from the model's full-attention layer ``layer_idx``: see
        :meth:`StaticKVCache.update`."""
        return self.kv.update(key, value, self.cache_slot(layer_idx))

    def cache_slot(self, layer: int) -> int:
        """Where the model's full-attention layer ``layer`` keeps its keys and values: its layer index
        in :attr:`kv` (``kv.keys[slot]``, ``kv.scales(slot)``)."""
        return self._kv_slot[layer]

    # ------------------------------------------------------------------ whole state

    def reset(self) -> None:
        """Empty the state: linear states zero, no positions held (a new conversation starts from here)."""
        for state in (*self.conv_states, *self.recurrent_states):
            state.zero_()
        self.kv.reset()

    def snapshot(self, into: HybridSnapshot | None = None) -> HybridSnapshot:
        """Copies of the linear states as they are now, with the tokens the state holds; into the
        tensors of ``into`` where given (a snapshot kept for this state, so no memory is allocated)."""
        if into is None:
            conv = tuple(state.clone() for state in self.conv_states)
            recurrent = tuple(state.clone() for state in self.recurrent_states)
        else:
            conv, recurrent = into.conv, into.recurrent
            for copy, state in zip((*conv, *recurrent), (*self.conv_states, *self.recurrent_states)):
                copy.copy_(state)
        return HybridSnapshot(tuple(self.kv.tokens), self.kv.owner, conv, recurrent)

    def restorable(self, snapshot: HybridSnapshot) -> bool:
        """Whether the keys and values of ``snapshot``'s tokens are still in the cache: it holds
        them, or more tokens after them, for the same owner."""
        return snapshot.owner is self.kv.owner and tuple(self.kv.tokens[: snapshot.length]) == snapshot.tokens

    def restore(self, snapshot: HybridSnapshot) -> None:
        """Put the linear states of ``snapshot`` back; the state then holds its tokens.

        Raises ValueError when the cache no longer holds their keys and values (:meth:`restorable`)."""
        if not self.restorable(snapshot):
            raise ValueError(
                f"the snapshot after {snapshot.length} tokens no longer matches the cache, which holds "
                f"{len(self.kv.tokens)} tokens of another conversation or prefix: prefill from the start"
            )
        for state, copy in zip((*self.conv_states, *self.recurrent_states), (*snapshot.conv, *snapshot.recurrent)):
            state.copy_(copy)
        self.kv.tokens = list(snapshot.tokens)


def _slots(layer_kinds: Sequence[str], kind: str) -> dict[int, int]:
    """Model layer index -> index among the layers of ``kind``."""
    layers = [index for index, each in enumerate(layer_kinds) if each == kind]
    return {layer: slot for slot, layer in enumerate(layers)}
