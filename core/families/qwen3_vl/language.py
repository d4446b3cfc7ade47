"""Qwen3-VL's language model, run pass by pass over a :class:`StaticKVCache`.

Everything the decoder needs to know about Qwen3-VL's language model lives here: how the vision
features enter (in place of the tokens the decoder marks, with their deepstack features added
after the first layers), the 3-D rotary positions (the model's own ``get_rope_index`` over the whole prompt, so
they agree with ``generate()``), and the offset that carries them on past the prompt: a token
generated at cache position ``p`` has rotary position ``p + rope_offset`` on all three axes.

Dense layers (no bias, SiLU gated MLP) are laid out as :class:`_DenseLayer`: q, k and v stacked into
one matrix, gate and up into another, the model's own projections views into them. A prefill and a
decode step run the same torch ops over them (:meth:`Qwen3VLLanguageModel._dense_stack`, n tokens):
one product for q/k/v and one for gate/up, ``F.rms_norm``, rotary as one ``addcmul``, attention in
``scaled_dot_product_attention``. Layers of another shape (the MoE model's experts), or a language
model built with ``fused_steps=False``, run the model's own decoder layers, rotary embedding and norm,
called the way ``Qwen3VLTextModel.forward`` calls them, with Framewise's cache and attention function.
On a CUDA device with Triton the step is six kernel launches a layer instead
(:mod:`framewise.core.kernels.decode_step`: norms, rotary, SiLU and residual adds done
inside the matrix-vector products and the cache write, attention reading only the filled positions).

Decoder linear layers in FP8 (:class:`~framewise.core.quantization.linear.Fp8Linear`, from an FP8
checkpoint or ``model.dtype = fp8``) are stacked the same way, e4m3 with their scales, and the
step reads them through the FP8 matrix-vector kernels
(:mod:`framewise.core.kernels.fp8_gemv`), or dequantized in torch ops; a prefill multiplies
them as ``Fp8Linear`` does, through FP8 tensor cores (the activations quantized per token, once for
q/k/v and once for gate/up) or dequantized weights (:func:`~framewise.core.quantization.matmul.fp8_linear`).
"""

from __future__ import annotations

import importlib.util
import inspect
import math
import weakref
from dataclasses import dataclass
from typing import Protocol, Sequence

import torch
import torch.nn.functional as F
from transformers.integrations.sdpa_attention import repeat_kv

from framewise.core.decoding.attention import (
    causal_mask,
    decoder_attention,
    prefill_attention_backends,
    prefill_mask,
)
from framewise.core.decoding.defs import PromptPositions, VisionRows
from framewise.core.decoding.kv_cache import StaticKVCache
from framewise.core.kernels.e4m3 import BLOCK_SIZE
from framewise.core.quantization.linear import Fp8Linear
from framewise.core.quantization.matmul import Norm, fp8_linear, product_input
from framewise.core.seam import PieceGrid


@dataclass(frozen=True)
class _DenseLayer:
    """One dense decoder layer's weights laid out for few-product passes (prefills and steps).

    ``qkv`` ((heads + 2 kv_heads) * head_dim, hidden) and ``gate_up`` (2 intermediate, hidden)
    are the q/k/v and gate/up projections stacked; the layer's own parameters are views into
    them, so the layout costs no memory. ``qk_norm`` (heads + kv_heads, head_dim) repeats the
    q norm's weight per query head, then the k norm's per key/value head; ``qk_norms``
    (2, head_dim) holds the two once.

    In a model whose decoder linear layers are :class:`~framewise.core.quantization.linear.Fp8Linear`
    the four matrices are e4m3 and each ``*_scale`` holds its float32 scales (stacked alike:
    (rows, 1) per channel, (rows/128, columns/128) per 128x128 block); otherwise the scales are None.
    """

    input_norm: torch.Tensor
    qkv: torch.Tensor
    qk_norm: torch.Tensor
    qk_norms: torch.Tensor
    o: torch.Tensor
    post_norm: torch.Tensor
    gate_up: torch.Tensor
    down: torch.Tensor
    eps: float
    scaling: float
    scheme: str = "none"
    qkv_scale: torch.Tensor | None = None
    o_scale: torch.Tensor | None = None
    gate_up_scale: torch.Tensor | None = None
    down_scale: torch.Tensor | None = None


