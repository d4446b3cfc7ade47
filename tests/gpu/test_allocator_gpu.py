"""The CUDA allocator grows its segments in place in a process that imports framewise
(framewise/__init__.py), even where torch was imported first, unless a person set it up themselves."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.gpu

# torch first, as a script or a test module that imports torch before framewise would.
PROBE = (
    "import torch, framewise; torch.empty(1 << 20, device='cuda'); "
    "print(all(segment['is_expandable'] for segment in torch.cuda.memory_snapshot()))"
)


def segments_expandable(**allocator: str) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF")}
    done = subprocess.run([sys.executable, "-c", PROBE], env={**env, **allocator}, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip()


def test_importing_framewise_lets_segments_grow_in_place() -> None:
    assert segments_expandable() == "True"


def test_a_persons_own_allocator_setting_is_kept() -> None:
    assert segments_expandable(PYTORCH_ALLOC_CONF="expandable_segments:False") == "False"
