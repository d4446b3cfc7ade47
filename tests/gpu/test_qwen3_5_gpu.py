"""Qwen3.5's language model on CUDA: a decode step captured as a CUDA graph replays what the same
step computes directly, with its linear states moving on in place; fla-core's kernels, where they
import, are as close to the float32 logits in bf16 as the torch code is."""

from __future__ import annotations

import copy
from dataclasses import replace

import pytest
import torch

from framewise.core.decoding.linear_attention import fla_unavailable
from framewise.core.graph_capture import GraphCapture
from tests.core.families.qwen3_5.checkpoint import tiny_config, tiny_model
from tests.core.families.qwen3_5.test_qwen3_5_language import (
    MAX_TOKENS,
    build_prompt,
    items_for,
    prefilled,
)

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def cuda_model():
    return tiny_model(tiny_config(), seed=1, dtype=torch.bfloat16).to("cuda")


def test_a_captured_step_replays_the_direct_steps(cuda_model) -> None:
    case = build_prompt(cuda_model.config, items_for("video", torch.bfloat16))
    length = case.input_ids.shape[1]
    with torch.inference_mode():
        run, _ = prefilled(cuda_model, case)
        language, state = run.language, run.state
        snapshot = state.snapshot()
        embeds = language.embed(torch.zeros(1, 1, dtype=torch.long))
        position = torch.zeros(1, dtype=torch.long, device="cuda")
        rope_position = torch.zeros(1, dtype=torch.long, device="cuda")
        logits = torch.zeros(1, language.vocab_size, device="cuda")
        state.kv.view_length = MAX_TOKENS

        def forward() -> None:
            logits.copy_(language.step(state, embeds, position, rope_position))

        def run_steps(replay) -> list[torch.Tensor]:
            state.restore(snapshot)
            seen = []
            for offset, next_token in enumerate((5, 9, 11)):
                embeds.copy_(language.embed(torch.tensor([[next_token]])))
                position.fill_(length + offset)
                rope_position.fill_(length + offset + run.rope_offset)
                replay()
                seen.append(logits.clone())
            return seen

        directly = run_steps(forward)
        graph = GraphCapture(torch.device("cuda")).capture(forward)
        through_graph = run_steps(graph.replay)
    for replayed, direct in zip(through_graph, directly):
        torch.testing.assert_close(replayed, direct, rtol=0, atol=0)
    assert not torch.equal(directly[0], directly[1])  # the state moved on between steps


def test_in_bf16_the_fla_kernels_are_as_close_to_float32_as_the_torch_code(cuda_model) -> None:
    """In bf16 fla-core's chunked kernels and the torch code each round in their own order (their
    last logits lay 1.9 % apart on an H100), so neither is the other's reference: both are measured
    against the same weights and inputs in float32 through the torch code, and the kernels' error
    may be at most 1.5 times the torch code's."""
    unavailable = fla_unavailable(torch.device("cuda"))
    if unavailable:
        pytest.skip(f"fla-core cannot run here: {unavailable}")
    items = items_for("image and video", torch.bfloat16)
    case = build_prompt(cuda_model.config, items)
    exact_case = build_prompt(cuda_model.config, tuple(replace(item, pixels=item.pixels.float()) for item in items))
    with torch.inference_mode():
        run, with_kernels = prefilled(cuda_model, case)
        without = prefilled(cuda_model, case, linear_kernels=False)[1]
        truth = prefilled(copy.deepcopy(cuda_model).float(), exact_case, linear_kernels=False)[1]
    assert run.language.linear_kernels
    kernels_error, torch_error = relative_to(with_kernels, truth), relative_to(without, truth)
    assert kernels_error <= 1.5 * torch_error, (kernels_error, torch_error)


def relative_to(actual: torch.Tensor, truth: torch.Tensor) -> float:
    """The largest difference from ``truth`` over ``truth``'s largest magnitude."""
    return ((actual.float() - truth).abs().max() / truth.abs().max()).item()


@pytest.fixture(scope="module")
def cuda_fp32_model():
    return tiny_model(tiny_config(), seed=2).to("cuda")


def test_the_decoder_answers_through_graphs_in_chunks_and_from_snapshots_like_generate(cuda_fp32_model) -> None:
    """Decode steps and prefills (a clip's and a follow-up's) replayed as graphs over the hybrid
    state, prefills in chunks of 16, follow-ups, a stopped answer and another question: the
    eager decoder's tokens, and generate()'s logits, each time."""
    from framewise.core.decoding import Decoder
    from framewise.core.families.qwen3_5.language import Qwen35LanguageModel
    from tests.core.families.qwen3_5.test_qwen3_5_decoder import (
        MAX_TOKENS as DECODER_TOKENS,
        answer,
        answer_as_generate,
        first_question,
        recording,
    )

    decoder = Decoder(Qwen35LanguageModel(cuda_fp32_model), DECODER_TOKENS, 16, use_graphs=True,
                      prefill_chunk_tokens=16)
    assert decoder.graphs_enabled, decoder.graphs_reason
    if not fla_unavailable(torch.device("cuda")):  # the fused step's kernels, captured
        assert decoder.language.step_kernels, decoder.graphs_reason
    with pytest.MonkeyPatch.context() as monkeypatch:
        conversation = first_question(cuda_fp32_model)
        first = answer(decoder, conversation)
        # Every pass replayed a graph: the clip's chunks, their features in the embeddings, and the
        # text after the clip's snapshot.
        assert first.prefill_chunks > 1 and first.graph_passes == first.prefill_chunks
        second = conversation.then(first.token_ids, question_seed=0)
        stopped = answer(decoder, second, stop_after=2)
        assert stopped.graph_steps == 1 and stopped.prefill_graph
        instead = conversation.then(first.token_ids, question_seed=1)
        result = answer(decoder, instead)
        assert result.prefix_tokens_reused == conversation.case.input_ids.shape[1] + len(first.token_ids) - 1
        assert result.graph_steps == len(result.token_ids) - 1
        # The reference runs the torch code: through fla-core's kernels the float32 logits lay 0.2 % of
        # the largest from generate()'s (H100, 2026-12-07), past 1e-4; the kernels against the torch
        # code are the test above's.
        fresh = Decoder(Qwen35LanguageModel(cuda_fp32_model, linear_kernels=False), DECODER_TOKENS, 16,
                        use_graphs=False)
        seen_fresh = recording(fresh, monkeypatch)
        assert answer_as_generate(fresh, seen_fresh, instead).token_ids == result.token_ids