class Product(Protocol):
    """One linear layer of a dense pass: the input formed from ``x`` (n, K) (itself, or with ``norm``
    or ``silu_mul`` as :func:`~framewise.core.quantization.matmul.product_input` forms it) times
    ``weight`` (N, K), float (``scale`` None) or e4m3 with its scales; returns (n, N) in ``x``'s dtype."""

    def __call__(
        self, x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor | None, scheme: str, *,
        norm: Norm | None = None, silu_mul: bool = False,
    ) -> torch.Tensor: ...


@dataclass(frozen=True)
class _Deepstack:
    """The deepstack features of a prefill: ``features[i]`` (rows, hidden) is added at the token
    ``rows`` (rows,) after layer ``i``."""

    rows: torch.Tensor
    features: list[torch.Tensor]


# Stacked weights by the first projection they hold, with that projection's data pointer then:
# a model whose parameters were moved since gets stacked anew.
_STACKED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


class Qwen3VLLanguageModel:
    """The language half of a ``Qwen3VLForConditionalGeneration`` (or its MoE sibling), as the
    decoder's :class:`~framewise.core.decoding.defs.LanguageModel`. Rotary positions have three
    axes (temporal, height, width).

    ``fused_steps`` (default) lays dense layers out for few-kernel prefills and decode steps;
    ``False`` runs both through the model's own layers (the reference the dense passes are tested
    against).
    ``step_kernels`` runs fused steps through the Triton kernels; by default they are used where
    they can run (:func:`step_kernels_unavailable`).
    """

    def __init__(self, model: torch.nn.Module, fused_steps: bool = True, step_kernels: bool | None = None) -> None:
        self.model = model
        self.text = model.model.language_model
        self.config = model.config.text_config
        parameter = next(self.text.parameters())
        self.device = parameter.device
        self.dtype = parameter.dtype
        layer_parameters = inspect.signature(self.text.layers[0].forward).parameters
        # transformers renamed the layers' cache argument after 5.17.
        self._cache_keyword = "cache" if "cache" in layer_parameters else "past_key_values"
        self._dense = _dense_layers(self.text, self.config) if fused_steps else None
        self._kernels = None
        if self._dense is not None and step_kernels is not False:
            unavailable = step_kernels_unavailable(self.device, self.config)
            if unavailable and step_kernels:
                raise ValueError(f"the decode step kernels cannot run here: {unavailable}")
            if not unavailable:
                from framewise.core.kernels import decode_step as kernels

                self._kernels = kernels

    @property
    def fused_steps(self) -> bool:
        """Whether decode steps run the few-kernel layout (dense layers) or the model's own layers."""
        return self._dense is not None

    @property
    def step_kernels(self) -> bool:
        """Whether decode steps run through the Triton kernels."""
        return self._kernels is not None

    def disable_step_kernels(self) -> None:
        """Run later decode steps as torch ops (after the kernels failed to compile or capture)."""
        self._kernels = None

    @property
    def step_description(self) -> str:
        """How a decode step runs, in a few words."""
        if self._kernels is not None:
            weights = " (FP8 weights)" if self._dense and self._dense[0].qkv_scale is not None else ""
            return f"Triton kernels, 6 launches a layer{weights}"
        return "few-kernel torch ops" if self._dense is not None else "the model's own layers"

    # ------------------------------------------------------------------ sizes

    @property
    def layers(self) -> int:
        return len(self.text.layers)

    @property
    def kv_heads(self) -> int:
        return self.config.num_key_value_heads

    @property
    def head_dim(self) -> int:
        return getattr(self.config, "head_dim", None) or self.config.hidden_size // self.config.num_attention_heads

    @property
    def vocab_size(self) -> int:
        return self.config.vocab_size

    @property
    def max_positions(self) -> int:
        return self.config.max_position_embeddings

    @property
    def rope_axes(self) -> int:
        return 3  # temporal, height, width

    # ------------------------------------------------------------------ positions

    def positions(
        self, input_ids: torch.Tensor, token_types: torch.Tensor, grids: tuple[PieceGrid, ...]
    ) -> PromptPositions:
        """Rotary positions of the prompt ``input_ids`` (1, n) with ``token_types`` (1, n) (0 text,
        1 image, 2 video) about items of ``grids``, as ``generate()`` computes them; a prompt
        without items counts 0, 1, 2, ..."""
        length = input_ids.shape[1]
        if not grids:
            return PromptPositions(rope=torch.arange(length).expand(3, length), rope_offset=0)

        def grids_of(modality: str) -> torch.Tensor | None:
            chosen = [grid for kind, grid in grids if kind == modality]
            return torch.tensor(chosen) if chosen else None

        rope, deltas = self.model.model.get_rope_index(
            input_ids,
            mm_token_type_ids=token_types,
            image_grid_thw=grids_of("image"),
            video_grid_thw=grids_of("video"),
            attention_mask=torch.ones_like(input_ids),
        )
        return PromptPositions(rope=rope[:, 0], rope_offset=int(deltas.reshape(-1)[0]))

    # ------------------------------------------------------------------ passes

    def prefill(
        self, cache: StaticKVCache, start: int, input_ids: torch.Tensor, rope: torch.Tensor, vision: VisionRows | None
    ) -> torch.Tensor:
        """Run the prompt tail ``input_ids`` (1, n), whose first token goes to cache position
        ``start``, at rotary positions ``rope`` (3, n), and return the last token's logits
        (1, vocab) float32. ``vision`` features replace the embeddings of the tokens it marks."""
        count = input_ids.shape[1]
        device = self.device
        input_ids = input_ids.to(device)
        embeds = self.text.embed_tokens(input_ids)
        vision_mask: torch.Tensor | None = None
        deepstack: list[torch.Tensor] = []
        if vision is not None:
            vision_mask = vision.mask.to(device)
            embeds = embeds.masked_scatter(vision_mask[..., None], vision.embeds.to(device, embeds.dtype))
            deepstack = [layer.to(device) for layer in vision.deepstack]
        cache.write_positions = torch.arange(start, start + count, device=device)
        cache.view_length = start + count
        mask = prefill_mask(start, count, device, embeds.dtype)
        hidden = self._prefill_stack(embeds, rope.to(device)[:, None, :], cache, mask, vision_mask, deepstack)
        return self.model.lm_head(hidden[:, -1, :]).float()

    def text_prefill(
        self,
        cache: StaticKVCache,
        input_ids: torch.Tensor,
        cache_positions: torch.Tensor,
        rope: torch.Tensor,
        last: torch.Tensor,
    ) -> torch.Tensor:
        """A prefill of text tokens, graph-safe: ``input_ids`` (1, n) at ``cache_positions`` (n,)
        with rotary positions ``rope`` (3, n), all on the device; attends over
        ``cache.view_length`` positions. Returns the logits (1, vocab) float32 of the token at
        index ``last`` (1,) of the n."""
        embeds = self.text.embed_tokens(input_ids)
        cache.write_positions = cache_positions
        mask = causal_mask(cache.view_length, cache_positions, embeds.dtype)
        hidden = self._prefill_stack(embeds, rope[:, None, :], cache, mask, None, [])
        return self.model.lm_head(hidden[0].index_select(0, last)).float()

    def step(self, cache: StaticKVCache, token: torch.Tensor, cache_position: torch.Tensor, rope_position: torch.Tensor):
        """One decode step, graph-safe: ``token`` (1, 1) int64 at ``cache_position`` (1,) with
        rotary position ``rope_position`` (1,) on every axis. Reads ``cache.view_length`` positions;
        returns logits (1, vocab) float32."""
        if self._kernels is not None:
            return self._kernel_step(cache, token, cache_position, rope_position)
        embeds = self.text.embed_tokens(token)
        rope = rope_position.view(1, 1, 1).expand(3, 1, 1)
        cache.write_positions = cache_position
        mask = causal_mask(cache.view_length, cache_position, embeds.dtype)
        if self._dense is None:
            hidden = self._layers(embeds, rope, cache, mask, None, [])[:, -1, :]
        else:
            hidden = self._dense_stack(embeds.view(1, -1), self.text.rotary_emb(embeds, rope), cache, mask, _project)
        return self.model.lm_head(hidden).float()

    def _kernel_step(
        self, cache: StaticKVCache, token: torch.Tensor, cache_position: torch.Tensor, rope_position: torch.Tensor
    ) -> torch.Tensor:
        """:meth:`step` through the Triton kernels: six launches a layer, none reading more of the
        cache than ``cache_position`` has filled. Logits (1, vocab) float32."""
        kernels, rotary = self._kernels, self.text.rotary_emb
        heads = self.config.num_attention_heads
        hidden = self.text.embed_tokens(token).view(-1)
        norm_linear, linear_residual, mlp = _step_products(kernels, self._dense[0].qkv_scale is not None)
        for index, layer in enumerate(self._dense):
            keys, values = cache.keys[index], cache.values[index]
            qkv = norm_linear(hidden, layer.input_norm, layer.qkv, layer.qkv_scale, layer.eps)
            attended = kernels.attend_step(
                qkv, layer.qk_norms, rotary.inv_freq, rotary.attention_scaling, rope_position, cache_position,
                keys, values, heads, layer.eps, cache.view_length, layer.scaling,
            )
            hidden = linear_residual(attended, layer.o, layer.o_scale, hidden)
            hidden = mlp(hidden, layer)
        norm = self.text.norm
        logits = kernels.rms_norm_linear(
            hidden, norm.weight, self.model.lm_head.weight, norm.variance_epsilon, out_dtype=torch.float32
        )
        return logits.view(1, -1)

    def _prefill_stack(
        self,
        embeds: torch.Tensor,
        rope: torch.Tensor,
        cache: StaticKVCache,
        mask: torch.Tensor | None,
        vision_mask: torch.Tensor | None,
        deepstack: list[torch.Tensor],
    ) -> torch.Tensor:
        """The decoder stack of a prefill, :meth:`_layers`' arguments and result: through the dense
        layers where the model has them (:meth:`_dense_stack` with :func:`_prefill_product`), else
        through the model's own layers."""
        if self._dense is None:
            return self._layers(embeds, rope, cache, mask, vision_mask, deepstack)
        features = None
        if deepstack:
            assert vision_mask is not None
            rows = vision_mask[0].nonzero().squeeze(1)
            features = _Deepstack(rows, [layer.to(embeds.dtype) for layer in deepstack])
        hidden = self._dense_stack(
            embeds[0], self.text.rotary_emb(embeds, rope), cache, mask, _prefill_product,
            deepstack=features, hooked=self.text.layers,
        )
        return hidden[None]

    def _dense_stack(
        self,
        hidden: torch.Tensor,
        position_embeddings: tuple[torch.Tensor, torch.Tensor],
        cache: StaticKVCache,
        mask: torch.Tensor | None,
        product: Product,
        deepstack: _Deepstack | None = None,
        hooked: Sequence[torch.nn.Module] = (),
    ) -> torch.Tensor:
        """The decoder stack for ``n`` tokens ``hidden`` (n, hidden) through :class:`_DenseLayer`s as
        torch ops, the arithmetic of the model's layers; returns the normed hidden states (n, hidden).

        ``position_embeddings``: the rotary cos and sin, (1, n, head_dim) each. The keys and values go
        to the cache at ``cache.write_positions`` (n,); ``mask`` is additive over ``cache.view_length``
        positions, or None for a causal prefill from an empty cache. ``product`` is every linear layer
        and forms its input from the norm before it or from ``silu(gate) * up`` (:func:`_project`
        for a decode step, :func:`_prefill_product` for a prefill). ``deepstack`` features are added
        at their rows after the first layers, as ``Qwen3VLTextModel._deepstack_process`` does. The
        forward pre-hooks of ``hooked[i]`` run before layer ``i`` (the engine's cancel checks inside
        a prefill)."""
        assert self._dense is not None
        count = hidden.shape[0]
        heads, kv_heads, head_dim = self.config.num_attention_heads, self.kv_heads, self.head_dim
        half = head_dim // 2
        cos, sin = (part.reshape(count, 1, head_dim) for part in position_embeddings)
        # rotate_half(x) * sin == roll(x, half) * sin with its first half negated
        sin_signed = torch.cat((-sin[..., :half], sin[..., half:]), dim=-1)
        size = self.config.hidden_size
        for index, layer in enumerate(self._dense):
            if index < len(hooked):
                _run_pre_hooks(hooked[index], hidden)
            qkv = product(hidden, layer.qkv, layer.qkv_scale, layer.scheme, norm=(layer.input_norm, layer.eps))
            qk = qkv[:, : (heads + kv_heads) * head_dim].view(count, heads + kv_heads, head_dim)
            qk = F.rms_norm(qk, (head_dim,), None, layer.eps) * layer.qk_norm
            qk = torch.addcmul(qk * cos, qk.roll(half, dims=-1), sin_signed)
            key = qk[:, heads:].transpose(0, 1)[None]
            value = qkv[:, (heads + kv_heads) * head_dim :].view(count, kv_heads, head_dim).transpose(0, 1)[None]
            keys, values = cache.update(key, value, index)
            attended = _attend(qk[:, :heads], keys, values, mask, layer.scaling)
            hidden = hidden + product(attended, layer.o, layer.o_scale, layer.scheme)
            post_norm = (layer.post_norm, layer.eps)
            gate_up = product(hidden, layer.gate_up, layer.gate_up_scale, layer.scheme, norm=post_norm)
            hidden = hidden + product(gate_up, layer.down, layer.down_scale, layer.scheme, silu_mul=True)
            if deepstack is not None and index < len(deepstack.features):
                hidden = hidden.index_add(0, deepstack.rows, deepstack.features[index])
        norm = self.text.norm
        return F.rms_norm(hidden, (size,), norm.weight, norm.variance_epsilon)

    def _layers(
        self,
        embeds: torch.Tensor,
        rope: torch.Tensor,
        cache: StaticKVCache,
        mask: torch.Tensor | None,
        vision_mask: torch.Tensor | None,
        deepstack: list[torch.Tensor],
    ) -> torch.Tensor:
        """The decoder stack on ``embeds`` (1, n, hidden) at rotary positions ``rope`` (3, 1, n);
        deepstack features are added at the ``vision_mask`` (1, n) positions after the first layers, as
        ``Qwen3VLTextModel.forward`` does. Returns the normed hidden states (1, n, hidden)."""
        position_embeddings = self.text.rotary_emb(embeds, rope)
        hidden = embeds
        with decoder_attention(self.config):
            for index, layer in enumerate(self.text.layers):
                hidden = layer(
                    hidden,
                    attention_mask=mask,
                    position_embeddings=position_embeddings,
                    **{self._cache_keyword: cache},
                )
                if index < len(deepstack):
                    hidden = self.text._deepstack_process(hidden, vision_mask, deepstack[index])
        return self.text.norm(hidden)


