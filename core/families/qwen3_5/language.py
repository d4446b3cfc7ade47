"""Qwen3.5's language model, run pass by pass over a :class:`HybridState`.

Three of every four layers are linear attention (Gated DeltaNet), the fourth gated full attention
(transformers' ``layer_types``). A pass runs the model's weights in the order
``Qwen3_5TextModel.forward`` runs them, with Framewise's state in place of transformers' cache:

- every layer's two norms run fused, each with the residual add before it, as one Triton kernel
  on a CUDA device, else as torch's ``rms_norm``
  (:func:`~framewise.core.families.qwen3_5.mixers.norms_for`); the final norm, and the final
  residual add, only for the one token a pass reads;
- a layer's projections of its normed input, and its MLP's gate and up, run as the modules' own
  products, or, where the layers are laid out for the fused step of :mod:`.step`, as that
  layout's stacked products (one a weight format; the MLP's SiLU-gated product formed as the down
  product's input, inside a quantizing product's kernel);
- a full-attention layer's attention runs Qwen3.5's rotary code, its per-head norms fused, its
  keys and values into the state (:meth:`HybridState.update` maps the layer to its slot of the KV
  cache), through the decoder's attention function
  (:func:`~framewise.core.decoding.attention.decoder_attention_forward`);
- a linear-attention layer's token mixing runs through
  :mod:`framewise.core.decoding.linear_attention` on the layer's convolution and recurrent states
  (the chunked rule for a prefill, the one-token rule for a decode step).

A decode step runs the fused step of :mod:`.step` instead where it is laid out (norms and
residuals inside the products; the same mixing).

Rotary positions are Qwen3-VL's: three axes from the model's own ``get_rope_index`` over the whole
prompt (the same code in transformers), interleaved over the rotary quarter of each head, and a
token generated at cache position ``p`` has rotary position ``p + rope_offset`` on every axis.
There are no deepstack features.
"""

from __future__ import annotations

import torch

from framewise.core.decoding.attention import AttentionMask, causal_mask, prefill_mask
from framewise.core.decoding.defs import VisionRows
from framewise.core.decoding.host_embedding import look_up
from framewise.core.decoding.hybrid_state import FULL_ATTENTION, HybridState
from framewise.core.decoding.linear_attention import PaddedEnd, fla_kernels, fla_unavailable
from framewise.core.errors import ModelLoadError
from framewise.core.families.qwen3_5.config import TextShape
from framewise.core.families.qwen3_5.mixers import (
    delta_rule_mixing,
    gated_attention,
    norm_scale,
    norms_for,
)
from framewise.core.families.qwen3_5.step import StepLayer, StepModel, load_fused_step, output_head
from framewise.core.families.qwen3_vl.language import Qwen3VLLanguageModel
from framewise.core.quantization.kv_formats import FLOAT_KV_CACHE, KVCacheFormat


