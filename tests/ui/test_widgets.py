"""The window's parts on their own: encoder view, frame strip, settings store."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from PySide6.QtCore import QSettings, Qt
from PySide6.QtGui import QColor

from framewise.core.events import (
    AnswerStats, ChunkStats, ClipSampled, DecoderInfo, DecoderStats, EncodeDone, EngineInfo,
)
from framewise.core.metrics import EncoderMetricsAccumulator
from framewise.core.settings import AppSettings
from framewise.ui import frame_strip
from framewise.ui.frame_strip import FrameStrip
from framewise.ui.frames import format_timestamp, image_from_array
from framewise.ui.latency_plot import HIT_COLOR, MISS_COLOR
from framewise.ui.metrics import EncoderPanel
from framewise.ui.settings_store import MAX_RECENT_FILES, SettingsStore
from framewise.ui.wording import engine_text, model_title
from tests.ui import probes

GPU_INFO = EngineInfo(
    device="cuda (NVIDIA H200)",
    device_kind="cuda",
    dtype="bfloat16",
    model_name="Qwen3-VL-8B-Instruct",
    model_label=None,
    encoder_name="cuda-graphs (varlen)",
    graphs_enabled=True,
    graphs_reason="12 CUDA graphs captured",
    attention_backends=("varlen", "sdpa_masked", "eager"),
    graph_budgets=(256, 512, 1024),
)


def chunk(index: int, hit: bool, ms_per_frame: float, budget: int | None = 1024) -> ChunkStats:
    return ChunkStats(index, 1, 8, 900, budget, 0.12, ms_per_frame * 8, hit, None if hit else "larger than every budget")


def test_encoder_panel_shows_hits_per_item_budgets_and_padding(qtbot):
    panel = EncoderPanel()
    qtbot.addWidget(panel)
    panel.set_engine_info(GPU_INFO)
    metrics = EncoderMetricsAccumulator()
    panel.start_clip("a.mp4")
    first_clip = [chunk(index, hit, 2.0 + index) for index, hit in enumerate((True, True, False))]
    for stats in first_clip:
        panel.add_chunk(stats)
    panel.set_metrics(metrics.add_item(first_clip))
    assert panel.hits_value.text() == "0 hits, 1 miss (0% of 1 item)", "one eager pass makes the clip a miss"
    assert "3 graphs (budgets 256–1024)" in panel.encoder_value.text()
    row = [panel.chunk_table.item(1, column).text() for column in range(panel.chunk_table.columnCount())]
    assert row == ["1", "8", "900", "1024", "12%", "3.00", "graph"]
    assert panel.chunk_table.item(2, 6).text() == "eager: larger than every budget"

    panel.start_clip("b.mp4")
    second_clip = [chunk(0, True, 1.5)]
    panel.add_chunk(second_clip[0])
    panel.set_metrics(metrics.add_item(second_clip))
    assert panel.chunk_table.rowCount() == 1, "the table shows the last clip's chunks"
    assert [point.run for point in probes.plotted(panel.plot)] == [0, 0, 0, 1], "the plot keeps every clip"
    assert panel.hits_value.text() == "1 hit, 1 miss (50% of 2 items)"
    assert panel.latency_value.text() == "p50 2.00 ms, p99 4.00 ms (4 chunks this run)", "across clips"


def test_latency_plot_paints_points_in_their_colours(qtbot):
    panel = EncoderPanel()
    qtbot.addWidget(panel)
    panel.resize(900, 400)
    panel.set_engine_info(GPU_INFO)
    panel.start_clip("a.mp4")
    panel.add_chunk(chunk(0, True, 4.0))
    panel.add_chunk(chunk(1, False, 8.0))
    image = panel.plot.grab().toImage()
    colours = {image.pixelColor(x, y).rgb() for x in range(0, image.width(), 2) for y in range(0, image.height(), 2)}
    assert QColor(HIT_COLOR).rgb() in colours and QColor(MISS_COLOR).rgb() in colours


def test_answer_stats_and_clip_timing_are_shown(qtbot):
    panel = EncoderPanel()
    qtbot.addWidget(panel)
    done = EncodeDone(
        "a.mp4", 16, 4096, (0.0, 0.5), 40.0, 12.0, 30.0, 1.875, True, video_tokens_before=1024, video_tokens_after=1024
    )
    panel.set_encode_done(done)
    panel.set_answer_stats(AnswerStats(85.4, 20, 42.0, False, 1536.0))
    assert panel.clip_value.text() == "16 frames, 4,096 patches, 1,024 video tokens"
    assert "1.88 ms/frame" in panel.timing_value.text()
    assert panel.first_token_value.text() == "85 ms"
    assert panel.speed_value.text() == "42.0 tokens/s (20 tokens)"
    assert panel.memory_value.text() == "1,536 MiB"


def test_the_last_clip_shows_its_video_tokens_before_and_after_pruning(qtbot):
    panel = EncoderPanel()
    qtbot.addWidget(panel)
    kept = (1.0, 1.0) + (0.25,) * 14
    done = EncodeDone(
        "a.mp4", 16, 4096, (0.0, 0.5), 40.0, 12.0, 30.0, 1.875, True,
        video_tokens_before=1024, video_tokens_after=352, kept_per_frame=kept,
    )
    panel.set_encode_done(done)
    assert panel.clip_value.text() == "16 frames, 4,096 patches, 1,024 → 352 video tokens"
    assert "pruning" in panel.clip_value.toolTip()


def test_the_decoder_line_shows_graph_steps_prefill_and_the_reused_prefix(qtbot):
    panel = EncoderPanel()
    qtbot.addWidget(panel)
    decoder_info = DecoderInfo(
        True, "5 decode graphs captured", 2816, (256, 512, 1024, 2048, 2816), 204.2, 0.4, 12.0,
        kv_cache_dtype="fp8 e4m3, a scale per token and head", kv_bytes_per_token=76032,
    )
    panel.set_engine_info(dataclasses.replace(GPU_INFO, decoder=decoder_info))
    assert panel.decoder_value.text() == (
        "5 decode graphs, KV cache of 2,816 tokens (fp8 e4m3, a scale per token and head, 74.25 KiB a token)"
    )
    decoder = DecoderStats(True, 19, 0, 1310, 1290, 20, 14.2, 210.5, 4.75, 4.9, 2816, "end of answer")
    stats = AnswerStats(16.0, 20, 198.0, False, 1536.0, decoder)
    panel.set_answer_stats(stats)
    line = panel.decoder_value.text()
    assert "graph steps 19, eager steps 0" in line and "prefill 20 tokens in 14 ms" in line
    assert "1290 of 1310 prompt tokens reused" in line and "210.5 tokens/s" in line


def test_the_model_is_named_with_its_family_unless_its_name_says_it():
    qwen3_5 = dataclasses.replace(GPU_INFO, model_name="Qwen3.5-9B", family="Qwen3.5")
    assert engine_text(qwen3_5, qwen3_5.model_name).startswith("Qwen3.5-9B · cuda (NVIDIA H200) · bfloat16")
    folder = dataclasses.replace(qwen3_5, model_name="my-finetune")
    assert model_title(folder) == "my-finetune · Qwen3.5"
    assert engine_text(folder, folder.model_name).startswith("my-finetune · Qwen3.5 · cuda (NVIDIA H200)")
    assert model_title(GPU_INFO) == "Qwen3-VL-8B-Instruct"  # no family said: none shown


def test_format_timestamp():
    assert [format_timestamp(t) for t in (0.0, 0.55, 75.25, 3723.0)] == ["0:00.0", "0:00.6", "1:15.3", "1:02:03.0"]
    assert [format_timestamp(t) for t in (0.25, 0.75, 1.25, 1.75, 1.15)] == ["0:00.3", "0:00.8", "0:01.3", "0:01.8", "0:01.2"]
    assert format_timestamp(59.96) == "1:00.0" and format_timestamp(3599.96) == "1:00:00.0"
    assert format_timestamp(0.755, 2) == "0:00.76"


def test_strip_captions_of_frames_closer_than_a_tenth_read_apart(qtbot):
    """A closer look at 0.75–0.85 s: its frames read "0:00.75, 0:00.80…", not "0:00.8, 0:00.8" (issue 44, item 8)."""
    strip = FrameStrip()
    qtbot.addWidget(strip)
    frames = tuple(np.zeros((8, 8, 3), np.uint8) for _ in range(3))
    strip.set_clip(ClipSampled("c.mp4 0.8–0.8 s", "/tmp/c.mp4", (0.75, 0.8, 0.85), frames, 64, 64, 4.0))
    assert probes.item_texts(strip) == ["0:00.75", "0:00.80", "0:00.85"]
    strip.set_clip(ClipSampled("c.mp4", "/tmp/c.mp4", (0.25, 0.75, 1.25), frames, 64, 64, 4.0))
    assert probes.item_texts(strip) == ["0:00.3", "0:00.8", "0:01.3"], "halves round up: even steps"


def test_frame_strip_shows_one_captioned_thumbnail_per_frame(qtbot):
    strip = FrameStrip()
    qtbot.addWidget(strip)
    frames = tuple(np.full((96, 128, 3), value, np.uint8) for value in (10, 120, 250))
    strip.set_clip(ClipSampled("c.mp4", "/tmp/c.mp4", (0.0, 0.5, 1.0), frames, 1280, 960, 1.2))
    assert probes.item_texts(strip) == ["0:00.0", "0:00.5", "0:01.0"]
    assert image_from_array(frames[1]).pixelColor(5, 5).red() == 120
    with pytest.raises(ValueError):
        image_from_array(np.zeros((4, 4), np.uint8))


@pytest.fixture
def pictured(monkeypatch) -> list[np.ndarray]:
    """The thumbnails the frame strip has made pictures of, in order."""
    made: list[np.ndarray] = []
    real = frame_strip.image_from_array

    def recording(frame: np.ndarray):
        made.append(frame)
        return real(frame)

    monkeypatch.setattr(frame_strip, "image_from_array", recording)
    return made


def shown_strip(qtbot) -> FrameStrip:
    """A frame strip 1,000 pixels wide, on screen."""
    strip = FrameStrip()
    qtbot.addWidget(strip)
    strip.resize(1000, strip.height())
    strip.show()
    qtbot.waitExposed(strip)
    return strip


def test_a_frame_picked_in_the_strip_is_said_and_one_the_preview_reached_is_not(qtbot, pictured):
    strip = shown_strip(qtbot)
    frames = tuple(np.full((32, 56, 3), 40 * index, np.uint8) for index in range(4))
    strip.set_clip(ClipSampled("c.mp4", "/tmp/c.mp4", (1.0, 3.0, 5.0, 7.0), frames, 1280, 720, 8.0))
    assert probes.item_texts(strip) == ["0:01.0", "0:03.0", "0:05.0", "0:07.0"]
    qtbot.waitUntil(lambda: {id(frame) for frame in pictured} >= {id(frames[2])})
    assert probes.picture_color(strip, 2).red() == 80
    picked = []
    strip.frame_selected.connect(picked.append)
    strip.select_frame(1)  # the preview played past frame 1: the strip follows, nothing is picked
    strip.setCurrentRow(3)
    assert picked == [3] and strip.currentRow() == 3


def test_settings_store_round_trip_and_bad_saved_settings(tmp_path):
    store = SettingsStore(tmp_path / "s.ini")
    assert store.load_settings() == AppSettings()
    settings = AppSettings().replace("encoder", budgets=(256, 512), use_graphs=False)
    store.save_settings(settings)
    assert SettingsStore(tmp_path / "s.ini").load_settings() == settings

    broken = AppSettings().replace("sampling", max_frames=3)
    store.save_settings(broken)
    reread = SettingsStore(tmp_path / "s.ini")
    assert reread.load_settings() == AppSettings()
    assert "sampling.max_frames" in reread.load_problem


def test_a_settings_file_saved_before_a_rename_keeps_its_value(tmp_path):
    saved = AppSettings().to_dict()
    saved["encoder"].pop("max_frame_pairs_per_batch")
    saved["encoder"]["max_frames_per_batch"] = 12  # the name before frame pairs were called so
    older = QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat)
    older.setValue("engine/settings_json", json.dumps(saved))
    older.sync()
    store = SettingsStore(tmp_path / "s.ini")
    assert store.load_settings().encoder.max_frame_pairs_per_batch == 12 and store.load_problem is None
    store.save_settings(store.load_settings())
    rewritten = json.loads(QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat).value("engine/settings_json"))
    assert rewritten["encoder"]["max_frame_pairs_per_batch"] == 12 and "max_frames_per_batch" not in rewritten["encoder"]


def test_recent_files_newest_first_without_duplicates(tmp_path):
    store = SettingsStore(tmp_path / "s.ini")
    for index in range(MAX_RECENT_FILES + 3):
        store.add_recent_file(f"/clips/{index}.mp4")
    store.add_recent_file("/clips/5.mp4")
    files = SettingsStore(tmp_path / "s.ini").recent_files()
    assert files[0] == "/clips/5.mp4" and len(files) == MAX_RECENT_FILES and files.count("/clips/5.mp4") == 1


def test_timeline_click_and_keys_seek_within_the_clip(qtbot):
    from PySide6.QtCore import QPoint, Qt

    from framewise.ui.frames import Timeline

    timeline = Timeline()
    qtbot.addWidget(timeline)
    timeline.resize(400, 24)
    timeline.show()
    timeline.set_clip(4.0, (0.5, 1.5, 2.5, 3.5))
    requested = []
    timeline.seek_requested.connect(requested.append)
    qtbot.mouseClick(timeline, Qt.MouseButton.LeftButton, pos=QPoint(round(timeline.x_of(2.0)), 12))
    assert requested[-1] == pytest.approx(2.0, abs=0.02)
    qtbot.keyClick(timeline, Qt.Key.Key_Right)
    assert requested[-1] == pytest.approx(3.0, abs=0.02)
    qtbot.keyClick(timeline, Qt.Key.Key_End)
    qtbot.keyClick(timeline, Qt.Key.Key_Right)
    assert requested[-1] == 4.0 and timeline.position == 4.0, "never past the end"


def test_a_strip_of_768_frames_makes_only_the_pictures_in_view(qtbot, pictured):
    strip = shown_strip(qtbot)
    frames = tuple(np.full((32, 56, 3), index % 256, np.uint8) for index in range(768))
    strip.set_clip(ClipSampled("long.mp4", "/tmp/long.mp4", tuple(i * 4.0 for i in range(768)), frames, 1920, 1080, 3072.0))
    rows = {id(frame): row for row, frame in enumerate(frames)}
    made = lambda: {rows[id(frame)] for frame in pictured}  # noqa: E731
    qtbot.waitUntil(lambda: len(made()) > 0, timeout=2000)
    assert len(made()) < 100 and strip.count() == 768
    assert 400 not in made()  # not made yet
    strip.select_frame(400)
    qtbot.waitUntil(lambda: 400 in made())
    assert probes.picture_color(strip, 400).red() == 400 % 256
    assert len(made()) < 200


def test_a_timeline_of_768_frames_draws_ticks_at_least_two_pixels_apart(qtbot):
    from framewise.ui.frames import MIN_TICK_GAP_PX, Timeline

    timeline = Timeline()
    qtbot.addWidget(timeline)
    timeline.resize(500, 24)
    timeline.show()
    timeline.set_clip(3072.0, tuple(4.0 * i + 2.0 for i in range(768)))
    ticks = timeline.tick_xs()
    assert 100 < len(ticks) < 768
    assert all(b - a >= MIN_TICK_GAP_PX for a, b in zip(ticks, ticks[1:]))
    timeline.set_clip(4.0, (0.5, 1.5, 2.5, 3.5))
    assert len(timeline.tick_xs()) == 4  # a few frames: one tick each
    timeline.grab()  # paints without error