def _dense_layers(text: torch.nn.Module, config) -> list[_DenseLayer] | None:
    """The layers of ``text`` laid out for fused steps, or ``None`` when a layer is not the dense
    Qwen3-VL layer (no bias, SiLU gated MLP) or its linear layers cannot be stacked (mixed
    precisions, block-scaled projections whose rows are not whole blocks).

    The stacked matrices are built layer by layer, each projection's weight copied into its place
    and released at once, and freed device memory is handed back between layers so that the next
    layer's stacked matrix can reuse it: building holds no second copy of the weights. Projections
    the FP8 loader already wrote as one matrix are used as they lie, with no copy."""
    if config.hidden_act != "silu" or getattr(config, "attention_bias", False):
        return None
    layers = []
    for layer in text.layers:
        attention, mlp = layer.self_attn, layer.mlp
        if not all(hasattr(mlp, name) for name in ("gate_proj", "up_proj", "down_proj")):
            return None
        projections = (attention.q_proj, attention.k_proj, attention.v_proj, attention.o_proj,
                       mlp.gate_proj, mlp.up_proj, mlp.down_proj)
        scheme = _common_scheme(projections)
        if scheme is None or not _stackable(scheme, (attention.q_proj, attention.k_proj), (mlp.gate_proj,)):
            return None
        heads = attention.q_proj.out_features // attention.head_dim
        kv_heads = attention.k_proj.out_features // attention.head_dim
        q_norm, k_norm = attention.q_norm.weight.detach(), attention.k_norm.weight.detach()
        qk_norm = torch.cat((q_norm.expand(heads, -1), k_norm.expand(kv_heads, -1)))
        qkv, qkv_scale = _stacked(attention.q_proj, attention.k_proj, attention.v_proj)
        gate_up, gate_up_scale = _stacked(mlp.gate_proj, mlp.up_proj)
        layers.append(
            _DenseLayer(
                input_norm=layer.input_layernorm.weight.detach(),
                qkv=qkv,
                qk_norm=qk_norm,
                qk_norms=torch.stack((q_norm, k_norm)),
                o=attention.o_proj.weight.detach(),
                post_norm=layer.post_attention_layernorm.weight.detach(),
                gate_up=gate_up,
                down=mlp.down_proj.weight.detach(),
                eps=layer.input_layernorm.variance_epsilon,
                scaling=attention.scaling,
                scheme=scheme,
                qkv_scale=qkv_scale,
                o_scale=_scale_of(attention.o_proj),
                gate_up_scale=gate_up_scale,
                down_scale=_scale_of(mlp.down_proj),
            )
        )
        if qkv.is_cuda:
            torch.cuda.empty_cache()  # the released projections' segments, for the next layer's stacks
    return layers


