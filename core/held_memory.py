"""Measuring what a loaded model holds: its weights' tensor bytes by part and dtype, and how much
the caching allocator's reserved device memory grows over a build step.

The engine measures while it builds (:class:`~framewise.core.memory_plan.HeldMemory` carries the
figures); the estimate made before loading (:mod:`framewise.core.memory_plan`) is checked against them.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

from framewise.core.decoding.host_embedding import HostEmbedding
from framewise.core.graph_capture import memory_reserved
from framewise.core.memory_plan import WeightBytes

LANGUAGE_PART = "language model"
VISION_PART = "vision tower"


def weight_shares(model: torch.nn.Module, vision_tower: torch.nn.Module) -> tuple[WeightBytes, ...]:
    """The bytes of ``model``'s weights (parameters and persistent buffers: what its checkpoint
    holds) by part and dtype, the largest share of each part first; tensors of ``vision_tower``
    are the vision tower's, the rest the language model's. A tensor held under two names (tied
    embeddings) counts once; an input embedding held by the host (:func:`host_weight_bytes`) does
    not count."""
    vision = {_storage_key(tensor) for tensor in vision_tower.state_dict(keep_vars=True).values()}
    sizes: dict[tuple[str, str], int] = {}
    seen = {_storage_key(module.weight) for module in _held_by_host(model)}
    for tensor in model.state_dict(keep_vars=True).values():
        key = _storage_key(tensor)
        if key in seen or tensor.numel() == 0:
            continue
        seen.add(key)
        share = (VISION_PART if key in vision else LANGUAGE_PART, str(tensor.dtype).removeprefix("torch."))
        sizes[share] = sizes.get(share, 0) + tensor.numel() * tensor.element_size()
    order = sorted(sizes, key=lambda share: (share[0] != LANGUAGE_PART, -sizes[share]))
    return tuple(WeightBytes(part, dtype, sizes[(part, dtype)]) for part, dtype in order)


def host_weight_bytes(model: torch.nn.Module) -> int:
    """Bytes of ``model``'s weights kept in the host's memory: its input embedding where a
    :class:`~framewise.core.decoding.host_embedding.HostEmbedding` holds it, else none."""
    return sum(module.weight.numel() * module.weight.element_size() for module in _held_by_host(model))


def _held_by_host(model: torch.nn.Module) -> list[HostEmbedding]:
    return [module for module in model.modules() if isinstance(module, HostEmbedding)]


def _storage_key(tensor: torch.Tensor) -> tuple[int, int]:
    """Where a tensor's elements lie: views of one stacked matrix differ, two names of one tensor do not."""
    return tensor.data_ptr(), tensor.numel() * tensor.element_size()


@contextmanager
def recording_growth(device: torch.device, into: dict[str, int], step: str) -> Iterator[None]:
    """Record in ``into[step]`` how much the block grows the reserved memory of ``device`` (on CUDA
    only); a block that raises leaves no record of ``step``."""
    into.pop(step, None)
    before = memory_reserved(device)
    yield
    if device.type == "cuda":
        into[step] = memory_reserved(device) - before
