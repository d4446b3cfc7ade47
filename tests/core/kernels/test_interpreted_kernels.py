"""The tests that run Triton kernels through Triton's interpreter on the CPU, each module in a pytest
subprocess with ``TRITON_INTERPRET=1`` (why: :mod:`tests.core.kernels.interpreted`). Skipped where
Triton is not installed (CI)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT
from tests.core.kernels.interpreted import INTERPRETED

MODULES = (
    "tests/core/kernels/test_attend_cached_interpreted.py",
    "tests/core/families/qwen3_5/test_qwen3_5_kernel_attention.py",
)


@pytest.mark.timeout(600)
@pytest.mark.skipif(INTERPRETED, reason="the subprocess itself")
@pytest.mark.parametrize("module", MODULES)
def test_through_the_interpreter(module: str) -> None:
    pytest.importorskip("triton", reason="the kernels need Triton, which interprets them on the CPU")
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", module],
        cwd=REPO_ROOT, env={**os.environ, "TRITON_INTERPRET": "1"}, capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stdout[-8000:] + result.stderr[-2000:]
    assert " passed" in result.stdout and "skipped" not in result.stdout, result.stdout[-2000:]