def _common_scheme(linears: tuple[torch.nn.Module, ...]) -> str | None:
    """``"none"`` when all ``linears`` are ``nn.Linear``, the FP8 scheme when all are Fp8Linear with
    one scheme, else None."""
    schemes = {linear.scheme if isinstance(linear, Fp8Linear) else
               "none" if isinstance(linear, torch.nn.Linear) else "other" for linear in linears}
    return schemes.pop() if len(schemes) == 1 and "other" not in schemes else None


def _stackable(scheme: str, *leading: tuple[torch.nn.Module, ...]) -> bool:
    """Block scales stack only when every projection but the last of a stack fills whole blocks."""
    return scheme != "block" or all(linear.out_features % BLOCK_SIZE == 0 for group in leading for linear in group)


def _scale_of(linear: torch.nn.Module) -> torch.Tensor | None:
    return linear.weight_scale if isinstance(linear, Fp8Linear) else None


def _project(
    x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor | None, scheme: str, *,
    norm: Norm | None = None, silu_mul: bool = False,
) -> torch.Tensor:
    """A :class:`Product` for one token, a float weight (``scale`` None) or an e4m3 one with its
    scales, dequantized: the arithmetic of the FP8 step kernels (activations stay unquantized)."""
    if scale is None:
        return F.linear(product_input(x, norm, silu_mul), weight)
    return fp8_linear(  # type: ignore[arg-type]
        x, weight, scale, scheme, path="dequantize", norm=norm, silu_mul=silu_mul
    )


