"""Gated DeltaNet's token mixing: the gated delta rule and the short causal convolution before it,
each carrying its state from one pass to the next.

A linear-attention layer keeps, per value head, a recurrent state ``S`` (key_dim, value_dim) in
float32. For every token ``t``, with the key and query L2-normalized and the query scaled by
``key_dim ** -0.5``::

    S = exp(decay_t) * S                      decay_t <= 0: a forgetting gate
    S = S + k_t (beta_t (v_t - S^T k_t))^T    the delta rule: write what S does not yet predict
    o_t = S^T q_t

Two ways compute it, with the same result up to rounding: :func:`gated_delta_chunked` for n tokens
(a prefill: chunks of 64 tokens solved in closed form, the state carried from chunk to chunk) and
:func:`gated_delta_step` for one token (a decode step, in place, graph-safe). The q/k/v channels
first pass a depthwise causal convolution of ``kernel`` taps with a SiLU (:func:`causal_conv`),
whose state is the last ``kernel`` input columns.

Every function updates the state tensors it is given in place, so that a captured CUDA graph that
calls it keeps reading and writing the same memory.

On CUDA, where the fla-core package (flash-linear-attention's Triton kernels) imports,
:func:`fla_kernels` hands its functions to these and they run instead of the torch code. Used from
fla-core 0.6.0, each with ``q``/``k`` (B, T, H, K), ``v`` (B, T, HV, V), ``g``/``beta`` (B, T, HV),
a state (B, HV, K, V) float32, HV a multiple of H:

- ``fla.ops.gated_delta_rule.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=...,
  output_final_state=True, use_qk_l2norm_in_kernel=True) -> (o, final_state)``
- ``fla.ops.gated_delta_rule.fused_recurrent_gated_delta_rule(q, k, v, g, beta, initial_state=...,
  output_final_state=True, use_qk_l2norm_in_kernel=True) -> (o, final_state)``; with
  ``use_gate_in_kernel=True, A_log=..., dt_bias=..., use_beta_sigmoid_in_kernel=True`` it takes ``g``
  and ``beta`` before their activations and computes the gates itself
- ``fla.modules.causal_conv1d.causal_conv1d(x, weight, initial_state=..., output_final_state=...,
  activation="silu") -> (y, final_state)`` with ``x`` (B, T, D), ``weight`` (D, W), states (B, D, W)
- ``fla.modules.causal_conv1d.causal_conv1d_update(x, cache, weight=..., activation="silu") ->
  (y, cache)``, one token, ``cache`` (B, D, W) updated in place.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.nn.functional as F

CHUNK_SIZE = 64
# The epsilon of the query and key L2 norms, as the model was trained with.
L2_EPS = 1e-6


@dataclass(frozen=True)
class FlaKernels:
    """fla-core's functions this module calls (signatures in the module docstring)."""

    chunk: Callable
    recurrent: Callable
    conv: Callable
    conv_update: Callable


@functools.cache
def _import_fla() -> tuple[FlaKernels | None, str]:
    try:
        from fla.modules.causal_conv1d import causal_conv1d, causal_conv1d_update
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule, fused_recurrent_gated_delta_rule
    except Exception as error:  # not installed, or Triton missing or broken underneath it
        return None, f"fla-core does not import ({type(error).__name__}: {error})"
    kernels = FlaKernels(chunk_gated_delta_rule, fused_recurrent_gated_delta_rule, causal_conv1d, causal_conv1d_update)
    return kernels, ""


def fla_unavailable(device: torch.device) -> str:
    """Why fla-core's kernels cannot run on ``device`` ("" when they can)."""
    if device.type != "cuda":
        return "they need a CUDA device"
    return _import_fla()[1]


def fla_kernels(device: torch.device) -> FlaKernels | None:
    """fla-core's functions where they can run on ``device``, else None (the torch code runs)."""
    return None if fla_unavailable(device) else _import_fla()[0]


def l2_normalized(x: torch.Tensor) -> torch.Tensor:
    """``x`` divided by its L2 norm over the last axis (with :data:`L2_EPS` under the root)."""
    return x * torch.rsqrt((x * x).sum(dim=-1, keepdim=True) + L2_EPS)


