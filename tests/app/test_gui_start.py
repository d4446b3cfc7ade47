"""``framewise-studio`` on a machine with no display: a message that says how to run it, not Qt's abort."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from framewise.app.gui import display_problem
from tests.conftest import REPO_ROOT


@pytest.mark.parametrize(
    ("environ", "platform", "blocked"),
    [
        ({}, "linux", True),
        ({"QT_QPA_PLATFORM": "xcb"}, "linux", True),
        ({"DISPLAY": ":0"}, "linux", False),
        ({"WAYLAND_DISPLAY": "wayland-0"}, "linux", False),
        ({"QT_QPA_PLATFORM": "offscreen"}, "linux", False),
        ({}, "darwin", False),
    ],
)
def test_a_missing_display_is_recognised_only_where_qt_needs_one(environ: dict, platform: str, blocked: bool) -> None:
    assert (display_problem(environ, platform) is not None) is blocked


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the display check is for Linux's X11 and Wayland")
def test_the_window_without_a_display_says_how_to_run_offscreen(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM")}
    env.update(FRAMEWISE_LOG_DIR=str(tmp_path / "log"), HOME=str(tmp_path))
    result = subprocess.run(
        [sys.executable, "-m", "framewise.app", "--settings-file", str(tmp_path / "settings.ini")],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 2
    assert "there is no display" in result.stderr and "QT_QPA_PLATFORM=offscreen" in result.stderr
    assert "xcb" not in result.stderr and "Traceback" not in result.stderr
