"""Per-user folders: platformdirs' folder of each platform, an environment override, and none touched by tests."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import platformdirs.windows
import pytest

from framewise.core.user_folders import user_folder

OVERRIDES = {"data": "FRAMEWISE_DATA_DIR", "cache": "FRAMEWISE_CACHE_DIR", "log": "FRAMEWISE_LOG_DIR"}


@pytest.fixture
def home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A home folder of the test's own, with no override or XDG variable set."""
    for variable in [*OVERRIDES.values(), "XDG_DATA_HOME", "XDG_CACHE_HOME", "XDG_STATE_HOME"]:
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    return tmp_path


def read_windows_folders_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """On this machine, have platformdirs find Windows' known folders in %APPDATA% and %LOCALAPPDATA%
    (on Windows it asks the system through ctypes, which has no such call elsewhere)."""
    monkeypatch.setattr(platformdirs.windows, "get_win_folder", platformdirs.windows.get_win_folder_from_env_vars)


@pytest.mark.parametrize(
    ("platform", "kind", "below_home"),
    [
        ("linux", "data", ".local/share/framewise"),
        ("linux", "cache", ".cache/framewise"),
        ("linux", "log", ".local/state/framewise/log"),
        ("darwin", "data", "Library/Application Support/Framewise"),
        ("darwin", "cache", "Library/Caches/Framewise"),
        ("darwin", "log", "Library/Logs/Framewise"),
    ],
)
def test_each_platform_has_its_own_folders(
    monkeypatch: pytest.MonkeyPatch, home: Path, platform: str, kind: str, below_home: str
) -> None:
    monkeypatch.setattr(sys, "platform", platform)
    assert user_folder(OVERRIDES[kind], kind) == home / below_home


@pytest.mark.parametrize(
    ("kind", "expected"), [("data", "Roaming/Framewise"), ("cache", "Local/Framewise/Cache"), ("log", "Local/Framewise/Logs")]
)
def test_windows_keeps_conversations_roaming_and_the_rest_local(
    monkeypatch: pytest.MonkeyPatch, home: Path, kind: str, expected: str
) -> None:
    monkeypatch.setattr(sys, "platform", "win32")
    read_windows_folders_from_the_environment(monkeypatch)
    monkeypatch.setenv("APPDATA", str(home / "Roaming"))
    monkeypatch.setenv("LOCALAPPDATA", str(home / "Local"))
    assert user_folder(OVERRIDES[kind], kind) == home / expected


def test_xdg_variables_and_the_override_win_in_that_order(monkeypatch: pytest.MonkeyPatch, home: Path) -> None:
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / "xdg-cache"))
    assert user_folder("FRAMEWISE_CACHE_DIR", "cache") == home / "xdg-cache" / "framewise"
    monkeypatch.setenv("FRAMEWISE_CACHE_DIR", "~/kernels")
    assert user_folder("FRAMEWISE_CACHE_DIR", "cache") == home / "kernels"


@pytest.mark.parametrize("kind", sorted(OVERRIDES))
def test_the_test_session_points_every_user_folder_at_a_temporary_one(kind: str) -> None:
    """tests/conftest.py's overrides: `make test` leaves the user's log, conversations and kernel cache alone."""
    folder = user_folder(OVERRIDES[kind], kind)
    assert folder.is_relative_to(tempfile.gettempdir()), folder
    assert not folder.is_relative_to(Path.home()), folder
