"""The window on the real engine with the demo model, on the CPU (small clips and answers to stay fast)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from PySide6.QtCore import Qt

from framewise.core.events import ChunkStats, Done, EncodeDone, Token
from framewise.core.settings import AppSettings
from framewise.core.wording import plural
from framewise.core.errors import UnreadableClipError
from framewise.core.video import probe_clip
from tests.conftest import make_random_demo_model
from tests.core.test_video import SVG_DRAWING, cut_short_mp4
from tests.ui.test_main_window import LOAD_TIMEOUT_MS, ask_and_wait, drop_file, open_and_wait, wait_ready
from framewise.ui.frames import format_timestamp
from framewise.ui.settings_store import SettingsStore
from tests.ui import probes

FAST = (
    AppSettings()
    .replace("model", device="cpu")
    .replace("sampling", max_frames=4)
    .replace("generation", max_new_tokens=6)
)
REPO_ROOT = Path(__file__).resolve().parents[2]


def real_engine(settings, sink):
    from framewise.core.backends.local.engine import Engine

    return Engine(settings, sink=sink)


def test_drop_ask_and_watch_the_encoder_with_the_demo_model(qtbot, make_window, sample_clip):
    window = make_window(real_engine, FAST)
    events = []
    window.host.event.connect(events.append)
    wait_ready(qtbot, window)
    assert window.session.info.model_label and window.banners.demo_banner.isVisible()
    assert not window.banners.cpu_banner.isVisible() and window.encoder_panel.title.text().startswith("eager on the CPU: no CUDA graphs")

    open_and_wait(qtbot, window, sample_clip)
    sampled = next(event for event in events if type(event).__name__ == "ClipSampled")
    assert len(sampled.timestamps) == 4
    assert probes.item_texts(window.clip_section.strip) == [format_timestamp(t) for t in sampled.timestamps]
    chunks = [event for event in events if isinstance(event, ChunkStats)]
    assert chunks and len(probes.plotted(window.encoder_panel.plot)) == len(chunks)
    assert f"({plural(len(chunks), 'eager pass', 'eager passes')})" in window.encoder_panel.hits_value.text()

    ask_and_wait(qtbot, window, "What moves in the clip?")
    kinds = [type(event) for event in events]
    assert Token in kinds and kinds.index(Token) < kinds.index(Done)
    done = next(event for event in events if isinstance(event, Done))
    turn = window.session.conversation.turns[-1]
    assert turn.status == "done" and turn.answer == done.text
    assert turn.stats.new_tokens == done.stats.new_tokens > 0
    header = window.chat.answer_cards()[-1].header
    assert window.session.info.model_label in header.toolTip() and "Demo model" in header.text()
    assert window.encoder_panel.first_token_value.text().endswith(" ms")
    assert window.encoder_panel.speed_value.text() == done.stats.speed_text()  # the figure core worded

    ask_and_wait(qtbot, window, "And after that?")
    assert [t.status for t in window.session.conversation.turns] == ["done", "done"]


@pytest.fixture(scope="module")
def untrained_model(tmp_path_factory) -> Path:
    """The demo architecture with random weights: it never writes an end token, so its answers run long."""
    folder = tmp_path_factory.mktemp("untrained") / "model"
    make_random_demo_model("--out", str(folder))
    return folder


def test_stop_cancels_a_long_answer_within_half_a_second(qtbot, make_window, sample_clip, untrained_model):
    settings = FAST.replace("model", source=str(untrained_model)).replace("generation", max_new_tokens=4000)
    window = make_window(real_engine, settings)
    tokens = []
    window.host.event.connect(lambda event: tokens.append(event) if isinstance(event, Token) else None)
    wait_ready(qtbot, window)
    open_and_wait(qtbot, window, sample_clip)
    window.chat.question_edit.setPlainText("Describe the clip in detail")
    window.chat.submit()
    qtbot.waitUntil(lambda: len(tokens) >= 3, timeout=LOAD_TIMEOUT_MS * 3)
    assert window.session.conversation.current is not None, "the answer ended before Stop could be tested"

    started = time.perf_counter()
    qtbot.mouseClick(window.chat.stop_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: window.session.conversation.current is None, timeout=3000)
    elapsed = time.perf_counter() - started

    assert elapsed < 0.5, f"Stop took {elapsed:.2f} s"
    turn = window.session.conversation.turns[-1]
    assert turn.status == "stopped" and turn.stats.cancelled and turn.stats.new_tokens < 4000


def test_corrupt_clip_keeps_the_conversation_and_the_next_clip_loads(qtbot, make_window, sample_clip, corrupt_clip):
    window = make_window(real_engine, FAST)
    wait_ready(qtbot, window)
    open_and_wait(qtbot, window, sample_clip)
    ask_and_wait(qtbot, window, "What moves?")

    drop_file(window.clip_section.strip, corrupt_clip)
    qtbot.waitUntil(lambda: window.banners.error_banner.isVisible(), timeout=LOAD_TIMEOUT_MS)
    assert "corrupt.mp4" in window.banners.error_banner.text()
    assert len(window.session.conversation.turns) == 1 and window.session.clip.path == str(sample_clip)
    ask_and_wait(qtbot, window, "Still there?")
    assert window.session.conversation.turns[-1].status == "done"

    other = sorted(sample_clip.parent.glob("*.mp4"))[-1]
    open_and_wait(qtbot, window, other)
    assert window.session.conversation.clip_name == other.name and not window.banners.error_banner.isVisible()


def test_an_svg_drawing_is_refused_in_the_window_with_the_clis_message(qtbot, make_window, sample_clip, tmp_path):
    drawing = tmp_path / "drawing.svg"
    drawing.write_text(SVG_DRAWING)
    window = make_window(real_engine, FAST)
    wait_ready(qtbot, window)
    open_and_wait(qtbot, window, sample_clip)

    drop_file(window.clip_section.strip, drawing)
    qtbot.waitUntil(lambda: window.banners.error_banner.isVisible(), timeout=LOAD_TIMEOUT_MS)
    with pytest.raises(UnreadableClipError) as refused:
        probe_clip(drawing)
    assert window.banners.error_banner.text() == f"Could not open drawing.svg: {refused.value}"
    assert window.session.clip.path == str(sample_clip)


def test_a_cut_short_clip_opens_with_a_notice_of_how_much_was_read(qtbot, make_window, tmp_path):
    _, cut = cut_short_mp4(tmp_path)
    window = make_window(real_engine, FAST)
    events = []
    window.host.event.connect(events.append)
    wait_ready(qtbot, window)

    open_and_wait(qtbot, window, cut)
    done = next(event for event in events if isinstance(event, EncodeDone))
    assert done.damage and done.damage.startswith("Only the first ")
    assert window.chat.cards()[-1].text() == done.damage


def run_app(
    tmp_path: Path, *args: str, settings: AppSettings | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -m app`` offscreen with a throw-away settings file and log folder."""
    settings_file = tmp_path / "framewise.ini"
    if settings is not None:
        SettingsStore(settings_file).save_settings(settings)
    return subprocess.run(
        [sys.executable, "-m", "framewise.app", "--settings-file", str(settings_file), *args],
        cwd=REPO_ROOT,
        env=dict(os.environ, QT_QPA_PLATFORM="offscreen", FRAMEWISE_LOG_DIR=str(tmp_path / "logs"), **(env or {})),
        capture_output=True,
        text=True,
        timeout=240,
    )


