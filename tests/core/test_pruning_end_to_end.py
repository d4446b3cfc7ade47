"""Pruned video tokens end to end on the CPU: the bundled demo model encodes a held-out synthetic
clip (every patch through the tower), the clip's tokens are pruned after the encoder, and the
decoder answers from the pruned prompt at the unpruned positions.

The first tests drive the pieces (the family's prompt, the encoder,
:mod:`framewise.core.encoding.pruning` and the decoder) through their public calls; the last ones
the engine, which prunes as ``sampling.pruning`` says and must answer as those pieces do.
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
from framewise.core.families.qwen3_vl.processor import VideoInputs, fit_video_frames
from framewise.core.loading import LoadedModel, load_model
from framewise.core.settings import ModelSettings, SamplingSettings
from framewise.core import settings as settings_module
from framewise.core.backends.local.engine import Engine
from framewise.core.events import ChunkStats, ConversationReset, EncodeDone, Event
from framewise.core.settings import AppSettings
from tests.conftest import SAMPLE_CLIPS
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

    def recording(cache, embeds, positions, rope, last):
        passed.append((int(positions[0]), rope[:, : int(last) + 1].clone()))
        return text_prefill(cache, embeds, positions, rope, last)

    monkeypatch.setattr(language, "text_prefill", recording)
    monkeypatch.setattr(language, "positions", lambda *args: pytest.fail("positions recomputed for a text tail"))
    _, inputs, prompt = ask(demo, decoder, video, features, demo.questions[1], history)
    monkeypatch.undo()

    ((start, rope),) = passed
    assert start > 0  # only the new text was prefilled
    expected = prompt_positions(language, prompt.input_ids, prompt.token_types, prompt.grids, inputs.unpruned)
    assert torch.equal(rope, expected.rope[:, start:])


# --- the engine ----------------------------------------------------------------------------------

ENGINE_SETTINGS = (
    AppSettings()
    .replace("model", device="cpu")
    .replace("sampling", max_frames=8)
    .replace("generation", max_new_tokens=6)
)
CLIP = SAMPLE_CLIPS / "red_square_moves_right.mp4"


@pytest.fixture(scope="module")
def engine() -> tuple[Engine, list[Event]]:
    events: list[Event] = []
    engine = Engine(ENGINE_SETTINGS, sink=events.append)
    engine.load()
    return engine, events


def opened(engine: tuple[Engine, list[Event]], pruning: str) -> tuple[EncodeDone, list[ChunkStats]]:
    """The sample clip opened afresh with ``pruning``: its summary and the encoder's passes."""
    engine_, events = engine
    engine_.apply_settings(ENGINE_SETTINGS.replace("sampling", pruning=pruning))
    events.clear()
    done = engine_.open_clip(CLIP)
    return done, [event for event in events if isinstance(event, ChunkStats)]


def merged_grid(engine_: Engine) -> tuple[int, int, int]:
    t, h, w = engine_.clip.video.item.grid_thw
    merge = engine_.loaded.limits.merge_size
    return (t, h // merge, w // merge)


def test_the_engine_prunes_after_the_tower_saw_every_patch_and_says_how_many_tokens_each_frame_kept(engine) -> None:
    plain, plain_passes = opened(engine, "off")
    done, passes = opened(engine, "0.5")
    engine_ = engine[0]
    grid = merged_grid(engine_)

    assert [(p.frames, p.patches, p.items, p.budget) for p in passes] == [
        (p.frames, p.patches, p.items, p.budget) for p in plain_passes
    ]
    tokens = grid[0] * grid[1] * grid[2]
    assert plain.video_tokens_before == plain.video_tokens_after == done.video_tokens_before == tokens
    assert plain.kept_per_frame == () and not plain.pruned
    assert done.video_tokens_after == kept_token_count(grid, 0.5) == engine_.clip.features.embeds.shape[0]
    assert done.pruned and done.tokens_text() == f"{tokens:,} → {done.video_tokens_after:,} video tokens"
    per_slice = engine_.clip.video.retention.kept_per_slice
    assert len(done.kept_per_frame) == done.frames and done.kept_per_frame[:2] == (1.0, 1.0)
    assert [round(share * grid[1] * grid[2]) for share in done.kept_per_frame[::2]] == list(per_slice)


def test_the_engines_answer_about_a_pruned_clip_is_prefilled_at_the_unpruned_positions(
    engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened(engine, "0.75")
    engine_ = engine[0]
    question = "What color is the square?"
    language = engine_.parts.decoder.language
    ropes: list[torch.Tensor] = []
    prefill = language.prefill
    monkeypatch.setattr(
        language, "prefill",
        lambda state, start, ids, rope, vision, **options: ropes.append(rope) or prefill(state, start, ids, rope, vision, **options),
    )
    answered = engine_.ask(question)
    monkeypatch.undo()

    loaded, clip = engine_.loaded, engine_.clip
    inputs = loaded.family.build_prompt(loaded.tokenizer, question, videos=[clip.video], limits=loaded.limits)
    assert inputs.unpruned is not None
    assert inputs.unpruned.pruned_tokens == clip.summary.video_tokens_before - clip.summary.video_tokens_after
    assert answered.stats.decoder.prompt_tokens == inputs.input_ids.shape[1]
    expected = prompt_positions(language, inputs.input_ids, inputs.token_types, inputs.grids, inputs.unpruned)
    assert torch.equal(torch.cat(ropes, dim=1), expected.rope)  # the prefill's chunks, in order
    assert not torch.equal(expected.rope, language.positions(inputs.input_ids, inputs.token_types, inputs.grids).rope)


def test_a_new_pruning_setting_reads_the_clip_again_and_starts_the_conversation_afresh(engine) -> None:
    opened(engine, "off")
    engine_, events = engine
    engine_.ask("What color is the square?")
    events.clear()
    engine_.apply_settings(ENGINE_SETTINGS.replace("sampling", pruning="0.5"))
    assert [event.reason for event in events if isinstance(event, ConversationReset)] == ["resampled"]
    assert engine_.turns == [] and engine_.clip.summary.pruned
    assert engine_.clip.features.embeds.shape[0] == engine_.clip.summary.video_tokens_after


def test_frames_given_directly_and_a_closer_look_are_pruned_too(engine) -> None:
    opened(engine, "0.5")
    engine_ = engine[0]
    closer = engine_.look_closer(0.0, 2.0)
    assert closer.span is not None and closer.pruned
    assert engine_.added[-1].features.embeds.shape[0] == closer.video_tokens_after
    sampled = sample_scene(make_scene(HELD_OUT_SEEDS[1]))
    frames = fit_video_frames(sampled.frames, SamplingSettings(), geometry=engine_.loaded.adapter.geometry)
    given = engine_.open_frames(frames, sampled.timestamps, "held-out clip")
    assert given.pruned and engine_.clip.features.embeds.shape[0] == given.video_tokens_after


def test_automatic_pruning_leaves_a_clip_up_to_its_threshold_whole_and_prunes_a_longer_one(
    engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    tokens = opened(engine, "off")[0].video_tokens_before
    monkeypatch.setattr(settings_module, "AUTO_PRUNING_ABOVE_TOKENS", tokens)
    assert not opened(engine, "auto")[0].pruned
    monkeypatch.setattr(settings_module, "AUTO_PRUNING_ABOVE_TOKENS", tokens - 1)
    done = opened(engine, "auto")[0]
    assert done.pruned
    assert done.video_tokens_after == kept_token_count(merged_grid(engine[0]), settings_module.AUTO_PRUNING_RATE)
