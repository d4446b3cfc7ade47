"""A faster form, for a vision tower on the CPU, of the op it runs first on every patch.

A patch embedding is a 3-D convolution whose kernel equals its stride: each output row is one
patch's values times the kernel, so the whole of it is one matrix product over the flattened
patches. Torch's CPU convolution takes several times as long for the same sums (docs/benchmarks.md,
"Reading long clips on 2 cores"). On the GPU the encoder's fused forward already computes the
patch embedding as a product; this form is for the eager tower on the CPU.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class PatchProduct(nn.Module):
    """A :class:`torch.nn.Conv3d` whose kernel equals its stride (no padding, dilation or groups)
    as one matrix product: patches (n, channels, *kernel) → (n, out_channels, 1, 1, 1). It holds
    the convolution's own weight (out_channels, channels, *kernel) and bias."""

    def __init__(self, conv: nn.Conv3d) -> None:
        super().__init__()
        self.weight = conv.weight
        self.bias = conv.bias
        self.kernel_size = tuple(conv.kernel_size)

    def forward(self, patches: torch.Tensor) -> torch.Tensor:
        if tuple(patches.shape[2:]) != self.kernel_size:
            shape = tuple(patches.shape[2:])
            raise ValueError(f"patches of {shape} values: this product takes {self.kernel_size} alone")
        flat_weight = self.weight.view(self.weight.shape[0], -1)
        rows = F.linear(patches.reshape(patches.shape[0], -1), flat_weight, self.bias)
        return rows.view(*rows.shape, 1, 1, 1)


def use_cpu_forms(tower: nn.Module) -> int:
    """Replace, inside ``tower``, each patch-embedding convolution by a :class:`PatchProduct`; how
    many were replaced. The parameters and their names stay as they were."""
    replaced = 0
    for parent in list(tower.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, nn.Conv3d) and _is_patch_embedding(child):
                setattr(parent, name, PatchProduct(child))
                replaced += 1
    return replaced


def _is_patch_embedding(conv: nn.Conv3d) -> bool:
    """Whether ``conv`` maps each kernel-sized block of its input to one output position alone."""
    return (
        tuple(conv.kernel_size) == tuple(conv.stride)
        and all(pad == 0 for pad in conv.padding)
        and all(step == 1 for step in conv.dilation)
        and conv.groups == 1
        and conv.padding_mode == "zeros"
    )
