"""The engine on the demo model, on the CPU: encode once, stream answers, cancel, keep state on errors."""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from framewise.core.backends.local import parts as parts_module
from framewise.core.decoding import decoder as decoder_module
from framewise.core.encoding.eager import EagerVisionEncoder
from framewise.core.encoding.manager import GraphVisionEncoder
from framewise.core.backends.local.engine import Engine
from framewise.core.errors import CancelledError, ClipError, ContextFullError, FramewiseError, QuestionTooLongError
from framewise.core.events import (
    AnswerSpeed,
    ChunkStats,
    ClipSampled,
    ConversationReset,
    Done,
    EncodeDone,
    EncoderMetrics,
    EngineInfo,
    Event,
    Progress,
    Token,
)
from framewise.core.encoding.attention_backends import REGISTERED_NAMES
from framewise.core.metrics import DecodeSpeedMeter
from framewise.core.model_source import family_limits_of
from framewise.core.settings import FEWER_ITEMS_ADVICE, SENTENCE_QUESTION_TOKENS, AppSettings, context_needed
from framewise.core.video import pyav_reader, sample_clip
from tests.conftest import SAMPLE_CLIPS
from tests.core.test_video_robustness import write_audio_with_cover
from training.clip_writer import write_clip

FAST = AppSettings().replace("model", device="cpu").replace("sampling", max_frames=4).replace(
    "generation", max_new_tokens=6
)


