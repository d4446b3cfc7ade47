"""The dependency rule: ``core`` never imports Qt; ``ui`` never imports torch or transformers."""

from __future__ import annotations

import subprocess
import sys
from tests.conftest import REPO_ROOT


def modules_of(package: str) -> list[str]:
    modules = sorted(f"{package}.{path.stem}" for path in (REPO_ROOT / package).glob("*.py") if path.stem != "__main__")
    assert len(modules) > 3, f"found no modules in {package}/"
    return modules


def imported_after(modules: list[str]) -> set[str]:
    """Top-level packages in ``sys.modules`` of a fresh interpreter after importing ``modules``."""
    code = "import sys\n" + "".join(f"import {name}\n" for name in modules) + "print(' '.join(sys.modules))"
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=180,
        env={"QT_QPA_PLATFORM": "offscreen", "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 0, result.stderr
    return {name.split(".")[0] for name in result.stdout.split()}


def test_ui_does_not_import_torch_or_transformers() -> None:
    loaded = imported_after(modules_of("ui"))
    assert "PySide6" in loaded  # the check itself works
    assert not loaded & {"torch", "transformers"}


def test_core_does_not_import_qt_or_the_other_layers() -> None:
    loaded = imported_after(modules_of("core"))
    assert "torch" in loaded
    assert not loaded & {"PySide6", "shiboken6", "ui", "app"}
