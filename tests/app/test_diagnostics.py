"""app.diagnostics: the versions shown in Help ▸ About."""

from __future__ import annotations

import platform
import re
import sys

import av
import cv2
import pytest
import torch
import transformers
from PySide6 import QtCore

from framewise.app.diagnostics import VERSION_KEYS, collect_versions, format_versions
from framewise import __version__


def test_every_key_is_present_in_order_with_a_value() -> None:
    versions = collect_versions()
    assert tuple(versions) == VERSION_KEYS
    assert all(isinstance(value, str) and value.strip() for value in versions.values())


def test_versions_are_those_of_the_running_libraries() -> None:
    versions = collect_versions()
    assert versions["Framewise"] == __version__
    assert versions["Python"] == platform.python_version()
    assert versions["torch"] == torch.__version__
    assert versions["transformers"] == transformers.__version__
    assert versions["Qt"] == QtCore.qVersion()
    assert re.fullmatch(r"\d+\.\d+\.\d+", versions["Qt"])
    assert versions["PyAV"] == av.__version__
    assert versions["OpenCV"] == cv2.__version__
    assert versions["CUDA"] == (torch.version.cuda or "none")


def test_gpu_names_every_device_or_says_none() -> None:
    gpu = collect_versions()["GPU"]
    if torch.cuda.is_available():
        assert gpu.count(",") == torch.cuda.device_count() - 1
        assert torch.cuda.get_device_name(0) in gpu
    else:
        assert gpu == "none"


def test_format_versions_gives_one_line_per_key() -> None:
    text = format_versions({"Framewise": "0.1.0", "GPU": "none"})
    assert text == "Framewise: 0.1.0\nGPU: none"


def test_a_missing_library_reads_not_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "av", None)  # makes `import av` raise ImportError
    assert collect_versions()["PyAV"] == "not installed"
