"""Dense decoder layers laid out for few-kernel passes, whichever model family they belong to.

A dense layer (no biases, per-head q and k RMS norms, rotary embedding, SiLU-gated MLP: the text
layers of Qwen3-style models) is laid out as a :class:`DenseLayer`: q, k and v
stacked into one matrix, gate and up into another, the model's own projections views into them. A
prefill and a decode step run the same torch ops over them (:func:`dense_stack`, n tokens): one
product for q/k/v and one for gate/up, ``F.rms_norm``, rotary as one ``addcmul``, attention in
``scaled_dot_product_attention``. On a CUDA device with Triton a decode step is six kernel
launches a layer instead (:func:`kernel_step_stack` over :mod:`framewise.core.kernels.decode_step`:
norms, rotary, SiLU and residual adds done inside the matrix-vector products and the cache write,
attention reading only the filled positions).

Every product goes through the products of the layer's weight format
(:class:`~framewise.core.quantization.weight_format.LinearProducts`, which the linear layers a
format put in place carry): ``F.linear`` and the step kernels above for float weights; for
quantized ones (a weight and its ``weight_scale``, stacked alike) whatever their format runs, its
own matrix-vector kernels in a step and its own prefill product. This module never looks at how
the weights are held.

A family's language model decides where its layers come from, how its positions and any extra
features are made, and calls these passes; this module names no model.
"""

from __future__ import annotations

import importlib.util
import math
import weakref
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Protocol, Sequence

import torch
import torch.nn.functional as F

from framewise.core.decoding.attention import AttentionMask, attend
from framewise.core.decoding.kv_cache import CachedEntries, StaticKVCache
from framewise.core.quantization.kv_formats import FLOAT_KV_CACHE, KVCacheFormat
from framewise.core.quantization.registry import linear_products
from framewise.core.quantization.weight_format import LinearProducts, Norm


@dataclass(frozen=True)
class DenseLayer:
    """One dense decoder layer's weights laid out for few-product passes (prefills and steps).

    ``qkv`` ((heads + 2 kv_heads) * head_dim, hidden) and ``gate_up`` (2 intermediate, hidden)
    are the q/k/v and gate/up projections stacked; the layer's own parameters are views into
    them, so the layout costs no memory. ``qk_norm`` (heads + kv_heads, head_dim) repeats the
    q norm's weight per query head, then the k norm's per key/value head; ``qk_norms``
    (2, head_dim) holds the two once. ``heads`` and ``kv_heads`` count the query and key/value
    heads.

    ``products`` are those of the layer's weight format, one for all seven projections. With
    quantized weights the four matrices hold the stored values and each ``*_scale`` their scales,
    stacked alike; with float weights the scales are None.
    """

    input_norm: torch.Tensor
    qkv: torch.Tensor
    qk_norm: torch.Tensor
    qk_norms: torch.Tensor
    o: torch.Tensor
    post_norm: torch.Tensor
    gate_up: torch.Tensor
    down: torch.Tensor
    heads: int
    kv_heads: int
    eps: float
    scaling: float
    products: LinearProducts
    qkv_scale: torch.Tensor | None = None
    o_scale: torch.Tensor | None = None
    gate_up_scale: torch.Tensor | None = None
    down_scale: torch.Tensor | None = None


class Product(Protocol):
    """One linear layer of a dense pass: the input formed from ``x`` (n, K) (itself, or with ``norm``
    or ``silu_mul`` as :func:`~framewise.core.quantization.weight_format.product_input` forms it)
    times ``weight`` (N, K) with its ``scale`` (None for float weights), through the layer's
    ``products``; returns (n, N) in ``x``'s dtype."""

    def __call__(
        self, x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor | None, products: LinearProducts, *,
        norm: Norm | None = None, silu_mul: bool = False,
    ) -> torch.Tensor: ...


@dataclass(frozen=True)
class RowAdditions:
    """Features a family adds to the hidden state of a prefill after its first layers:
    ``features[i]`` (rows, hidden) is added at the tokens ``rows`` (rows,) after layer ``i``
    (a vision-language family's extra vision features, for one)."""

    rows: torch.Tensor
    features: list[torch.Tensor]


