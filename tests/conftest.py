"""Shared test setup: headless Qt, and the repository root on the import path."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# The CLI and the window write their log here during tests, not into the user's log folder.
os.environ.setdefault("FRAMEWISE_LOG_DIR", tempfile.mkdtemp(prefix="framewise-test-log-"))

REPO_ROOT = Path(__file__).resolve().parents[1]
SAMPLE_CLIPS = REPO_ROOT / "assets" / "clips"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip GPU tests, saying why, on machines without CUDA."""
    try:
        import torch

        has_cuda = torch.cuda.is_available()
    except ImportError:
        has_cuda = False
    if has_cuda:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU; run `make gpu-test` on a machine with one")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
