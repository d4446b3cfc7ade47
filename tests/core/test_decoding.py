"""The decoder on the CPU: a static KV cache, steps per context bucket, follow-ups that prefill only
their new tokens. Every answer is checked token for token against transformers' own generate()
with the model's own vision pass over the whole conversation."""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass

import numpy as np
import pytest
import torch

from framewise.core.decoding import Decoder, Prompt, SamplingRule, context_for
from framewise.core.decoding import decoder as decoder_module
from framewise.core.decoding.decoder import prefill_chunks
from framewise.core.decoding.host_embedding import HostEmbedding
from framewise.core.decoding.step_graphs import context_buckets
from framewise.core.encoding.defs import EncodedItem
from framewise.core.encoding.eager import EagerVisionEncoder
from framewise.core.errors import CancelledError, FramewiseError, SettingsError
from framewise.core.families import family_for
from framewise.core.families.qwen3_vl.adapter import Qwen3VLAdapter
from framewise.core.families.qwen3_vl.geometry import VisionGeometry
from framewise.core.families.qwen3_vl.language import Qwen3VLLanguageModel
from framewise.core.families.qwen3_vl.processor import VideoInputs, preprocess_image, preprocess_video
from framewise.core.families.qwen3_vl.prompt import build_chat_inputs
from framewise.core.settings import AppSettings, context_needed
from training.demo_model import (
    build_demo_config,
    build_demo_tokenizer,
    init_demo_model,
    special_token_ids,
)

QWEN3_VL = family_for("qwen3_vl").limits
NEW_TOKENS = 40


@dataclass
class Setup:
    """An untrained demo-architecture model (its answers run to the token limit), its tokenizer,
    two clips and their features."""

    model: torch.nn.Module
    tokenizer: object
    geometry: VisionGeometry
    clips: list[VideoInputs]
    features: list[EncodedItem]


@pytest.fixture(scope="module")
def setup() -> Setup:
    tokenizer = build_demo_tokenizer()
    config = build_demo_config(len(tokenizer), special_token_ids(tokenizer), depth=2, deepstack_visual_indexes=(0, 1))
    model = init_demo_model(config, seed=3)
    geometry = VisionGeometry.from_vision_config(config.vision_config)
    rng = np.random.default_rng(0)
    clips = [
        preprocess_video(rng.integers(0, 256, (4, 64, 96, 3), dtype=np.uint8), [0.0, 0.5, 1.0, 1.5], geometry)
        for _ in range(2)
    ]
    encoder = EagerVisionEncoder(Qwen3VLAdapter(model.model.visual))
    with torch.inference_mode():
        features = [encoder.encode([clip.item]).items[0] for clip in clips]
    return Setup(model, tokenizer, geometry, clips, features)


def make_decoder(setup: Setup, max_tokens: int = 512, min_bucket: int = 16) -> Decoder:
    return Decoder(Qwen3VLLanguageModel(setup.model), max_tokens, min_bucket, use_graphs=True)


def prompt_for(setup: Setup, question: str, history=(), clip: int = 0):
    inputs = build_chat_inputs(
        setup.tokenizer, question, videos=[setup.clips[clip]], history=list(history), geometry=setup.geometry
    )
    prompt = Prompt(
        inputs.input_ids, inputs.token_types, inputs.spans, inputs.grids, (setup.features[clip],),
        owner=setup.clips[clip],
    )
    return inputs, prompt


def reference(setup: Setup, inputs, clip: int = 0, **options) -> list[int]:
    """generate() with the model's own vision tower, over the whole prompt."""
    item = setup.clips[clip].item
    device = next(setup.model.parameters()).device
    with torch.inference_mode():
        output = setup.model.generate(
            input_ids=inputs.input_ids.to(device),
            attention_mask=inputs.attention_mask.to(device),
            mm_token_type_ids=inputs.mm_token_type_ids.to(device),
            pixel_values_videos=item.pixel_values.to(device),
            video_grid_thw=torch.tensor([item.grid_thw], device=device),
            max_new_tokens=NEW_TOKENS,
            **(options or {"do_sample": False}),
        )
    return output[0, inputs.input_ids.shape[1]:].tolist()


