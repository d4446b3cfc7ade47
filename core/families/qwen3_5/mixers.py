"""What Qwen3.5's two kinds of layers do with their projections, whoever made them: the gated full
attention after its q (with the output gate), k and v projections, and the Gated DeltaNet's token
mixing after its qkv, beta and decay projections; and the norms of both, each fused.

The language model's passes (:mod:`.language`) make the projections with the model's own modules;
a fused decode step (:mod:`.step`) makes them with stacked products. Both then call these, so the
two compute the same attention and mixing; a fused step through the Triton step kernels attends
through the decode step's split attention kernel instead (:func:`gated_attention_step`: the same
heads, norms and rotary, the cache read as it is stored).

The norms (the zero-centred ones, alone and after a residual add, and the gated one) run as torch
ops or, on a CUDA device where Triton imports, as one Triton kernel each with the same arithmetic
(:mod:`framewise.core.kernels.scaled_rms_norm`, :mod:`framewise.core.kernels.gated_rms_norm`):
:func:`norms_for` chooses.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from types import ModuleType
from typing import Callable

import torch
import torch.nn.functional as F
from transformers.models.qwen3_5.modeling_qwen3_5 import apply_rotary_pos_emb

from framewise.core.decoding.attention import AttentionMask, decoder_attention_forward
from framewise.core.decoding.hybrid_state import HybridState
from framewise.core.decoding.linear_attention import (
    FlaKernels,
    PaddedEnd,
    causal_conv,
    gated_delta_chunked,
    gated_delta_step,
    gated_delta_step_gated_in_kernel,
)


def norm_scale(norm: torch.nn.Module) -> torch.Tensor:
    """What a ``Qwen3_5RMSNorm`` multiplies the normed rows by: 1 + its weight, float32 (hidden,)."""
    return norm.weight.detach().float() + 1


def zero_centred_rms_norm(x: torch.Tensor, scale: torch.Tensor, eps: float) -> torch.Tensor:
    """``Qwen3_5RMSNorm`` of ``x`` (..., hidden) in one fused op: normed in float32, times ``scale``
    (:func:`norm_scale`), in ``x``'s dtype. transformers' module runs it as a string of small ops,
    which in a decode step cost more than the layer's own attention."""
    return F.rms_norm(x.float(), scale.shape, scale, eps).type_as(x)


