"""The decoder state of a hybrid model: a KV cache for the full-attention layers only, linear
layers' states of a fixed size, and snapshots that put those states back exactly."""

from __future__ import annotations

import pytest
import torch

from framewise.core.decoding.hybrid_state import (
    FULL_ATTENTION,
    LINEAR_ATTENTION,
    HybridState,
    LinearLayerShape,
)

KINDS = (LINEAR_ATTENTION, LINEAR_ATTENTION, LINEAR_ATTENTION, FULL_ATTENTION) * 2
LINEAR = LinearLayerShape(conv_channels=24, conv_kernel=4, heads=4, key_dim=4, value_dim=2)


def new_state(max_tokens: int = 32, dtype: torch.dtype = torch.bfloat16) -> HybridState:
    return HybridState(KINDS, kv_heads=2, head_dim=8, linear=LINEAR, max_tokens=max_tokens, dtype=dtype,
                       device=torch.device("cpu"))


def fill_randomly(state: HybridState, seed: int) -> None:
    generator = torch.Generator().manual_seed(seed)
    for tensor in (*state.conv_states, *state.recurrent_states):
        tensor.copy_(torch.randn(tensor.shape, generator=generator))


def test_only_full_attention_layers_keep_keys_and_values_and_the_size_is_as_computed() -> None:
    state = new_state(max_tokens=32)
    assert len(state.kv.keys) == 2 and len(state.conv_states) == len(state.recurrent_states) == 6
    assert state.conv_states[0].shape == (1, 24, 4) and state.conv_states[0].dtype == torch.bfloat16
    assert state.recurrent_states[0].shape == (1, 4, 4, 2) and state.recurrent_states[0].dtype == torch.float32
    kv_bytes = 2 * 2 * 2 * 8 * 32 * 2  # keys and values, 2 layers, 2 heads, head_dim 8, 32 positions, bf16
    linear_bytes = 6 * (24 * 4 * 2 + 4 * 4 * 2 * 4)
    assert state.nbytes == kv_bytes + linear_bytes
    assert HybridState.bytes_needed(KINDS, 2, 8, LINEAR, 32, torch.bfloat16) == state.nbytes
    # Twice the context doubles only the keys and values.
    assert HybridState.bytes_needed(KINDS, 2, 8, LINEAR, 64, torch.bfloat16) == 2 * kv_bytes + linear_bytes


def test_a_model_layer_index_reaches_its_own_slot() -> None:
    state = new_state()
    state.kv.write_positions = torch.tensor([3])
    key, value = torch.ones(1, 2, 1, 8, dtype=torch.bfloat16), torch.full((1, 2, 1, 8), 2.0, dtype=torch.bfloat16)
    state.update(key, value, 7)  # the model's 8th layer is the second full-attention layer
    assert state.kv.keys[1][0, :, 3].eq(1).all() and state.kv.values[1][0, :, 3].eq(2).all()
    assert state.kv.keys[0].eq(0).all()
    state.recurrent_state(5).fill_(3.0)  # model layer 5 is the fifth linear layer
    assert state.recurrent_states[4].eq(3).all() and state.recurrent_states[3].eq(0).all()
    assert state.conv_state(4) is state.conv_states[3]


def test_restore_puts_back_the_linear_states_of_the_snapshot_in_the_same_tensors() -> None:
    state = new_state()
    fill_randomly(state, seed=0)
    state.kv.tokens, state.kv.owner = [5, 6, 7], "clip"
    expected = [tensor.clone() for tensor in (*state.conv_states, *state.recurrent_states)]
    pointers = [tensor.data_ptr() for tensor in (*state.conv_states, *state.recurrent_states)]
    snapshot = state.snapshot()
    fill_randomly(state, seed=1)  # an answer moved the states on
    state.kv.tokens += [8, 9]
    state.restore(snapshot)
    restored = (*state.conv_states, *state.recurrent_states)
    assert all(torch.equal(now, before) for now, before in zip(restored, expected))
    assert [tensor.data_ptr() for tensor in restored] == pointers  # captured graphs keep their memory
    assert state.kv.tokens == [5, 6, 7] and snapshot.length == 3


def test_a_snapshot_taken_into_a_kept_one_reuses_its_tensors() -> None:
    state = new_state()
    kept = state.snapshot()
    fill_randomly(state, seed=2)
    state.kv.tokens = [1]
    again = state.snapshot(into=kept)
    assert [t.data_ptr() for t in again.conv] == [t.data_ptr() for t in kept.conv]
    assert all(torch.equal(copy, now) for copy, now in zip(again.recurrent, state.recurrent_states))
    assert again.tokens == (1,)


def test_a_snapshot_of_another_conversation_or_a_cut_prefix_is_not_restored() -> None:
    state = new_state()
    state.kv.tokens, state.kv.owner = [5, 6, 7], "clip"
    snapshot = state.snapshot()
    state.kv.tokens = [5, 9]  # a different follow-up overwrote position 1
    assert not state.restorable(snapshot)
    with pytest.raises(ValueError, match="no longer matches"):
        state.restore(snapshot)
    state.kv.tokens, state.kv.owner = [5, 6, 7, 8], "another clip"
    assert not state.restorable(snapshot)


def test_reset_empties_every_state() -> None:
    state = new_state()
    fill_randomly(state, seed=3)
    state.kv.tokens, state.kv.owner = [1, 2], "clip"
    state.reset()
    assert all(tensor.eq(0).all() for tensor in (*state.conv_states, *state.recurrent_states))
    assert state.kv.tokens == [] and state.kv.owner is None


def test_an_unknown_layer_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="mamba"):
        HybridState(("mamba", FULL_ATTENTION), 2, 8, LINEAR, 16, torch.float32, torch.device("cpu"))