def two_item_prompt(setup: Setup, question: str, with_image: bool, history=()):
    """A prompt about two items: both clips, or the first clip and an image; with their reference
    inputs for generate() (``pixel_values_videos`` and ``pixel_values`` as transformers takes them)."""
    if with_image:
        image = preprocess_image(np.random.default_rng(1).integers(0, 256, (64, 64, 3), dtype=np.uint8), setup.geometry)
        with torch.inference_mode():
            image_features = EagerVisionEncoder(Qwen3VLAdapter(setup.model.model.visual)).encode([image]).items[0]
        videos, images, items = setup.clips[:1], [image], (setup.features[0], image_features)
    else:
        videos, images, items = setup.clips, [], tuple(setup.features)
    inputs = build_chat_inputs(
        setup.tokenizer, question, videos=videos, images=images, history=list(history), geometry=setup.geometry
    )
    owner = setup.features[0] if with_image else setup.features  # the same object on every turn
    prompt = Prompt(inputs.input_ids, inputs.token_types, inputs.spans, inputs.grids, items, owner=owner)
    visual_inputs = {
        "pixel_values_videos": torch.cat([clip.item.pixel_values for clip in videos]),
        "video_grid_thw": torch.tensor([clip.item.grid_thw for clip in videos]),
    }
    if images:
        visual_inputs |= {"pixel_values": images[0].pixel_values, "image_grid_thw": torch.tensor([images[0].grid_thw])}
    return inputs, prompt, visual_inputs


def rule_for(setup: Setup, temperature: float = 0.0, max_new_tokens: int = NEW_TOKENS) -> SamplingRule:
    return SamplingRule(max_new_tokens, temperature, frozenset(setup.model.generation_config.eos_token_id))


def answer(decoder: Decoder, prompt: Prompt, rule: SamplingRule, stop_after: int | None = None):
    streamed: list[int] = []
    result = decoder.answer(
        prompt, rule, streamed.append, lambda: stop_after is not None and len(streamed) >= stop_after
    )
    assert streamed == result.token_ids
    return result


def test_buckets_double_up_to_the_context() -> None:
    assert context_buckets(256, 1400) == (256, 512, 1024, 1400)
    assert context_buckets(16, 16) == (16,)
    assert context_buckets(64, 256) == (64, 128, 256)


def test_first_question_and_follow_ups_match_generate_token_for_token(setup: Setup) -> None:
    decoder = make_decoder(setup)
    rule = rule_for(setup)
    history: list[tuple[str, str]] = []
    for turn, question in enumerate(["What color is the square?", "Where does it go?", "And the circle?"]):
        inputs, prompt = prompt_for(setup, question, history)
        result = answer(decoder, prompt, rule)
        assert result.token_ids == reference(setup, inputs), f"turn {turn}"
        video_tokens = int((inputs.mm_token_type_ids == 2).sum())
        if turn == 0:
            assert result.prefix_tokens_reused == 0
        else:  # the clip and the turns so far come from the cache; only the new turn is prefilled
            assert result.prefix_tokens_reused >= previous_prompt_tokens > video_tokens
        assert decoder.cache.tokens == prompt.input_ids[0].tolist() + result.token_ids[:-1]
        assert result.graph_steps == 0 and result.eager_steps == len(result.token_ids) - 1  # no CUDA here
        previous_prompt_tokens = result.prompt_tokens
        history.append((question, setup.tokenizer.decode(result.token_ids, skip_special_tokens=True).strip()))


@pytest.mark.parametrize("with_image", [False, True], ids=["two clips", "a clip and an image"])
def test_two_items_in_one_prompt_match_generate_on_the_first_question_and_a_follow_up(
    setup: Setup, with_image: bool
) -> None:
    """Several vision spans in one prompt: each item's features land on its own tokens, in the
    first prefill and when a follow-up reuses the cached prefix."""
    decoder = make_decoder(setup)
    rule = rule_for(setup)
    history: list[tuple[str, str]] = []
    for turn, question in enumerate(["Which one is brighter?", "And the other one?"]):
        inputs, prompt, visual_inputs = two_item_prompt(setup, question, with_image, history)
        assert {span.item for span in prompt.spans} == {0, 1}
        with torch.inference_mode():
            expected = setup.model.generate(
                input_ids=inputs.input_ids, attention_mask=inputs.attention_mask,
                mm_token_type_ids=inputs.mm_token_type_ids, max_new_tokens=NEW_TOKENS, do_sample=False,
                **visual_inputs,
            )[0, inputs.input_ids.shape[1]:].tolist()
        result = answer(decoder, prompt, rule)
        assert result.token_ids == expected, f"turn {turn}"
        assert (result.prefix_tokens_reused > prompt.spans[-1].end) == (turn > 0)
        history.append((question, setup.tokenizer.decode(result.token_ids, skip_special_tokens=True).strip()))


