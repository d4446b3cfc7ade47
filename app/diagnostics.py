"""Versions of Framewise and what it runs on, for Help ▸ About and bug reports."""

from __future__ import annotations

import importlib
import platform
from collections.abc import Mapping

NOT_INSTALLED = "not installed"

VERSION_KEYS = (
    "Framewise",
    "Python",
    "torch",
    "CUDA",
    "transformers",
    "Qt",
    "PySide6",
    "PyAV",
    "OpenCV",
    "GPU",
    "Platform",
)


def _module_version(module_name: str) -> str:
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        return NOT_INSTALLED
    return str(getattr(module, "__version__", "unknown"))


def _qt_version() -> str:
    try:
        from PySide6 import QtCore
    except ImportError:
        return NOT_INSTALLED
    return QtCore.qVersion()


def _torch_details() -> tuple[str, str, str]:
    """(torch version, CUDA version it was built with or "none", GPU names or "none")."""
    try:
        import torch
    except ImportError:
        return NOT_INSTALLED, "none", "none"
    cuda = torch.version.cuda or "none"
    if not torch.cuda.is_available():
        return torch.__version__, cuda, "none"
    names = [torch.cuda.get_device_name(index) for index in range(torch.cuda.device_count())]
    return torch.__version__, cuda, ", ".join(names) or "none"


def collect_versions() -> dict[str, str]:
    """One string per key of VERSION_KEYS, in that order. Never raises for a missing library."""
    from framewise import __version__ as framewise_version

    torch_version, cuda_version, gpus = _torch_details()
    return {
        "Framewise": framewise_version,
        "Python": platform.python_version(),
        "torch": torch_version,
        "CUDA": cuda_version,
        "transformers": _module_version("transformers"),
        "Qt": _qt_version(),
        "PySide6": _module_version("PySide6"),
        "PyAV": _module_version("av"),
        "OpenCV": _module_version("cv2"),
        "GPU": gpus,
        "Platform": platform.platform(),
    }


def format_versions(versions: Mapping[str, str]) -> str:
    """Plain text, one "key: value" line each, for copying into a bug report."""
    return "\n".join(f"{key}: {value}" for key, value in versions.items())