def _prefill_product(
    x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor | None, scheme: str, *,
    norm: Norm | None = None, silu_mul: bool = False,
) -> torch.Tensor:
    """A :class:`Product` for many tokens, as the model's own layers compute it: ``F.linear`` for a
    float weight (``scale`` None), :func:`fp8_linear` on its default path for an e4m3 one (FP8 tensor
    cores with the input formed and quantized per token in one kernel where the card has them)."""
    if scale is None:
        return F.linear(product_input(x, norm, silu_mul), weight)
    return fp8_linear(x, weight, scale, scheme, norm=norm, silu_mul=silu_mul)  # type: ignore[arg-type]


def _attend(
    query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor | None, scaling: float
) -> torch.Tensor:
    """Attention of ``query`` (n, heads, head_dim) over the cached ``keys``/``values``
    (1, kv_heads, length, head_dim) under the additive ``mask`` (1, 1, n, length), or causally when
    ``mask`` is None (then ``length`` is n). Returns (n, heads * head_dim)."""
    count, heads, head_dim = query.shape
    kv_heads = keys.shape[1]
    if count == 1:
        # The query heads of one key/value head attend as that head's queries: no copies.
        grouped = query.reshape(1, kv_heads, heads // kv_heads, head_dim)
        attended = F.scaled_dot_product_attention(grouped, keys, values, attn_mask=mask, scale=scaling)
        return attended.reshape(1, heads * head_dim)
    query = query.transpose(0, 1)[None]
    with prefill_attention_backends():
        if mask is None:
            # Causal from an empty cache: flash attention shares the key/value heads itself.
            attended = F.scaled_dot_product_attention(
                query, keys, values, is_causal=True, scale=scaling, enable_gqa=True
            )
        else:
            # Only the memory-efficient and math kernels take a mask, and the memory-efficient one
            # does not share key/value heads (enable_gqa would fall back to math): repeat them, as
            # transformers' sdpa attention does (an expand and a copy, no host sync: graph-safe).
            group = heads // kv_heads
            keys, values = repeat_kv(keys, group), repeat_kv(values, group)
            attended = F.scaled_dot_product_attention(query, keys, values, attn_mask=mask, scale=scaling)
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


def _step_products(kernels, fp8: bool):
    """The step's fused products: ``norm_linear(x, norm, W, scale, eps)``,
    ``linear_residual(x, W, scale, residual)`` and ``mlp(hidden, layer)`` (post-attention norm,
    gate/up, ``silu(gate) * up``, down and the residual, in two launches): the FP8 gemv kernels for
    e4m3 weights, the bf16 step kernels (which take no scale) otherwise. The FP8 gate/up kernel forms
    ``silu(gate) * up`` itself, where the bf16 down kernel forms it as it reads the gate/up product."""
    if fp8:
        from framewise.core.kernels import fp8_gemv

        def fp8_mlp(hidden, layer):
            activation = fp8_gemv.fp8_rms_norm_silu_gate_up(
                hidden, layer.post_norm, layer.gate_up, layer.gate_up_scale, layer.eps
            )
            return fp8_gemv.fp8_linear_residual(activation, layer.down, layer.down_scale, hidden)

        return fp8_gemv.fp8_rms_norm_linear, fp8_gemv.fp8_linear_residual, fp8_mlp

    def norm_linear(x, norm, weight, scale, eps):
        return kernels.rms_norm_linear(x, norm, weight, eps)

    def linear_residual(x, weight, scale, residual):
        return kernels.linear_residual(x, weight, residual)

    def mlp(hidden, layer):
        gate_up = kernels.rms_norm_linear(hidden, layer.post_norm, layer.gate_up, layer.eps)
        return kernels.linear_residual(gate_up, layer.down, hidden, silu_mul=True)

    return norm_linear, linear_residual, mlp


def step_kernels_unavailable(device: torch.device, config) -> str:
    """Why the Triton decode-step kernels cannot run for a text model of ``config`` on ``device``
    ("" when they can)."""
    if device.type != "cuda":
        return "they need a CUDA device"
    if importlib.util.find_spec("triton") is None:
        return "Triton is not installed"
    rope_type = (getattr(config, "rope_parameters", None) or {}).get("rope_type", "default")
    if rope_type != "default":
        return f"they compute plain rotary angles, not {rope_type!r} ones"
    return ""


def _stacked(*linears: torch.nn.Module) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The weights of ``linears`` stacked by rows, and their FP8 scales stacked alike (None for
    float weights); the layers' own weights and scales become views into them, once.

    The stacked tensors are allocated once and each layer's tensor is copied in and dropped
    before the next is read, so no second copy of the weights is held."""
    first = linears[0]
    known = _STACKED.get(first)
    if known is not None and known[2] == first.weight.data_ptr():
        return known[0], known[1]
    with torch.no_grad():
        weight = _stack_into_views(linears, "weight")
        scale = _stack_into_views(linears, "weight_scale") if isinstance(first, Fp8Linear) else None
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
    are consecutive rows of one tensor (the FP8 loader writes stacks so), that tensor's view."""
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