class Qwen35LanguageModel:
    """The language half of a ``Qwen3_5ForConditionalGeneration`` as the decoder runs it.

    ``linear_kernels`` runs the linear layers' token mixing through fla-core's kernels: by default
    where they can run (:func:`~framewise.core.decoding.linear_attention.fla_unavailable`), never
    when False; True where they cannot is a ValueError saying why. The states it makes keep the
    full-attention layers' keys and values in ``cache_format``.

    Decode steps run the fused step (:mod:`.step`: stacked projections, norms and residuals inside
    the products) through the Triton step kernels where they can run, else the model's own layers;
    ``fused_steps`` and ``step_kernels`` choose otherwise, as
    :func:`~framewise.core.families.qwen3_5.step.load_fused_step` reads them.
    """

    def __init__(
        self, model: torch.nn.Module, linear_kernels: bool | None = None, cache_format: KVCacheFormat = FLOAT_KV_CACHE,
        fused_steps: bool | None = None, step_kernels: bool | None = None,
    ) -> None:
        self.model = model
        self.cache_format = cache_format
        self.text = model.model.language_model
        self.config = model.config.text_config
        self.shape = TextShape.from_text_config(self.config.to_dict())
        parameter = self.text.norm.weight  # not the embedding's, which may be held by the host
        self.device = parameter.device
        self.dtype = parameter.dtype
        _check_mixers(self.text.layers, self.shape)
        unavailable = fla_unavailable(self.device)
        if linear_kernels and unavailable:
            raise ValueError(f"the linear-attention kernels cannot run here: {unavailable}")
        self._fla = fla_kernels(self.device) if linear_kernels is not False else None
        self._norms = norms_for(self.device)
        self._norm_scales = [
            (norm_scale(layer.input_layernorm), norm_scale(layer.post_attention_layernorm)) for layer in self.text.layers
        ]
        self._final_norm_scale = norm_scale(self.text.norm)
        self._head_norm_scales = {
            index: (norm_scale(layer.self_attn.q_norm), norm_scale(layer.self_attn.k_norm))
            for index, layer in enumerate(self.text.layers)
            if self.shape.layer_kinds[index] == FULL_ATTENTION
        }
        # -exp(A_log) of each linear layer (heads,) float32, once rather than in every pass
        self._decay_rates = {
            index: -layer.linear_attn.A_log.detach().float().exp()
            for index, layer in enumerate(self.text.layers)
            if self.shape.layer_kinds[index] != FULL_ATTENTION
        }
        step_model = StepModel(
            self.text, self._head_norm_scales, self._decay_rates, self._fla, self._final_norm_scale, self.text.norm.eps,
            output_head(model.lm_head), self._norms,
        )
        self._step, self._kernels = load_fused_step(
            step_model, self.shape, self.device, fused_steps, step_kernels, cache_format
        )
        self._fused_torch = bool(fused_steps)

    @property
    def linear_kernels(self) -> bool:
        """Whether the linear layers mix tokens through fla-core's kernels."""
        return self._fla is not None

    @property
    def step_kernels(self) -> bool:
        """Whether decode steps run through the Triton step kernels."""
        return self._kernels is not None

    @property
    def fused_steps(self) -> bool:
        """Whether decode steps run the fused step (through the kernels or as torch ops)."""
        return self._step is not None

    @property
    def vision_in_embeddings(self) -> bool:
        """Always: Qwen3.5's vision features replace token embeddings, with no deepstack."""
        return True

    @property
    def step_description(self) -> str:
        """How a decode step runs, in a few words."""
        mixing = "fla-core's kernels" if self._fla is not None else "torch ops"
        if self._step is None:
            return f"the model's own layers, Gated DeltaNet through {mixing}"
        weight_dtype = self._step.layers[0].gate_up.products.weight_dtype
        weights = f" ({weight_dtype.upper()} weights)" if weight_dtype else ""
        products = "Triton kernels" if self._kernels is not None else "torch ops"
        kernel_attention = self._kernels is not None and self._step.kernel_attention
        attention = "a Triton split kernel" if kernel_attention else "torch ops"
        return (f"stacked products with norms and residuals fused, through {products}{weights}; Gated DeltaNet "
                f"through {mixing}; full attention through {attention}")

    def disable_step_kernels(self) -> None:
        """Run later decode steps without the Triton step kernels (after they failed to compile or
        capture): through the model's own layers, or the fused step as torch ops where
        ``fused_steps=True`` asked for it."""
        self._kernels = None
        if not self._fused_torch:
            self._step = None

    # ------------------------------------------------------------------ sizes

    @property
    def layers(self) -> int:
        """Layers with keys and values in the cache (the full-attention ones)."""
        return self.shape.full_layers

    @property
    def kv_heads(self) -> int:
        return self.shape.kv_heads

    @property
    def head_dim(self) -> int:
        return self.shape.head_dim

    @property
    def vocab_size(self) -> int:
        return self.shape.vocab_size

    @property
    def max_positions(self) -> int:
        return self.shape.max_positions

    @property
    def rope_axes(self) -> int:
        return 3  # temporal, height, width

    def new_state(self, max_tokens: int) -> HybridState:
        """A zeroed decoder state for ``max_tokens`` positions on the model's device."""
        shape = self.shape
        return HybridState(
            shape.layer_kinds, shape.kv_heads, shape.head_dim, shape.linear, max_tokens, self.dtype, self.device,
            self.cache_format,
        )

    def state_bytes(self, max_tokens: int) -> int:
        """Device memory :meth:`new_state` takes for ``max_tokens`` positions."""
        shape = self.shape
        return HybridState.bytes_needed(
            shape.layer_kinds, shape.kv_heads, shape.head_dim, shape.linear, max_tokens, self.dtype, self.cache_format
        )

    # ------------------------------------------------------------------ positions

    # transformers' Qwen3.5 computes rotary positions with Qwen3-VL's code, so the positions do too.
    positions = Qwen3VLLanguageModel.positions

    # ------------------------------------------------------------------ passes

    def prefill(
        self, state: HybridState, start: int, input_ids: torch.Tensor, rope: torch.Tensor, vision: VisionRows | None,
        *, logits: bool = True,
    ) -> torch.Tensor | None:
        """Run the prompt tail ``input_ids`` (1, n), whose first token goes to position ``start``,
        at rotary positions ``rope`` (3, n); ``state`` must hold exactly the ``start`` tokens before
        it (its linear layers cannot skip or repeat one). ``vision`` features replace the
        embeddings of the tokens it marks. Returns the last token's logits (1, vocab) float32, or
        None without ``logits`` (the output head skipped)."""
        count = input_ids.shape[1]
        device = self.device
        embeds = self.embed(input_ids)
        if vision is not None:
            if vision.deepstack:
                raise ValueError("Qwen3.5 takes no deepstack features; its vision tower makes none")
            embeds = vision.placed_in(embeds)
        state.kv.write_positions = torch.arange(start, start + count, device=device)
        state.kv.view_length = start + count
        mask = prefill_mask(start, count)
        final = self._layers(embeds, rope.to(device)[:, None, :], state, mask)
        return self.head(final) if logits else None

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        """The embeddings (1, n, hidden) on the device of token ``ids`` (1, n), on the host or the device."""
        return look_up(self.text.embed_tokens, ids, self.device)

    def text_prefill(
        self,
        state: HybridState,
        embeds: torch.Tensor,
        cache_positions: torch.Tensor,
        rope: torch.Tensor,
        last: torch.Tensor,
    ) -> torch.Tensor:
        """A prefill of text tokens, graph-safe: their embeddings ``embeds`` (1, n, hidden) at
        ``cache_positions`` (n,) with rotary positions ``rope`` (3, n), all on the device, attending over
        ``state.kv.view_length`` positions. Tokens after index ``last`` (1,) are padding: the linear
        states end after token ``last``, as if the padding had not been there. Returns the final
        hidden state (1, hidden) of token ``last``, which :meth:`head` turns into its logits."""
        state.kv.write_positions = cache_positions
        mask = causal_mask(state.kv.view_length, cache_positions, embeds.dtype)
        return self._layers(embeds, rope[:, None, :], state, mask, last=last)

    def head(self, hidden: torch.Tensor) -> torch.Tensor:
        """The logits (1, vocab) float32 of a final hidden state ``hidden`` (1, hidden)."""
        return self.model.lm_head(hidden).float()

    def step(
        self, state: HybridState, embeds: torch.Tensor, cache_position: torch.Tensor, rope_position: torch.Tensor
    ) -> torch.Tensor:
        """One decode step, graph-safe: the token whose embedding is ``embeds`` (1, 1, hidden) at
        ``cache_position`` (1,) with rotary position ``rope_position`` (1,) on every axis; reads
        ``state.kv.view_length`` positions and moves every linear state on by one token. Returns
        logits (1, vocab) float32."""
        if self._step is not None:
            return self._step(state, embeds, cache_position, rope_position, self._kernels)
        state.kv.write_positions = cache_position
        mask = causal_mask(state.kv.view_length, cache_position, embeds.dtype)
        return self.head(self._layers(embeds, rope_position.view(1, 1, 1).expand(3, 1, 1), state, mask, one_token=True))

    def _layers(
        self,
        embeds: torch.Tensor,
        rope: torch.Tensor,
        state: HybridState,
        mask: AttentionMask,
        *,
        one_token: bool = False,
        last: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The decoder stack on ``embeds`` (1, n, hidden) at rotary positions ``rope`` (3, 1, n),
        full attention under the additive ``mask`` (None: causal from an empty cache). Linear layers
        take the one-token rule when ``one_token``, and ignore the tokens after ``last`` where given.
        Each residual add runs with the norm after it. Returns the final normed hidden state
        (1, hidden) of the last token, or of token ``last`` (1,) where given: the one a pass reads."""
        position_embeddings = self.text.rotary_emb(embeds, rope)
        end = None if last is None else PaddedEnd.after(last, embeds.shape[1], self.shape.linear.conv_kernel)
        stacked = self._step.layers if self._step is not None else None
        norms = self._norms
        hidden = embeds
        normed = norms.norm(hidden, self._norm_scales[0][0], self.text.layers[0].input_layernorm.eps)
        for index, layer in enumerate(self.text.layers):
            input_scale, post_scale = self._norm_scales[index]
            if index:
                hidden, normed = norms.add_norm(hidden, out, input_scale, layer.input_layernorm.eps)
            layout = stacked[index] if stacked else None
            full_attention = self.shape.layer_kinds[index] == FULL_ATTENTION
            parts = _input_projections(layer, full_attention, normed, layout)
            if full_attention:
                attention = layer.self_attn
                attended = gated_attention(
                    attention, *parts, self._head_norm_scales[index], position_embeddings, mask, state, index, norms
                )
                mixed = attention.o_proj(attended)
            else:
                mixed = self._mix(layer.linear_attn, parts, state, index, one_token, end)
            hidden, normed = norms.add_norm(hidden, mixed, post_scale, layer.post_attention_layernorm.eps)
            out = _mlp(layer.mlp, normed, layout)
        if last is None:
            final = hidden[0, -1:] + out[0, -1:]
        else:
            final = hidden[0].index_select(0, last) + out[0].index_select(0, last)
        return norms.norm(final, self._final_norm_scale, self.text.norm.eps)

    def _mix(
        self,
        mixer: torch.nn.Module,
        parts: list[torch.Tensor],
        state: HybridState,
        layer: int,
        one_token: bool,
        end: PaddedEnd | None,
    ) -> torch.Tensor:
        """A Gated DeltaNet layer's token mixing from its projections ``parts`` (in_proj_qkv's,
        in_proj_z's, in_proj_b's and in_proj_a's, each (1, n, rows);
        :func:`~framewise.core.families.qwen3_5.mixers.delta_rule_mixing`), over the linear states
        of model layer ``layer``, its gated norm and out_proj. Returns (1, n, hidden)."""
        qkv, gate, beta_logits, decay_input = parts
        count = qkv.shape[1]
        out = delta_rule_mixing(
            mixer, qkv, beta_logits, decay_input, self._decay_rates[layer], state,
            layer, one_token=one_token, end=end, fla=self._fla,
        )
        # As (tokens, heads, head_v_dim): the gate is read where its projection left it.
        by_heads = (count, -1, mixer.head_v_dim)
        out = self._norms.gated(out.reshape(by_heads), gate.view(by_heads), mixer.norm)
        return mixer.out_proj(out.reshape(1, count, -1))


def _input_projections(
    layer: torch.nn.Module, full_attention: bool, normed: torch.Tensor, stacked: StepLayer | None
) -> list[torch.Tensor]:
    """The projections of a decoder layer's normed input ``normed`` (1, n, hidden), each (1, n, rows):
    a full-attention layer's q (with its output gate), k and v, a linear layer's in_proj_qkv,
    in_proj_z, in_proj_b and in_proj_a. Through the step's stacks (one product a weight format, as
    the step multiplies them) where the layer is laid out for it, else the model's own modules."""
    if stacked is not None:
        parts: list[torch.Tensor] = []
        for stack in stacked.inputs:
            parts.extend(stack.products.prefill(normed, stack.weight, stack.scale).split(stack.rows, dim=-1))
        return parts
    if full_attention:
        attention = layer.self_attn
        return [attention.q_proj(normed), attention.k_proj(normed), attention.v_proj(normed)]
    mixer = layer.linear_attn
    return [mixer.in_proj_qkv(normed), mixer.in_proj_z(normed), mixer.in_proj_b(normed), mixer.in_proj_a(normed)]


