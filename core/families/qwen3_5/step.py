"""Qwen3.5's decode step in few launches: the layers' projections stacked, each layer's norms and
residual adds inside its products.

Each decoder layer is laid out once (:func:`step_layers`): the projections of its normed input
stacked by rows (a Gated DeltaNet layer's in_proj_qkv, in_proj_z, in_proj_b and in_proj_a; a
full-attention layer's q with its gate, k and v), consecutive ones of one weight format in one
matrix where the format can stack their rows (a quantized format keeps in_proj_b and in_proj_a
in floating point: they make a second, small product); the MLP's gate and up stacked. The modules' own weights become views
of the stacks, so the layout holds no second copy; a prefill multiplies by the same stacks
(:mod:`.language`).

A step (:class:`FusedStep`) runs per layer: the input norm and the stacked product as one fused
product, the layer's mixing (:mod:`.mixers`: for a linear layer fla-core's one-token convolution
and delta rule with its gates computed in the kernel; for a full-attention layer the per-head
norms as the model's norms run on the device (:func:`~.mixers.norms_for`: one Triton kernel each on
CUDA) and rotary embedding, the key and value written into the cache and the attention through
the dense decode step's split kernel, which reads only the filled positions of the cache as they
are stored, or all as torch ops), a linear layer's gated norm (one Triton kernel,
:mod:`framewise.core.kernels.gated_rms_norm`), the output projection with the residual
add, and the MLP as two fused products; then the final norm with the output head. The products
are the weight formats' :class:`~framewise.core.quantization.weight_format.StepProducts`: the
Triton kernels where they can run, else the same arithmetic as torch ops
(:func:`~framewise.core.quantization.weight_format.torch_step_products`), which tests hold
against the model's own layers. The norms are zero-centred (a float32 scale 1 + weight) and
rounded as the model rounds them.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Callable, Sequence

import torch

from framewise.core.decoding.attention import AttentionMask, causal_mask
from framewise.core.decoding.dense_layers import cache_unreadable, common_products, scale_of, stacked_views
from framewise.core.decoding.dense_layers import step_kernels_unavailable as dense_step_kernels_unavailable
from framewise.core.decoding.hybrid_state import FULL_ATTENTION, HybridState
from framewise.core.decoding.linear_attention import FlaKernels
from framewise.core.families.qwen3_5.config import TextShape
from framewise.core.families.qwen3_5.mixers import (
    Norms,
    delta_rule_mixing,
    gated_attention,
    gated_attention_step,
    gated_rms_norm,
    norm_scale,
)
from framewise.core.quantization.kv_formats import FLOAT_KV_CACHE, KVCacheFormat
from framewise.core.quantization.registry import linear_products
from framewise.core.quantization.weight_format import LinearProducts, StepProducts, torch_step_products


@dataclass(frozen=True)
class StackedLinear:
    """Linear layers multiplied as one product: their weights stacked by rows in ``weight`` (N, K)
    (the layers' own weights are views of it), their scales stacked alike in ``scale`` (None for
    float weights), through their format's ``products``; ``rows`` are each layer's output rows in
    order (summing to N)."""

    weight: torch.Tensor
    scale: torch.Tensor | None
    products: LinearProducts
    rows: tuple[int, ...]


@dataclass(frozen=True)
class StepLayer:
    """Decoder layer ``index`` of Qwen3.5 laid out for a decode step.

    ``inputs`` multiply the input normed by ``input_scale``: their outputs, in order, are a linear
    layer's in_proj_qkv, in_proj_z, in_proj_b and in_proj_a products, or a full-attention layer's q
    (with its output gate), k and v. ``out`` is out_proj or o_proj; ``gate_up`` (the MLP's gate and
    up stacked) multiplies the state normed by ``post_scale``, ``down`` its ``silu(gate) * up``.
    The scales are float32 (hidden,): 1 + the norms' weights; ``input_eps`` and ``post_eps`` the
    norms' epsilons."""

    index: int
    full_attention: bool
    input_scale: torch.Tensor
    post_scale: torch.Tensor
    input_eps: float
    post_eps: float
    inputs: tuple[StackedLinear, ...]
    out: StackedLinear
    gate_up: StackedLinear
    down: StackedLinear

    @property
    def stacks(self) -> tuple[StackedLinear, ...]:
        """Every product of the layer."""
        return (*self.inputs, self.out, self.gate_up, self.down)