def add_zero_centred_rms_norm(
    hidden: torch.Tensor, delta: torch.Tensor, scale: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """The residual add ``hidden + delta`` (..., hidden) and its :func:`zero_centred_rms_norm`."""
    total = hidden + delta
    return total, zero_centred_rms_norm(total, scale, eps)


def gated_rms_norm(x: torch.Tensor, gate: torch.Tensor, norm: torch.nn.Module) -> torch.Tensor:
    """``Qwen3_5RMSNormGated`` of ``x`` (..., head_v_dim) by ``gate`` (same shape), the norm fused:
    each row normed in float32 and rounded to ``x``'s dtype, times ``norm``'s weight, times
    silu(gate) in float32, in ``x``'s dtype."""
    normed = F.rms_norm(x.float(), x.shape[-1:], None, norm.variance_epsilon).to(x.dtype)
    return (norm.weight * normed * F.silu(gate.float())).to(x.dtype)


@dataclass(frozen=True)
class Norms:
    """How Qwen3.5's norms run: ``norm(x, scale, eps)`` as :func:`zero_centred_rms_norm`,
    ``add_norm(hidden, delta, scale, eps) -> (total, normed)`` as :func:`add_zero_centred_rms_norm`,
    ``gated(x, gate, norm)`` as :func:`gated_rms_norm`."""

    norm: Callable[[torch.Tensor, torch.Tensor, float], torch.Tensor]
    add_norm: Callable[[torch.Tensor, torch.Tensor, torch.Tensor, float], tuple[torch.Tensor, torch.Tensor]]
    gated: Callable[[torch.Tensor, torch.Tensor, torch.nn.Module], torch.Tensor]


TORCH_NORMS = Norms(zero_centred_rms_norm, add_zero_centred_rms_norm, gated_rms_norm)


def norms_for(device: torch.device) -> Norms:
    """The norms for tensors on ``device``: one Triton kernel each on a CUDA device where Triton
    imports (torch's arithmetic in one launch, where torch ops take three to eight), else
    :data:`TORCH_NORMS`."""
    if device.type != "cuda" or importlib.util.find_spec("triton") is None:
        return TORCH_NORMS
    # They need Triton: imported where they run.
    from framewise.core.kernels import gated_rms_norm as gated_kernel
    from framewise.core.kernels import scaled_rms_norm as scaled_kernel

    def gated(x: torch.Tensor, gate: torch.Tensor, norm: torch.nn.Module) -> torch.Tensor:
        return gated_kernel.gated_rms_norm(x, gate, norm.weight, norm.variance_epsilon)

    return Norms(scaled_kernel.scaled_rms_norm, scaled_kernel.add_scaled_rms_norm, gated)


def gated_attention(
    attention: torch.nn.Module,
    query_gate: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    head_norm_scales: tuple[torch.Tensor, torch.Tensor],
    position_embeddings: tuple[torch.Tensor, torch.Tensor],
    mask: AttentionMask,
    state: HybridState,
    layer: int,
    norms: Norms,
) -> torch.Tensor:
    """A gated full-attention layer's attention from its projections, as ``Qwen3_5Attention.forward``
    computes it with the per-head norms fused (``head_norm_scales``: the q and k norms'
    :func:`norm_scale`, run by ``norms``): ``query_gate`` (1, n, heads * 2 head_dim), each head's
    query then its output gate, as q_proj lays them out; ``key``/``value`` (1, n, kv_heads * head_dim).
    The keys and values go to the state's slot for model layer ``layer``. Returns the gated attention
    (1, n, heads * head_dim), o_proj's input."""
    count = query_gate.shape[1]
    query, gate, key, value = _attention_heads(
        attention, query_gate, key, value, head_norm_scales, position_embeddings, norms
    )
    key, value = state.update(key, value, layer)
    attended, _ = decoder_attention_forward(attention, query, key, value, mask, scaling=attention.scaling)
    return attended.reshape(1, count, -1) * torch.sigmoid(gate.reshape(1, count, -1))


def gated_attention_step(
    attention: torch.nn.Module,
    query_gate: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    head_norm_scales: tuple[torch.Tensor, torch.Tensor],
    position_embeddings: tuple[torch.Tensor, torch.Tensor],
    state: HybridState,
    layer: int,
    norms: Norms,
    kernels: ModuleType,
) -> torch.Tensor:
    """:func:`gated_attention` of one token (its projections (1, 1, ...)) through the decode step's
    split attention kernel (``kernels.attend_cached``): the token's key and value written into the
    cache in its format, its query heads attending over the cache's entries (and scales) as they are
    stored, up to the token's position (``state.kv.write_positions``), never reading the cache back
    in the activations' dtype. Graph-safe. Returns the gated attention (heads * head_dim,)."""
    query, gate, key, value = _attention_heads(
        attention, query_gate, key, value, head_norm_scales, position_embeddings, norms
    )
    cache, slot = state.kv, state.cache_slot(layer)
    cache.write(key, value, slot)
    attended = kernels.attend_cached(
        query.reshape(-1, attention.head_dim).contiguous(), cache.write_positions, cache.keys[slot],
        cache.values[slot], cache.view_length, attention.scaling, *cache.scales(slot),
    )
    return attended * torch.sigmoid(gate.reshape(-1))


def _attention_heads(
    attention: torch.nn.Module,
    query_gate: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    head_norm_scales: tuple[torch.Tensor, torch.Tensor],
    position_embeddings: tuple[torch.Tensor, torch.Tensor],
    norms: Norms,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """A gated full-attention layer's heads from its projections (:func:`gated_attention`'s), the
    per-head norms run by ``norms``: the query (1, heads, n, head_dim) and key (1, kv_heads, n,
    head_dim) normed and rotated, the output
    gate (1, n, heads, head_dim) and the value (1, kv_heads, n, head_dim)."""
    count, head_dim = query_gate.shape[1], attention.head_dim
    query, gate = query_gate.view(1, count, -1, 2 * head_dim).chunk(2, dim=-1)
    query_scale, key_scale = head_norm_scales
    query = norms.norm(query, query_scale, attention.q_norm.eps).transpose(1, 2)
    key = norms.norm(key.view(1, count, -1, head_dim), key_scale, attention.k_norm.eps).transpose(1, 2)
    value = value.view(1, count, -1, head_dim).transpose(1, 2)
    query, key = apply_rotary_pos_emb(query, key, *position_embeddings)
    return query, gate, key, value


def delta_rule_mixing(
    mixer: torch.nn.Module,
    qkv: torch.Tensor,
    beta_logits: torch.Tensor,
    decay_input: torch.Tensor,
    decay_rate: torch.Tensor,
    state: HybridState,
    layer: int,
    *,
    one_token: bool,
    end: PaddedEnd | None,
    fla: FlaKernels | None,
) -> torch.Tensor:
    """A Gated DeltaNet layer's token mixing from its projections, as ``Qwen3_5GatedDeltaNet.forward``
    computes it before the gated norm, over the linear states of model layer ``layer``: ``qkv``
    (1, n, conv channels) the in_proj_qkv product, ``beta_logits``/``decay_input`` (1, n, heads)
    in_proj_b's and in_proj_a's, ``decay_rate`` (heads,) float32 -exp(A_log). The one-token rule
    when ``one_token``; the tokens after the real ones are padding where ``end`` says so. Through
    fla-core's kernels where ``fla`` is given. Returns (1, n, heads, head_v_dim)."""
    mixed = causal_conv(qkv, state.conv_state(layer), mixer.conv1d.weight[:, 0], end, fla)
    query, key, value = _split_mixed(mixed, mixer.key_dim, mixer.head_k_dim, mixer.head_v_dim)
    recurrent = state.recurrent_state(layer)
    if one_token and fla is not None:
        return gated_delta_step_gated_in_kernel(
            query, key, value, decay_input, beta_logits, mixer.A_log, mixer.dt_bias, recurrent, fla
        )
    beta = beta_logits.sigmoid()
    # In float32: in a half-precision model exp(A_log) * softplus(.) may not fit.
    decay = decay_rate * F.softplus(decay_input.float() + mixer.dt_bias)
    if end is not None:
        # Padding neither decays nor writes the recurrent state.
        beta, decay = beta * end.real, decay * end.real
    rule = gated_delta_step if one_token else gated_delta_chunked
    return rule(query, key, value, decay, beta, recurrent, fla)


def _split_mixed(
    mixed: torch.Tensor, key_dim: int, head_k_dim: int, head_v_dim: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Query, key (1, n, key_heads, head_k_dim) and value (1, n, heads, head_v_dim) from the
    convolved channels ``mixed`` (1, n, 2 key_dim + value_dim), laid out in that order."""
    count = mixed.shape[1]
    query, key, value = mixed.split((key_dim, key_dim, mixed.shape[-1] - 2 * key_dim), dim=-1)
    return (
        query.reshape(1, count, -1, head_k_dim),
        key.reshape(1, count, -1, head_k_dim),
        value.reshape(1, count, -1, head_v_dim),
    )
