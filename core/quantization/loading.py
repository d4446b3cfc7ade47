"""Streaming a safetensors checkpoint into a module tree, one tensor at a time, in a weight format.

The module tree is built beforehand by the model family, best on the meta device
(:func:`parameters_on_meta`: then no weight exists anywhere before it is read). Each tensor is
read from the memory-mapped files, moved to the target device and put in its place. The weight
format (:class:`~framewise.core.quantization.weight_format.WeightFormat`) says what becomes of a
linear layer:

- a weight the checkpoint stores quantized replaces its ``nn.Linear`` by the format's layer, built
  from it and its scale;
- a float weight of a linear layer the format quantizes while loading (every one the family does
  not keep in floating point) is handed to the format as read, memory-mapped; the FP8 formats move
  it to the device a band of rows at a time and quantize it there
  (:func:`~framewise.core.quantization.fp8.quantize_onto`), so the device never holds a
  full-precision copy of a weight that ends up quantized, only one band and its temporaries;
- anything else is cast to the model's dtype (floats only) and set as the parameter or buffer.

A layer stored quantized that the family keeps in floating point (a vision tower's, whose graphs
read plain weights) is turned back into an ``nn.Linear`` once loaded.

Linear layers the caller names as a stack (a decoder layer's q/k/v projections, its gate/up)
whose weights all end up quantized are written into one (rows of all, K) weight tensor and one
scale tensor, each layer's weight and scale a view of its rows: whoever multiplies by the stack
(the fused decode step and prefill) finds it already laid out, and never copies the weights into
a new stack and frees the old ones, which would leave the allocator's segments partly used.

Tied weights (an output head sharing the input embedding) come apart when one of them is set:
the family ties them again after loading, as ``from_pretrained`` does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors import safe_open
from torch import nn

from framewise.core.errors import QuantizationFormatError
from framewise.core.quantization.formats import TensorHeader, read_tensor_headers
from framewise.core.quantization.weight_format import WeightFormat

# Which linear layers stay in floating point, by module name (the family says).
KeepFloat = Callable[[str], bool]


@dataclass
class LoadReport:
    """What :func:`load_checkpoint` did. ``quantized_from_checkpoint`` and ``quantized_on_load``
    name the linear modules now quantized; ``unexpected`` the stored tensors the module tree has no
    place for; ``mismatched`` those whose shape differs from their place's (left unloaded);
    ``missing`` the parameters and buffers still on the meta device (never loaded)."""

    quantized_from_checkpoint: list[str] = field(default_factory=list)
    quantized_on_load: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    mismatched: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)


def load_checkpoint(
    model: nn.Module,
    files: Sequence[Path],
    weight_format: WeightFormat,
    device: torch.device,
    dtype: torch.dtype,
    keep_float: KeepFloat = lambda module_name: False,
    stacked_with: Callable[[str], Sequence[str] | None] = lambda module_name: None,
    on_host: Callable[[str], bool] = lambda name: False,
) -> LoadReport:
    """Fill ``model`` (in place) with the tensors of the safetensors ``files`` on ``device``, its
    linear layers in ``weight_format`` (:func:`~framewise.core.quantization.registry.choose_weight_format`)
    except those ``keep_float`` names, the rest in ``dtype``.

    The checkpoint's tensors are checked against the format before anything is read.
    ``stacked_with`` names, by module name, the linear layers stacked with it in row order
    (``None``: none); a stack whose layers all end up quantized the same way (all stored so, or
    all quantized on load) shares one weight and one scale tensor where the format's products can
    stack them. A float tensor ``on_host`` names stays in the host's memory (an input embedding
    the decoder reads there), never taking the device's. Raises QuantizationFormatError when the
    checkpoint's tensors do not match the format, or a quantized weight belongs to a module that is
    not a linear layer.
    """
    headers = read_tensor_headers(files)
    scales = weight_format.checked_scales(headers)
    stacks = _plan_stacks(model, headers, weight_format, scales, keep_float, stacked_with)
    streaming = _Streaming(model, weight_format, keep_float, device, dtype, headers, scales, stacks, on_host)
    with ExitStack() as opened:
        handles = {file: opened.enter_context(safe_open(file, framework="pt", device="cpu")) for file in files}
        file_of = {name: file for file, handle in handles.items() for name in handle.keys()}
        scale_names = set(scales.values())
        for name in file_of:
            if name not in scale_names:  # a scale is read with its weight
                streaming.load(name, lambda stored: handles[file_of[stored]].get_tensor(stored))
    streaming.float_where_kept()
    streaming.report.missing = meta_tensors(model)
    return streaming.report


@dataclass
class _Streaming:
    """One :func:`load_checkpoint`: its arguments, the checkpoint's headers, its quantized weights'
    scales (weight name -> scale name), the planned stacks and the report so far."""

    model: nn.Module
    weight_format: WeightFormat
    keep_float: KeepFloat
    device: torch.device
    dtype: torch.dtype
    headers: dict[str, TensorHeader]
    scales: dict[str, str]
    stacks: dict[str, _Stack]
    on_host: Callable[[str], bool]
    report: LoadReport = field(default_factory=LoadReport)

    def load(self, name: str, read: Callable[[str], torch.Tensor]) -> None:
        """Put the stored tensor ``name`` (``read`` reads any stored tensor) in its place, and say
        in the report what became of it."""
        module_name, _, leaf = name.rpartition(".")
        module = _submodule(self.model, module_name)
        place = _place(module, leaf)
        fmt = self.weight_format
        if place is None:
            self.report.unexpected.append(name)
        elif tuple(place.shape) != self.headers[name].shape:
            self.report.mismatched.append(name)
        elif name in self.scales:
            linear = _stored_linear_module(module_name, module, fmt)
            scale = _finite(self.scales[name], read(self.scales[name]))
            _replace(self.model, module_name, fmt.stored_linear(linear, read(name), scale, self.device, self._slot(module_name)))
            self.report.quantized_from_checkpoint.append(module_name)
        elif leaf == "weight" and isinstance(module, nn.Linear) and fmt.should_quantize(module_name, self.keep_float):
            _replace(self.model, module_name, fmt.quantized_linear(module, read(name), self.device, self._slot(module_name)))
            self.report.quantized_on_load.append(module_name)
        else:
            assert module is not None
            where = torch.device("cpu") if self.on_host(name) else self.device
            _set_tensor(module, leaf, _cast(read(name).to(where), self.dtype))

    def _slot(self, module_name: str) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The views of ``module_name``'s rows in its stack, or None where it has none."""
        stack = self.stacks.get(module_name)
        return None if stack is None else stack.slot(module_name, self.device)

    def float_where_kept(self) -> None:
        """Turn the layers stored quantized that ``keep_float`` names back into ``nn.Linear``."""
        quantized = self.report.quantized_from_checkpoint
        for name in quantized:
            if self.keep_float(name):
                _replace(self.model, name, self.weight_format.float_linear(self.model.get_submodule(name), self.dtype))
        self.report.quantized_from_checkpoint = [name for name in quantized if not self.keep_float(name)]