def test_the_features_of_each_span_replace_its_tokens(setup: Setup) -> None:
    """The rows a prompt hands the prefill: every span's rows of its own item, in token order,
    and only the part of a span after the cached prefix."""
    _, prompt, _ = two_item_prompt(setup, "Which one is brighter?", with_image=False)
    rows = prompt.vision_rows(0)
    assert rows is not None
    marked = rows.mask[0].nonzero().flatten().tolist()
    assert marked == [index for span in prompt.spans for index in range(span.start, span.end)]
    expected = torch.cat([prompt.items[span.item].embeds[span.row : span.row + span.length] for span in prompt.spans])
    torch.testing.assert_close(rows.embeds, expected, rtol=0, atol=0)
    last = prompt.spans[-1]
    partial = prompt.vision_rows(last.start + 1)
    assert partial is not None and int(partial.mask.sum()) == last.length - 1
    expected_deepstack = prompt.items[last.item].deepstack[0][last.row + 1 : last.row + last.length]
    torch.testing.assert_close(partial.deepstack[0], expected_deepstack)
    assert prompt.vision_rows(last.end) is None


def test_a_span_past_its_items_features_is_refused(setup: Setup) -> None:
    _, prompt, _ = two_item_prompt(setup, "Which one is brighter?", with_image=False)
    short = Prompt(prompt.input_ids, prompt.token_types, prompt.spans, prompt.grids, prompt.items[:1])
    with pytest.raises(ValueError, match="outside the prompt"):
        short.vision_rows(0)


def test_steps_read_only_their_bucket_of_the_cache(setup: Setup) -> None:
    decoder = make_decoder(setup, max_tokens=512, min_bucket=16)
    read_lengths: list[int] = []
    update = decoder.cache.update

    def recording_update(key, value, layer_idx, *args, **kwargs):
        keys, values = update(key, value, layer_idx, *args, **kwargs)
        if layer_idx == 0 and key.shape[2] == 1:
            read_lengths.append(keys.shape[2])
        return keys, values

    decoder.cache.update = recording_update  # type: ignore[method-assign]
    inputs, prompt = prompt_for(setup, "What color is the square?")
    result = answer(decoder, prompt, rule_for(setup))
    first_position = result.prompt_tokens
    expected = [decoder.steps.bucket_for(position + 1) for position in range(first_position, first_position + len(read_lengths))]
    assert read_lengths == expected
    assert len(set(read_lengths)) > 1 and max(read_lengths) < decoder.max_tokens  # crossed a bucket, never read it all


def test_the_fused_step_computes_what_the_models_own_layers_compute(setup: Setup) -> None:
    fused = make_decoder(setup)
    stock = Decoder(Qwen3VLLanguageModel(setup.model, fused_steps=False), 512, 16, use_graphs=True)
    assert fused.language.fused_steps and not stock.language.fused_steps
    _, prompt = prompt_for(setup, "What color is the square?")
    rule = rule_for(setup, max_new_tokens=2)
    for decoder in (fused, stock):
        answer(decoder, prompt, rule)  # the same prompt and first token in both caches
    position = len(fused.cache.tokens)
    token = torch.tensor([fused.cache.tokens[-1]])
    with torch.inference_mode():
        ours = fused.steps.run(token, position, position - 7)[0].clone()
        theirs = stock.steps.run(token, position, position - 7)[0].clone()
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5)
    for layer in range(fused.language.layers):
        torch.testing.assert_close(fused.cache.keys[layer][:, :, position], stock.cache.keys[layer][:, :, position])
        torch.testing.assert_close(fused.cache.values[layer][:, :, position], stock.cache.values[layer][:, :, position])


def test_fusing_shares_the_models_weights(setup: Setup) -> None:
    attention = setup.model.model.language_model.layers[0].self_attn
    Qwen3VLLanguageModel(setup.model)
    stacked = Qwen3VLLanguageModel(setup.model)._dense[0].qkv  # a second decoder re-uses the layout
    assert attention.q_proj.weight.data_ptr() == stacked.data_ptr()
    assert attention.k_proj.weight.data_ptr() == stacked[attention.q_proj.out_features :].data_ptr()