def step_layers(text: torch.nn.Module, shape: TextShape) -> list[StepLayer] | None:
    """The decoder layers of Qwen3.5's text model ``text`` of ``shape`` laid out for a decode step,
    or None when a projection has a bias or is no linear layer of a weight format, or the MLP's
    three do not share one format that can stack gate and up. Frees device memory between layers,
    so that the next layer's stacks can reuse what this layer's released."""
    layers = []
    for index, layer in enumerate(text.layers):
        full_attention = shape.layer_kinds[index] == FULL_ATTENTION
        if full_attention:
            attention = layer.self_attn
            projections, out = (attention.q_proj, attention.k_proj, attention.v_proj), attention.o_proj
        else:
            mixer = layer.linear_attn
            projections = (mixer.in_proj_qkv, mixer.in_proj_z, mixer.in_proj_b, mixer.in_proj_a)
            out = mixer.out_proj
        mlp = layer.mlp
        mlp_products = common_products((mlp.gate_proj, mlp.up_proj, mlp.down_proj))
        linears = (*projections, out, mlp.gate_proj, mlp.up_proj, mlp.down_proj)
        if (
            mlp_products is None
            or not mlp_products.stackable([mlp.gate_proj.out_features, mlp.up_proj.out_features])
            or any(linear_products(linear) is None or getattr(linear, "bias", None) is not None for linear in linears)
        ):
            return None
        norm, post_norm = layer.input_layernorm, layer.post_attention_layernorm
        layers.append(StepLayer(
            index=index, full_attention=full_attention, input_scale=norm_scale(norm),
            post_scale=norm_scale(post_norm), input_eps=norm.eps, post_eps=post_norm.eps,
            inputs=tuple(_stack(group) for group in _stackable_runs(projections)),
            out=_stack((out,)), gate_up=_stack((mlp.gate_proj, mlp.up_proj)), down=_stack((mlp.down_proj,)),
        ))
        if out.weight.is_cuda:
            torch.cuda.empty_cache()  # the released projections' segments, for the next layer's stacks
    return layers


def _stackable_runs(linears: Sequence[torch.nn.Module]) -> list[tuple[torch.nn.Module, ...]]:
    """``linears`` in order, in runs of consecutive layers of one weight format whose rows it can
    stack."""
    runs = [[linears[0]]]
    for linear in linears[1:]:
        run = runs[-1]
        products = linear_products(run[0])
        rows = [member.out_features for member in (*run, linear)]
        if linear_products(linear) == products and products.stackable(rows):
            run.append(linear)
        else:
            runs.append([linear])
    return [tuple(run) for run in runs]


def _stack(linears: tuple[torch.nn.Module, ...]) -> StackedLinear:
    """``linears`` (one weight format) as one :class:`StackedLinear`, their weights views of it."""
    weight, scale = stacked_views(*linears)
    products = linear_products(linears[0])
    assert products is not None
    return StackedLinear(weight, scale, products, tuple(linear.out_features for linear in linears))


def output_head(lm_head: torch.nn.Module) -> StackedLinear:
    """The output head ``lm_head`` as the fused step multiplies by it (its weight as it lies)."""
    products = linear_products(lm_head)
    if products is None:
        raise ValueError(f"the output head is a {type(lm_head).__name__}, not a linear layer of a weight format")
    return StackedLinear(lm_head.weight.detach(), scale_of(lm_head), products, (lm_head.weight.shape[0],))


# A linear layer's gated norm of its mixing (rows, head_v_dim) by its gate (same shape), given its norm module.
GatedNorm = Callable[[torch.Tensor, torch.Tensor, torch.nn.Module], torch.Tensor]