# The compute capability whose hardware converts e4m3, which the step kernels need for a scaled cache.
SCALED_CACHE_CAPABILITY = (8, 9)
# Stacked weights by the first projection they hold, with that projection's data pointer then:
# a model whose parameters were moved since gets stacked anew.
_STACKED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def dense_stack(
    layers: Sequence[DenseLayer],
    hidden: torch.Tensor,
    position_embeddings: tuple[torch.Tensor, torch.Tensor],
    cache: StaticKVCache,
    mask: AttentionMask,
    product: Product,
    final_norm: Norm,
    additions: RowAdditions | None = None,
    hooked: Sequence[torch.nn.Module] = (),
) -> torch.Tensor:
    """The decoder stack for ``n`` tokens ``hidden`` (n, hidden) through ``layers`` as torch ops,
    the arithmetic of the model's own layers; returns the hidden states (n, hidden) normed by
    ``final_norm`` (its weight and epsilon).

    ``position_embeddings``: the rotary cos and sin, (1, n, head_dim) each. The keys and values go
    to the cache at ``cache.write_positions`` (n,); ``mask`` is additive over ``cache.view_length``
    positions, a :func:`~framewise.core.decoding.attention.prefill_mask` bias for a chunk after
    cached tokens, or None for a causal prefill from an empty cache. ``product`` is every linear layer
    and forms its input from the norm before it or from ``silu(gate) * up`` (:func:`project` for a
    decode step, :func:`prefill_product` for a prefill). ``additions`` are added at their rows after
    the first layers. The forward pre-hooks of ``hooked[i]`` run before layer ``i`` (the engine's
    cancel checks inside a prefill)."""
    count = hidden.shape[0]
    head_dim = layers[0].qk_norm.shape[-1]
    half = head_dim // 2
    cos, sin = (part.reshape(count, 1, head_dim) for part in position_embeddings)
    # rotate_half(x) * sin == roll(x, half) * sin with its first half negated
    sin_signed = torch.cat((-sin[..., :half], sin[..., half:]), dim=-1)
    for index, layer in enumerate(layers):
        if index < len(hooked):
            _run_pre_hooks(hooked[index], hidden)
        heads, kv_heads = layer.heads, layer.kv_heads
        qkv = product(hidden, layer.qkv, layer.qkv_scale, layer.products, norm=(layer.input_norm, layer.eps))
        qk = qkv[:, : (heads + kv_heads) * head_dim].view(count, heads + kv_heads, head_dim)
        qk = F.rms_norm(qk, (head_dim,), None, layer.eps) * layer.qk_norm
        qk = torch.addcmul(qk * cos, qk.roll(half, dims=-1), sin_signed)
        key = qk[:, heads:].transpose(0, 1)[None]
        value = qkv[:, (heads + kv_heads) * head_dim :].view(count, kv_heads, head_dim).transpose(0, 1)[None]
        keys, values = cache.update(key, value, index)
        attended = _attend(qk[:, :heads], keys, values, mask, layer.scaling)
        hidden = hidden + product(attended, layer.o, layer.o_scale, layer.products)
        post_norm = (layer.post_norm, layer.eps)
        gate_up = product(hidden, layer.gate_up, layer.gate_up_scale, layer.products, norm=post_norm)
        hidden = hidden + product(gate_up, layer.down, layer.down_scale, layer.products, silu_mul=True)
        if additions is not None and index < len(additions.features):
            hidden = hidden.index_add(0, additions.rows, additions.features[index])
    weight, eps = final_norm
    return F.rms_norm(hidden, (hidden.shape[-1],), weight, eps)