def test_rotary_positions_carry_the_clips_offset_across_turns(setup: Setup) -> None:
    """The follow-up's prefill, on top of cached entries, gives the logits of the model's own
    forward over the whole conversation, whose 3-D positions it computes itself."""
    decoder = make_decoder(setup)
    rule = rule_for(setup)
    inputs, prompt = prompt_for(setup, "What color is the square?")
    first = answer(decoder, prompt, rule)
    language = decoder.language
    offset = language.positions(prompt.input_ids, prompt.token_types, prompt.grids).rope_offset
    assert offset < 0  # a clip's tokens take fewer rotary positions than cache positions

    history = [("What color is the square?", setup.tokenizer.decode(first.token_ids, skip_special_tokens=True))]
    inputs, prompt = prompt_for(setup, "Where does it go?", history)
    ids = prompt.input_ids[0].tolist()
    reused = decoder.cache.reusable_prefix(prompt.owner, ids)
    assert reused > 0
    positions = language.positions(prompt.input_ids, prompt.token_types, prompt.grids)
    with torch.inference_mode():
        ours = language.prefill(
            decoder.cache, reused, prompt.input_ids[:, reused:], positions.rope[:, reused:], prompt.vision_rows(reused)
        )
        item = setup.clips[0].item
        theirs = setup.model(
            input_ids=inputs.input_ids, attention_mask=inputs.attention_mask,
            mm_token_type_ids=inputs.mm_token_type_ids, pixel_values_videos=item.pixel_values,
            video_grid_thw=torch.tensor([item.grid_thw]),
        ).logits[:, -1].float()
        wrong = language.prefill(
            decoder.cache, reused, prompt.input_ids[:, reused:], positions.rope[:, reused:] - offset,
            prompt.vision_rows(reused),
        )
    torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-4)
    assert not torch.allclose(wrong, theirs, rtol=1e-4, atol=1e-4)  # the offset matters


def test_a_follow_ups_text_counts_on_from_the_cached_prefix(setup: Setup, monkeypatch: pytest.MonkeyPatch) -> None:
    """The decoder gives a follow-up's text the rotary positions the model's own position rule
    gives it over the whole conversation, without recomputing them for the cached prefix."""
    decoder = make_decoder(setup)
    rule = rule_for(setup, max_new_tokens=3)
    first = answer(decoder, prompt_for(setup, "What color is the square?")[1], rule)
    history = [("What color is the square?", setup.tokenizer.decode(first.token_ids, skip_special_tokens=True))]
    _, prompt = prompt_for(setup, "Where does it go?", history)
    language = decoder.language
    expected = language.positions(prompt.input_ids, prompt.token_types, prompt.grids).rope
    passed: list[tuple[int, torch.Tensor]] = []
    text_prefill = language.text_prefill
    monkeypatch.setattr(language, "text_prefill", lambda cache, embeds, positions, rope, last: (
        passed.append((int(positions[0]), rope[:, : int(last) + 1].clone())), text_prefill(cache, embeds, positions, rope, last))[1])
    monkeypatch.setattr(language, "positions", lambda *args: pytest.fail("positions recomputed for a text tail"))
    answer(decoder, prompt, rule)
    ((start, rope),) = passed
    assert start > 0
    torch.testing.assert_close(rope, expected[:, start:], rtol=0, atol=0)


def test_a_padded_follow_up_prefill_computes_what_the_plain_prefill_computes(setup: Setup) -> None:
    """The prefill graphs' pass (run directly here): the tail padded to its token bucket gives the
    real tokens' logits and cache entries of the unpadded prefill."""
    padded, plain = make_decoder(setup), make_decoder(setup)
    rule = rule_for(setup, max_new_tokens=3)
    first = answer(padded, prompt_for(setup, "What color is the square?")[1], rule)
    answer(plain, prompt_for(setup, "What color is the square?")[1], rule)
    history = [("What color is the square?", setup.tokenizer.decode(first.token_ids, skip_special_tokens=True))]
    _, prompt = prompt_for(setup, "Where does it go?", history)
    ids = prompt.input_ids[0].tolist()
    start = padded.cache.reusable_prefix(prompt.owner, ids)
    tail = prompt.input_ids[:, start:]
    rope = padded.language.positions(prompt.input_ids, prompt.token_types, prompt.grids).rope[:, start:]
    assert padded.prefills.takes(start, tail.shape[1]) and tail.shape[1] not in padded.prefills.token_buckets
    with torch.inference_mode():
        ours, graph_ran = padded.prefills.run(start, tail, rope)
        theirs = plain.language.prefill(plain.cache, start, tail, rope, prompt.vision_rows(start))
    assert not graph_ran
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5)
    end = start + tail.shape[1]
    for layer in range(padded.language.layers):
        torch.testing.assert_close(padded.cache.keys[layer][:, :, :end], plain.cache.keys[layer][:, :, :end])
        torch.testing.assert_close(padded.cache.values[layer][:, :, :end], plain.cache.values[layer][:, :, :end])