@dataclass(frozen=True)
class StepModel:
    """What a step reads of the model besides the layers: its text model ``text`` (the layers'
    mixing modules, the rotary embedding), the per-head norm scales of each full-attention layer
    and -exp(A_log) of each linear layer by index, fla-core's functions (None: the torch code), the
    final norm's scale and epsilon, the output head, and how the per-head norms run."""

    text: torch.nn.Module
    head_norm_scales: dict[int, tuple[torch.Tensor, torch.Tensor]]
    decay_rates: dict[int, torch.Tensor]
    fla: FlaKernels | None
    final_scale: torch.Tensor
    final_eps: float
    head: StackedLinear
    norms: Norms


class FusedStep:
    """Qwen3.5's decode step over :func:`step_layers`' ``layers`` of ``model``: through the step
    kernels of each product's weight format when called with ``kernels`` (the dense decode step's
    kernel module; ``model.fla`` must be given), its full attention through their split attention
    kernel unless ``kernel_attention`` is False (a cache they cannot read there), else the same
    arithmetic as torch ops."""

    def __init__(self, layers: Sequence[StepLayer], model: StepModel, kernel_attention: bool = True) -> None:
        self.layers = tuple(layers)
        self.model = model
        self.kernel_attention = kernel_attention
        self._products: dict[tuple[LinearProducts, bool], StepProducts] = {}

    def __call__(
        self, state: HybridState, embeds: torch.Tensor, cache_position: torch.Tensor, rope_position: torch.Tensor,
        kernels: ModuleType | None,
    ) -> torch.Tensor:
        """One decode step, graph-safe: the token whose embedding is ``embeds`` (1, 1, hidden) at
        ``cache_position`` (1,) with rotary position ``rope_position`` (1,) on every axis; reads
        ``state.kv.view_length`` positions and moves every linear state on by one token. Returns
        logits (1, vocab) float32."""
        model = self.model
        state.kv.write_positions = cache_position
        attention_kernels = kernels if self.kernel_attention else None
        mask = causal_mask(state.kv.view_length, cache_position, embeds.dtype) if attention_kernels is None else None
        position_embeddings = model.text.rotary_emb(embeds, rope_position.view(1, 1, 1).expand(3, 1, 1))
        gated_norm = model.norms.gated if kernels is not None else gated_rms_norm
        hidden = embeds.view(-1)
        for layer in self.layers:
            parts = self._projections(layer, hidden, kernels)
            if layer.full_attention:
                mixed = self._attention(layer, parts, position_embeddings, mask, state, attention_kernels)
            else:
                mixed = self._mixing(layer, parts, state, gated_norm)
            out = layer.out
            hidden = self._step_products(out.products, kernels).linear_residual(mixed, out.weight, out.scale, hidden)
            gate_up, down = layer.gate_up, layer.down
            hidden = self._step_products(down.products, kernels).mlp(
                hidden, layer.post_scale, gate_up.weight, gate_up.scale, down.weight, down.scale, layer.post_eps
            )
        head = model.head
        logits = self._step_products(head.products, kernels).norm_linear(
            hidden, model.final_scale, head.weight, head.scale, model.final_eps
        )
        return logits.float().view(1, -1)

    def _projections(self, layer: StepLayer, hidden: torch.Tensor, kernels: ModuleType | None) -> list[torch.Tensor]:
        """The outputs of ``layer``'s input projections, in order, for the normed ``hidden``
        (hidden,): one vector (rows,) each, views of the stacked products."""
        parts: list[torch.Tensor] = []
        for stack in layer.inputs:
            out = self._step_products(stack.products, kernels).norm_linear(
                hidden, layer.input_scale, stack.weight, stack.scale, layer.input_eps
            )
            parts.extend(out.split(stack.rows))
        return parts

    def _attention(
        self,
        layer: StepLayer,
        parts: list[torch.Tensor],
        position_embeddings: tuple[torch.Tensor, torch.Tensor],
        mask: AttentionMask,
        state: HybridState,
        kernels: ModuleType | None,
    ) -> torch.Tensor:
        """A full-attention layer's gated attention from its projections ``parts`` (q with its gate,
        k, v): through ``kernels``' split attention kernel, else as torch ops under ``mask``.
        o_proj's input (heads * head_dim,)."""
        query_gate, key, value = (part.view(1, 1, -1) for part in parts)
        attention = self.model.text.layers[layer.index].self_attn
        norm_scales = self.model.head_norm_scales[layer.index]
        if kernels is not None:
            return gated_attention_step(
                attention, query_gate, key, value, norm_scales, position_embeddings, state, layer.index,
                self.model.norms, kernels,
            )
        return gated_attention(
            attention, query_gate, key, value, norm_scales, position_embeddings, mask, state, layer.index,
            self.model.norms,
        ).view(-1)

    def _mixing(
        self, layer: StepLayer, parts: list[torch.Tensor], state: HybridState, gated_norm: GatedNorm
    ) -> torch.Tensor:
        """A linear layer's token mixing and gated norm from its projections ``parts`` (qkv, z, beta
        logits, decay input), out_proj's input (value heads * head_v_dim,)."""
        qkv, gate, beta_logits, decay_input = parts
        mixer = self.model.text.layers[layer.index].linear_attn
        out = delta_rule_mixing(
            mixer, qkv.view(1, 1, -1), beta_logits.view(1, 1, -1), decay_input.view(1, 1, -1),
            self.model.decay_rates[layer.index], state, layer.index, one_token=True, end=None, fla=self.model.fla,
        )
        return gated_norm(out.reshape(-1, mixer.head_v_dim), gate.view(-1, mixer.head_v_dim), mixer.norm).view(-1)

    def _step_products(self, products: LinearProducts, kernels: ModuleType | None) -> StepProducts:
        """``products``' fused step products: through ``kernels``, or as torch ops without."""
        key = (products, kernels is not None)
        if key not in self._products:
            self._products[key] = products.step_kernels(kernels) if kernels is not None else torch_step_products(products)
        return self._products[key]