def kernel_step_stack(
    layers: Sequence[DenseLayer],
    kernels: ModuleType,
    hidden: torch.Tensor,
    rotary: torch.nn.Module,
    cache: StaticKVCache,
    cache_position: torch.Tensor,
    rope_position: torch.Tensor,
) -> torch.Tensor:
    """One decode step's decoder stack through the Triton kernels (:func:`load_step_kernels`): six
    launches a layer, none reading more of the cache than ``cache_position`` (1,) has filled; a
    scaled cache's entries and scales are read and written by the attention kernel itself.
    ``hidden`` (hidden,) is the token's embedding, ``rotary`` the model's rotary embedding (its
    ``inv_freq`` and ``attention_scaling``), ``rope_position`` (1,) its position on every axis.
    Returns the last layer's hidden state (hidden,), not normed."""
    norm_linear, linear_residual, mlp = layers[0].products.step_kernels(kernels)
    for index, layer in enumerate(layers):
        keys, values = cache.keys[index], cache.values[index]
        key_scales, value_scales = cache.scales(index)
        qkv = norm_linear(hidden, layer.input_norm, layer.qkv, layer.qkv_scale, layer.eps)
        attended = kernels.attend_step(
            qkv, layer.qk_norms, rotary.inv_freq, rotary.attention_scaling, rope_position, cache_position,
            keys, values, layer.heads, layer.eps, cache.view_length, layer.scaling, key_scales, value_scales,
        )
        hidden = linear_residual(attended, layer.o, layer.o_scale, hidden)
        hidden = mlp(hidden, layer.post_norm, layer.gate_up, layer.gate_up_scale, layer.down, layer.down_scale, layer.eps)
    return hidden


def load_step_kernels(
    device: torch.device, config: Any, wanted: bool | None, layers: Sequence[DenseLayer] = (),
    cache_format: KVCacheFormat = FLOAT_KV_CACHE,
) -> ModuleType | None:
    """The Triton decode-step kernels for a text model of ``config`` on ``device`` with the dense
    ``layers`` over a cache in ``cache_format``: where they can run when ``wanted`` is None, never
    when False; True where they cannot run is a ValueError saying why
    (:func:`step_kernels_unavailable`)."""
    if wanted is False:
        return None
    unavailable = step_kernels_unavailable(device, config, layers, cache_format)
    if unavailable and wanted:
        raise ValueError(f"the decode step kernels cannot run here: {unavailable}")
    if unavailable:
        return None
    from framewise.core.kernels import decode_step

    return decode_step


def dense_layers(text: torch.nn.Module, config: Any) -> list[DenseLayer] | None:
    """The decoder layers of the text model ``text`` (``text.layers``, a transformers model of
    ``config``) laid out for few-product passes, or ``None`` when a layer is not a dense layer of
    this shape (no bias, SiLU gated MLP, per-head q and k norms) or its linear layers cannot be
    stacked (mixed weight formats, or rows their format's products cannot stack).

    The stacked matrices are built layer by layer, each projection's weight copied into its place
    and released at once, and freed device memory is handed back between layers so that the next
    layer's stacked matrix can reuse it: building holds no second copy of the weights. Projections
    the streaming loader already wrote as one matrix are used as they lie, with no copy."""
    if config.hidden_act != "silu" or getattr(config, "attention_bias", False):
        return None
    layers = []
    for layer in text.layers:
        attention, mlp = layer.self_attn, layer.mlp
        if not all(hasattr(mlp, name) for name in ("gate_proj", "up_proj", "down_proj")):
            return None
        projections = (attention.q_proj, attention.k_proj, attention.v_proj, attention.o_proj,
                       mlp.gate_proj, mlp.up_proj, mlp.down_proj)
        products = common_products(projections)
        if products is None or not (
            products.stackable([linear.out_features for linear in (attention.q_proj, attention.k_proj, attention.v_proj)])
            and products.stackable([mlp.gate_proj.out_features, mlp.up_proj.out_features])
        ):
            return None
        heads = attention.q_proj.out_features // attention.head_dim
        kv_heads = attention.k_proj.out_features // attention.head_dim
        q_norm, k_norm = attention.q_norm.weight.detach(), attention.k_norm.weight.detach()
        qk_norm = torch.cat((q_norm.expand(heads, -1), k_norm.expand(kv_heads, -1)))
        qkv, qkv_scale = stacked_views(attention.q_proj, attention.k_proj, attention.v_proj)
        gate_up, gate_up_scale = stacked_views(mlp.gate_proj, mlp.up_proj)
        layers.append(
            DenseLayer(
                input_norm=layer.input_layernorm.weight.detach(),
                qkv=qkv,
                qk_norm=qk_norm,
                qk_norms=torch.stack((q_norm, k_norm)),
                o=attention.o_proj.weight.detach(),
                post_norm=layer.post_attention_layernorm.weight.detach(),
                gate_up=gate_up,
                down=mlp.down_proj.weight.detach(),
                heads=heads,
                kv_heads=kv_heads,
                eps=layer.input_layernorm.variance_epsilon,
                scaling=attention.scaling,
                products=products,
                qkv_scale=qkv_scale,
                o_scale=scale_of(attention.o_proj),
                gate_up_scale=gate_up_scale,
                down_scale=scale_of(mlp.down_proj),
            )
        )
        if qkv.is_cuda:
            torch.cuda.empty_cache()  # the released projections' segments, for the next layer's stacks
    return layers


