"""A closer look at a span of the open clip, on the demo model (CPU): dense frames with their real
times, added to the same conversation."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from framewise.core.backends.local.engine import Engine
from framewise.core.errors import SpanError
from framewise.core.events import ClipSampled, ConversationReset
from framewise.core.settings import SamplingSettings
from framewise.core.video import span_count
from tests.conftest import SAMPLE_CLIPS
from tests.core.test_engine import FAST, Recorder
from tests.core.test_images import red_square_picture


@pytest.fixture(scope="module")
def engine() -> tuple[Engine, Recorder]:
    recorder = Recorder()
    engine = Engine(FAST.replace("sampling", max_frames=8), sink=recorder)
    engine.load()
    return engine, recorder


@pytest.fixture()
def clip() -> Path:
    return sorted(SAMPLE_CLIPS.glob("*.mp4"))[0]


def test_a_span_is_sampled_densely_inside_it_and_joins_the_conversation(
    engine: tuple[Engine, Recorder], clip: Path
) -> None:
    engine_, recorder = engine
    whole = engine_.open_clip(clip)
    engine_.ask("How many shapes are there?")
    recorder.events.clear()

    closer = engine_.look_closer(1.0, 2.0)
    assert closer.span == (1.0, 2.0) and closer.clip_name == f"{clip.name} 1.0–2.0 s"
    assert closer.frames == 8, "the whole frame budget goes to the span"
    assert all(1.0 - 1e-6 <= t <= 2.0 for t in closer.timestamps), closer.timestamps
    assert len(set(closer.timestamps)) == len(closer.timestamps), "real, distinct frame times"
    spacing = np.diff(closer.timestamps).mean()
    assert spacing < np.diff(whole.timestamps).mean() / 2, "denser than the whole clip's sampling"
    assert recorder.of(ClipSampled)[-1].timestamps == closer.timestamps
    assert not recorder.of(ConversationReset) and len(engine_.turns) == 1, "the conversation is kept"
    assert [item.summary.span for item in engine_.clips] == [None, (1.0, 2.0)]

    done = engine_.ask("What color is the square?")
    assert done.kept and len(engine_.turns) == 2


def test_a_span_outside_the_clip_or_of_a_picture_is_refused(
    engine: tuple[Engine, Recorder], clip: Path, tmp_path: Path
) -> None:
    engine_, _ = engine
    engine_.open_clip(clip)
    with pytest.raises(SpanError, match="holds nothing"):
        engine_.look_closer(50.0, 60.0)
    with pytest.raises(SpanError, match="holds nothing"):
        engine_.look_closer(2.0, 1.0)
    engine_.add_clip(red_square_picture(tmp_path))
    with pytest.raises(SpanError, match="no timeline"):
        engine_.look_closer(0.0, 1.0, item=1)
    assert len(engine_.clips) == 2, "a refused span leaves the items as they were"


@pytest.mark.parametrize("span", [(float("nan"), 2.0), (1.0, float("nan")), (float("nan"), float("nan"))])
def test_a_span_that_is_not_a_number_is_refused_not_a_crash(
    engine: tuple[Engine, Recorder], clip: Path, span: tuple[float, float]
) -> None:
    engine_, _ = engine
    engine_.open_clip(clip)
    with pytest.raises(SpanError, match="holds nothing"):
        engine_.look_closer(*span)
    assert len(engine_.clips) == 1


def test_span_count_spends_the_budget_but_not_more_than_the_span_holds() -> None:
    sampling = SamplingSettings(fps=2.0, min_frames=4, max_frames=32)
    assert span_count(10.0, 30.0, sampling, multiple=2) == 32
    assert span_count(1.0, 12.0, sampling, multiple=2) == 12
    assert span_count(0.1, 12.0, sampling, multiple=2) == 4
    assert span_count(1.0, 0.0, sampling, multiple=2) == 32, "an unknown frame rate spends the budget"
    assert span_count(0.75, 10.0, sampling, multiple=2) == 8