def _mlp(mlp: torch.nn.Module, normed: torch.Tensor, stacked: StepLayer | None) -> torch.Tensor:
    """The MLP of the post-attention normed state ``normed`` (1, n, hidden): gate and up as one
    product and SiLU(gate) * up formed as the down product's input where the layer is laid out for
    the step (a quantizing product forms it inside its kernel), else the model's own module."""
    if stacked is None:
        return mlp(normed)
    gate_up, down = stacked.gate_up, stacked.down
    both = gate_up.products.prefill(normed, gate_up.weight, gate_up.scale)
    return down.products.prefill(both, down.weight, down.scale, silu_mul=True)


def _check_mixers(layers: torch.nn.ModuleList, shape: TextShape) -> None:
    """Raise ModelLoadError when a linear layer is not the Gated DeltaNet this module computes (SiLU
    convolution without bias, the projections of Qwen3.5)."""
    for index, kind in enumerate(shape.layer_kinds):
        if kind == FULL_ATTENTION:
            continue
        mixer = layers[index].linear_attn
        if mixer.activation != "silu" or mixer.conv1d.bias is not None or not hasattr(mixer, "in_proj_qkv"):
            raise ModelLoadError(
                f"layer {index}'s linear attention is not Qwen3.5's Gated DeltaNet (SiLU convolution without "
                "bias, in_proj_qkv/z/b/a): this checkpoint's language model cannot run here"
            )