def common_products(linears: tuple[torch.nn.Module, ...]) -> LinearProducts | None:
    """The products of ``linears`` when all are linear layers of one weight format, else None."""
    products = {linear_products(linear) for linear in linears}
    return products.pop() if len(products) == 1 and None not in products else None


def scale_of(linear: torch.nn.Module) -> torch.Tensor | None:
    """A quantized linear layer's ``weight_scale``; None for a float one."""
    return getattr(linear, "weight_scale", None)


def project(
    x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor | None, products: LinearProducts, *,
    norm: Norm | None = None, silu_mul: bool = False,
) -> torch.Tensor:
    """A :class:`Product` for one token (a decode step) in torch ops: the arithmetic of the step
    kernels (:meth:`~framewise.core.quantization.weight_format.LinearProducts.step`)."""
    return products.step(x, weight, scale, norm=norm, silu_mul=silu_mul)


def prefill_product(
    x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor | None, products: LinearProducts, *,
    norm: Norm | None = None, silu_mul: bool = False,
) -> torch.Tensor:
    """A :class:`Product` for many tokens, as the model's own layers compute it
    (:meth:`~framewise.core.quantization.weight_format.LinearProducts.prefill`)."""
    return products.prefill(x, weight, scale, norm=norm, silu_mul=silu_mul)


def step_weights_note(layers: Sequence[DenseLayer]) -> str:
    """How a step's weights are held, for a step's description: ``" (<dtype> weights)"`` with the
    quantized format's dtype in capitals, or ``""`` for float weights."""
    weight_dtype = layers[0].products.weight_dtype if layers else None
    return f" ({weight_dtype.upper()} weights)" if weight_dtype else ""


def _attend(
    query: torch.Tensor, keys: CachedEntries, values: CachedEntries, mask: AttentionMask, scaling: float
) -> torch.Tensor:
    """Attention of ``query`` (n, heads, head_dim) over the cached ``keys``/``values``
    (:func:`~framewise.core.decoding.attention.attend`'s) under ``mask``. Returns
    (n, heads * head_dim)."""
    count, heads, head_dim = query.shape
    attended = attend(query.transpose(0, 1)[None], keys, values, mask, scaling)
    return attended[0].transpose(0, 1).reshape(count, heads * head_dim)


def _run_pre_hooks(module: torch.nn.Module, hidden: torch.Tensor) -> None:
    """Run ``module``'s forward pre-hooks as if it were called on ``hidden``: a dense pass computes a
    layer without calling it, and the engine's cancel checks are such hooks. What a hook returns is
    not used."""
    for key, hook in module._forward_pre_hooks.items():
        if key in module._forward_pre_hooks_with_kwargs:
            hook(module, (hidden,), {})
        else:
            hook(module, (hidden,))


