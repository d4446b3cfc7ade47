"""Two clips, or a clip and a picture, in one conversation on the demo model (CPU)."""

from __future__ import annotations

from pathlib import Path

import pytest

from framewise.core.backends.local.engine import Engine
from framewise.core.events import ConversationReset, EncodeDone
from tests.conftest import SAMPLE_CLIPS
from tests.core.test_engine import FAST, Recorder
from tests.core.test_images import red_square_picture


@pytest.fixture(scope="module")
def engine() -> tuple[Engine, Recorder]:
    recorder = Recorder()
    engine = Engine(FAST, sink=recorder)
    engine.load()
    return engine, recorder


def clips() -> list[Path]:
    found = sorted(SAMPLE_CLIPS.glob("*.mp4"))
    assert len(found) >= 2, "assets/clips holds the sample clips; run scripts/make_sample_clips.py"
    return found


def test_two_clips_get_their_own_spans_and_times_in_one_prompt(engine: tuple[Engine, Recorder]) -> None:
    engine_, recorder = engine
    first, second = clips()[:2]
    engine_.open_clip(first)
    alone = engine_.ask("How many shapes are there?")
    recorder.events.clear()
    added = engine_.add_clip(second)
    assert added.clip_name == second.name and not recorder.of(ConversationReset), "adding keeps the conversation"
    assert [item.summary.clip_name for item in engine_.clips] == [first.name, second.name]
    assert len(engine_.turns) == 1

    loaded = engine_.loaded
    assert loaded is not None
    inputs = loaded.family.build_prompt(
        loaded.tokenizer, "Which clip is brighter?", videos=[item.video for item in engine_.clips],
        history=engine_.turns, limits=loaded.limits,
    )
    assert sorted({span.item for span in inputs.spans}) == [0, 1]
    pairs = sum(item.video.item.grid_thw[0] for item in engine_.clips)
    assert inputs.text.count(" seconds>") == pairs, "every frame pair of both clips has its time marker"

    done = engine_.ask("What color is the square?")
    assert done.text and done.kept and len(engine_.turns) == 2
    second_pads = engine_.clips[1].video.item.patches // loaded.limits.merge_area
    assert alone.stats.decoder is not None and done.stats.decoder is not None
    assert done.stats.decoder.prompt_tokens > alone.stats.decoder.prompt_tokens + second_pads, "the answer saw both clips"


def test_a_clip_and_a_picture_answer_about_the_picture(engine: tuple[Engine, Recorder], tmp_path: Path) -> None:
    engine_, recorder = engine
    engine_.open_clip(clips()[0])
    summary = engine_.add_clip(red_square_picture(tmp_path))
    assert summary.kind == "image" and [item.kind for item in engine_.clips] == ["video", "image"]
    assert recorder.of(EncodeDone)[-1].kind == "image"
    assert engine_.ask("What color is the square?").text


def test_opening_a_clip_replaces_every_item(engine: tuple[Engine, Recorder], tmp_path: Path) -> None:
    engine_, _ = engine
    engine_.open_clip(clips()[0])
    engine_.add_clip(red_square_picture(tmp_path))
    engine_.open_clip(clips()[1])
    assert [item.summary.clip_name for item in engine_.clips] == [clips()[1].name] and engine_.turns == []


def test_adding_with_nothing_open_opens(engine: tuple[Engine, Recorder], tmp_path: Path) -> None:
    engine_ = Engine(FAST)
    engine_.parts.put_back(engine[0].parts)  # the loaded engine's model, encoder and decoder
    engine_.add_clip(red_square_picture(tmp_path))
    assert engine_.clip is not None and engine_.added == []


def test_a_resample_keeps_every_item_each_sampled_anew(engine: tuple[Engine, Recorder], tmp_path: Path) -> None:
    engine_, recorder = engine
    engine_.open_clip(clips()[0])
    engine_.add_clip(red_square_picture(tmp_path))
    engine_.look_closer(0.5, 1.5)
    names = [item.summary.clip_name for item in engine_.clips]
    frames_before = [item.summary.frames for item in engine_.clips]
    recorder.events.clear()
    engine_.apply_settings(FAST.replace("sampling", max_frames=6))
    try:
        assert [item.summary.clip_name for item in engine_.clips] == names
        assert [item.kind for item in engine_.clips] == ["video", "image", "video"]
        opened, _, closer = engine_.clips
        assert frames_before == [4, 1, 4] and [item.summary.frames for item in engine_.clips] == [6, 1, 6], (
            "the clips are sampled under the new settings"
        )
        assert closer.summary.span == (0.5, 1.5) and all(0.5 <= t <= 1.5 for t in closer.summary.timestamps)
        assert [reset.reason for reset in recorder.of(ConversationReset)] == ["resampled"] and engine_.turns == []
        assert engine_.ask("What color is the square?").text, "the answer sees every item"
    finally:
        engine_.apply_settings(FAST)
