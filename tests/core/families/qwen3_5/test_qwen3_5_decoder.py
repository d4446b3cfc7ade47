"""Qwen3.5 through the decoder (tiny random weights, the CPU): its hybrid state reused across a
conversation only where its linear states are known, a stopped answer or a cancelled prefill
leaving it consistent, and prefills in chunks equal to one pass. Answers are checked token for
token against transformers' own generate() over the whole conversation."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch

from framewise.core.decoding import Decoder, Prompt, SamplingRule
from framewise.core.decoding.decoder import prefill_chunks
from framewise.core.encoding.defs import EncodedItem
from framewise.core.errors import CancelledError
from framewise.core.families.qwen3_5.language import Qwen35LanguageModel
from framewise.core.families.qwen3_vl.prompt import vision_spans
from tests.core.families.qwen3_5.checkpoint import tiny_config, tiny_model
from tests.core.test_decoding import cancelling_on_call
from tests.core.families.qwen3_5.test_qwen3_5_language import (
    PromptCase,
    assert_relatively_close,
    build_prompt,
    items_for,
    reference_inputs,
)

NEW_TOKENS = 6
MAX_TOKENS = 512
# Logits of chunked and one-pass prefills (fp32), relative to the largest logit: the same
# arithmetic, the gated delta rule's sums split at other places.
CHUNKED = 1e-5
# Against transformers' generate(): as the language model's own tests allow (fp32).
AGAINST_TRANSFORMERS = 1e-4
# The full-attention layer's keys and values, relative to the largest: they come out of the linear
# layers, whose 64-token closed form rounds otherwise than shorter chunks (its float32 state in
# either). Measured here: 3-token chunks against one pass up to 3e-5; each of the two against a
# float64 run of the model differs by as much.
CHUNKED_KEYS = 1e-4


@dataclass
class Conversation:
    """A clip prompt grown turn by turn: ``case`` holds the ids and token types so far."""

    model: torch.nn.Module
    case: PromptCase
    features: tuple[EncodedItem, ...]

    def prompt(self) -> Prompt:
        grids = tuple((item.modality, item.grid) for item in self.case.items)
        spans = vision_spans(self.case.token_types, grids, merge_area=4)
        assert spans is not None
        return Prompt(self.case.input_ids, self.case.token_types, spans, grids, self.features, owner=self.features)

    def then(self, answer: list[int], question_seed: int) -> Conversation:
        """The conversation with ``answer`` and a new question of random text after it."""
        return self._cut(self.case.input_ids.shape[1], answer, question_seed)

    def restart(self, question_seed: int) -> Conversation:
        """A new conversation about the same clip: its prefix, then a new question."""
        return self._cut(self.prompt().clip_end, [], question_seed)

    def _cut(self, keep: int, answer: list[int], question_seed: int) -> Conversation:
        question = torch.randint(0, 250, (1, 9), generator=torch.Generator().manual_seed(question_seed))
        ids = torch.cat((self.case.input_ids[:, :keep], torch.tensor([answer], dtype=torch.long), question), dim=1)
        types = torch.cat((self.case.token_types[:, :keep], torch.zeros(1, len(answer) + 9, dtype=torch.long)), dim=1)
        return Conversation(self.model, PromptCase(ids, types, self.case.items), self.features)


@pytest.fixture(scope="module")
def model():
    # Seed 2: no answer of these tests holds one of the tiny vocabulary's special ids.
    return tiny_model(tiny_config(), seed=2)


def first_question(model, seed: int = 0, text: int = 0) -> Conversation:
    """A question about a clip of two slices, ``text`` more random tokens before the question."""
    case = build_prompt(model.config, items_for("video", torch.float32), seed=seed)
    if text:
        more = torch.randint(0, 250, (1, text), generator=torch.Generator().manual_seed(seed + 100))
        case = PromptCase(torch.cat((case.input_ids, more), dim=1),
                          torch.cat((case.token_types, torch.zeros_like(more)), dim=1), case.items)
    (item,) = case.items
    device = next(model.parameters()).device
    with torch.inference_mode():
        grid = torch.tensor([item.grid], device=device)
        embeds = model.model.get_video_features(item.pixels.to(device, model.dtype), grid).pooler_output
    return Conversation(model, case, (EncodedItem(embeds=torch.cat(embeds), deepstack=()),))


def make_decoder(model, chunk: int = 2048, linear_kernels: bool | None = None, use_graphs: bool = True) -> Decoder:
    language = Qwen35LanguageModel(model, linear_kernels=linear_kernels)
    return Decoder(language, MAX_TOKENS, 16, use_graphs=use_graphs, prefill_chunk_tokens=chunk)


def rule() -> SamplingRule:
    return SamplingRule(NEW_TOKENS, eos_token_ids=frozenset({295}))


def reference(conversation: Conversation) -> list[int]:
    """generate()'s tokens with the model's own tower over the whole conversation."""
    return reference_with_logits(conversation)[0]


def reference_with_logits(conversation: Conversation) -> tuple[list[int], tuple[torch.Tensor, ...]]:
    """generate()'s tokens and the logits of each (1, vocab)."""
    case, model = conversation.case, conversation.model
    device = next(model.parameters()).device
    inputs = {name: value.to(device) for name, value in reference_inputs(case).items()}
    inputs = {name: value.to(model.dtype) if value.is_floating_point() else value for name, value in inputs.items()}
    with torch.inference_mode():
        output = model.generate(
            **inputs, max_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=0,
            output_logits=True, return_dict_in_generate=True,
        )
    return output.sequences[0, case.input_ids.shape[1]:].tolist(), output.logits


