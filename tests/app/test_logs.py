"""app.logs: where the log file lives, that it rotates, and that setup can be repeated."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest

from framewise.app import logs
from tests.conftest import REPO_ROOT
from tests.core.test_user_folders import read_windows_folders_from_the_environment


@pytest.fixture
def log_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A private log folder; the root logger's handlers and level are restored afterwards."""
    folder = tmp_path / "logs"
    monkeypatch.setenv("FRAMEWISE_LOG_DIR", str(folder))
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield folder
    for handler in root.handlers:
        if handler not in handlers:
            root.removeHandler(handler)
            handler.close()
    root.setLevel(level)


def test_override_folder_is_used_and_created(log_dir: Path) -> None:
    path = logs.setup_logging()
    assert path == logs.log_file_path() == log_dir / "framewise.log"
    logging.getLogger("framewise.core.backends.local.engine").info("hello from the engine")
    assert "hello from the engine" in path.read_text(encoding="utf-8")


def test_linux_folder_follows_xdg_state_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("FRAMEWISE_LOG_DIR", raising=False)
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    assert logs.log_dir() == tmp_path / "state" / "framewise" / "log"
    monkeypatch.delenv("XDG_STATE_HOME")
    assert logs.log_dir() == tmp_path / ".local" / "state" / "framewise" / "log"


def test_macos_and_windows_folders(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("FRAMEWISE_LOG_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setattr(sys, "platform", "darwin")
    assert logs.log_dir() == tmp_path / "Library" / "Logs" / "Framewise"
    monkeypatch.setattr(sys, "platform", "win32")
    read_windows_folders_from_the_environment(monkeypatch)
    monkeypatch.setenv("LOCALAPPDATA", str(tmp_path / "Local"))
    assert logs.log_dir() == tmp_path / "Local" / "Framewise" / "Logs"


def test_file_rotates_and_keeps_the_configured_backups(log_dir: Path) -> None:
    path = logs.setup_logging(max_bytes=2_000, backup_count=2)
    line = "x" * 200
    for index in range(60):  # ~12 kB through a 2 kB file: several rotations
        logging.getLogger("test").warning("%03d %s", index, line)
    backups = sorted(p.name for p in log_dir.iterdir())
    assert backups == ["framewise.log", "framewise.log.1", "framewise.log.2"]
    for file in log_dir.iterdir():
        assert file.stat().st_size <= 2_000
    assert "059" in path.read_text(encoding="utf-8")  # the newest record is in the current file


def test_calling_setup_twice_keeps_one_handler(log_dir: Path) -> None:
    logs.setup_logging()
    logs.setup_logging(level=logging.DEBUG)
    logging.getLogger("test").debug("once")
    assert logs.log_file_path().read_text(encoding="utf-8").count("once") == 1
    assert logging.getLogger().level == logging.DEBUG


def test_uncaught_exception_is_written_to_the_log(tmp_path: Path) -> None:
    code = "from app.logs import setup_logging; setup_logging(); raise RuntimeError('boom at start')"
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO_ROOT,
        env={"FRAMEWISE_LOG_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert "boom at start" in result.stderr  # the default handling still runs
    text = (tmp_path / "framewise.log").read_text(encoding="utf-8")
    assert "uncaught exception" in text and "RuntimeError: boom at start" in text