def test_python_dash_m_app_opens_the_window_and_loads_the_demo_model(tmp_path):
    """The README's run command: the window starts and the model loads (``--quit-after-load`` then exits)."""
    result = run_app(tmp_path, "--quit-after-load")
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split() == ["ready"]
    log = (tmp_path / "logs" / "framewise.log").read_text(encoding="utf-8")
    assert "engine ready" in log and "demo" in log


def test_smoke_run_reports_a_model_that_does_not_load(tmp_path):
    bad_model = AppSettings().replace("model", source=str(tmp_path / "no-model"))
    result = run_app(tmp_path, settings=bad_model, env={"FRAMEWISE_SMOKE": "1"})
    assert result.returncode == 1
    assert "ready" not in result.stdout
    assert "no-model" in result.stderr


def test_ctrl_c_in_the_terminal_closes_the_window_cleanly(tmp_path):
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", FRAMEWISE_LOG_DIR=str(tmp_path / "logs"))
    # The terminal's output goes to a file: a pipe nobody reads while waiting would fill and stall the app.
    terminal = tmp_path / "terminal.txt"
    with terminal.open("w") as output:
        process = subprocess.Popen(
            [sys.executable, "-m", "framewise.app", "--settings-file", str(tmp_path / "framewise.ini")],
            cwd=REPO_ROOT,
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
            text=True,
        )
    log_file = tmp_path / "logs" / "framewise.log"
    deadline = time.monotonic() + 120
    while "engine ready" not in (log_file.read_text() if log_file.exists() else ""):
        assert process.poll() is None, terminal.read_text()
        assert time.monotonic() < deadline, f"no 'engine ready' within 120 s:\n{terminal.read_text()[-3000:]}"
        time.sleep(0.2)
    process.send_signal(signal.SIGINT)
    process.wait(timeout=60)
    assert process.returncode == 0, terminal.read_text()


def test_new_sampling_settings_re_sample_the_open_clip(qtbot, make_window, sample_clip):
    window = make_window(real_engine, FAST)
    wait_ready(qtbot, window)
    open_and_wait(qtbot, window, sample_clip)
    ask_and_wait(qtbot, window, "What moves?")

    window.settings_flow.apply(FAST.replace("sampling", max_frames=6))
    qtbot.waitUntil(lambda: len(probes.item_texts(window.clip_section.strip)) == 6 and window.session.operation is None, timeout=LOAD_TIMEOUT_MS)
    assert window.session.clip.path == str(sample_clip) and len(window.session.clip.timestamps) == 6
    assert not window.session.conversation.turns, "the engine forgets the conversation when it re-samples; so does the window"
    ask_and_wait(qtbot, window, "What moves now?")
    assert window.session.conversation.turns[-1].status == "done"


def test_closing_the_window_mid_answer_stops_the_engine_thread(qtbot, make_window, sample_clip, untrained_model):
    window = make_window(real_engine, FAST.replace("model", source=str(untrained_model)).replace("generation", max_new_tokens=4000))
    tokens = []
    window.host.event.connect(lambda event: tokens.append(event) if isinstance(event, Token) else None)
    wait_ready(qtbot, window)
    open_and_wait(qtbot, window, sample_clip)
    window.chat.question_edit.setPlainText("Tell me everything")
    window.chat.submit()
    qtbot.waitUntil(lambda: len(tokens) >= 2, timeout=LOAD_TIMEOUT_MS * 3)

    started = time.perf_counter()
    window.close()
    assert window.host.thread.isFinished()
    assert time.perf_counter() - started < 2.0
