"""Gated DeltaNet's token mixing (core.decoding.linear_attention) against transformers' own torch
code for Qwen3.5 (fp32, random inputs): the chunked rule, the one-token step and the causal
convolution, from zero and from nonzero states, in one pass and split in two."""

from __future__ import annotations

import pytest
import torch
from torch.overrides import TorchFunctionMode

from framewise.core.decoding.linear_attention import (
    FlaKernels,
    PaddedEnd,
    causal_conv,
    fla_kernels,
    fla_unavailable,
    gated_delta_chunked,
    gated_delta_step,
    gated_delta_step_gated_in_kernel,
)
from tests.core.families.qwen3_5.transformers_reference import modeling as reference

KEY_HEADS, HEADS, KEY_DIM, VALUE_DIM = 2, 4, 16, 8
CHANNELS, KERNEL = 24, 4
TOLERANCE = {"rtol": 1e-4, "atol": 1e-5}


def rule_inputs(count: int, seed: int = 0, device: str = "cpu") -> dict[str, torch.Tensor]:
    """Random query/key (1, n, KEY_HEADS, KEY_DIM), value (1, n, HEADS, VALUE_DIM), log decay
    (1, n, HEADS) <= 0 as the model forms it, beta (1, n, HEADS) in (0, 1)."""
    generator = torch.Generator().manual_seed(seed)

    def normal(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=generator).to(device)

    return {
        "query": normal(1, count, KEY_HEADS, KEY_DIM),
        "key": normal(1, count, KEY_HEADS, KEY_DIM),
        "value": normal(1, count, HEADS, VALUE_DIM),
        "decay": -normal(HEADS).exp() * torch.nn.functional.softplus(normal(1, count, HEADS)),
        "beta": normal(1, count, HEADS).sigmoid(),
    }


def random_state(seed: int = 1, device: str = "cpu") -> torch.Tensor:
    return torch.randn(1, HEADS, KEY_DIM, VALUE_DIM, generator=torch.Generator().manual_seed(seed)).to(device)


def transformers_rule(inputs: dict[str, torch.Tensor], state: torch.Tensor, recurrent: bool):
    """transformers' chunked or token-by-token rule (it takes q/k already repeated per value head)."""
    group = HEADS // KEY_HEADS
    query, key = (inputs[name].repeat_interleave(group, dim=2) for name in ("query", "key"))
    function = reference.torch_recurrent_gated_delta_rule if recurrent else reference.torch_chunk_gated_delta_rule
    return function(
        query, key, inputs["value"], g=inputs["decay"], beta=inputs["beta"], initial_state=state.clone(),
        output_final_state=True, use_qk_l2norm_in_kernel=True,
    )


def sliced(inputs: dict[str, torch.Tensor], part: slice) -> dict[str, torch.Tensor]:
    return {name: tensor[:, part] for name, tensor in inputs.items()}


@pytest.mark.parametrize("count", [1, 5, 64, 150])
@pytest.mark.parametrize("recurrent", [False, True], ids=["chunked reference", "token-by-token reference"])
def test_the_chunked_rule_equals_transformers_from_a_nonzero_state(count: int, recurrent: bool) -> None:
    inputs, state = rule_inputs(count), random_state()
    expected_out, expected_state = transformers_rule(inputs, state, recurrent)
    out = gated_delta_chunked(**inputs, state=state)
    torch.testing.assert_close(out, expected_out, **TOLERANCE)
    torch.testing.assert_close(state, expected_state, **TOLERANCE)


def test_steps_token_by_token_equal_transformers_and_update_the_state_in_place() -> None:
    inputs, state = rule_inputs(20, seed=2), random_state(3)
    expected_out, expected_state = transformers_rule(inputs, state, recurrent=True)
    buffer = state.data_ptr()
    outs = [gated_delta_step(**sliced(inputs, slice(t, t + 1)), state=state) for t in range(20)]
    torch.testing.assert_close(torch.cat(outs, dim=1), expected_out, **TOLERANCE)
    torch.testing.assert_close(state, expected_state, **TOLERANCE)
    assert state.data_ptr() == buffer


