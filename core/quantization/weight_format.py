"""What every weight format says, and the products the dense decoder passes call.

A weight format is how a model's linear layers hold their weights once loaded: in floating
point, or quantized (a storage dtype with scales). It is chosen once, when a checkpoint is loaded
(:func:`~framewise.core.quantization.registry.choose_weight_format`), from the checkpoint's
config.json and the dtype setting. Then:

- the family's loader hands it to :func:`~framewise.core.quantization.loading.load_checkpoint`,
  which asks it what to put in place of each linear layer: the layer as the checkpoint stores it
  (:meth:`WeightFormat.stored_linear`), the layer quantized from the float weight just read
  (:meth:`WeightFormat.quantized_linear`, where :meth:`WeightFormat.should_quantize` says so), or
  a float ``nn.Linear``. The family names the linear layers that stay in floating point;
- the memory estimate asks it the bytes of each linear layer (:meth:`WeightFormat.linear_bytes`);
- the engine shows its :attr:`WeightFormat.weight_dtype`.

The layers a format puts in place carry its :class:`LinearProducts` as ``products``: the dense
decoder layers (:mod:`framewise.core.decoding.dense_layers`) multiply by their stacked weights
through them and never look at how the weights are held. A quantized linear layer holds its
``weight`` (N, K) in its storage dtype and a ``weight_scale`` whose rows follow the weight's
(:meth:`WeightFormat.storage`), so that stacked layers (q/k/v, gate/up) stack by rows.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from types import ModuleType
from typing import Any, ClassVar, NamedTuple, Protocol

import torch
import torch.nn.functional as F
from torch import nn

from framewise.core.quantization.formats import UNQUANTIZED, CheckpointLayout, TensorHeader, quantized_weight_scales

# An RMS norm folded into a product: its (K,) weight and epsilon. A weight in the activations' dtype
# multiplies the normed input rounded to that dtype (Qwen3's RMSNorm); a float32 weight is a scale
# multiplied in before the one rounding (Qwen3.5's zero-centred norm, whose scale is 1 + its weight).
Norm = tuple[torch.Tensor, float]
# How a quantized linear layer's tensors are laid out: the weight's and the scale's dtype and shape.
Storage = tuple[tuple[torch.dtype, tuple[int, int]], tuple[torch.dtype, tuple[int, int]]]


def product_input(x: torch.Tensor, norm: Norm | None = None, silu_mul: bool = False) -> torch.Tensor:
    """The input of a product formed from ``x`` (..., K) by torch ops: ``rms_norm(x)`` with ``norm``
    (a (K,) weight and an epsilon; a float32 weight scales the float32 normed rows before they are
    rounded to ``x``'s dtype, see :data:`Norm`), ``silu(gate) * up`` (..., K/2) with ``silu_mul``
    (the gate first), else ``x`` itself."""
    if norm is not None:
        weight, eps = norm
        if weight.dtype == torch.float32:
            x = F.rms_norm(x.float(), (x.shape[-1],), weight, eps).to(x.dtype)
        else:
            x = F.rms_norm(x, (x.shape[-1],), weight, eps)
    if silu_mul:
        gate, up = x.chunk(2, dim=-1)
        x = F.silu(gate) * up
    return x


class StepProducts(NamedTuple):
    """A decode step's fused products through Triton kernels, for one token (vectors, not rows):

    - ``norm_linear(x, norm, weight, scale, eps)``: ``rms_norm(x) @ weight.T``, (K,) -> (N,);
    - ``linear_residual(x, weight, scale, residual)``: ``residual + x @ weight.T``;
    - ``mlp(hidden, post_norm, gate_up, gate_up_scale, down, down_scale, eps)``: the post-attention
      norm, the stacked gate/up product, ``silu(gate) * up``, the down product and the residual.

    ``scale`` is the weight's ``weight_scale`` (None for float weights); a norm weight is rounded
    as :data:`Norm` says (float32: a zero-centred norm's scale)."""

    norm_linear: Callable[..., torch.Tensor]
    linear_residual: Callable[..., torch.Tensor]
    mlp: Callable[..., torch.Tensor]


class LinearProducts(Protocol):
    """How the dense decoder passes multiply by one kind of linear layer's weights.

    Every product takes ``x`` (n, K), or (n, 2K) with ``silu_mul``, forms its input as
    :func:`product_input` does (``norm``, ``silu_mul``), multiplies it by ``weight`` (N, K) with its
    ``scale`` (None for float weights) and returns (n, N) in ``x``'s dtype. ``weight_dtype`` is the
    weights' dtype as people name it (None: the activations'); ``has_step_kernels`` whether a
    decode step can run through Triton kernels with them."""

    weight_dtype: str | None
    has_step_kernels: bool

    def stackable(self, rows: Sequence[int]) -> bool:
        """Whether linear layers of ``rows`` output rows each, in this order, may share one stacked
        weight and scale."""
        ...

    def prefill(
        self, x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor | None, *,
        norm: Norm | None = None, silu_mul: bool = False,
    ) -> torch.Tensor:
        """The product for many tokens (a prefill), as the layer's own ``forward`` computes it."""
        ...

    def step(
        self, x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor | None, *,
        norm: Norm | None = None, silu_mul: bool = False,
    ) -> torch.Tensor:
        """The product for one token (a decode step) in torch ops, the arithmetic of the step kernels."""
        ...

    def step_kernels(self, kernels: ModuleType) -> StepProducts:
        """The step's fused products through Triton (``kernels`` is the dense decode step's kernel
        module); asked only where ``has_step_kernels``."""
        ...


def torch_step_products(products: LinearProducts) -> StepProducts:
    """The fused products of :class:`StepProducts` as torch ops over ``products.step``: the
    arithmetic the step kernels follow, one token's vectors in and out, where the kernels cannot
    run (or as their tests' reference)."""

    def norm_linear(x, norm, weight, scale, eps):
        return products.step(x, weight, scale, norm=(norm, eps))

    def linear_residual(x, weight, scale, residual):
        return residual + products.step(x, weight, scale)

    def mlp(hidden, post_norm, gate_up, gate_up_scale, down, down_scale, eps):
        activation = products.step(hidden, gate_up, gate_up_scale, norm=(post_norm, eps))
        return hidden + products.step(activation, down, down_scale, silu_mul=True)

    return StepProducts(norm_linear, linear_residual, mlp)


def linear_bias(module: nn.Module) -> torch.Tensor | None:
    """A linear layer's bias, to carry over into its replacement (may still be on meta: the
    checkpoint's bias, read later, replaces it)."""
    bias = getattr(module, "bias", None)
    return None if bias is None else bias.detach()


class WeightFormat:
    """One way of holding a model's linear weights: a subclass sets the class attributes and
    overrides the methods its format needs (by default a format quantizes nothing while loading,
    reads no quantized layer from a checkpoint, and counts weights in the activations' dtype).

    ``name`` is for messages. ``weight_dtype`` names the quantized linear layers' dtype for people
    (the engine's info, ``--json``, the status bar); None for float weights. ``setting`` is the
    dtype setting that chooses the format for a float checkpoint (a format read from the checkpoint
    has none). ``products`` are the products of the linear layers it puts in place. ``layout`` is
    what the checkpoint's config.json declares (:mod:`.formats`); its tensors are checked against it.
    """

    name: str
    weight_dtype: ClassVar[str | None] = None
    setting: ClassVar[str | None] = None
    products: LinearProducts
    layout: CheckpointLayout = UNQUANTIZED

    # ------------------------------------------------------------------ choosing

    @classmethod
    def declared(cls, config: Mapping[str, Any]) -> WeightFormat | None:
        """This format for a checkpoint whose config.json (a dict) declares it, else None."""
        return None

    @classmethod
    def chosen(cls, setting: str, device: torch.device) -> WeightFormat | None:
        """This format for a float checkpoint loaded onto ``device`` with the dtype ``setting``,
        else None. By default: chosen by its ``setting``."""
        return cls() if cls.setting is not None and setting == cls.setting else None

    @property
    def quantized(self) -> bool:
        """Whether any linear layer ends up other than a float ``nn.Linear``."""
        return self.weight_dtype is not None

    # ------------------------------------------------------------------ loading

    def checked_scales(self, headers: Mapping[str, TensorHeader]) -> dict[str, str]:
        """Check the checkpoint's tensors (name -> dtype and shape) against this format before any
        is read; return each weight stored quantized -> its scale's name. Raises
        QuantizationFormatError naming what does not match."""
        return quantized_weight_scales(headers, self.layout)

    def should_quantize(self, module_name: str, keep_float: Callable[[str], bool]) -> bool:
        """Whether the float ``nn.Linear`` ``module_name`` is quantized while loading; the family's
        ``keep_float`` names the linear layers that stay in floating point."""
        return False

    def storage(self, weight_shape: tuple[int, int]) -> Storage | None:
        """The dtype and shape of a quantized (N, K) weight and of its scale, for stacked layers
        that share one of each; None: this format's layers are not stacked while loading."""
        return None

    def stored_linear(
        self, module: nn.Linear, weight: torch.Tensor, scale: torch.Tensor, device: torch.device,
        out: tuple[torch.Tensor, torch.Tensor] | None,
    ) -> nn.Module:
        """The layer that replaces ``module``, built from the checkpoint's quantized ``weight`` and
        its (finite) ``scale`` as read, on ``device``; into the views ``out`` (of :meth:`storage`'s
        shapes) where it shares a stack."""
        raise NotImplementedError(f"{self.name} is not read from checkpoints")

    def quantized_linear(
        self, module: nn.Linear, weight: torch.Tensor, device: torch.device,
        out: tuple[torch.Tensor, torch.Tensor] | None,
    ) -> nn.Module:
        """The layer that replaces ``module``, its float ``weight`` (N, K) as read (anywhere: a
        memory-mapped tensor) quantized onto ``device``; into ``out`` where it shares a stack."""
        raise NotImplementedError(f"{self.name} quantizes nothing while loading")

    def float_linear(self, module: nn.Module, dtype: torch.dtype) -> nn.Linear:
        """An ``nn.Linear`` in ``dtype`` with the weights of this format's layer ``module`` (a layer
        stored quantized that the family keeps in floating point)."""
        raise NotImplementedError(f"{self.name} has no quantized layers to turn back into floats")

    # ------------------------------------------------------------------ memory

    def linear_bytes(self, weight_shape: tuple[int, int], activations: torch.dtype) -> int:
        """Bytes a linear layer of weight ``weight_shape`` (N, K) takes in this format, scales
        included; ``activations`` is the dtype of what stays in floating point."""
        rows, columns = weight_shape
        return rows * columns * activations.itemsize