def _stored_linear_module(module_name: str, module: nn.Module | None, weight_format: WeightFormat) -> nn.Linear:
    """``module``, whose weight is stored quantized; QuantizationFormatError unless it is a linear layer."""
    if not isinstance(module, nn.Linear):
        raise QuantizationFormatError(
            f"{module_name}.weight is stored as {weight_format.name}, but {module_name} ({type(module).__name__}) is not "
            "a linear layer; Framewise runs quantized linear layers only. Choose a checkpoint that quantizes only "
            "linear layers."
        )
    return module


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


class _Stack:
    """One weight and one scale tensor for a stack of quantized linear layers, allocated when the
    first of them is read; each layer gets the views of its rows.

    ``weight_shapes`` maps each layer's module name, in row order, to its (N, K) weight shape;
    ``weight_format`` gives the dtypes and shapes of each layer's weight and scale."""

    def __init__(self, weight_shapes: dict[str, tuple[int, int]], weight_format: WeightFormat) -> None:
        self.rows: dict[str, tuple[slice, slice]] = {}
        row = scale_row = 0
        for name, shape in weight_shapes.items():
            storage = weight_format.storage(shape)
            assert storage is not None
            (self.weight_dtype, _), (self.scale_dtype, (scale_height, scale_columns)) = storage
            self.rows[name] = (slice(row, row + shape[0]), slice(scale_row, scale_row + scale_height))
            row, scale_row = row + shape[0], scale_row + scale_height
        self.shape = (row, next(iter(weight_shapes.values()))[1])
        self.scale_shape = (scale_row, scale_columns)
        self._tensors: tuple[torch.Tensor, torch.Tensor] | None = None

    def slot(self, name: str, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """The (weight, scale) views for layer ``name``, to be filled."""
        if self._tensors is None:
            self._tensors = (torch.empty(self.shape, dtype=self.weight_dtype, device=device),
                             torch.empty(self.scale_shape, dtype=self.scale_dtype, device=device))
        weight, scale = self._tensors
        weight_rows, scale_rows = self.rows[name]
        return weight[weight_rows], scale[scale_rows]


def _plan_stacks(
    model: nn.Module,
    headers: dict[str, TensorHeader],
    weight_format: WeightFormat,
    scales: dict[str, str],
    keep_float: KeepFloat,
    stacked_with: Callable[[str], Sequence[str] | None],
) -> dict[str, _Stack]:
    """The stack of each linear layer that will share one: by module name, for every layer of a
    stack whose weights all end up quantized the same way (all stored so, or all quantized on
    load), with one column count, in linear layers of the stored shapes, and rows the format's
    products can stack."""
    stacks: dict[str, _Stack] = {}
    for name in headers:
        module_name = name.removesuffix(".weight")
        members = stacked_with(module_name) if name.endswith(".weight") else None
        if not members or module_name != members[0]:
            continue
        shapes = {member: headers[f"{member}.weight"].shape for member in members if f"{member}.weight" in headers}
        if len(shapes) != len(members) or len({shape[1] for shape in shapes.values()}) != 1:
            continue
        stored = {f"{member}.weight" in scales and not keep_float(member) for member in members}
        on_load = all(f"{member}.weight" not in scales and weight_format.should_quantize(member, keep_float)
                      for member in members)
        if stored != {True} and not on_load:
            continue
        modules = [_submodule(model, member) for member in members]
        if not all(isinstance(module, nn.Linear) and tuple(module.weight.shape) == shapes[member]
                   for module, member in zip(modules, members)):
            continue
        if weight_format.storage(shapes[members[0]]) is None:
            continue
        if not weight_format.products.stackable([shapes[member][0] for member in members]):
            continue  # a block row of scales would span two layers
        stack = _Stack({member: shapes[member] for member in members}, weight_format)
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


def _cast(tensor: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return tensor.to(dtype) if tensor.is_floating_point() else tensor


def _set_tensor(module: nn.Module, leaf: str, tensor: torch.Tensor) -> None:
    """Put ``tensor`` in place of ``module``'s parameter or buffer ``leaf``."""
    if leaf in module._parameters:
        module._parameters[leaf] = nn.Parameter(tensor, requires_grad=False)
    else:
        module._buffers[leaf] = tensor


@contextmanager
def parameters_on_meta() -> Iterator[None]:
    """Modules built inside put their parameters on the meta device (no memory, no random
    initialisation) and their buffers where they would be anyway. It swaps
    ``nn.Module.register_parameter`` for its duration, process-wide: the model is built on the one
    thread that loads it, and nothing else builds modules meanwhile."""
    register = nn.Module.register_parameter

    def register_on_meta(module: nn.Module, name: str, parameter: nn.Parameter | None) -> None:
        register(module, name, parameter)
        if parameter is not None:
            module._parameters[name] = nn.Parameter(parameter.to("meta"), requires_grad=parameter.requires_grad)

    nn.Module.register_parameter = register_on_meta  # type: ignore[method-assign]
    try:
        yield
    finally:
        nn.Module.register_parameter = register  # type: ignore[method-assign]


def move_buffers(model: nn.Module, device: torch.device) -> None:
    """Move the buffers of ``model`` to ``device`` (``Module.to`` would fail on its meta parameters)."""
    for module in model.modules():
        for name, buffer in module._buffers.items():
            if buffer is not None and not buffer.is_meta:
                module._buffers[name] = buffer.to(device)
