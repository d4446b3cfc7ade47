"""Streaming a safetensors checkpoint into a module tree, one tensor at a time, with FP8 linears.

The module tree is built beforehand by the model family, best on the meta device (then no
weight exists anywhere before it is read). Each tensor is read from the memory-mapped files,
moved to the target device and put in its place:

- an e4m3 weight from an FP8 checkpoint replaces its ``nn.Linear`` by an
  :class:`~framewise.core.quantization.linear.Fp8Linear` with its scale;
- a weight of a linear layer the caller chose to quantize on load is moved to the device a band
  of rows at a time in the checkpoint's precision, quantized there
  (:func:`~framewise.core.quantization.fp8.quantize_onto`), and replaced likewise; the target
  device never holds a full-precision copy of a weight that ends up in FP8, only one band and its
  float32 temporaries;
- anything else is cast to the model's dtype (floats only) and set as the parameter or buffer.

Linear layers the caller names as a stack (a decoder layer's q/k/v projections, its gate/up)
whose weights all end up in FP8 are written into one (rows of all, K) e4m3 tensor and one scale
tensor, each layer's weight and scale a view of its rows: whoever multiplies by the stack
(the fused decode step and prefill) finds it already laid out, and never copies the weights into
a new stack and frees the old ones, which would leave the allocator's segments partly used.

Tied weights (an output head sharing the input embedding) come apart when one of them is set:
the family ties them again after loading, as ``from_pretrained`` does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import torch
from safetensors import safe_open
from torch import nn

from framewise.core.errors import QuantizationFormatError
from framewise.core.quantization.formats import (
    BLOCK_SIZE,
    TensorHeader,
    WeightFormat,
    quantized_weight_scales,
    read_tensor_headers,
    scale_shape,
)
from framewise.core.quantization.fp8 import QUANTIZE_ON_LOAD_SCHEME, quantize_onto
from framewise.core.quantization.linear import Fp8Linear


@dataclass
class LoadReport:
    """What :func:`load_checkpoint` did. ``fp8_from_checkpoint`` and ``quantized_on_load`` name
    the linear modules now in FP8; ``unexpected`` the stored tensors the module tree has no place
    for; ``mismatched`` those whose shape differs from their place's (left unloaded); ``missing``
    the parameters and buffers still on the meta device (never loaded)."""

    fp8_from_checkpoint: list[str] = field(default_factory=list)
    quantized_on_load: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    mismatched: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)


def load_checkpoint(
    model: nn.Module,
    files: Sequence[Path],
    fmt: WeightFormat,
    device: torch.device,
    dtype: torch.dtype,
    quantize_on_load: Callable[[str], bool] = lambda module_name: False,
    scheme: Literal["block", "channel"] = QUANTIZE_ON_LOAD_SCHEME,
    stacked_with: Callable[[str], Sequence[str] | None] = lambda module_name: None,
) -> LoadReport:
    """Fill ``model`` (in place) with the tensors of the safetensors ``files`` on ``device``.

    ``fmt`` is the checkpoint's format (:func:`~framewise.core.quantization.formats.detect_weight_format`);
    its quantized weights and scales are checked before anything is read. ``quantize_on_load``
    says, by module name, which of the remaining ``nn.Linear`` layers to quantize with ``scheme``
    (the family passes its language model's linear layers). ``stacked_with`` names, by module
    name, the linear layers stacked with it in row order (``None``: none); a stack whose layers
    all end up in FP8 with one scheme (block-scaled: every layer but the last a whole number of
    blocks high) shares one weight and one scale tensor. Raises QuantizationFormatError when
    the checkpoint's scales do not match its weights, or an FP8 weight belongs to a module that
    is not a linear layer.
    """
    headers = read_tensor_headers(files)
    scales = quantized_weight_scales(headers, fmt)
    scale_names = set(scales.values())
    stacks = _plan_stacks(model, headers, fmt, scales, quantize_on_load, scheme, stacked_with)
    report = LoadReport()
    with ExitStack() as stack:
        handles = {file: stack.enter_context(safe_open(file, framework="pt", device="cpu")) for file in files}
        file_of = {name: file for file, handle in handles.items() for name in handle.keys()}

        def read(name: str) -> torch.Tensor:
            return handles[file_of[name]].get_tensor(name)

        for name in file_of:
            if name in scale_names:
                continue  # read with its weight
            module_name, _, leaf = name.rpartition(".")
            module = _submodule(model, module_name)
            place = _place(module, leaf)
            if place is None:
                report.unexpected.append(name)
            elif tuple(place.shape) != headers[name].shape:
                report.mismatched.append(name)
            elif name in scales:
                _check_fp8_module(module_name, module)
                scale = _finite(scales[name], read(scales[name])).reshape(fmt.scale_shape(headers[name].shape))
                stored = _stored_fp8_linear(module_name, module, read(name), scale, fmt, stacks.get(module_name), device)
                _replace(model, module_name, stored)
                report.fp8_from_checkpoint.append(module_name)
            elif leaf == "weight" and isinstance(module, nn.Linear) and quantize_on_load(module_name):
                quantized = _quantized_linear(module_name, module, read(name), scheme, stacks.get(module_name), device)
                _replace(model, module_name, quantized)
                report.quantized_on_load.append(module_name)
            else:
                _set_tensor(module, leaf, _cast(read(name).to(device), dtype))
    report.missing = meta_tensors(model)
    return report


def _check_fp8_module(module_name: str, module: nn.Module | None) -> None:
    """Raise QuantizationFormatError unless ``module``, whose weight is stored in FP8, is a linear layer."""
    if not isinstance(module, nn.Linear):
        raise QuantizationFormatError(
            f"{module_name}.weight is stored in FP8, but {module_name} ({type(module).__name__}) is not a linear layer; "
            "Framewise runs FP8 linear layers only. Choose a checkpoint that quantizes only linear layers."
        )


def _finite(name: str, scale: torch.Tensor) -> torch.Tensor:
    """``scale`` (the stored tensor ``name``), or QuantizationFormatError where any of it is NaN or
    infinite: every weight it scales would be, and the answers nonsense."""
    bad = int((~torch.isfinite(scale)).sum())
    if bad:
        raise QuantizationFormatError(
            f"{name} holds {bad} of {scale.numel()} scales that are not finite (NaN or infinite), so the weights "
            "it scales cannot be used; the download is likely damaged. Repeat the download."
        )
    return scale


def _stored_fp8_linear(
    module_name: str,
    module: nn.Linear,
    weight: torch.Tensor,
    scale: torch.Tensor,
    fmt: WeightFormat,
    stack: _Stack | None,
    device: torch.device,
) -> Fp8Linear:
    """``module`` as the checkpoint stores it: its e4m3 ``weight`` (N, K) and ``scale`` (in
    ``fmt``'s shape for it) on ``device``, in its rows of ``stack`` where it has one."""
    if stack is not None:
        weight, scale = stack.place(module_name, weight, scale, device)
    else:
        weight, scale = weight.to(device), scale.to(device, torch.float32)
    return Fp8Linear(weight, scale, fmt.scheme, _bias_of(module))


def _quantized_linear(
    module_name: str,
    module: nn.Linear,
    weight: torch.Tensor,
    scheme: Literal["block", "channel"],
    stack: _Stack | None,
    device: torch.device,
) -> Fp8Linear:
    """``module`` with its full-precision ``weight`` (N, K) quantized onto ``device`` with ``scheme``,
    into its rows of ``stack`` where it has one."""
    slot = stack.slot(module_name, device) if stack is not None else None
    quantized, scales = quantize_onto(weight, scheme, device, out=slot)
    return Fp8Linear(quantized, scales, scheme, _bias_of(module))


class _Stack:
    """One weight and one scale tensor for a stack of FP8 linear layers, allocated when the first
    of them is read; each layer gets the views of its rows.

    ``weight_shapes`` maps each layer's module name, in row order, to its (N, K) weight shape."""

    def __init__(self, weight_shapes: dict[str, tuple[int, int]], scheme: Literal["block", "channel"]) -> None:
        self.weight_rows: dict[str, tuple[int, int]] = {}
        self.scale_rows: dict[str, tuple[int, int]] = {}
        row = scale_row = 0
        for name, shape in weight_shapes.items():
            scale_height = scale_shape(scheme, shape)[0]
            self.weight_rows[name] = (row, row + shape[0])
            self.scale_rows[name] = (scale_row, scale_row + scale_height)
            row, scale_row = row + shape[0], scale_row + scale_height
        self.shape = (row, next(iter(weight_shapes.values()))[1])
        self.scale_shape = (scale_row, scale_shape(scheme, self.shape)[1])
        self._tensors: tuple[torch.Tensor, torch.Tensor] | None = None

    def slot(self, name: str, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """The (weight, scale) views for layer ``name``, to be filled."""
        if self._tensors is None:
            self._tensors = (torch.empty(self.shape, dtype=torch.float8_e4m3fn, device=device),
                             torch.empty(self.scale_shape, dtype=torch.float32, device=device))
        weight, scale = self._tensors
        return weight[slice(*self.weight_rows[name])], scale[slice(*self.scale_rows[name])]

    def place(
        self, name: str, weight: torch.Tensor, scale: torch.Tensor, device: torch.device
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Copy layer ``name``'s stored e4m3 ``weight`` and ``scale`` into its views; returns them."""
        weight_view, scale_view = self.slot(name, device)
        weight_view.copy_(weight)
        scale_view.copy_(scale)
        return weight_view, scale_view


def _plan_stacks(
    model: nn.Module,
    headers: dict[str, TensorHeader],
    fmt: WeightFormat,
    scales: dict[str, str],
    quantize_on_load: Callable[[str], bool],
    scheme: Literal["block", "channel"],
    stacked_with: Callable[[str], Sequence[str] | None],
) -> dict[str, _Stack]:
    """The stack of each linear layer that will share one: by module name, for every layer of a
    stack whose weights all end up in FP8 the same way (all stored in FP8, or all quantized on
    load), with one column count, and in linear layers of the stored shapes."""
    stacks: dict[str, _Stack] = {}
    for name in headers:
        module_name = name.removesuffix(".weight")
        members = stacked_with(module_name) if name.endswith(".weight") else None
        if not members or module_name != members[0]:
            continue
        shapes = {member: headers[f"{member}.weight"].shape for member in members if f"{member}.weight" in headers}
        if len(shapes) != len(members) or len({shape[1] for shape in shapes.values()}) != 1:
            continue
        stored = {f"{member}.weight" in scales for member in members}
        if stored == {True}:
            member_scheme = "block" if fmt.scheme == "block" else "channel"
        elif stored == {False} and all(quantize_on_load(member) for member in members):
            member_scheme = scheme
        else:
            continue
        modules = [_submodule(model, member) for member in members]
        if not all(isinstance(module, nn.Linear) and tuple(module.weight.shape) == shapes[member]
                   for module, member in zip(modules, members)):
            continue
        if member_scheme == "block" and any(shapes[member][0] % BLOCK_SIZE for member in members[:-1]):
            continue  # a block row would span two layers
        stack = _Stack({member: shapes[member] for member in members}, member_scheme)
        stacks.update(dict.fromkeys(members, stack))
    return stacks


def meta_tensors(model: nn.Module) -> list[str]:
    """Names of the parameters and buffers of ``model`` that are still on the meta device."""
    tensors = [*model.named_parameters(remove_duplicate=False), *model.named_buffers(remove_duplicate=False)]
    return sorted(name for name, tensor in tensors if tensor.is_meta)


def _submodule(model: nn.Module, name: str) -> nn.Module | None:
    try:
        return model.get_submodule(name)
    except AttributeError:
        return None


def _place(module: nn.Module | None, leaf: str) -> torch.Tensor | None:
    """``module``'s parameter or buffer ``leaf``, or None when it has no such tensor."""
    if module is None:
        return None
    if leaf in module._parameters:
        return module._parameters[leaf]
    return module._buffers.get(leaf)


def _replace(model: nn.Module, name: str, replacement: nn.Module) -> None:
    parent_name, _, child = name.rpartition(".")
    setattr(model.get_submodule(parent_name), child, replacement)


def _bias_of(module: nn.Module) -> torch.Tensor | None:
    """A linear layer's bias, to carry over into its FP8 replacement (may still be on meta: the
    checkpoint's bias, read later, replaces it)."""
    bias = getattr(module, "bias", None)
    return None if bias is None else bias.detach()


def _cast(tensor: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return tensor.to(dtype) if tensor.is_floating_point() else tensor


def _set_tensor(module: nn.Module, leaf: str, tensor: torch.Tensor) -> None:
    """Put ``tensor`` in place of ``module``'s parameter or buffer ``leaf``."""
    if leaf in module._parameters:
        module._parameters[leaf] = nn.Parameter(tensor, requires_grad=False)
    else:
        module._buffers[leaf] = tensor