def _head_major(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """float32 (heads, n, dim) copies of ``query``/``key`` (1, n, key_heads, key_dim), normalized,
    the query scaled, each key head repeated for the value heads it serves, and of ``value``
    (1, n, heads, value_dim)."""
    group = value.shape[2] // key.shape[2]
    query, key = (l2_normalized(t[0].float()).repeat_interleave(group, dim=1) for t in (query, key))
    query = query * query.shape[-1] ** -0.5
    return query.transpose(0, 1), key.transpose(0, 1), value[0].float().transpose(0, 1)


def gated_delta_chunked(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    decay: torch.Tensor,
    beta: torch.Tensor,
    state: torch.Tensor,
    fla: FlaKernels | None = None,
) -> torch.Tensor:
    """The gated delta rule over n tokens from ``state``, which ends holding the state after them.

    ``query``/``key`` (1, n, key_heads, key_dim), ``value`` (1, n, heads, value_dim) with heads a
    multiple of key_heads; ``decay`` (1, n, heads) log-space, <= 0; ``beta`` (1, n, heads) in [0, 1];
    ``state`` (1, heads, key_dim, value_dim) float32. Returns (1, n, heads, value_dim) in
    ``value``'s dtype. Through ``fla``'s chunk kernel where given."""
    if fla is not None:
        return _through_fla(fla.chunk, query, key, value, decay, beta, state)
    q, k, v = _head_major(query, key, value)
    count = q.shape[1]
    padding = -count % CHUNK_SIZE
    # Padded tokens come last, with no decay and no write: they leave the state as it was.
    q, k, v = (F.pad(t, (0, 0, 0, padding)) for t in (q, k, v))
    log_decay, write = (F.pad(t[0].float().transpose(0, 1), (0, padding)) for t in (decay, beta))
    heads = q.shape[0]
    q, k, v = (t.reshape(heads, -1, CHUNK_SIZE, t.shape[-1]) for t in (q, k, v))
    log_decay, write = (t.reshape(heads, -1, CHUNK_SIZE) for t in (log_decay, write))
    terms = _chunk_terms(q, k, v, log_decay.cumsum(dim=-1), write)
    out = _scan_chunks(terms, state)
    out = out.reshape(heads, -1, out.shape[-1])[:, :count]
    return out.transpose(0, 1)[None].to(value.dtype)


def _through_fla(
    rule: Callable, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, decay: torch.Tensor,
    beta: torch.Tensor, state: torch.Tensor, **options: Any,
) -> torch.Tensor:
    """One of fla-core's gated delta rules on the arguments of :func:`gated_delta_chunked` (and the
    rule's further keyword ``options``), its final state copied into ``state``."""
    # By keyword: the recurrent rule's fourth and fifth parameters are per-key and per-value gates.
    out, final = rule(
        query, key, value, g=decay, beta=beta, initial_state=state, output_final_state=True,
        use_qk_l2norm_in_kernel=True, **options,
    )
    state.copy_(final)
    return out


@dataclass(frozen=True)
class _ChunkTerms:
    """What each chunk of C tokens contributes, computed for all chunks at once (heads, chunks, ...).

    With ``u`` (C, value_dim) the values a chunk writes into the state (each token's correction to
    what the state before it predicts): ``u = written - keys_for_state @ S`` for the state ``S`` at
    the chunk's start. Then the chunk's outputs are ``queries @ S + scores @ u`` and the state after
    it ``S * chunk_decay + keys_to_end^T @ u``."""

    written: torch.Tensor
    keys_for_state: torch.Tensor
    queries: torch.Tensor
    scores: torch.Tensor
    keys_to_end: torch.Tensor
    chunk_decay: torch.Tensor


def _chunk_terms(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cumulative: torch.Tensor, write: torch.Tensor
) -> _ChunkTerms:
    """The terms of :class:`_ChunkTerms` from ``q``/``k`` (heads, chunks, C, key_dim), ``v``
    (heads, chunks, C, value_dim), ``cumulative`` (heads, chunks, C) the log decay summed from the
    chunk's start through each token, and ``write`` (heads, chunks, C) each token's beta.

    Token i's correction depends on the corrections of the tokens before it in its chunk through
    ``(I + L) u = beta v - beta exp(cumulative) k S``, with ``L[i, j] = beta_i
    exp(cumulative_i - cumulative_j) k_i . k_j`` for j < i: one triangular solve per chunk."""
    size = q.shape[2]
    causal = torch.ones(size, size, dtype=torch.bool, device=q.device).tril()
    # between[i, j] = exp(cumulative_i - cumulative_j), the decay from token j to token i (0 for j > i)
    between = (cumulative[..., :, None] - cumulative[..., None, :]).masked_fill(~causal, float("-inf")).exp()
    weighted_keys = k * write[..., None]
    coupling = (weighted_keys @ k.transpose(-1, -2) * between).tril(-1)
    from_start = cumulative.exp()[..., None]
    right = torch.cat((v * write[..., None], weighted_keys * from_start), dim=-1)
    solved = torch.linalg.solve_triangular(coupling, right, upper=False, unitriangular=True)
    written, keys_for_state = solved.split((v.shape[-1], k.shape[-1]), dim=-1)
    last = cumulative[..., -1:]
    return _ChunkTerms(
        written=written,
        keys_for_state=keys_for_state,
        queries=q * from_start,
        scores=q @ k.transpose(-1, -2) * between,
        keys_to_end=k * (last - cumulative).exp()[..., None],
        chunk_decay=last.exp()[..., None],
    )


def _scan_chunks(terms: _ChunkTerms, state: torch.Tensor) -> torch.Tensor:
    """Carry ``state`` (1, heads, key_dim, value_dim) float32 through the chunks in order, in place;
    return the outputs (heads, chunks, C, value_dim) float32."""
    current = state[0].float()
    outputs = torch.empty_like(terms.written)
    for chunk in range(terms.written.shape[1]):
        corrections = terms.written[:, chunk] - terms.keys_for_state[:, chunk] @ current
        outputs[:, chunk] = terms.queries[:, chunk] @ current + terms.scores[:, chunk] @ corrections
        current = current * terms.chunk_decay[:, chunk] + terms.keys_to_end[:, chunk].transpose(-1, -2) @ corrections
    state.copy_(current[None])
    return outputs


def gated_delta_step(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    decay: torch.Tensor,
    beta: torch.Tensor,
    state: torch.Tensor,
    fla: FlaKernels | None = None,
) -> torch.Tensor:
    """One token of the gated delta rule, graph-safe: the shapes of :func:`gated_delta_chunked`
    with n = 1; ``state`` is updated in place. Returns (1, 1, heads, value_dim) in ``value``'s
    dtype. Through ``fla``'s recurrent kernel where given."""
    if fla is not None:
        return _through_fla(fla.recurrent, query, key, value, decay, beta, state)
    q, k, v = (t[:, 0] for t in _head_major(query, key, value))  # (heads, dim)
    current = state[0]
    current.mul_(decay[0, 0].float().exp()[:, None, None])
    predicted = (k[:, None, :] @ current)[:, 0]
    correction = (v - predicted) * beta[0, 0].float()[:, None]
    current.add_(k[:, :, None] * correction[:, None, :])
    out = (q[:, None, :] @ current)[:, 0]
    return out.to(value.dtype)[None, None]


def gated_delta_step_gated_in_kernel(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    decay_input: torch.Tensor,
    beta_logits: torch.Tensor,
    decay_log_rate: torch.Tensor,
    decay_bias: torch.Tensor,
    state: torch.Tensor,
    fla: FlaKernels,
) -> torch.Tensor:
    """:func:`gated_delta_step` through fla-core's recurrent kernel, which also computes Gated
    DeltaNet's gates from the layer's projections, so a decode step launches no kernels for them:
    decay = -exp(``decay_log_rate``) * softplus(``decay_input`` + ``decay_bias``) and
    beta = sigmoid(``beta_logits``), with ``decay_input``/``beta_logits`` (1, 1, heads) and
    ``decay_log_rate``/``decay_bias`` (heads,). Graph-safe; ``state`` is updated in place."""
    return _through_fla(
        fla.recurrent, query, key, value, decay_input, beta_logits, state,
        use_gate_in_kernel=True, A_log=decay_log_rate, dt_bias=decay_bias, use_beta_sigmoid_in_kernel=True,
    )


@dataclass(frozen=True)
class PaddedEnd:
    """Where the real tokens of a pass of n end, the rest padding (a graph's fixed-length prefill),
    in the forms the mixing reads, computed once for all the layers of the pass: ``real`` (1, n, 1)
    bool, whether each token is real; and the ``kernel`` convolution inputs that end with the last
    real token, column by column: ``from_input`` (kernel,) bool, whether the column is a token of
    the pass (else a column of the state before it), ``input_tokens`` (kernel,) which token (0 where
    not), ``state_columns`` (kernel,) which state column (the last where not). Graph-safe."""

    real: torch.Tensor
    from_input: torch.Tensor
    input_tokens: torch.Tensor
    state_columns: torch.Tensor

    @classmethod
    def after(cls, last: torch.Tensor, count: int, kernel: int) -> PaddedEnd:
        """The end after token ``last`` (1,) int64 on the device, of ``count`` tokens, for a
        convolution of ``kernel`` taps."""
        device = last.device
        tokens = last + torch.arange(1 - kernel, 1, device=device)  # the window's columns, as tokens of the pass
        return cls(
            real=(torch.arange(count, device=device) <= last)[None, :, None],
            from_input=tokens >= 0,
            input_tokens=tokens.clamp(min=0),
            state_columns=(tokens + kernel).clamp(max=kernel - 1),
        )


def causal_conv(
    x: torch.Tensor,
    state: torch.Tensor,
    weight: torch.Tensor,
    end: PaddedEnd | None = None,
    fla: FlaKernels | None = None,
) -> torch.Tensor:
    """The depthwise causal convolution with SiLU over n tokens ``x`` (1, n, channels), continuing
    from ``state`` (1, channels, kernel), the inputs before them; ``weight`` (channels, kernel).
    Returns (1, n, channels) in ``x``'s dtype. ``state`` ends holding the last ``kernel`` inputs,
    or, where ``end`` says the pass is padded, the ``kernel`` inputs up to and including its last
    real token. Graph-safe. Through ``fla``'s kernels where given."""
    if fla is not None and end is None:
        return _fla_conv(x, state, weight, fla)
    if fla is not None:
        out, _ = fla.conv(x, weight, initial_state=state, output_final_state=False, activation="silu")
    else:
        window = torch.cat((state, x.transpose(1, 2).to(state.dtype)), dim=-1)  # (1, channels, kernel + n)
        # The window holds kernel + n columns: n + 1 outputs, the first of which ends before x.
        out = F.conv1d(window.to(weight.dtype), weight[:, None, :], groups=weight.shape[0])[..., 1:]
        out = F.silu(out).transpose(1, 2).to(x.dtype)
    state.copy_(_state_after(state, x, end))
    return out


def _state_after(state: torch.Tensor, x: torch.Tensor, end: PaddedEnd | None) -> torch.Tensor:
    """The ``kernel`` convolution inputs (1, channels, kernel) that end with the last real token of
    ``x`` (1, n, channels) (its last token without ``end``), ``state`` (1, channels, kernel) holding
    the inputs before ``x``: the last columns of ``cat(state, x^T)`` up to there, gathered from the
    two without joining them (the pass's whole input)."""
    if end is None:
        count = x.shape[1]
        kept = state[..., count:]  # the state's columns still in the window (none once n >= kernel)
        return torch.cat((kept, x[:, max(count - state.shape[-1], 0) :].transpose(1, 2).to(state.dtype)), dim=-1)
    from_input = x[0].index_select(0, end.input_tokens).T.to(state.dtype)  # (channels, kernel)
    return torch.where(end.from_input, from_input, state[0].index_select(-1, end.state_columns))[None]


def _fla_conv(x: torch.Tensor, state: torch.Tensor, weight: torch.Tensor, fla: FlaKernels) -> torch.Tensor:
    """:func:`causal_conv` through fla-core, ``state`` ending after the last token: the one-token
    kernel (which updates ``state`` itself) for a step, else the n-token kernel."""
    if x.shape[1] == 1:
        out, _ = fla.conv_update(x, state, weight=weight, activation="silu")
        return out
    out, final = fla.conv(x, weight, initial_state=state, output_final_state=True, activation="silu")
    state.copy_(final)
    return out