def answer(decoder: Decoder, conversation: Conversation, stop_after: int | None = None):
    streamed: list[int] = []
    result = decoder.answer(
        conversation.prompt(), rule(), streamed.append, lambda: stop_after is not None and len(streamed) >= stop_after
    )
    assert streamed == result.token_ids
    return result


def recording(decoder: Decoder, monkeypatch: pytest.MonkeyPatch) -> list[torch.Tensor | None]:
    """The logits of every prefill pass (plain or padded) and step ``decoder`` runs from now on, in
    order: None for a pass whose logits it did not ask for."""
    seen: list[torch.Tensor | None] = []

    def recorded(logits: torch.Tensor | None) -> torch.Tensor | None:
        seen.append(None if logits is None else logits.clone())
        return logits

    language, prefills = decoder.language, decoder.prefills
    prefill, padded, step = language.prefill, prefills.run, language.step

    def padded_recorded(*args, **options) -> tuple[torch.Tensor | None, bool]:
        logits, replayed = padded(*args, **options)
        return recorded(logits), replayed

    monkeypatch.setattr(language, "prefill", lambda *args, **options: recorded(prefill(*args, **options)))
    monkeypatch.setattr(prefills, "run", padded_recorded)
    monkeypatch.setattr(language, "step", lambda *args: recorded(step(*args)))
    return seen


def answer_as_generate(decoder: Decoder, seen: list[torch.Tensor | None], conversation: Conversation):
    """Answer ``conversation`` and check the tokens and the logits (``seen``: what
    :func:`recording` records of the decoder) against generate()'s: only the last prefill pass's
    logits are computed, then each step's."""
    seen.clear()
    result = answer(decoder, conversation)
    tokens, logits = reference_with_logits(conversation)
    assert result.token_ids == tokens
    assert len(seen) == result.prefill_chunks + len(tokens) - 1
    assert all(skipped is None for skipped in seen[: -len(tokens)])
    for ours, theirs in zip(seen[-len(tokens) :], logits, strict=True):  # the last chunk's, then each step's
        assert ours is not None
        assert_relatively_close(ours, theirs, AGAINST_TRANSFORMERS)
    return result


def plain_text(tokens: list[int]) -> bool:
    """Whether ``tokens`` hold none of the tiny model's special ids (an answer that re-enters a
    prompt must not be read as vision placeholders)."""
    return all(token < 294 for token in tokens)


@pytest.mark.parametrize("chunk", [2048, 16], ids=["one pass", "chunks of 16"])
def test_a_first_question_and_three_follow_ups_match_generate(
    model, monkeypatch: pytest.MonkeyPatch, chunk: int
) -> None:
    decoder = make_decoder(model, chunk)
    seen = recording(decoder, monkeypatch)
    conversation = first_question(model)
    held = 0
    for turn in range(4):
        result = answer_as_generate(decoder, seen, conversation)
        ids = conversation.case.input_ids[0].tolist()
        # The live state continues: everything it held is reused, the new turn alone prefilled.
        assert result.prefix_tokens_reused == held
        assert decoder.cache.tokens == ids + result.token_ids[:-1]
        assert result.prefill_chunks >= (len(ids) - held) / chunk
        assert plain_text(result.token_ids), "the random weights answered with a special token: pick another seed"
        held = len(decoder.cache.tokens)
        conversation = conversation.then(result.token_ids, question_seed=turn)


