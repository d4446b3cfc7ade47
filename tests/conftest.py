"""Shared test setup: headless Qt, and the repository root on the import path."""

from __future__ import annotations

import contextlib
import gc
import io
import os
import runpy
import tempfile
from pathlib import Path

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
# One intra-op thread for torch, here and in the tests' subprocesses (set before torch is imported).
# The tests' models are tiny, and on a machine whose cores are busy torch's OpenMP workers spin-wait
# for one another: with two threads on a shared 2-core machine a test took several times as long and
# burnt several times the CPU. A person who wants more threads sets OMP_NUM_THREADS themselves.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# Tests never write into the user's own folders: the log, the kept conversations and the compiled
# kernels go to one temporary folder per session (subprocesses inherit these variables). The native
# QSettings store follows XDG_CONFIG_HOME; the Hugging Face cache (XDG_CACHE_HOME) stays the user's,
# read only, so that tests on a GPU machine find its downloaded models.
USER_FOLDERS_FOR_TESTS = Path(tempfile.mkdtemp(prefix="framewise-test-home-"))
for variable, folder in [
    ("FRAMEWISE_LOG_DIR", "log"),
    ("FRAMEWISE_DATA_DIR", "data"),
    ("FRAMEWISE_CACHE_DIR", "cache"),
    ("XDG_CONFIG_HOME", "config"),
]:
    os.environ[variable] = str(USER_FOLDERS_FOR_TESTS / folder)  # set, not defaulted: the person's own values name their folders

REPO_ROOT = Path(__file__).resolve().parents[1]
SAMPLE_CLIPS = REPO_ROOT / "assets" / "clips"


def make_random_demo_model(*args: str) -> None:
    """Run ``scripts/make_demo_model.py`` with ``args`` in this process (torch is loaded already)."""
    script = runpy.run_path(str(REPO_ROOT / "scripts" / "make_demo_model.py"), run_name="make_demo_model")
    with contextlib.redirect_stdout(io.StringIO()):
        script["main"](list(args))


def pytest_collection_finish(session: pytest.Session) -> None:
    """Freeze the objects that exist once every test module is imported (torch, transformers, Qt:
    about half a million): Python's garbage collector then never walks them again, so that a full
    collection, such as the window tests' after each test, scans only what the tests made."""
    gc.collect()
    gc.freeze()


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