@pytest.mark.parametrize("split", [1, 63, 64, 70])
def test_a_sequence_split_in_two_chunked_passes_equals_one_pass(split: int) -> None:
    inputs = rule_inputs(130, seed=4)
    whole_state, parts_state = random_state(5), random_state(5)
    whole = gated_delta_chunked(**inputs, state=whole_state)
    first = gated_delta_chunked(**sliced(inputs, slice(None, split)), state=parts_state)
    second = gated_delta_chunked(**sliced(inputs, slice(split, None)), state=parts_state)
    torch.testing.assert_close(torch.cat((first, second), dim=1), whole, **TOLERANCE)
    torch.testing.assert_close(parts_state, whole_state, **TOLERANCE)


def test_the_rule_keeps_the_value_dtype_and_a_float32_state() -> None:
    inputs = {name: tensor.to(torch.bfloat16) for name, tensor in rule_inputs(10, seed=6).items()}
    state = random_state(7)
    assert gated_delta_chunked(**inputs, state=state).dtype == torch.bfloat16
    assert gated_delta_step(**sliced(inputs, slice(0, 1)), state=state).dtype == torch.bfloat16
    assert state.dtype == torch.float32


def conv_inputs(count: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Token-major inputs (1, n, CHANNELS) and a depthwise weight (CHANNELS, KERNEL)."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(1, count, CHANNELS, generator=generator), torch.randn(CHANNELS, KERNEL, generator=generator)


def test_the_convolution_from_an_empty_state_equals_transformers_prefill() -> None:
    x, weight = conv_inputs(9)
    state = torch.zeros(1, CHANNELS, KERNEL)
    out = causal_conv(x, state, weight)
    expected = reference.causal_conv1d_fn(x.transpose(1, 2), weight, None, activation="silu").transpose(1, 2)
    torch.testing.assert_close(out, expected, **TOLERANCE)
    torch.testing.assert_close(state, x[0, -KERNEL:].T[None])


def test_convolution_steps_equal_transformers_update_and_a_split_equals_one_pass() -> None:
    x, weight = conv_inputs(12, seed=1)
    whole_state = torch.randn(1, CHANNELS, KERNEL, generator=torch.Generator().manual_seed(2))
    their_state, step_state, split_state = whole_state.clone(), whole_state.clone(), whole_state.clone()
    whole = causal_conv(x, whole_state, weight)
    theirs = torch.cat(
        [reference.causal_conv1d_update(x[:, t : t + 1].transpose(1, 2), their_state, weight, None, "silu")
         for t in range(12)], dim=2,
    ).transpose(1, 2)
    steps = torch.cat([causal_conv(x[:, t : t + 1], step_state, weight) for t in range(12)], dim=1)
    split = torch.cat((causal_conv(x[:, :2], split_state, weight), causal_conv(x[:, 2:], split_state, weight)), dim=1)
    for out, state in [(theirs, their_state), (steps, step_state), (split, split_state)]:
        torch.testing.assert_close(out, whole, **TOLERANCE)
        torch.testing.assert_close(state, whole_state)


@pytest.mark.parametrize("real", [1, 3, 6])
def test_padding_after_the_last_real_token_leaves_the_state_of_the_real_tokens(real: int) -> None:
    x, weight = conv_inputs(8, seed=3)
    start = torch.randn(1, CHANNELS, KERNEL, generator=torch.Generator().manual_seed(4))
    padded_state, real_state = start.clone(), start.clone()
    padded = causal_conv(x, padded_state, weight, PaddedEnd.after(torch.tensor([real - 1]), 8, KERNEL))
    alone = causal_conv(x[:, :real], real_state, weight)
    torch.testing.assert_close(padded[:, :real], alone)
    torch.testing.assert_close(padded_state, real_state)


class LargestMade(TorchFunctionMode):
    """Records the most elements of any tensor a torch function returns inside it."""

    def __init__(self) -> None:
        super().__init__()
        self.elements = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for tensor in out if isinstance(out, tuple) else (out,):
            if isinstance(tensor, torch.Tensor):
                self.elements = max(self.elements, tensor.numel())
        return out


@pytest.mark.parametrize("real", [1, 3, 8])
def test_a_padded_pass_through_the_library_gathers_its_state_without_joining_its_input(real: int) -> None:
    """With fla-core's n-token kernel (a stand-in here: it computes no state) and padding after
    token ``real - 1``, the state after the real tokens is gathered from the old state and the
    input's last columns, never from the state and the pass's whole input joined."""
    x, weight = conv_inputs(8, seed=5)
    start = torch.randn(1, CHANNELS, KERNEL, generator=torch.Generator().manual_seed(6))
    padded_state, real_state = start.clone(), start.clone()
    unused = lambda *args, **kwargs: pytest.fail("only the n-token convolution runs")  # noqa: E731
    stand_in = FlaKernels(unused, unused, lambda x, *args, **kwargs: (torch.zeros_like(x), None), unused)
    end = PaddedEnd.after(torch.tensor([real - 1]), 8, KERNEL)  # once a pass, for all its layers
    with LargestMade() as made:
        causal_conv(x, padded_state, weight, end, stand_in)
    causal_conv(x[:, :real], real_state, weight)
    assert torch.equal(padded_state, real_state)
    assert made.elements <= x.numel()  # the joined window holds both


def test_the_library_kernels_are_not_used_off_cuda() -> None:
    assert fla_unavailable(torch.device("cpu")) == "they need a CUDA device"
    assert fla_kernels(torch.device("cpu")) is None


@pytest.mark.gpu
def test_the_fla_kernels_equal_the_torch_code_on_cuda() -> None:
    device = torch.device("cuda")
    kernels = fla_kernels(device)
    if kernels is None:
        pytest.skip(f"fla-core cannot run here: {fla_unavailable(device)}")
    inputs = rule_inputs(150, seed=8, device="cuda")
    states = [random_state(9, device="cuda") for _ in range(2)]
    outs = [gated_delta_chunked(**inputs, state=state, fla=fla) for state, fla in zip(states, (kernels, None))]
    torch.testing.assert_close(outs[0], outs[1], rtol=1e-3, atol=1e-3)
    torch.testing.assert_close(states[0], states[1], rtol=1e-3, atol=1e-3)
    steps = [gated_delta_step(**sliced(inputs, slice(0, 1)), state=state, fla=fla) for state, fla in zip(states, (kernels, None))]
    torch.testing.assert_close(steps[0], steps[1], rtol=1e-3, atol=1e-3)
    torch.testing.assert_close(states[0], states[1], rtol=1e-3, atol=1e-3)
    x, weight = (t.to(device) for t in conv_inputs(9, seed=10))
    conv_states = [torch.zeros(1, CHANNELS, KERNEL, device=device) for _ in range(2)]
    for part in (slice(0, 5), slice(5, 8), slice(8, 9)):  # from zero, from a state, one token
        convs = [causal_conv(x[:, part], state, weight, fla=fla) for state, fla in zip(conv_states, (kernels, None))]
        torch.testing.assert_close(convs[0], convs[1], rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(conv_states[0], conv_states[1])
    for real in (2, 9):  # padded passes, one shorter than the kernel
        end = PaddedEnd.after(torch.tensor([real - 1], device=device), x.shape[1], KERNEL)
        convs = [causal_conv(x, state, weight, end, fla) for state, fla in zip(conv_states, (kernels, None))]
        torch.testing.assert_close(convs[0], convs[1], rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(conv_states[0], conv_states[1])


@pytest.mark.gpu
def test_the_kernel_that_computes_the_gates_steps_as_the_torch_code_given_the_gates() -> None:
    """A decode step whose gates fla-core's kernel computes from the projections equals the torch
    step given the gates computed as the Qwen3.5 layer computes them, state included."""
    device = torch.device("cuda")
    kernels = fla_kernels(device)
    if kernels is None:
        pytest.skip(f"fla-core cannot run here: {fla_unavailable(device)}")
    inputs = rule_inputs(1, seed=11, device="cuda")
    generator = torch.Generator().manual_seed(12)
    decay_input, beta_logits = (torch.randn(1, 1, HEADS, generator=generator).to(device) for _ in range(2))
    log_rate, bias = (torch.randn(HEADS, generator=generator).to(device) for _ in range(2))
    states = [random_state(13, device="cuda") for _ in range(2)]
    fused = gated_delta_step_gated_in_kernel(
        inputs["query"], inputs["key"], inputs["value"], decay_input, beta_logits, log_rate, bias, states[0], kernels
    )
    decay = -log_rate.exp() * torch.nn.functional.softplus(decay_input + bias)
    given = gated_delta_step(
        inputs["query"], inputs["key"], inputs["value"], decay, beta_logits.sigmoid(), states[1], None
    )
    torch.testing.assert_close(fused, given, rtol=1e-3, atol=1e-3)
    torch.testing.assert_close(states[0], states[1], rtol=1e-3, atol=1e-3)
