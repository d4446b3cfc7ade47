"""Every answering backend, the test fake included, holds to the one protocol, ``AnsweringBackend``.

A method that is missing, renamed, or whose parameters drifted (a name, a kind, a default) fails
here, before the worker or the window meets it at run time.
"""

from __future__ import annotations

import inspect
import numpy as np
import pytest

from framewise.core.backends.base import AnsweringBackend, BackendBase
from framewise.core.video import SampledFrames, frames_size_and_duration
from framewise.core.backends.vllm.server import VllmServerEngine
from framewise.core.backends.local.engine import Engine
from framewise.core.errors import ModelLoadError, SettingsError
from framewise.core.events import ConversationReset, Done, EncodeDone, ignore_events
from framewise.core.settings import AppSettings
from tests.ui.fake_engine import FakeEngine

IMPLEMENTATIONS = (Engine, VllmServerEngine, FakeEngine)


def protocol_methods() -> dict[str, inspect.Signature]:
    """The protocol's methods (not its data attributes) with their signatures."""
    return {
        name: inspect.signature(member)
        for name, member in vars(AnsweringBackend).items()
        if inspect.isfunction(member) and not name.startswith("_")
    }


def drift(implementation: type) -> list[str]:
    """How ``implementation``'s methods differ from the protocol's; empty when it conforms."""
    problems = []
    for name, wanted in protocol_methods().items():
        method = getattr(implementation, name, None)
        if not callable(method):
            problems.append(f"{name} is missing")
            continue
        got = inspect.signature(method).parameters
        for parameter in wanted.parameters.values():
            theirs = got.get(parameter.name)
            if theirs is None:
                problems.append(f"{name} lacks the parameter {parameter.name}")
            elif theirs.kind != parameter.kind:
                problems.append(f"{name}'s {parameter.name} is {theirs.kind.description}, not {parameter.kind.description}")
            elif parameter.default is not inspect.Parameter.empty and theirs.default != parameter.default:
                problems.append(f"{name}'s {parameter.name} defaults to {theirs.default!r}, not {parameter.default!r}")
        positional = [p.name for p in wanted.parameters.values() if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD]
        if [p for p in got if p in positional] != positional:
            problems.append(f"{name}'s parameters are in another order")
        required_extra = [
            p.name for p in got.values()
            if p.name not in wanted.parameters and p.default is inspect.Parameter.empty
            and p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
        ]
        if required_extra:
            problems.append(f"{name} requires {', '.join(required_extra)}, which the protocol does not pass")
    return problems


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS, ids=lambda cls: cls.__name__)
def test_every_backend_has_every_protocol_method_with_its_signature(implementation: type) -> None:
    assert drift(implementation) == []


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS, ids=lambda cls: cls.__name__)
def test_every_backend_has_the_protocols_attributes(implementation: type) -> None:
    backend = implementation(AppSettings(), ignore_events)
    missing = [name for name in AnsweringBackend.__annotations__ if not hasattr(backend, name)]
    assert missing == [] and backend.turns == []


class _Drifted(FakeEngine):
    """The fake after three kinds of drift: a renamed parameter, a lost default, an extra required one."""

    def ask(self, text: str, request_id: int | None = None):  # type: ignore[override]
        raise NotImplementedError

    def cancel(self, request_id: int | None):  # type: ignore[override]
        raise NotImplementedError

    def open_clip_path(self, verbose: bool):  # type: ignore[override]
        raise NotImplementedError


class _WithoutOpenFrames(FakeEngine):
    """The fake as it was before it had ``open_frames``."""

    open_frames = None  # type: ignore[assignment]


def test_the_check_catches_a_drifted_fake() -> None:
    assert drift(_Drifted) == [
        "ask lacks the parameter question",
        "ask's parameters are in another order",
        "ask requires text, which the protocol does not pass",
        "cancel's request_id defaults to <class 'inspect._empty'>, not None",
        "open_clip_path requires verbose, which the protocol does not pass",
    ]
    assert drift(_WithoutOpenFrames) == ["open_frames is missing"]


class _Frames:
    def __init__(self, path: None, summary: EncodeDone) -> None:
        self.path, self.summary = path, summary


