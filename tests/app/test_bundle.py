"""The one-folder bundle starts the window and loads the demo model without any Python set up.

Build it first with packaging/build_bundle.sh (several minutes); these tests look for it in
$FRAMEWISE_BUNDLE_DIR, else dist/framewise, and are skipped when neither holds it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.bundle

BUNDLE_DIR = Path(os.environ.get("FRAMEWISE_BUNDLE_DIR") or REPO_ROOT / "dist" / "framewise")
PROGRAM = BUNDLE_DIR / ("framewise-studio.exe" if sys.platform == "win32" else "framewise-studio")
STARTUP_LIMIT_S = 240  # under pytest-timeout's 300 s


@pytest.fixture(scope="module")
def program() -> Path:
    if not PROGRAM.is_file():
        pytest.skip(f"no bundle at {BUNDLE_DIR}: build it with packaging/build_bundle.sh or set FRAMEWISE_BUNDLE_DIR")
    return PROGRAM


def run_bundle(program: Path, home: Path, extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run the bundle as a fresh login would: no PATH, PYTHONPATH or virtual environment, no display."""
    env = {"HOME": str(home), "LANG": "C.UTF-8", "QT_QPA_PLATFORM": "offscreen", **(extra_env or {})}
    return subprocess.run(
        [str(program), "--quit-after-load"],
        cwd=home,
        env=env,
        capture_output=True,
        text=True,
        timeout=STARTUP_LIMIT_S,
    )


def test_bundle_loads_the_demo_model_and_prints_ready(program: Path, tmp_path: Path) -> None:
    started = time.monotonic()
    result = run_bundle(program, tmp_path)
    elapsed = time.monotonic() - started
    assert result.returncode == 0, f"exit {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr[-4000:]}"
    assert "ready" in result.stdout.split(), result.stdout
    print(f"bundle ready after {elapsed:.1f} s")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses the Linux dynamic loader's LD_DEBUG")
def test_bundle_loads_no_library_from_the_development_python(program: Path, tmp_path: Path) -> None:
    """Every shared library the bundle initialises comes from the bundle or the system, none from this Python."""
    result = run_bundle(program, tmp_path, {"LD_DEBUG": "files", "LD_DEBUG_OUTPUT": str(tmp_path / "ld")})
    assert result.returncode == 0, result.stderr[-4000:]
    trace = "".join(path.read_text(errors="replace") for path in tmp_path.glob("ld.*"))
    initialised = set(re.findall(r"calling init: (\S+)", trace))
    assert any(str(BUNDLE_DIR.resolve()) in path for path in initialised), "the trace names no bundled library"
    development = {str(Path(prefix).resolve()) for prefix in (sys.prefix, sys.base_prefix)}
    leaked = sorted(path for path in initialised if any(path.startswith(prefix + os.sep) for prefix in development))
    assert not leaked, f"the bundle loaded libraries of the development Python: {leaked[:10]}"
