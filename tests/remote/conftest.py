"""A real vLLM (CPU) server serving the bundled demo model on 127.0.0.1, for the ``vllm`` tests.

The server's venv is made by ``scripts/vllm_server/setup_venv.sh`` (``.vllm-venv`` in the
repository, or ``FRAMEWISE_VLLM_VENV``); without it these tests are skipped, saying so. One
server is started for the tests of this folder (a package, so that it stops when they end, not
at the end of the whole run); a test that restarts a server starts one of its own.
"""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path
from typing import Iterator, NamedTuple, Sequence

import pytest

from framewise.core.resources import asset_path
from tests.conftest import REPO_ROOT

SERVE = REPO_ROOT / "scripts" / "vllm_server" / "serve.sh"
START_TIMEOUT_S = 900  # 51-121 s measured on a loaded 2-core machine; CI may be slower
# The demo model is served under a name of its own, not "demo": its answers must keep their label
# (read from the folder the server loaded) whatever the name.
SERVED_NAME = "shapes"


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


class RunningServer(NamedTuple):
    """A vLLM server started by ``serve.sh``: its base URL and process id (the leader of its process group)."""

    url: str
    pid: int


def start_server(
    run_dir: Path, port: int, served_name: str, model: Path | None = None, flags: Sequence[str] = ()
) -> RunningServer:
    """Start ``serve.sh`` serving ``model`` (default: the demo model) as ``served_name`` on ``port``,
    with more vLLM ``flags``; wait until it is healthy."""
    venv = complete_venv()
    started = subprocess.run(
        ["bash", str(SERVE), str(model or asset_path("demo_model")), str(port), *flags],
        env=_serve_environment(venv, run_dir, served_name), capture_output=True, text=True,
        timeout=START_TIMEOUT_S + 60,
    )
    assert started.returncode == 0, f"the vLLM server did not start:\n{started.stdout}\n{started.stderr}"
    print(started.stdout.strip())
    return RunningServer(f"http://127.0.0.1:{port}", int((run_dir / f"server-{port}.pid").read_text()))


def stop_server(run_dir: Path, port: int) -> None:
    environment = _serve_environment(server_venv(), run_dir, SERVED_NAME)
    subprocess.run(["bash", str(SERVE), "--stop", str(port)], env=environment, capture_output=True, timeout=120)


def _serve_environment(venv: Path, run_dir: Path, served_name: str) -> dict[str, str]:
    environment = {
        **os.environ, "VENV": str(venv), "RUN": str(run_dir), "HEALTH_TIMEOUT_S": str(START_TIMEOUT_S),
        "SERVED_NAME": served_name,
    }
    environment.pop("VLLM_API_KEY", None)
    return environment


@pytest.fixture(scope="package")
def vllm_server_process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """A running vLLM server whose model ``SERVED_NAME`` is the bundled demo model."""
    run_dir = tmp_path_factory.mktemp("vllm-run")
    port = free_port()
    try:
        yield start_server(run_dir, port, SERVED_NAME)
    finally:
        stop_server(run_dir, port)


@pytest.fixture(scope="package")
def vllm_server(vllm_server_process: RunningServer) -> str:
    """The base URL of the running vLLM server."""
    return vllm_server_process.url