class Recorder:
    """An event sink that keeps every event."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def __call__(self, event: Event) -> None:
        self.events.append(event)

    def of(self, kind: type) -> list:
        return [event for event in self.events if isinstance(event, kind)]


@pytest.fixture(scope="module")
def clip() -> Path:
    clips = sorted(SAMPLE_CLIPS.glob("*.mp4"))
    assert clips, "assets/clips holds the sample clips; run scripts/make_sample_clips.py"
    return clips[0]


@pytest.fixture(scope="module")
def loaded_engine() -> tuple[Engine, Recorder]:
    recorder = Recorder()
    engine = Engine(FAST, sink=recorder)
    engine.load()
    return engine, recorder


@pytest.fixture()
def engine(loaded_engine: tuple[Engine, Recorder], clip: Path) -> tuple[Engine, Recorder]:
    engine, recorder = loaded_engine
    engine.apply_settings(FAST)
    engine.open_clip(clip)
    recorder.events.clear()
    return engine, recorder


def test_load_reports_eager_on_the_cpu_and_the_demo_label(loaded_engine: tuple[Engine, Recorder]) -> None:
    info = loaded_engine[0].info()
    assert info.device == "cpu" and not info.graphs_enabled
    assert info.device_kind == "cpu" and info.on_cpu
    assert "CPU" in info.graphs_reason
    assert info.model_label and info.model_label.startswith("Demo model")


def test_open_clip_reports_frames_chunks_and_summary(loaded_engine: tuple[Engine, Recorder], clip: Path) -> None:
    engine, recorder = loaded_engine
    recorder.events.clear()
    summary = engine.open_clip(clip)
    sampled = recorder.of(ClipSampled)
    assert len(sampled) == 1 and len(sampled[0].thumbnails) == len(sampled[0].timestamps) == 4
    assert list(sampled[0].timestamps) == sorted(sampled[0].timestamps)
    assert sampled[0].thumbnails[0].dtype.name == "uint8" and sampled[0].thumbnails[0].shape[2] == 3
    chunks = recorder.of(ChunkStats)
    assert chunks and sum(chunk.frames for chunk in chunks) == 4
    assert recorder.of(EncodeDone) == [summary]
    assert summary.frames == 4 and summary.patches == engine.clip.video.item.patches
    assert not summary.graph_hit and not any(chunk.graph_hit for chunk in chunks)  # eager on the CPU


def test_answer_streams_tokens_that_add_up_to_the_answer(engine: tuple[Engine, Recorder]) -> None:
    engine_, recorder = engine
    done = engine_.ask("What color is the square?")
    tokens = recorder.of(Token)
    assert tokens, "the answer was not streamed"
    assert "".join(token.text for token in tokens).strip() == done.text
    assert recorder.events[-1] == done
    assert 0 < done.stats.new_tokens <= FAST.generation.max_new_tokens
    assert done.stats.time_to_first_token_ms > 0 and engine_.clip.summary.frames == 4 and done.kept
    assert not done.stats.cancelled


def test_follow_up_questions_reuse_the_features_and_keep_the_conversation(engine: tuple[Engine, Recorder]) -> None:
    engine_, _ = engine
    calls = []
    real_encode = engine_.parts.encoder.encode
    engine_.parts.encoder.encode = lambda items: calls.append(items) or real_encode(items)  # type: ignore[method-assign]
    try:
        first = engine_.ask("What color is the square?")
        second = engine_.ask("And which way does it move?")
    finally:
        del engine_.parts.encoder.encode
    assert calls == []
    assert engine_.turns == [("What color is the square?", first.text), ("And which way does it move?", second.text)]


def test_the_engines_answer_is_generates_answer_with_the_models_own_vision_pass(
    engine: tuple[Engine, Recorder], clip: Path
) -> None:
    """Encoder and decoder must be invisible: generate() with the model's own vision tower agrees.
    An open clip keeps no pixel rows (only its features), so the clip is sampled and preprocessed
    again here, as the engine did."""
    engine_, _ = engine
    ours = engine_.ask("How many shapes are there?").text

    from framewise.core.families.qwen3_vl.prompt import build_chat_inputs

    loaded = engine_.loaded
    sampled = sample_clip(clip, FAST.sampling, loaded.family.frame_sizing(FAST.sampling, loaded.limits))
    video = loaded.family.preprocess_video(sampled.frames, sampled.timestamps, loaded.limits)
    item = video.item
    assert item.grid_thw == engine_.clip.video.item.grid_thw
    inputs = build_chat_inputs(loaded.tokenizer, "How many shapes are there?", videos=[video])
    with torch.inference_mode():
        output = loaded.model.generate(
            input_ids=inputs.input_ids,
            attention_mask=inputs.attention_mask,
            mm_token_type_ids=inputs.mm_token_type_ids,
            pixel_values_videos=item.pixel_values,
            video_grid_thw=torch.tensor([item.grid_thw]),
            max_new_tokens=FAST.generation.max_new_tokens,
            do_sample=False,
        )
    theirs = loaded.tokenizer.decode(output[0, inputs.input_ids.shape[1]:], skip_special_tokens=True).strip()
    assert ours == theirs


def test_info_says_decode_steps_run_eagerly_on_the_cpu_and_why(loaded_engine: tuple[Engine, Recorder]) -> None:
    engine = loaded_engine[0]
    decoder = engine.info().decoder
    assert decoder is not None and not decoder.graphs_enabled and "CPU" in decoder.graphs_reason
    assert decoder.context_tokens == FAST.context_tokens(engine.loaded.limits)
    assert decoder.buckets[-1] == decoder.context_tokens
    assert decoder.kv_cache_mb > 0


def test_a_follow_up_prefills_only_its_new_tokens_and_says_so(engine: tuple[Engine, Recorder]) -> None:
    engine_, _ = engine
    first = engine_.ask("What color is the square?").stats.decoder
    second = engine_.ask("And which way does it move?").stats.decoder
    assert first.prefix_tokens_reused == 0 and first.prefill_tokens == first.prompt_tokens
    assert second.prefix_tokens_reused > first.prompt_tokens > engine_.clip.video.item.patches // 4
    assert second.prefill_tokens == second.prompt_tokens - second.prefix_tokens_reused < 32
    for stats in (first, second):
        assert stats.graph_steps == 0 and stats.eager_steps >= 0 and stats.stop_reason


def test_a_follow_up_after_an_answer_that_does_not_tokenize_back_prefills_only_its_new_tokens(
    engine: tuple[Engine, Recorder], monkeypatch: pytest.MonkeyPatch
) -> None:
    engine_, _ = engine
    tokenizer = engine_.loaded.tokenizer
    # "red" spelled letter by letter: its text tokenizes back to one token, not these three.
    spelled = [tokenizer.convert_tokens_to_ids(letter) for letter in "red"]
    assert tokenizer.encode(tokenizer.decode(spelled), add_special_tokens=False) != spelled
    script = iter([*spelled, tokenizer.convert_tokens_to_ids("<|im_end|>")])
    picked = decoder_module._pick
    monkeypatch.setattr(decoder_module, "_pick", lambda logits, temperature: torch.tensor([next(script)]))
    first = engine_.ask("What color is the square?")
    monkeypatch.setattr(decoder_module, "_pick", picked)
    assert first.text == "red" and engine_.turns[-1] == ("What color is the square?", "red")

    second = engine_.ask("And which way does it move?").stats.decoder
    assert second.prefix_tokens_reused == first.stats.decoder.prompt_tokens + len(spelled), "the cache held all of it"
    assert second.prefill_tokens == second.prompt_tokens - second.prefix_tokens_reused < 32


def test_a_question_or_conversation_too_long_for_the_context_is_refused_before_it_runs(
    engine: tuple[Engine, Recorder],
) -> None:
    engine_, recorder = engine
    context = engine_.parts.decoder.max_tokens
    with pytest.raises(QuestionTooLongError, match=r"This question is [\d,]+ tokens.*Shorten the question") as raised:
        engine_.ask("red " * context)
    assert not recorder.of(Token) and engine_.turns == []
    total, *parts = _context_parts(str(raised.value))
    assert total == sum(parts) > context and parts[1] == context and parts[3] == FAST.generation.max_new_tokens

    engine_.turns.append(("What moves?", "red " * context))
    with pytest.raises(QuestionTooLongError, match="Start a new conversation"):
        engine_.ask("And then?")
    assert not recorder.of(Token) and len(engine_.turns) == 1


def _context_parts(message: str) -> list[int]:
    """The total and the parts (items, question, chat template, answer) of a context message."""
    found = re.search(
        r"must hold ([\d,]+) tokens: ([\d,]+) for the clip .*?, ([\d,]+) for the question, ([\d,]+) for the chat "
        r"template and ([\d,]+) for one answer",
        message,
    )
    assert found, message
    return [int(number.replace(",", "")) for number in found.groups()]


def _one_clip_settings() -> AppSettings:
    """Settings whose largest clip is the sample clip (4 frames of 320×240), with the smallest context
    they accept: room for that clip, a short question and one answer, no more."""
    settings = FAST.replace("sampling", max_pixels=4 * 320 * 240)
    needed = context_needed(settings.sampling, settings.generation, limits=family_limits_of("demo"))
    context = decoder_module.CONTEXT_ALIGNMENT * -(-needed.total // decoder_module.CONTEXT_ALIGNMENT)
    return settings.replace("decoding", max_context_tokens=context, min_bucket=64)


def test_an_item_that_leaves_no_room_for_a_question_is_refused_as_it_is_added(
    loaded_engine: tuple[Engine, Recorder], clip: Path
) -> None:
    """The item that fills the context is refused when it is added, not at the next question, with advice
    that helps: fewer items or frames, or more context (issue 44, item 3)."""
    engine_, _ = loaded_engine
    engine_.apply_settings(_one_clip_settings())
    try:
        engine_.open_clip(clip)
        with pytest.raises(ContextFullError) as raised:
            engine_.add_clip(clip)
        assert engine_.added == [] and engine_.ask("?").kept, "the clip open before stays, and questions go on"
    finally:
        engine_.apply_settings(FAST)
    message = str(raised.value)
    assert message.startswith(f"With {clip.name} the items leave no room") and "with the 1 item it had" in message
    assert message.endswith(FEWER_ITEMS_ADVICE) and "Shorten" not in message


def test_a_question_the_items_leave_too_little_room_for_is_not_told_to_be_shorter(
    loaded_engine: tuple[Engine, Recorder], clip: Path
) -> None:
    """Where the items leave a question less than a sentence's room, shortening it is no advice: fewer
    items or frames, or more context, are (issue 44, item 3)."""
    engine_, _ = loaded_engine
    tight = _one_clip_settings()
    context = tight.decoding.max_context_tokens
    needed = context_needed(tight.sampling, tight.generation, limits=family_limits_of("demo"))
    without_answer = needed.total - needed.answer
    engine_.apply_settings(tight.replace("generation", max_new_tokens=context - without_answer))  # all the room spare
    try:
        engine_.open_clip(clip)
        with pytest.raises(QuestionTooLongError) as raised:
            engine_.ask("Which way does the square move, and how far does it go between the first and the last frame?")
    finally:
        engine_.apply_settings(FAST)
    total, _items, question, *_rest = _context_parts(str(raised.value))
    assert 1 <= context - (total - question) < SENTENCE_QUESTION_TOKENS, "a shorter question would fit, barely"
    assert str(raised.value).endswith(FEWER_ITEMS_ADVICE) and "Shorten" not in str(raised.value)


def test_a_question_the_settings_let_through_is_answered_at_the_smallest_context_they_accept(
    loaded_engine: tuple[Engine, Recorder], clip: Path
) -> None:
    """The check before loading counts the largest clip, the chat template and one answer; the engine
    counts the real prompt: at the smallest context the first lets a question through (a clip that
    fills the pixel budget), the engine answers it, and the answer has its full room."""
    engine_, _ = loaded_engine
    question = "What color is the square?"
    question_tokens = len(engine_.loaded.tokenizer.encode(question, add_special_tokens=False))
    settings = FAST.replace("sampling", max_pixels=4 * 320 * 240)
    unaligned = context_needed(settings.sampling, settings.generation, question_tokens, limits=engine_.loaded.limits)
    answer_tokens = unaligned.answer + -unaligned.total % decoder_module.CONTEXT_ALIGNMENT  # no rounding up
    settings = settings.replace("generation", max_new_tokens=answer_tokens)
    smallest = context_needed(settings.sampling, settings.generation, question_tokens, limits=engine_.loaded.limits).total
    tight = settings.replace("decoding", max_context_tokens=smallest, min_bucket=64)
    tight.check_question_fits(question_tokens, engine_.loaded.limits)
    engine_.apply_settings(tight)
    try:
        engine_.open_clip(clip)
        done = engine_.ask(question)
    finally:
        engine_.apply_settings(FAST)
    assert done.kept and done.stats.decoder.context_tokens == smallest
    assert done.stats.decoder.prompt_tokens + answer_tokens <= smallest


def test_a_new_clip_is_prefilled_from_the_start(engine: tuple[Engine, Recorder], clip: Path) -> None:
    engine_, _ = engine
    engine_.ask("What color is the square?")
    engine_.open_clip(clip)  # the same file again: a new encoding, so nothing is reused
    assert engine_.ask("What color is the square?").stats.decoder.prefix_tokens_reused == 0


def test_cancel_from_another_thread_stops_within_half_a_second(engine: tuple[Engine, Recorder]) -> None:
    engine_, recorder = engine
    engine_.apply_settings(FAST.replace("generation", max_new_tokens=4000))
    engine_.turns.clear()
    first_token, cancel_sent = threading.Event(), threading.Event()
    recorder_call = engine_.sink

    def sink(event: Event) -> None:
        recorder_call(event)
        if isinstance(event, Token) and not first_token.is_set():
            first_token.set()
            # Hold the answer at its first token until the stop is sent, so that a short answer
            # cannot end on its own before the stop arrives.
            cancel_sent.wait(5)

    engine_.sink = sink
    result: list[Done] = []
    worker = threading.Thread(target=lambda: result.append(engine_.ask("Describe the clip.")))
    worker.start()
    try:
        assert first_token.wait(60)
        asked = time.perf_counter()
        engine_.cancel()
        cancel_sent.set()
        worker.join(5)
        stopped_after = time.perf_counter() - asked
    finally:
        engine_.sink = recorder_call
    assert not worker.is_alive()
    assert stopped_after < 0.5
    assert result[0].stats.cancelled and result[0].stats.new_tokens < 4000
    assert engine_.turns == []  # a cancelled answer is not part of the conversation


def test_a_stop_for_an_answer_that_has_ended_does_not_stop_the_next_question(engine: tuple[Engine, Recorder]) -> None:
    engine_, _ = engine
    first = engine_.ask("What color is the square?", request_id=101)
    engine_.cancel(101)  # Stop pressed just as that answer ended
    second = engine_.ask("What color is the square?", request_id=102)
    assert not second.stats.cancelled and second.text == first.text
    engine_.cancel(103)  # a cancel of the request about to start is kept for it
    assert engine_.ask("What color is the square?", request_id=103).stats.cancelled


def junk_bytes(folder: Path) -> Path:
    junk = folder / "junk.mp4"
    junk.write_bytes(b"\x00not a video" * 100)
    return junk


@pytest.mark.parametrize(
    "bad_clip",
    [junk_bytes, lambda folder: folder / ("x" * 300 + ".mp4"), lambda folder: write_audio_with_cover(folder / "song.m4a")],
    ids=["junk bytes", "a name over 255 bytes", "audio with only a cover picture"],
)
def test_a_bad_clip_keeps_the_open_clip_and_the_conversation(
    engine: tuple[Engine, Recorder], tmp_path: Path, bad_clip
) -> None:
    engine_, _ = engine
    engine_.ask("What color is the square?")
    before_clip, before_history = engine_.clip, list(engine_.turns)
    with pytest.raises(ClipError):
        engine_.open_clip(bad_clip(tmp_path))
    assert engine_.clip is before_clip and engine_.turns == before_history
    assert engine_.ask("Which way does it move?").text is not None


def test_an_empty_question_is_refused(engine: tuple[Engine, Recorder]) -> None:
    with pytest.raises(FramewiseError, match="question"):
        engine[0].ask("   ")


def test_new_sampling_settings_re_encode_the_open_clip(engine: tuple[Engine, Recorder]) -> None:
    engine_, recorder = engine
    engine_.apply_settings(FAST.replace("sampling", max_frames=6, fps=30.0))
    assert engine_.clip.summary.frames == 6
    assert recorder.of(EncodeDone)[-1].frames == 6


def test_the_clip_and_its_summary_say_which_sampling_mode_took_the_frames(engine: tuple[Engine, Recorder]) -> None:
    engine_, recorder = engine
    assert engine_.clip.summary.sampling_mode == "exact"  # a short clip, fast mode on auto
    engine_.apply_settings(FAST.replace("sampling", fast_mode="on"))
    assert recorder.of(ClipSampled)[-1].sampling_mode == "fast"
    assert recorder.of(EncodeDone)[-1].sampling_mode == "fast"


def test_new_encoder_settings_rebuild_the_encoder_and_report_it(engine: tuple[Engine, Recorder]) -> None:
    engine_, recorder = engine
    before = engine_.parts.encoder
    info = engine_.apply_settings(FAST.replace("encoder", use_graphs=False))
    assert engine_.parts.encoder is not before
    assert isinstance(info, EngineInfo) and recorder.of(EngineInfo)[-1] == info


def test_turning_graphs_off_gives_the_tower_back_its_stock_attention(monkeypatch: pytest.MonkeyPatch) -> None:
    """Graphs switch the tower to a graph-safe attention; the eager encoder after them runs transformers' own.

    Graphs run ``direct`` here (same buffers and forward, no CUDA graph), so the switch happens on the CPU.
    """

    def direct_graphs(adapter, settings, progress=None, *, limits):
        if not settings.use_graphs:
            return EagerVisionEncoder(adapter), "graphs off"
        return GraphVisionEncoder(adapter, settings, direct=True, limits=limits), "direct graphs on the CPU"

    monkeypatch.setattr(parts_module, "make_vision_encoder", direct_graphs)
    settings = FAST.replace("encoder", budgets=(64, 256), max_items_per_batch=4, max_frame_pairs_per_batch=8)
    engine = Engine(settings)
    engine.load()
    visual = engine.loaded.model.model.visual
    assert visual.config._attn_implementation == REGISTERED_NAMES["sdpa_masked"]
    engine.apply_settings(settings.replace("encoder", budgets=(64, 128)))  # graphs re-captured
    assert visual.config._attn_implementation == REGISTERED_NAMES["sdpa_masked"]
    engine.apply_settings(settings.replace("encoder", use_graphs=False))
    assert engine.parts.encoder.name == "eager"
    assert visual.config._attn_implementation == "sdpa"


def test_frames_sampled_elsewhere_open_like_a_clip(loaded_engine: tuple[Engine, Recorder]) -> None:
    engine, recorder = loaded_engine
    engine.apply_settings(FAST)
    recorder.events.clear()
    frames = np.zeros((4, 64, 96, 3), np.uint8)
    frames[:, 16:48, 32:64] = (255, 0, 0)
    summary = engine.open_frames(frames, (0.25, 0.75, 1.25, 1.75), "red block")
    (sampled,) = recorder.of(ClipSampled)
    assert (sampled.clip_name, sampled.width, sampled.height, sampled.path) == ("red block", 96, 64, "")
    assert summary.frames == 4 and summary.patches == 2 * 4 * 6 and summary.decode_ms == 0.0
    assert engine.ask("What color is the square?").text
    engine.apply_settings(FAST.replace("sampling", max_frames=6))  # nothing to re-sample: the clip stays
    assert engine.clip.summary is summary


def test_cancel_reaches_a_clip_while_it_is_read_and_reading_shows_progress(
    engine: tuple[Engine, Recorder], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine_, recorder = engine
    open_before = engine_.clip
    long_clip = write_clip(tmp_path / "long.ts", [np.full((48, 64, 3), i % 200, np.uint8) for i in range(300)], fps=5)
    real_decoded = pyav_reader.PyAVClip._decoded

    def slow_decoded(self, *args):  # 0.05 s per frame: reading the 60 s clip takes seconds
        for decoded in real_decoded(self, *args):
            time.sleep(0.05)
            self.guard.check(decoded[0])
            yield decoded

    monkeypatch.setattr(pyav_reader.PyAVClip, "_decoded", slow_decoded)
    cancelled_at: list[float] = []

    def cancel_once_reading_has_progressed() -> None:
        while not any(p.stage == "decode" and p.current > 0 for p in recorder.of(Progress)):
            time.sleep(0.01)
        cancelled_at.append(time.monotonic())
        engine_.cancel()

    threading.Thread(target=cancel_once_reading_has_progressed, daemon=True).start()
    with pytest.raises(CancelledError):
        engine_.open_clip(long_clip)

    assert time.monotonic() - cancelled_at[0] < 0.5
    reading = [p for p in recorder.of(Progress) if p.stage == "decode" and p.total]
    assert reading and reading[-1].total == 60 and "long.ts" in reading[-1].message
    assert engine_.clip is open_before  # the open clip stays


def test_every_event_carries_the_id_of_its_request(loaded_engine: tuple[Engine, Recorder], clip: Path) -> None:
    engine, recorder = loaded_engine
    engine.apply_settings(FAST)
    recorder.events.clear()
    engine.open_clip(clip, request_id=41)
    opened = list(recorder.events)
    recorder.events.clear()
    engine.ask("What color is the square?", request_id=42)
    asked = list(recorder.events)
    recorder.events.clear()
    engine.new_conversation(request_id=43)
    assert opened and {event.request_id for event in opened} == {41}
    assert asked and {event.request_id for event in asked} == {42}
    assert recorder.events == [ConversationReset("asked", clip.name, str(clip), request_id=43)]
    engine.ask("And without an id?")
    assert len({event.request_id for event in recorder.events[1:]}) == 1 and recorder.events[-1].request_id not in (0, 43)


def test_the_engine_says_why_it_empties_the_conversation(loaded_engine: tuple[Engine, Recorder], clip: Path) -> None:
    engine, recorder = loaded_engine
    engine.apply_settings(FAST)
    recorder.events.clear()
    engine.open_clip(clip)
    engine.ask("What color is the square?")
    resampled = FAST.replace("sampling", max_frames=6)
    engine.apply_settings(resampled)
    engine.apply_settings(resampled.replace("generation", max_new_tokens=5))  # nothing to re-sample: no reset
    reasons = [event.reason for event in recorder.of(ConversationReset)]
    assert reasons == ["new_clip", "resampled"] and engine.turns == []
    assert not recorder.of(EngineInfo), "neither the model nor the encoder changed"


def test_an_odd_frame_count_is_timed_per_sampled_frame(loaded_engine: tuple[Engine, Recorder]) -> None:
    engine, recorder = loaded_engine
    engine.apply_settings(FAST)
    recorder.events.clear()
    frames = np.zeros((5, 64, 64, 3), np.uint8)
    summary = engine.open_frames(frames, (0.0, 0.5, 1.0, 1.5, 2.0), "five frames")
    assert summary.frames == 5 and sum(chunk.frames for chunk in summary.chunks) == 5
    assert summary.ms_per_frame == pytest.approx(summary.encode_ms / 5)
    (metrics,) = recorder.of(EncoderMetrics)
    assert metrics.last_item_ms_per_frame == summary.ms_per_frame and metrics.last_item_hit is False


def test_the_answers_speed_so_far_streams_with_it_as_the_final_figure_measures_it(
    engine: tuple[Engine, Recorder], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(DecodeSpeedMeter, "interval_s", 0.0)  # a report for every token from the second on
    engine_, recorder = engine
    done = engine_.ask("When does the square appear?")
    speeds = recorder.of(AnswerSpeed)
    assert done.stats.new_tokens >= 3, "an answer of a few tokens (the demo model's is 'about 2 seconds')"
    assert [speed.tokens_so_far for speed in speeds] == list(range(2, done.stats.new_tokens + 1))
    assert all(speed.request_id == done.request_id for speed in speeds)
    assert all(speed.tokens_per_second_so_far > 0 for speed in speeds)
    # The same count over the time since the first token; the final figure's clock stops after the last token.
    assert 0 < done.stats.tokens_per_second <= speeds[-1].tokens_per_second_so_far
    assert recorder.events.index(speeds[-1]) < recorder.events.index(done)
