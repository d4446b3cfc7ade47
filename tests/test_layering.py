"""The dependency rule: ``core`` never imports Qt; ``ui`` never imports torch or transformers."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from tests.conftest import REPO_ROOT


# Modules that need an optional package, which the application imports only where it is installed.
OPTIONAL = {
    "framewise.core.kernels.decode_step": "triton",
    "framewise.core.kernels.add_layer_norm": "triton",
    "framewise.core.kernels.vision_attention": "triton",
    "framewise.core.kernels.fp8_gemv": "triton",
    "framewise.core.kernels.fp8_row_quant": "triton",
    "framewise.core.kernels.gemv_loads": "triton",
    "framewise.core.kernels.dependent_launch": "triton",
}


def modules_of(package: str) -> list[str]:
    modules = sorted(
        f"framewise.{package}.{path.relative_to(REPO_ROOT / package).with_suffix('').as_posix().replace('/', '.')}"
        for path in (REPO_ROOT / package).rglob("*.py")
        if path.stem not in ("__main__", "__init__")
    )
    modules = [name for name in modules if name not in OPTIONAL or importlib.util.find_spec(OPTIONAL[name])]
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
    return {_layer(name) for name in result.stdout.split()}


def _layer(module: str) -> str:
    """``framewise.core.backends.local.engine`` -> ``framewise.core``; ``torch.nn`` -> ``torch``."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "framewise" and len(parts) > 1 else parts[0]


def test_ui_does_not_import_torch_or_transformers() -> None:
    loaded = imported_after(modules_of("ui"))
    assert "PySide6" in loaded  # the check itself works
    assert not loaded & {"torch", "transformers"}
    assert not loaded & {"core", "ui", "app"}, "import the layers as framewise.core / framewise.ui / framewise.app"


def test_core_does_not_import_qt_or_the_other_layers() -> None:
    loaded = imported_after(modules_of("core"))
    assert "torch" in loaded
    assert not loaded & {"PySide6", "shiboken6", "framewise.ui", "framewise.app"}
    assert not loaded & {"core", "ui", "app"}, "import the layers as framewise.core / framewise.ui / framewise.app"