def test_a_stopped_answer_then_a_new_question_equals_a_fresh_conversation(
    model, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The turn-start snapshot: the state the stopped turn began from comes back, and the new
    question's logits and tokens are a fresh decoder's over the same history."""
    decoder = make_decoder(model)
    first = first_question(model)
    first_answer = answer(decoder, first).token_ids
    second = first.then(first_answer, question_seed=1)
    stopped = answer(decoder, second, stop_after=2)
    assert stopped.stop_reason == "cancelled" and len(stopped.token_ids) == 2
    asked_instead = first.then(first_answer, question_seed=2)
    ours = recording(decoder, monkeypatch)
    result = answer(decoder, asked_instead)
    fresh = make_decoder(model)
    theirs = recording(fresh, monkeypatch)
    expected = answer(fresh, asked_instead)
    assert result.prefix_tokens_reused == first.case.input_ids.shape[1] + len(first_answer) - 1
    assert result.token_ids == expected.token_ids == reference(asked_instead)
    assert len(ours) == len(result.token_ids) and len(theirs) == len(expected.token_ids) + 1  # one prefill less
    for mine, fresh_logits in zip(ours, theirs[1:]):
        assert_relatively_close(mine, fresh_logits, CHUNKED)


def test_a_new_conversation_about_the_clip_starts_from_the_clip_snapshot(
    model, monkeypatch: pytest.MonkeyPatch
) -> None:
    decoder = make_decoder(model)
    seen = recording(decoder, monkeypatch)
    first = first_question(model)
    first_answer = answer(decoder, first).token_ids
    answer(decoder, first.then(first_answer, question_seed=1))
    again = first.restart(question_seed=3)
    result = answer_as_generate(decoder, seen, again)
    assert result.prefix_tokens_reused == again.prompt().clip_end


def test_a_stop_between_prefill_chunks_keeps_exactly_the_chunks_written(
    model, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stop arriving during a chunk ends the prefill before the next one; the state holds the
    chunks written and the next question continues from them."""
    decoder = make_decoder(model, chunk=8)
    seen = recording(decoder, monkeypatch)
    conversation = first_question(model, text=60)
    ids = conversation.case.input_ids[0].tolist()
    streamed: list[int] = []
    # The stop arrives while the fourth chunk runs.
    stopped = decoder.answer(conversation.prompt(), rule(), streamed.append, lambda: len(seen) >= 4)
    assert stopped.stop_reason == "cancelled" and stopped.token_ids == streamed == []
    assert len(seen) == stopped.prefill_chunks == 4
    written = len(decoder.cache.tokens)
    assert 0 < written < len(ids) and decoder.cache.tokens == ids[:written]
    result = answer_as_generate(decoder, seen, conversation)
    assert result.prefix_tokens_reused == written


def test_a_cancel_inside_a_chunk_returns_the_state_to_the_last_chunk(model, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cancel point inside a layer (the engine's hooks) raises in the middle of a chunk, with
    the linear states of some layers moved on: they are put back as the last chunk left them."""
    decoder = make_decoder(model, chunk=8)
    seen = recording(decoder, monkeypatch)
    conversation = first_question(model, text=60)
    ids = conversation.case.input_ids[0].tolist()
    # In the fifth chunk (a linear layer's MLP runs once per chunk).
    handle = model.model.language_model.layers[1].mlp.register_forward_pre_hook(cancelling_on_call(5))
    try:
        with pytest.raises(CancelledError):
            answer(decoder, conversation)
    finally:
        handle.remove()
    four_chunks = prefill_chunks(0, len(ids), conversation.prompt().clip_end, 8)[3][1]
    assert decoder.cache.tokens == ids[:four_chunks]
    result = answer_as_generate(decoder, seen, conversation)
    assert result.prefix_tokens_reused == four_chunks


@pytest.mark.parametrize("chunk", [3, 7, 16, 20])
def test_chunked_prefills_equal_one_pass(model, monkeypatch: pytest.MonkeyPatch, chunk: int) -> None:
    """Chunk boundaries inside the clip's vision spans and between them: the first token's
    logits, the keys and values and every linear state are one pass's."""
    conversation = first_question(model, text=20)
    prompt = conversation.prompt()
    length = prompt.input_ids.shape[1]
    chunks = prefill_chunks(0, length, prompt.clip_end, chunk)
    assert any(span.start < start < span.end for start, _ in chunks for span in prompt.spans)
    decoder = make_decoder(model, chunk)
    seen = recording(decoder, monkeypatch)
    result = decoder.answer(prompt, SamplingRule(1), lambda token: None, lambda: False)
    assert result.prefill_chunks == len(seen) == len(chunks) > 2
    language = Qwen35LanguageModel(model)
    whole = language.new_state(MAX_TOKENS)
    with torch.inference_mode():
        rope = language.positions(prompt.input_ids, prompt.token_types, prompt.grids).rope
        one_pass = language.prefill(whole, 0, prompt.input_ids, rope, prompt.vision_rows(0))
    assert_relatively_close(seen[-1], one_pass, CHUNKED)
    chunked = decoder.state
    for ours, theirs in zip((*chunked.conv_states, *chunked.recurrent_states),
                            (*whole.conv_states, *whole.recurrent_states)):
        assert_relatively_close(ours, theirs, CHUNKED)
    for ours, theirs in zip((*chunked.kv.keys, *chunked.kv.values), (*whole.kv.keys, *whole.kv.values)):
        assert_relatively_close(ours[:, :, :length], theirs[:, :, :length], CHUNKED_KEYS)