class _Plumbed(BackendBase[_Frames]):
    """A backend that only keeps frames given directly, on the shared plumbing."""

    def _limits_for(self, settings) -> None:
        return None  # no model family: the settings are checked without one

    def _open_clip(self, path, reason) -> EncodeDone:
        raise NotImplementedError

    def _add_clip(self, path, span) -> EncodeDone:
        summary = EncodeDone(path.name, 1, 0, (0.0,), 0.0, 0.0, 0.0, 0.0, False, kind="image")
        self.added.append(_Frames(None, summary))
        return self._emit(summary)

    def _ask(self, question) -> Done:
        raise NotImplementedError

    def _use_frames(self, sampled: SampledFrames) -> EncodeDone:
        timestamps = sampled.timestamps
        summary = EncodeDone(sampled.name, len(timestamps), 0, tuple(timestamps), 0.0, 0.0, 0.0, 0.0, False)
        self.sized = sampled.size_and_duration
        self._make_open(_Frames(None, summary), "new_clip")
        return self._emit(summary)


def test_the_shared_plumbing_stamps_events_and_keeps_the_record() -> None:
    events: list[object] = []
    backend = _Plumbed(AppSettings(), events.append)
    frames = np.zeros((4, 64, 96, 3), np.uint8)
    done = backend.open_frames(frames, (0.0, 0.5, 1.0, 1.5), "frames", request_id=7)
    assert backend.sized == (96, 64, 1.5), "(width, height, the last frame's time)"
    assert done.request_id == 7 and all(event.request_id == 7 for event in events)
    assert events[0] == ConversationReset("new_clip", "frames", "", request_id=7), "frames given directly have no file"
    assert backend.open_clip_path() is None
    backend.turns.append(("q", "a"))
    backend.new_conversation()
    assert backend.turns == [] and events[-1] == ConversationReset("asked", "frames", "", request_id=events[-1].request_id)
    assert events[-1].request_id not in (0, 7), "a call without an id gets a new one"


def test_a_backend_without_its_part_of_a_request_cannot_be_made() -> None:
    class WithoutFrames(_Plumbed):
        _use_frames = BackendBase._use_frames

    with pytest.raises(TypeError, match="_use_frames"):
        WithoutFrames(AppSettings())


def test_frames_size_and_duration_reads_width_height_and_the_last_time() -> None:
    assert frames_size_and_duration(np.zeros((2, 32, 64, 3), np.uint8), [0.0, 2.25]) == (64, 32, 2.25)


def test_the_fake_opens_frames_given_directly() -> None:
    events: list[object] = []
    fake = FakeEngine(AppSettings(), events.append)
    frames = np.zeros((6, 32, 64, 3), np.uint8)
    done = fake.open_frames(frames, [0.5 * index for index in range(6)], "frames", request_id=3)
    assert done.frames == 6 and done.request_id == 3 and fake.open_clip_path() is None
    assert [event for event in events if isinstance(event, ConversationReset)] == [
        ConversationReset("new_clip", "frames", "", request_id=3)
    ]


def test_adding_keeps_the_conversation_and_opening_replaces_every_item() -> None:
    events: list[object] = []
    backend = _Plumbed(AppSettings(), events.append)
    frames = np.zeros((2, 64, 96, 3), np.uint8)
    backend.open_frames(frames, (0.0, 0.5), "first")
    backend.turns.append(("q", "a"))
    backend.add_clip("picture.png")
    assert [clip.summary.clip_name for clip in backend.clips] == ["first", "picture.png"]
    assert backend.turns == [("q", "a")], "adding an item keeps the questions and answers"
    backend.open_frames(frames, (0.0, 0.5), "second")
    assert [clip.summary.clip_name for clip in backend.clips] == ["second"] and backend.turns == []


def test_each_backend_checks_settings_against_the_family_it_answers_with(tmp_path) -> None:
    from framewise.core.backends import family_limits_for
    from framewise.core.backends.vllm.family import served_family
    from framewise.core.families import family_for

    remote = AppSettings().replace("backend", kind="vllm", server_url="http://127.0.0.1:1")
    assert family_limits_for(remote) == served_family().limits
    assert family_limits_for(AppSettings()) == family_for("qwen3_vl").limits, "the demo model is a Qwen3-VL checkpoint"
    unreadable = AppSettings().replace("model", source=str(tmp_path / "missing"))
    assert family_limits_for(unreadable) is None, "no family is guessed for a checkpoint that cannot be read"


def test_a_source_that_cannot_be_read_yet_is_checked_without_a_family(tmp_path) -> None:
    odd_frames = AppSettings().replace("model", source=str(tmp_path / "missing")).replace("sampling", max_frames=7)
    engine = Engine(odd_frames)  # Qwen3-VL's frame pairs are not assumed for an unknown checkpoint
    assert engine.settings is odd_frames
    with pytest.raises(ModelLoadError, match="does not exist"):
        engine.load()
    with pytest.raises(SettingsError, match="even number"):
        Engine(AppSettings().replace("sampling", max_frames=7))  # the demo model's family is read from its config
