"""The norm kernels' arithmetic on the CPU: ``norm_kernel_cases.py`` run through Triton's
interpreter in a process of its own (``TRITON_INTERPRET=1`` must be set before Triton is imported,
and must not reach the other tests' kernels; ``FRAMEWISE_PDL=0``: no dependent launches to ask a
CUDA device about). Their GPU tests are in tests/gpu/test_norm_kernel.py."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT

pytest.importorskip("triton", reason="the interpreter is Triton's")


def test_the_kernels_through_the_interpreter_are_torchs_norms() -> None:
    cases = REPO_ROOT / "tests" / "core" / "kernels" / "norm_kernel_cases.py"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(cases)],
        cwd=REPO_ROOT, env={**os.environ, "TRITON_INTERPRET": "1", "FRAMEWISE_PDL": "0"},
        capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