def test_a_tail_that_does_not_fit_a_token_bucket_is_prefilled_plainly(setup: Setup) -> None:
    decoder = make_decoder(setup, max_tokens=512)
    prefills = decoder.prefills
    largest = prefills.token_buckets[-1]
    assert prefills.takes(0, largest) and not prefills.takes(0, largest + 1)
    assert not prefills.takes(decoder.max_tokens - 10, 5)  # its 32-token bucket would pass the cache's end
    rule = rule_for(setup)
    inputs, prompt = prompt_for(setup, "What color is the square?")
    first = answer(decoder, prompt, rule)
    history = [("What color is the square?", setup.tokenizer.decode(first.token_ids, skip_special_tokens=True))]
    long_question = "Where does it go? " * (largest // 4)
    inputs, prompt = prompt_for(setup, long_question, history)
    result = answer(decoder, prompt, rule)
    assert result.prompt_tokens - result.prefix_tokens_reused > largest
    assert result.token_ids == reference(setup, inputs) and not result.prefill_graph


def test_a_cancelled_answer_leaves_the_cache_consistent(setup: Setup) -> None:
    decoder = make_decoder(setup)
    rule = rule_for(setup)
    _, prompt = prompt_for(setup, "Describe the clip.")
    cancelled = answer(decoder, prompt, rule, stop_after=5)
    assert cancelled.stop_reason == "cancelled" and len(cancelled.token_ids) == 5
    # The cancelled answer is not part of the conversation: ask again as if it never came.
    inputs, prompt = prompt_for(setup, "What color is the square?")
    result = answer(decoder, prompt, rule)
    assert result.token_ids == reference(setup, inputs)
    assert 0 < result.prefix_tokens_reused < cancelled.prompt_tokens


def test_a_new_clip_invalidates_the_prefix(setup: Setup) -> None:
    decoder = make_decoder(setup)
    rule = rule_for(setup)
    answer(decoder, prompt_for(setup, "What color is the square?")[1], rule)
    inputs, prompt = prompt_for(setup, "What color is the square?", clip=1)
    result = answer(decoder, prompt, rule)
    assert result.prefix_tokens_reused == 0
    assert result.token_ids == reference(setup, inputs, clip=1)


def test_a_new_conversation_keeps_only_the_clips_part(setup: Setup) -> None:
    decoder = make_decoder(setup)
    rule = rule_for(setup)
    first = answer(decoder, prompt_for(setup, "What color is the square?")[1], rule)
    history = [("What color is the square?", setup.tokenizer.decode(first.token_ids, skip_special_tokens=True))]
    answer(decoder, prompt_for(setup, "Where does it go?", history)[1], rule)
    inputs, prompt = prompt_for(setup, "How many shapes are there?")  # history cleared
    result = answer(decoder, prompt, rule)
    last_video = int(torch.nonzero(prompt.token_types[0] == 2).max())
    assert last_video < result.prefix_tokens_reused < first.prompt_tokens
    assert result.token_ids == reference(setup, inputs)


def test_sampling_with_temperature_draws_as_generate_does(setup: Setup) -> None:
    decoder = make_decoder(setup)
    rule = rule_for(setup, temperature=0.9)
    inputs, prompt = prompt_for(setup, "Describe the clip.")
    torch.manual_seed(11)
    ours = answer(decoder, prompt, rule).token_ids
    torch.manual_seed(11)
    theirs = reference(setup, inputs, do_sample=True, temperature=0.9, top_k=0, top_p=1.0)
    assert ours == theirs
    torch.manual_seed(12)
    assert answer(decoder, prompt, rule).token_ids != ours
    assert ours != answer(decoder, prompt, rule_for(setup)).token_ids  # not the greedy answer


def test_a_prompt_longer_than_the_context_is_refused(setup: Setup) -> None:
    decoder = make_decoder(setup, max_tokens=64)
    _, prompt = prompt_for(setup, "What color is the square?", [("Where does it go? " * 10, "left " * 20)])
    assert prompt.input_ids.shape[1] > decoder.max_tokens == 64
    with pytest.raises(FramewiseError, match="new conversation"):
        decoder.answer(prompt, rule_for(setup), lambda token: None, lambda: False)


def test_an_answer_stops_when_the_context_is_full(setup: Setup) -> None:
    _, prompt = prompt_for(setup, "Describe the clip.")
    decoder = make_decoder(setup, max_tokens=prompt.input_ids.shape[1] + 8)
    result = answer(decoder, prompt, rule_for(setup, max_new_tokens=200))
    assert result.stop_reason == "context full" and len(decoder.cache.tokens) == decoder.max_tokens


def test_a_context_too_short_for_one_question_is_a_settings_error() -> None:
    settings = AppSettings()
    needed = context_needed(settings.sampling, settings.generation, limits=QWEN3_VL).total
    with pytest.raises(SettingsError) as raised:
        settings.replace("decoding", max_context_tokens=needed - 1).validate(QWEN3_VL)
    assert raised.value.field == "decoding.max_context_tokens" and f"must hold {needed:,} tokens" in raised.value.message
    assert settings.replace("decoding", max_context_tokens=needed).validate(QWEN3_VL).context_tokens(QWEN3_VL) == needed
    assert settings.context_tokens(QWEN3_VL) >= needed + 3 * settings.generation.max_new_tokens  # room for follow-ups


def test_a_clip_larger_than_the_model_positions_names_the_pixel_budget_that_fits(setup: Setup) -> None:
    language = Qwen3VLLanguageModel(setup.model)
    limits = QWEN3_VL
    long = AppSettings().replace("sampling", max_frames=2048, max_pixels=65536 * limits.pixels_per_video_token)
    with pytest.raises(SettingsError) as raised:
        context_for(long, language, limits)
    assert raised.value.field == "sampling.max_pixels"
    assert f"at most {language.max_positions:,} positions" in raised.value.message
    within = int(raised.value.message.split("sampling max pixels to at most ")[1].split(" ")[0].replace(",", ""))
    fitting = long.replace("sampling", max_pixels=within)
    assert context_for(fitting, language, limits) <= language.max_positions  # the advice is enough ...
    with pytest.raises(SettingsError):
        context_for(fitting.replace("sampling", max_pixels=within + 2 * limits.pixels_per_video_token), language, limits)


def test_the_context_is_bounded_by_free_memory(setup: Setup, monkeypatch: pytest.MonkeyPatch) -> None:
    language = Qwen3VLLanguageModel(setup.model)
    per_token = decoder_module.StaticKVCache.bytes_needed(
        language.layers, language.kv_heads, language.head_dim, 1, language.dtype
    )
    automatic = AppSettings().context_tokens(QWEN3_VL)
    monkeypatch.setattr(decoder_module, "free_memory_bytes", lambda device: per_token * automatic * 10)
    assert context_for(AppSettings(), language, QWEN3_VL) == automatic
    room = int(per_token * (automatic - 100) / decoder_module.CACHE_MEMORY_SHARE) + per_token
    monkeypatch.setattr(decoder_module, "free_memory_bytes", lambda device: room)
    assert context_needed(AppSettings().sampling, AppSettings().generation, limits=QWEN3_VL).total < context_for(
        AppSettings(), language, QWEN3_VL
    ) < automatic  # the automatic length shrinks to what fits
    explicit = AppSettings().replace("decoding", max_context_tokens=automatic)
    with pytest.raises(SettingsError, match="lower it to at most"):
        context_for(explicit, language, QWEN3_VL)


def test_memory_too_small_for_one_question_says_what_one_question_needs(
    setup: Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not "lower it to at most N" where N is below what any question needs: the numbers of the
    check at load, in its words."""
    language = Qwen3VLLanguageModel(setup.model)
    per_token = decoder_module.StaticKVCache.bytes_needed(
        language.layers, language.kv_heads, language.head_dim, 1, language.dtype
    )
    needed = context_needed(AppSettings().sampling, AppSettings().generation, limits=QWEN3_VL)
    room = int(per_token * (needed.total - 2 * decoder_module.CONTEXT_ALIGNMENT) / decoder_module.CACHE_MEMORY_SHARE)
    monkeypatch.setattr(decoder_module, "free_memory_bytes", lambda device: room)
    with pytest.raises(SettingsError) as raised:
        context_for(AppSettings(), language, QWEN3_VL)
    assert f"the context must hold {needed.describe()}" in raised.value.message
    assert "lower it to at most" not in raised.value.message


# ---------------------------------------------------------------------------- prefills in chunks


def cancelling_on_call(count: int):
    """A forward pre-hook raising CancelledError, as the engine's cancel points do, the
    ``count``-th time it runs (once per chunk on a layer's module)."""
    calls = 0

    def hook(module, args) -> None:
        nonlocal calls
        calls += 1
        if calls == count:
            raise CancelledError("Cancelled.")

    return hook


def recorded_prefills(
    language: Qwen3VLLanguageModel, monkeypatch: pytest.MonkeyPatch
) -> list[tuple[int, torch.Tensor | None]]:
    """(start, logits) of every plain prefill ``language`` runs from now on (None: the pass's
    logits were not asked for)."""
    seen: list[tuple[int, torch.Tensor | None]] = []
    prefill = language.prefill

    def recording(cache, start, *rest, **options):
        logits = prefill(cache, start, *rest, **options)
        seen.append((start, logits if logits is None else logits.clone()))
        return logits

    monkeypatch.setattr(language, "prefill", recording)
    return seen


@pytest.mark.parametrize(("start", "end", "cut"), [(0, 1133, 0), (0, 1133, 1100), (0, 14_498, 14_460), (300, 9_000, 0)])
def test_the_prefill_pass_plan(start: int, end: int, cut: int) -> None:
    """Passes cover the tokens in order, end at the cut, take a stretch of at most twice the chunk
    in one pass (a short clip's first question pays for one pass), and split a longer one into the
    fewest passes of at most a chunk, none a small remainder."""
    size = 1024
    passes = prefill_chunks(start, end, cut, size)
    assert passes[0][0] == start and passes[-1][1] == end
    assert all(stop == following for (_, stop), (following, _) in zip(passes, passes[1:]))
    if start < cut < end:
        assert cut in [stop for _, stop in passes]
    stretches = [(start, cut), (cut, end)] if start < cut < end else [(start, end)]
    for begin, stop in stretches:
        inside = [(a, b) for a, b in passes if begin <= a and b <= stop]
        count = stop - begin
        assert len(inside) == (1 if count <= 2 * size else -(-count // size))
        if len(inside) > 1:
            lengths = [b - a for a, b in inside]
            assert max(lengths) <= size and max(lengths) - min(lengths) <= 1


@pytest.mark.parametrize("chunk", [5, 7, 10])
def test_a_prefill_in_chunks_equals_one_pass(setup: Setup, monkeypatch: pytest.MonkeyPatch, chunk: int) -> None:
    """Chunk boundaries inside the clip's vision spans, so each chunk takes a part of a span's
    features and deepstack rows: the first token's logits and every cache entry are one pass's.
    Chunks of text alone go through the follow-up prefill passes (padded to a token bucket)."""
    _, prompt = prompt_for(setup, "What color is the square?")
    length = prompt.input_ids.shape[1]
    # a KV cache is not snapshotted at the clip's end, so no pass is cut there
    starts = [start for start, _ in prefill_chunks(0, length, 0, chunk)]
    assert any(span.start < start < span.end for start in starts for span in prompt.spans)
    decoder = Decoder(Qwen3VLLanguageModel(setup.model), 512, 16, use_graphs=True, prefill_chunk_tokens=chunk)
    seen = recorded_prefills(decoder.language, monkeypatch)
    result = decoder.answer(prompt, rule_for(setup, max_new_tokens=1), lambda token: None, lambda: False)
    assert result.prefill_chunks == len(starts) > 2
    with_vision = [start for start, stop in prefill_chunks(0, length, 0, chunk) if prompt.vision_rows(start, stop)]
    # the last pass, the question's text, went through the padded prefill, whose final hidden state
    # it leaves; no earlier pass ran the output head
    assert [start for start, _ in seen] == with_vision and with_vision[-1] < starts[-1]
    assert all(logits is None for _, logits in seen)
    language = Qwen3VLLanguageModel(setup.model)
    cache = language.new_state(512)
    with torch.inference_mode():
        rope = language.positions(prompt.input_ids, prompt.token_types, prompt.grids).rope
        one_pass = language.prefill(cache, 0, prompt.input_ids, rope, prompt.vision_rows(0))
    scale = one_pass.abs().max()
    assert (decoder.language.head(decoder.prefills.hidden) - one_pass).abs().max() <= 1e-5 * scale
    for ours, theirs in zip((*decoder.cache.keys, *decoder.cache.values), (*cache.keys, *cache.values)):
        assert (ours[:, :, :length] - theirs[:, :, :length]).abs().max() <= 1e-5 * theirs.abs().max()


def test_a_stop_between_prefill_chunks_keeps_exactly_the_chunks_written(
    setup: Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stop arriving during a chunk ends the prefill before the next one runs: the cache records
    the chunks written, and the next question reuses exactly them."""
    decoder = Decoder(Qwen3VLLanguageModel(setup.model), 512, 16, use_graphs=True, prefill_chunk_tokens=8)
    seen = recorded_prefills(decoder.language, monkeypatch)
    inputs, prompt = prompt_for(setup, "Describe the clip.")
    ids = prompt.input_ids[0].tolist()
    streamed: list[int] = []
    two_chunks = prefill_chunks(0, len(ids), 0, 8)[1][1]
    stopped = decoder.answer(prompt, rule_for(setup), streamed.append, lambda: len(decoder.cache.tokens) >= two_chunks)
    assert stopped.stop_reason == "cancelled" and stopped.token_ids == streamed == []
    assert stopped.prefill_chunks == 2 and len(seen) >= 1  # the first chunk, text alone, may take the padded pass
    assert decoder.cache.tokens == ids[:two_chunks]
    assert any(span.start < two_chunks < span.end for span in prompt.spans)  # the next prefill starts inside a span
    seen.clear()
    result = answer(decoder, prompt, rule_for(setup))
    assert result.prefix_tokens_reused == two_chunks == seen[0][0]
    assert result.token_ids == reference(setup, inputs)


def test_a_cancel_inside_a_chunk_keeps_the_chunks_before_it(setup: Setup) -> None:
    """The engine's cancel points are hooks before the language model's layers: one raising in
    the middle of a chunk leaves the cache recording the chunks before it."""
    decoder = Decoder(Qwen3VLLanguageModel(setup.model), 512, 16, use_graphs=True, prefill_chunk_tokens=12)
    inputs, prompt = prompt_for(setup, "Describe the clip.")
    handle = setup.model.model.language_model.layers[1].register_forward_pre_hook(cancelling_on_call(3))
    try:
        with pytest.raises(CancelledError):
            answer(decoder, prompt, rule_for(setup))
    finally:
        handle.remove()
    ids = prompt.input_ids[0].tolist()
    two_chunks = prefill_chunks(0, len(ids), 0, 12)[1][1]
    assert decoder.cache.tokens == ids[:two_chunks]
    result = answer(decoder, prompt, rule_for(setup))
    assert result.prefix_tokens_reused == two_chunks and result.token_ids == reference(setup, inputs)


def test_an_input_embedding_held_by_the_host_answers_as_the_models_own(setup: Setup) -> None:
    """The model's embedding table untied from its head and held by a HostEmbedding (on the CPU its
    device is the host): the first question, a follow-up through the padded text prefill, and
    generate() itself answer as the model with its own embedding."""
    model = copy.deepcopy(setup.model)
    model.lm_head.weight = torch.nn.Parameter(model.lm_head.weight.detach().clone(), requires_grad=False)
    model.set_input_embeddings(HostEmbedding(model.get_input_embeddings().weight, torch.device("cpu")))
    assert isinstance(model.model.language_model.embed_tokens, HostEmbedding)
    hosted = dataclasses.replace(setup, model=model)
    decoder = make_decoder(hosted)
    history: list[tuple[str, str]] = []
    for question in ("What color is the square?", "Where does it go?"):
        inputs, prompt = prompt_for(setup, question, history)
        result = answer(decoder, prompt, rule_for(setup))
        assert result.token_ids == reference(setup, inputs) == reference(hosted, inputs)
        history.append((question, setup.tokenizer.decode(result.token_ids, skip_special_tokens=True).strip()))
    assert result.prefix_tokens_reused > 0  # the follow-up's text tail was prefilled on its own
