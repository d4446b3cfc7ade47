"""Failures leave the engine working: settings apply all or nothing, and cancel reaches every stage.

Each test ends by asking a question about a good clip and getting an answer.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest
import torch

from framewise.core.backends.local import parts as parts_module
from framewise.core.backends.local.engine import Engine
from framewise.core.errors import CancelledError, ClipNotFoundError, ModelLoadError, describe_error
from framewise.core.events import Token
from framewise.core.settings import AppSettings
from tests.conftest import SAMPLE_CLIPS
from tests.core.test_engine import FAST, Recorder, loaded_engine  # noqa: F401 - the module-scoped engine fixture
from tests.core.test_loading import copy_demo

CLIP = SAMPLE_CLIPS / "red_square_moves_right.mp4"
OTHER_CLIP = SAMPLE_CLIPS / "two_shapes_wide.mp4"


@pytest.fixture()
def engine(loaded_engine: tuple[Engine, Recorder]) -> Engine:
    """The demo engine on FAST settings with CLIP open and one answered question."""
    engine, recorder = loaded_engine
    engine.apply_settings(FAST)
    engine.open_clip(CLIP)
    engine.ask("What color is the square?")
    recorder.events.clear()
    return engine


def assert_still_answers(engine: Engine, turns_before: int) -> None:
    done = engine.ask("How many shapes are there?")
    assert not done.stats.cancelled and done.stats.new_tokens > 0
    assert len(engine.turns) == turns_before + 1


# -- settings as a transaction -------------------------------------------------------------------


def test_a_failed_model_switch_keeps_the_model_the_clip_and_the_conversation(engine: Engine, tmp_path: Path) -> None:
    before = (engine.settings, engine.loaded, engine.parts.encoder, engine.parts.decoder, engine.clip, list(engine.turns))
    with pytest.raises(ModelLoadError, match="does not exist") as error:
        engine.apply_settings(FAST.replace("model", source=str(tmp_path / "missing-model")))
    assert describe_error(error.value).field == "model.source"
    assert (engine.settings, engine.loaded, engine.parts.encoder, engine.parts.decoder, engine.clip, engine.turns) == before
    assert_still_answers(engine, len(before[-1]))


def test_a_model_switch_out_of_memory_releases_the_old_model_then_loads_it_again(
    engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    too_big = copy_demo(tmp_path / "too-big")
    real_load = parts_module.load_model
    attempts: list[str] = []

    def load_model(settings, progress=None):
        if settings.source == str(too_big):
            attempts.append(settings.source)
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 80.00 GiB")
        return real_load(settings, progress=progress)

    monkeypatch.setattr(parts_module, "load_model", load_model)
    old_settings, old_clip_name, history = engine.settings, engine.clip.summary.clip_name, list(engine.turns)
    with pytest.raises(torch.OutOfMemoryError):
        engine.apply_settings(FAST.replace("model", source=str(too_big)))
    assert len(attempts) == 2, "the new model is tried beside the old one, then again after releasing it"
    assert engine.settings == old_settings and engine.loaded is not None and engine.loaded.is_demo
    assert engine.clip is not None and engine.clip.summary.clip_name == old_clip_name
    assert engine.turns == history
    assert_still_answers(engine, len(history))


def test_a_failed_re_encode_keeps_the_old_sampling_and_clip(engine: Engine, tmp_path: Path) -> None:
    copy = tmp_path / "clip.mp4"
    shutil.copy(CLIP, copy)
    engine.open_clip(copy)
    before = (engine.settings, engine.clip)
    copy.unlink()
    with pytest.raises(ClipNotFoundError):
        engine.apply_settings(FAST.replace("sampling", max_frames=6))
    assert (engine.settings, engine.clip) == before
    assert_still_answers(engine, 0)


def test_a_failed_encoder_rebuild_brings_the_old_encoder_back(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    real = parts_module.make_vision_encoder
    calls: list[int] = []

    def fails_once(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("capture failed in a way nobody expected")
        return real(*args, **kwargs)

    monkeypatch.setattr(parts_module, "make_vision_encoder", fails_once)
    before = (engine.settings, engine.info())
    with pytest.raises(RuntimeError, match="nobody expected"):
        engine.apply_settings(FAST.replace("encoder", use_graphs=False))
    assert (engine.settings, engine.info()) == before and len(calls) == 2
    engine.open_clip(OTHER_CLIP)
    assert_still_answers(engine, 0)


# -- cancel reaches every stage ------------------------------------------------------------------


def test_a_cancel_just_before_a_question_is_not_lost(engine: Engine, loaded_engine: tuple[Engine, Recorder]) -> None:
    engine.cancel()
    done = engine.ask("What moves?")
    assert done.stats.cancelled and done.stats.new_tokens == 0 and not loaded_engine[1].of(Token)
    assert len(engine.turns) == 1, "a cancelled answer is not kept"
    assert_still_answers(engine, 1)  # the cancel was used up by the question it stopped


def test_a_cancel_during_the_prefill_stops_before_the_first_token(engine: Engine) -> None:
    first_layer = engine.loaded.model.model.language_model.layers[0]
    cancelled_at: list[float] = []

    def cancel_now(module, args):
        if not cancelled_at:
            cancelled_at.append(time.perf_counter())
            engine.cancel()

    handle = first_layer.register_forward_pre_hook(cancel_now)
    try:
        done = engine.ask("Describe the clip.")
    finally:
        handle.remove()
    assert done.stats.cancelled and done.stats.new_tokens == 0
    assert time.perf_counter() - cancelled_at[0] < 0.5
    assert_still_answers(engine, 1)


def test_a_cancel_during_an_encoder_pass_keeps_the_open_clip(engine: Engine) -> None:
    first_block = engine.loaded.model.model.visual.blocks[0]
    calls: list[int] = []

    def cancel_now(module, args):
        calls.append(1)
        engine.cancel()

    handle = first_block.register_forward_pre_hook(cancel_now)
    try:
        with pytest.raises(CancelledError):
            engine.open_clip(OTHER_CLIP)
    finally:
        handle.remove()
    assert len(calls) == 1, "the pass stopped at the next block"
    assert engine.clip.summary.clip_name == CLIP.name and len(engine.turns) == 1
    assert_still_answers(engine, 1)


def test_a_cancel_during_preprocessing_keeps_the_open_clip(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    family = engine.loaded.family
    real = family.preprocess_video

    def preprocess_then_cancel(*args, **kwargs):
        engine.cancel()
        return real(*args, **kwargs)

    monkeypatch.setattr(family, "preprocess_video", preprocess_then_cancel)
    with pytest.raises(CancelledError):
        engine.open_clip(OTHER_CLIP)
    monkeypatch.setattr(family, "preprocess_video", real)
    assert engine.clip.summary.clip_name == CLIP.name
    assert_still_answers(engine, 1)


def test_a_cancel_before_a_clip_opens_is_not_lost(engine: Engine) -> None:
    engine.cancel()
    with pytest.raises(CancelledError):
        engine.open_clip(OTHER_CLIP)
    assert engine.clip.summary.clip_name == CLIP.name
    engine.open_clip(OTHER_CLIP)
    assert engine.clip.summary.clip_name == OTHER_CLIP.name
    assert_still_answers(engine, 0)
