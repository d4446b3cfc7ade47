"""A real vLLM (CPU) server serving the bundled demo model on 127.0.0.1, for the ``vllm`` tests.

The server's venv is made by ``scripts/vllm_server/setup_venv.sh`` (``.vllm-venv`` in the
repository, or ``FRAMEWISE_VLLM_VENV``); without it these tests are skipped, saying so. One
server is started for the tests of this folder (a package, so that it stops when they end, not
at the end of the whole run).
"""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path
from typing import Iterator

import pytest

from framewise.core.resources import asset_path
from tests.conftest import REPO_ROOT

SERVE = REPO_ROOT / "scripts" / "vllm_server" / "serve.sh"
START_TIMEOUT_S = 900  # 51-121 s measured on a loaded 2-core machine; CI may be slower


def server_venv() -> Path:
    return Path(os.environ.get("FRAMEWISE_VLLM_VENV", REPO_ROOT / ".vllm-venv"))


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def complete_venv() -> Path:
    """The server venv, or a skip saying how to make it."""
    venv = server_venv()
    if not (venv / ".framewise-vllm-stamp").exists():  # written once the venv is complete and checked
        pytest.skip(f"no complete vLLM server venv at {venv}; make it with `make vllm-venv`")
    return venv


@pytest.fixture(scope="session")
def server_python() -> list[str]:
    """The command that runs the server venv's Python with the torchvision shim on its path."""
    venv = complete_venv()
    return ["env", f"PYTHONPATH={REPO_ROOT / 'scripts' / 'vllm_server' / 'pyshim'}", str(venv / "bin" / "python")]


@pytest.fixture(scope="package")
def vllm_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The base URL of a running vLLM server whose model ``demo`` is the bundled demo model."""
    venv = complete_venv()
    port = free_port()
    run_dir = tmp_path_factory.mktemp("vllm-run")
    environment = {**os.environ, "VENV": str(venv), "RUN": str(run_dir), "HEALTH_TIMEOUT_S": str(START_TIMEOUT_S)}
    environment.pop("VLLM_API_KEY", None)
    started = subprocess.run(
        ["bash", str(SERVE), str(asset_path("demo_model")), str(port)],
        env=environment, capture_output=True, text=True, timeout=START_TIMEOUT_S + 60,
    )
    try:
        assert started.returncode == 0, f"the vLLM server did not start:\n{started.stdout}\n{started.stderr}"
        print(started.stdout.strip())
        yield f"http://127.0.0.1:{port}"
    finally:
        subprocess.run(["bash", str(SERVE), "--stop", str(port)], env=environment, capture_output=True, timeout=120)
