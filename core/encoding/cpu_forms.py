"""Faster forms, for a vision tower on the CPU, put in at load by :func:`use_cpu_forms`.

A patch embedding is a 3-D convolution whose kernel equals its stride: each output row is one
patch's values times the kernel, so the whole of it is one matrix product over the flattened
patches. Torch's CPU convolution takes several times as long for the same sums (docs/benchmarks.md,
"Reading long clips on 2 cores"). On the GPU the encoder's fused forward already computes the
patch embedding as a product; this form is for the eager tower on the CPU.

The tower's passes are then mostly matrix products, and a CPU with bfloat16 dot products in
hardware (AVX512-BF16, AMX) multiplies bfloat16 at over twice its float32 rate. Where it has them
and ``model.dtype`` leaves the choice to Framewise (:func:`cpu_tower_dtype`), the tower's weights
are held in bfloat16, so that every product, and the elementwise work between them, runs in
bfloat16, while what it returns is in the activations' dtype, as the decoder expects. (Casting
each product's inputs to bfloat16 and its results back, the rest in float32, saved measurably
less than the whole tower in bfloat16.) ``model.dtype = "float32"`` keeps it in float32.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from framewise.core.quantization.registry import format_settings


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


def cpu_multiplies_bf16() -> bool:
    """Whether this CPU multiplies bfloat16 in hardware: AVX512-BF16's dot products or AMX's tiles
    (every CPU with AMX tiles has their bfloat16 products). Other CPUs, ARM ones among them, are
    not counted. (torch's ``mkldnn`` bfloat16 check is not this one: it also passes on AVX-512
    CPUs without bfloat16 products, which convert bfloat16 to float32 to multiply it.)"""
    return torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()


def cpu_tower_dtype(dtype_setting: str, activations: torch.dtype) -> torch.dtype:
    """The dtype a vision tower on the CPU runs in, for the ``model.dtype`` setting and the
    activations' dtype it gave: bfloat16 where the setting leaves the choice to Framewise (``auto``
    or a quantized weight format, whose activations are float32 on the CPU) and the CPU multiplies
    bfloat16 in hardware (:func:`cpu_multiplies_bf16`); else ``activations``, so that a named dtype
    (``float32`` among them) runs the tower in that dtype."""
    chosen_by_framewise = dtype_setting == "auto" or dtype_setting in format_settings()
    if chosen_by_framewise and activations == torch.float32 and cpu_multiplies_bf16():
        return torch.bfloat16
    return activations


def use_cpu_forms(tower: nn.Module, dtype: torch.dtype) -> int:
    """Replace, inside ``tower``, each patch-embedding convolution by a :class:`PatchProduct`, and
    run it in ``dtype`` (:func:`run_in`); how many convolutions were replaced. The parameters keep
    their names and shapes."""
    run_in(tower, dtype)
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


def run_in(tower: nn.Module, dtype: torch.dtype) -> None:
    """Hold ``tower``'s parameters in ``dtype``, take its inputs' floating tensors in ``dtype`` and
    give back its outputs' in the dtype the parameters had; nothing when they are in ``dtype``
    already. Its buffers (the rotary frequencies, from which the angles are computed in float32)
    keep their dtype. A family's adapter need not know: what it passes and gets is as before."""
    loaded = next(tower.parameters()).dtype
    if loaded == dtype:
        return
    for parameter in tower.parameters():
        parameter.data = parameter.data.to(dtype)
    tower.register_forward_pre_hook(
        lambda module, args, kwargs: (_floats_in(args, dtype), _floats_in(kwargs, dtype)), with_kwargs=True
    )
    tower.register_forward_hook(lambda module, inputs, output: _floats_in(output, loaded))


def _floats_in(value: Any, dtype: torch.dtype) -> Any:
    """``value`` with each floating tensor in it cast to ``dtype``: a tensor, a list or tuple of
    them, or a mapping (a transformers output, changed in place)."""
    if isinstance(value, torch.Tensor):
        return value.to(dtype) if value.is_floating_point() else value
    if type(value) in (list, tuple):
        return type(value)(_floats_in(item, dtype) for item in value)
    if isinstance(value, dict):
        for key in list(value):
            value[key] = _floats_in(value[key], dtype)
    return value