def load_fused_step(
    model: StepModel, shape: TextShape, device: torch.device, fused_steps: bool | None, step_kernels: bool | None,
    cache_format: KVCacheFormat = FLOAT_KV_CACHE,
) -> tuple[FusedStep | None, ModuleType | None]:
    """The fused step of ``model`` (of ``shape``, on ``device``, over a KV cache in ``cache_format``)
    and the kernel module it runs with; its full attention through the kernels where they read that
    cache (:func:`~framewise.core.decoding.dense_layers.cache_unreadable`), else as torch ops.

    ``step_kernels``: the Triton step kernels where they can run (:func:`step_kernels_unavailable`)
    when None, never when False; True where they cannot is a ValueError saying why. ``fused_steps``:
    the layers laid out for the fused step where the kernels run when None (elsewhere the model's
    own layers step), always when True (the step runs as torch ops where the kernels do not), never
    when False. (None, None): steps run the model's own layers."""
    if fused_steps is False and step_kernels:
        raise ValueError("the decode step kernels run the fused step's layout, which fused_steps=False turns off")
    unavailable = step_kernels_unavailable(device, model.fla)
    if step_kernels and unavailable:
        raise ValueError(f"the decode step kernels cannot run here: {unavailable}")
    with_kernels = step_kernels is not False and not unavailable
    if not (fused_steps or (fused_steps is None and with_kernels)):
        return None, None
    layers = step_layers(model.text, shape)
    if layers is None:
        if fused_steps or step_kernels:
            raise ValueError("a layer's projections cannot be stacked for the fused step (a bias, or mixed weight formats)")
        return None, None
    if with_kernels and not all(stack.products.has_step_kernels for layer in layers for stack in layer.stacks):
        if step_kernels:
            raise ValueError("the weight format of its linear layers has no step kernels")
        with_kernels = False
    if not with_kernels:
        return (FusedStep(layers, model) if fused_steps else None), None
    from framewise.core.kernels import decode_step  # only where they run: it needs Triton

    return FusedStep(layers, model, kernel_attention=not cache_unreadable(device, cache_format)), decode_step


def step_kernels_unavailable(device: torch.device, fla: FlaKernels | None) -> str:
    """Why the fused step cannot run through Triton kernels on ``device`` ("" when it can): those of
    the dense decode step (its rotary angles are not theirs: no config to check) and fla-core's
    (``fla``, None where they do not run) for the linear layers' mixing."""
    unavailable = dense_step_kernels_unavailable(device, None)
    if unavailable:
        return unavailable
    return "" if fla is not None else "the linear layers' mixing needs fla-core's kernels, which do not run here"
