"""What importing the framewise package does to the process: the CUDA allocator's setting, and
nothing where a person set the allocator up themselves."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import framewise

PROBE = "import os, framewise; print(os.environ.get('PYTORCH_ALLOC_CONF'))"


def allocator_after_import(**allocator: str) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF")}
    done = subprocess.run([sys.executable, "-c", PROBE], env={**env, **allocator}, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_importing_framewise_lets_cuda_segments_grow_in_place() -> None:
    assert allocator_after_import() == framewise.ALLOCATOR_SETTING == "expandable_segments:True"


@pytest.mark.parametrize("variable", ["PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF"])
def test_a_persons_own_allocator_setting_is_left_alone(variable: str) -> None:
    expected = "max_split_size_mb:64" if variable == "PYTORCH_ALLOC_CONF" else "None"
    assert allocator_after_import(**{variable: "max_split_size_mb:64"}) == expected
