"""A tiny random-weight Qwen3.5 (two Gated DeltaNet layers, one full-attention layer) through the
engine on the CPU: a clip, a picture, two clips, follow-ups, a stopped answer and another question,
a settings change mid-conversation. Every answer is checked token for token against transformers'
own generate() with the model's own tower over the whole conversation as the engine prompts it, so
the hybrid state carried (or restored from a snapshot) from turn to turn must be exactly right."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import torch

from framewise.core.backends.local.clip_encoder import EncodedClip
from framewise.core.backends.local.engine import Engine
from framewise.core.encoding.defs import VisionItem
from framewise.core.events import Done, Event, Token
from framewise.core.settings import AppSettings
from framewise.core.video import sample_clip
from framewise.core.video.still import read_still
from tests.conftest import SAMPLE_CLIPS
from tests.core.families.qwen3_5.checkpoint import write_tiny_checkpoint
from tests.core.test_images import red_square_picture

CLIP = SAMPLE_CLIPS / "red_square_moves_right.mp4"
OTHER_CLIP = SAMPLE_CLIPS / "two_shapes_wide.mp4"
NEW_TOKENS = 6


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    return write_tiny_checkpoint(tmp_path_factory.mktemp("engine") / "tiny", seed=2)


def settings_for(checkpoint: Path) -> AppSettings:
    return (
        AppSettings()
        .replace("model", source=str(checkpoint), device="cpu", dtype="float32")
        .replace("sampling", max_frames=4)
        .replace("generation", max_new_tokens=NEW_TOKENS)
    )


@pytest.fixture(scope="module")
def loaded_engine(checkpoint: Path) -> Engine:
    engine = Engine(settings_for(checkpoint))
    engine.load()
    return engine


@pytest.fixture()
def engine(loaded_engine: Engine, checkpoint: Path) -> Engine:
    loaded_engine.apply_settings(settings_for(checkpoint))
    loaded_engine.open_clip(CLIP)
    return loaded_engine


def read_again(engine: Engine, item: EncodedClip) -> VisionItem:
    """An open item's pixel rows, read and preprocessed again as the engine did (it keeps only
    their features)."""
    loaded, sampling = engine.loaded, engine.settings.sampling
    if item.kind == "image":
        again = loaded.family.preprocess_image(read_still(item.path).pixels, loaded.limits)
    else:
        sampled = sample_clip(item.path, sampling, loaded.family.frame_sizing(sampling, loaded.limits))
        again = loaded.family.preprocess_video(sampled.frames, sampled.timestamps, loaded.limits).item
    assert again.grid_thw == (item.image or item.video.item).grid_thw
    return again


def generated(engine: Engine, question: str, new_tokens: int = NEW_TOKENS) -> list[int]:
    """generate()'s greedy answer ids (end token left out) with the model's own tower over the
    prompt the engine builds for ``question`` after the conversation so far."""
    loaded = engine.loaded
    items = sorted(engine.clips, key=lambda item: item.kind == "image")  # clips, then pictures
    inputs = engine._answerer._build_prompt(question, items, engine.turns)
    pixels = {}
    keys = (("video", "pixel_values_videos", "video_grid_thw"), ("image", "pixel_values", "image_grid_thw"))
    for kind, rows, grids in keys:
        chosen = [read_again(engine, item) for item in items if item.kind == kind]
        if chosen:
            pixels[rows] = torch.cat([item.pixel_values for item in chosen])
            pixels[grids] = torch.tensor([item.grid_thw for item in chosen])
    with torch.inference_mode():
        output = loaded.model.generate(
            input_ids=inputs.input_ids, attention_mask=torch.ones_like(inputs.input_ids),
            mm_token_type_ids=inputs.token_types, max_new_tokens=new_tokens, do_sample=False, **pixels,
        )
    ids = output[0, inputs.input_ids.shape[1]:].tolist()
    ends = set(loaded.model.generation_config.eos_token_id)
    return ids[: next((index for index, token in enumerate(ids) if token in ends), len(ids))]


def ask_and_check(engine: Engine, question: str) -> Done:
    """Ask ``question``; its answer's ids must be generate()'s over the whole conversation."""
    expected = generated(engine, question)
    done = engine.ask(question)
    assert done.kept and list(engine.turns[-1][1].token_ids) == expected
    return done


def test_the_engine_runs_the_family_of_the_checkpoint(loaded_engine: Engine) -> None:
    info = loaded_engine.info()
    assert info.family == "Qwen3.5" and info.layout.describe() == "2 linear-attention + 1 full-attention layers"
    assert info.decoder is not None and info.decoder.kv_cache_mb > 0
    assert info.decoder.kv_bytes_per_token == 2 * 2 * 64 * 4  # one layer, 2 KV heads of 64, float32


def test_a_clip_is_answered_as_generate_answers_it(engine: Engine) -> None:
    ask_and_check(engine, "What moves in the clip?")


def test_a_picture_is_answered_as_generate_answers_it(engine: Engine, tmp_path: Path) -> None:
    engine.open_clip(red_square_picture(tmp_path))
    assert engine.clip.kind == "image"
    ask_and_check(engine, "What color is the square?")


def test_two_clips_are_answered_as_generate_answers_them(engine: Engine) -> None:
    engine.add_clip(OTHER_CLIP)
    assert len(engine.clips) == 2
    ask_and_check(engine, "Which clip has two shapes?")


def test_follow_ups_continue_from_the_state_prefilling_only_their_new_tokens(engine: Engine) -> None:
    previous = ask_and_check(engine, "What moves?").stats.decoder
    for question in ("Where does it go?", "How fast?", "And then?"):
        # The state holds every answer token it was fed: all but the last of an answer cut at the
        # most new tokens (the last was picked, never fed), all of one that picked its end token.
        fed = len(engine.turns[-1][1].token_ids) - (previous.stop_reason == "max new tokens")
        stats = ask_and_check(engine, question).stats.decoder
        assert stats.prefix_tokens_reused == previous.prompt_tokens + fed
        assert stats.prefill_tokens == stats.prompt_tokens - stats.prefix_tokens_reused
        previous = stats


def stop_at_the_first_token(engine: Engine, question: str) -> Done:
    """Ask ``question`` and stop the answer once its first token has streamed."""
    first_token, stopped = threading.Event(), threading.Event()
    sink = engine.sink

    def hold_at_first_token(event: Event) -> None:
        if isinstance(event, Token) and not first_token.is_set():
            first_token.set()
            stopped.wait(10)

    engine.sink = hold_at_first_token
    result: list[Done] = []
    worker = threading.Thread(target=lambda: result.append(engine.ask(question)))
    worker.start()
    try:
        assert first_token.wait(60)
        engine.cancel()
        stopped.set()
        worker.join(30)
    finally:
        engine.sink = sink
    assert not worker.is_alive() and result[0].stats.cancelled
    return result[0]


def test_a_stopped_answer_leaves_no_trace_in_the_next_one(engine: Engine) -> None:
    ask_and_check(engine, "What moves?")
    turns = list(engine.turns)
    stop_at_the_first_token(engine, "Describe everything.")
    assert engine.turns == turns  # the stopped answer is not part of the conversation
    ask_and_check(engine, "Where does it go?")
    stop_at_the_first_token(engine, "And then?")
    ask_and_check(engine, "How fast?")


def test_settings_changed_mid_conversation_answer_over_what_they_leave(engine: Engine, checkpoint: Path) -> None:
    """A shorter answer limit keeps the conversation; smaller frames re-sample the clip and start it
    afresh on the new frames (the state then holds another clip's tokens)."""
    ask_and_check(engine, "What moves?")
    shorter = settings_for(checkpoint).replace("generation", max_new_tokens=3)
    engine.apply_settings(shorter)
    expected = generated(engine, "Where does it go?", new_tokens=3)
    engine.ask("Where does it go?")
    assert len(engine.turns) == 2 and list(engine.turns[-1][1].token_ids) == expected

    patches_before = engine.clip.video.item.patches
    engine.apply_settings(settings_for(checkpoint).replace("sampling", max_pixels=4 * 64 * 96))
    assert engine.clip.video.item.patches < patches_before and engine.turns == []
    ask_and_check(engine, "What moves?")
    ask_and_check(engine, "And then?")
