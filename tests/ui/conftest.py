"""Fixtures for the window's tests: windows on a fake or the real engine, clips, a settings store."""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Callable, Iterator

import cv2
import numpy as np
import pytest

from framewise.core.settings import AppSettings
from tests.ui.fake_engine import FakeEngine
from framewise.ui.main_window import MainWindow
from framewise.ui.services import AppServices
from framewise.ui.settings_store import SettingsStore
from framewise.ui.worker import EngineFactory, EngineHost

REPO_ROOT = Path(__file__).resolve().parents[2]
SAMPLE_CLIP = REPO_ROOT / "assets" / "clips" / "red_square_moves_right.mp4"


@pytest.fixture(autouse=True)
def _reset_fake_engine() -> Iterator[None]:
    yield
    FakeEngine.token_delay_s = 0.005
    FakeEngine.endless = False
    FakeEngine.load_gate = None
    FakeEngine.read_gate = None
    FakeEngine.fail_ask_with = None
    FakeEngine.fail_load_for_source = None


@pytest.fixture
def store(tmp_path: Path) -> SettingsStore:
    return SettingsStore(tmp_path / "framewise.ini")


@pytest.fixture
def log_file(tmp_path: Path) -> Path:
    path = tmp_path / "logs" / "framewise.log"
    path.parent.mkdir()
    path.write_text("2026-01-01 12:00:00 INFO framewise started\n", encoding="utf-8")
    return path


@pytest.fixture
def services(log_file: Path) -> AppServices:
    versions = {"Framewise": "0.1.0", "torch": "2.13.0 (CPU)", "CUDA": "none", "transformers": "5.17.0", "Qt": "6.12.0", "GPU": "none"}
    return AppServices(collect_versions=lambda: versions, log_file_path=lambda: log_file)


@pytest.fixture
def make_window(qtbot, store: SettingsStore, services: AppServices) -> Iterator[Callable[..., MainWindow]]:
    """Build (and afterwards shut down) windows on ``factory``; each starts loading at once."""
    windows: list[MainWindow] = []

    def make(
        factory: EngineFactory = FakeEngine, settings: AppSettings | None = None, window_store: SettingsStore | None = None
    ) -> MainWindow:
        chosen_store = window_store or store
        chosen = settings or chosen_store.load_settings()
        window = MainWindow(EngineHost(factory, chosen), chosen_store, services, chosen)
        qtbot.addWidget(window)
        windows.append(window)
        window.show()
        window.start()
        return window

    yield make
    for window in windows:
        window.shutdown()
    windows.clear()
    # The test's windows, dialogs and their signal closures are garbage now: collect them here, on
    # the GUI thread. Left to a later test, Python may collect them on that test's engine thread,
    # where PySide6 6.12.0 disconnects a freed QObject holding Qt's connection lock while it waits
    # for the GIL, and the GUI thread, holding the GIL, waits for that lock: a hang (seen once).
    gc.collect()


@pytest.fixture
def sample_clip(tmp_path: Path) -> Path:
    """A sample clip: the committed one, or a small one written here when it is missing."""
    if SAMPLE_CLIP.exists():
        return SAMPLE_CLIP
    path = tmp_path / "square.mp4"
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), 12.0, (320, 240))
    for index in range(48):
        frame = np.full((240, 320, 3), 230, np.uint8)
        x = 10 + index * 5
        frame[100:140, x : x + 40] = (0, 0, 220)
        writer.write(frame)
    writer.release()
    return path


@pytest.fixture
def corrupt_clip(tmp_path: Path) -> Path:
    path = tmp_path / "corrupt.mp4"
    path.write_bytes(b"\x00\x00\x00\x18ftypmp42" + np.random.default_rng(0).bytes(4096))
    return path


@pytest.fixture(autouse=True)
def _conversations_in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Kept conversations go to a folder of the test's own, never the user's data folder."""
    folder = tmp_path / "data"
    monkeypatch.setenv("FRAMEWISE_DATA_DIR", str(folder))
    return folder
