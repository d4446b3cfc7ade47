"""Pruned video tokens end to end on the CPU: the bundled demo model encodes a held-out synthetic
clip (every patch through the tower), the clip's tokens are pruned after the encoder, and the
decoder answers from the pruned prompt at the unpruned positions.

The engine does not prune yet; these tests drive the same pieces it will (the family's prompt, the
encoder, :mod:`framewise.core.encoding.pruning` and the decoder) through their public calls.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

import pytest
import torch

from framewise.core.decoding import Decoded, Decoder, Prompt, SamplingRule
from framewise.core.decoding.pruned_positions import prompt_positions
from framewise.core.encoding.defs import EncodedItem
from framewise.core.encoding.eager import EagerVisionEncoder
from framewise.core.encoding.pruning import kept_token_count, prune_encoded, retained_mask
from framewise.core.families.qwen3_vl.processor import VideoInputs
from framewise.core.loading import LoadedModel, load_model
from framewise.core.settings import ModelSettings, SamplingSettings
from training.synthetic import HELD_OUT_SEEDS, make_scene, questions_for, sample_scene, video_inputs

BLOCK = re.compile(r"<(\d+\.\d) seconds><\|vision_start\|>((?:<\|video_pad\|>)*)<\|vision_end\|>")


@dataclass(frozen=True)
class Demo:
    loaded: LoadedModel
    video: VideoInputs
    features: EncodedItem
    questions: tuple[str, ...]

    @property
    def merged_grid(self) -> tuple[int, int, int]:
        t, h, w = self.video.item.grid_thw
        merge = self.loaded.limits.merge_size
        return (t, h // merge, w // merge)


@pytest.fixture(scope="module")
def demo() -> Demo:
    loaded = load_model(ModelSettings(source="demo", device="cpu"))
    sampled = sample_scene(make_scene(HELD_OUT_SEEDS[0]))
    video = video_inputs(sampled, SamplingSettings(), loaded.adapter.geometry)
    features = EagerVisionEncoder(loaded.adapter).encode([video.item]).items[0]
    return Demo(loaded, video, features, tuple(question.text for question in questions_for(sampled)))


def pruned(demo: Demo, rate: float) -> tuple[VideoInputs, EncodedItem]:
    retention = retained_mask(demo.features.embeds, demo.merged_grid, rate)
    return dataclasses.replace(demo.video, retention=retention), prune_encoded(demo.features, retention)


def new_decoder(demo: Demo) -> Decoder:
    return Decoder(demo.loaded.adapter.language_model(), 1024, 16, use_graphs=False)


def ask(
    demo: Demo, decoder: Decoder, video: VideoInputs, features: EncodedItem, question: str, history=()
) -> tuple[Decoded, object, Prompt]:
    loaded = demo.loaded
    inputs = loaded.family.build_prompt(
        loaded.tokenizer, question, videos=[video], history=list(history), limits=loaded.limits
    )
    prompt = Prompt(
        inputs.input_ids, inputs.token_types, inputs.spans, inputs.grids, (features,),
        owner=video, unpruned=inputs.unpruned,
    )
    rule = SamplingRule(max_new_tokens=8, temperature=0.0, eos_token_ids=frozenset({loaded.tokenizer.eos_token_id}))
    return decoder.answer(prompt, rule, lambda token: None, lambda: False), inputs, prompt


def test_rate_zero_answers_exactly_as_without_pruning(demo: Demo) -> None:
    video, features = pruned(demo, 0.0)
    assert features is demo.features
    for question in demo.questions:
        plain, plain_inputs, _ = ask(demo, new_decoder(demo), demo.video, demo.features, question)
        zero, zero_inputs, _ = ask(demo, new_decoder(demo), video, features, question)
        assert torch.equal(zero_inputs.input_ids, plain_inputs.input_ids)
        assert zero.token_ids == plain.token_ids and zero.prompt_tokens == plain.prompt_tokens


def test_half_the_video_tokens_pruned_answers_from_a_shorter_prompt_whose_markers_match(demo: Demo) -> None:
    video, features = pruned(demo, 0.5)
    retention = video.retention
    question = demo.questions[0]
    plain, _, _ = ask(demo, new_decoder(demo), demo.video, demo.features, question)
    answered, inputs, _ = ask(demo, new_decoder(demo), video, features, question)

    dropped = retention.total - kept_token_count(demo.merged_grid, 0.5)
    assert dropped > 0 and plain.prompt_tokens - answered.prompt_tokens == dropped
    blocks = BLOCK.findall(demo.loaded.tokenizer.decode(inputs.input_ids[0]))
    assert [float(seconds) for seconds, _ in blocks] == [round(t, 1) for t in demo.video.pair_timestamps]
    assert tuple(pads.count("<|video_pad|>") for _, pads in blocks) == retention.kept_per_slice
    assert features.embeds.shape[0] == retention.kept == sum(span.length for span in inputs.spans)
    assert answered.token_ids and demo.loaded.tokenizer.decode(answered.token_ids, skip_special_tokens=True).strip()


def test_a_follow_up_to_a_pruned_clip_counts_on_from_the_unpruned_positions(
    demo: Demo, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The follow-up's text (prefilled after the cached pruned prefix) gets the positions the whole
    pruned conversation has at its unpruned places."""
    video, features = pruned(demo, 0.75)
    decoder = new_decoder(demo)
    first, _, _ = ask(demo, decoder, video, features, demo.questions[0])
    history = [(demo.questions[0], demo.loaded.tokenizer.decode(first.token_ids, skip_special_tokens=True))]

    language = decoder.language
    passed: list[tuple[int, torch.Tensor]] = []
    text_prefill = language.text_prefill  # a text tail's prefill, padded to its token bucket

    def recording(cache, ids, positions, rope, last):
        passed.append((int(positions[0]), rope[:, : int(last) + 1].clone()))
        return text_prefill(cache, ids, positions, rope, last)

    monkeypatch.setattr(language, "text_prefill", recording)
    monkeypatch.setattr(language, "positions", lambda *args: pytest.fail("positions recomputed for a text tail"))
    _, inputs, prompt = ask(demo, decoder, video, features, demo.questions[1], history)
    monkeypatch.undo()

    ((start, rope),) = passed
    assert start > 0  # only the new text was prefilled
    expected = prompt_positions(language, prompt.input_ids, prompt.token_types, prompt.grids, inputs.unpruned)
    assert torch.equal(rope, expected.rope[:, start:])