def step_kernels_unavailable(
    device: torch.device, config: Any, layers: Sequence[DenseLayer] = (), cache_format: KVCacheFormat = FLOAT_KV_CACHE
) -> str:
    """Why the Triton decode-step kernels cannot run for a text model of ``config`` on ``device``
    with the dense ``layers`` over a cache in ``cache_format`` ("" when they can)."""
    if device.type != "cuda":
        return "they need a CUDA device"
    if layers and not layers[0].products.has_step_kernels:
        return "the weight format of its linear layers has no step kernels"
    unreadable = cache_unreadable(device, cache_format)
    if unreadable:
        return unreadable
    if importlib.util.find_spec("triton") is None:
        return "Triton is not installed"
    rope_type = (getattr(config, "rope_parameters", None) or {}).get("rope_type", "default")
    if rope_type != "default":
        return f"they compute plain rotary angles, not {rope_type!r} ones"
    return ""


def cache_unreadable(device: torch.device, cache_format: KVCacheFormat) -> str:
    """Why the Triton decode-step kernels cannot read a KV cache in ``cache_format`` on the CUDA
    ``device`` ("" when they can)."""
    if cache_format.scaled and torch.cuda.get_device_capability(device) < SCALED_CACHE_CAPABILITY:
        return "they convert an 8-bit KV cache's entries in hardware, which needs compute capability 8.9"
    return ""


def stacked_views(*linears: torch.nn.Module) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The weights of ``linears`` stacked by rows, and their scales stacked alike (None for
    float weights); the layers' own weights and scales become views into them, once.

    The stacked tensors are allocated once and each layer's tensor is copied in and dropped
    before the next is read, so no second copy of the weights is held."""
    first = linears[0]
    known = _STACKED.get(first)
    if known is not None and known[2] == first.weight.data_ptr():
        return known[0], known[1]
    with torch.no_grad():
        weight = _stack_into_views(linears, "weight")
        scale = _stack_into_views(linears, "weight_scale") if scale_of(first) is not None else None
    _STACKED[first] = (weight, scale, first.weight.data_ptr())
    return weight, scale


def _adjacent_rows(parts: list[torch.Tensor]) -> torch.Tensor | None:
    """The (rows of all, ...) view over ``parts`` when they are contiguous, of one dtype and row
    shape, and follow each other in one storage; else None."""
    first = parts[0]
    offset = first.storage_offset()
    for part in parts:
        if (not part.is_contiguous() or part.dtype != first.dtype or part.shape[1:] != first.shape[1:]
                or part.untyped_storage().data_ptr() != first.untyped_storage().data_ptr()
                or part.storage_offset() != offset):
            return None
        offset += part.numel()
    shape = (sum(part.shape[0] for part in parts), *first.shape[1:])
    strides = tuple(math.prod(shape[axis + 1 :]) for axis in range(len(shape)))
    return first.detach().as_strided(shape, strides, first.storage_offset())


def _stack_into_views(modules: tuple[torch.nn.Module, ...], name: str) -> torch.Tensor:
    """Allocate the row-wise stack of the ``modules``' tensors ``name`` (parameters or buffers),
    copy each in, and replace it by its view, releasing the original; when the tensors already
    are consecutive rows of one tensor (the streaming loader writes stacks so), that tensor's view."""
    parts = [getattr(module, name) for module in modules]
    adjacent = _adjacent_rows(parts)
    if adjacent is not None:
        return adjacent
    stacked = torch.empty((sum(part.shape[0] for part in parts), *parts[0].shape[1:]),
                          dtype=parts[0].dtype, device=parts[0].device)
    del parts
    row = 0
    for module in modules:
        part = getattr(module, name)
        rows = part.shape[0]
        view = stacked[row : row + rows]
        view.copy_(part)
        if isinstance(part, torch.nn.Parameter):
            setattr(module, name, torch.nn.Parameter(view, requires_grad=part.requires_grad))
        else:
            setattr(module, name, view)
        del part
        row += rows
    return stacked
