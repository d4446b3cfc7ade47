"""The wheel as a user gets it: one import package, the assets inside, and `framewise ask` working
from a plain (non-editable) install in a fresh virtual environment.

The wheel is built from a copy of the files git knows (tracked, or untracked and not ignored), so
nothing left over in a local ``build/`` folder can reach it. The fresh venv gets the wheel alone
(``--no-deps``); its dependencies (torch, transformers, ...) come from this interpreter's
site-packages through a ``.pth`` file, which Python reads as a plain path and so does not pick up
this checkout's editable install.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path, PurePosixPath

import pytest

from tests.conftest import REPO_ROOT

# Repository folder -> where it lands inside the wheel.
INSTALLED_FOLDERS = {
    "framewise": "framewise",
    "app": "framewise/app", "core": "framewise/core", "ui": "framewise/ui", "assets": "framewise/assets",
}
REPOSITORY_ONLY = ("training", "benchmarks", "scripts", "tests")
CLIP = "clips/red_square_moves_right.mp4"


def source_files() -> list[str]:
    """Paths (relative to the repository) of the files git knows: tracked, or new and not ignored."""
    if shutil.which("git") is None or not (REPO_ROOT / ".git").exists():
        pytest.fail("the wheel test builds from the files git knows; run it in a git checkout with git installed")
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=REPO_ROOT, capture_output=True, text=True, check=True,
    ).stdout
    return [path for path in listed.split("\0") if path and (REPO_ROOT / path).is_file()]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel built (``pip wheel --no-deps --no-build-isolation``) from a clean copy of the source."""
    source = tmp_path_factory.mktemp("source")
    for relative in source_files():
        target = source / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO_ROOT / relative, target)
    out = tmp_path_factory.mktemp("wheelhouse")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "-w", str(out), str(source)],
        check=True, timeout=180,
    )
    (built,) = out.glob("framewise-*.whl")
    return built


@pytest.fixture(scope="module")
def wheel_names(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as archive:
        return archive.namelist()


@pytest.fixture(scope="module")
def installed_venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with the wheel installed non-editable; dependencies reused from this interpreter."""
    root = tmp_path_factory.mktemp("venv")
    venv.create(root, with_pip=False, symlinks=True)
    python = root / "bin" / "python"
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-deps", "--no-index", str(wheel)],
        check=True, timeout=180,
    )
    site_packages = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
            capture_output=True, text=True, check=True,
        ).stdout.strip()
    )
    (site_packages / "framewise_test_dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    return root


def clean_env(home: Path) -> dict[str, str]:
    """An environment that points nowhere near the repository."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env.update(HOME=str(home), FRAMEWISE_LOG_DIR=str(home / "log"), HF_HUB_OFFLINE="1", QT_QPA_PLATFORM="offscreen")
    return env


def test_framewise_is_the_wheels_only_top_level_name(wheel: Path, wheel_names: list[str]) -> None:
    top_level = {PurePosixPath(name).parts[0] for name in wheel_names}
    (dist_info,) = {name for name in top_level if name.endswith(".dist-info")}
    assert top_level - {dist_info} == {"framewise"}
    with zipfile.ZipFile(wheel) as archive:
        assert archive.read(f"{dist_info}/top_level.txt").decode().split() == ["framewise"]
        entry_points = archive.read(f"{dist_info}/entry_points.txt").decode()
    assert "framewise = framewise.app.cli:main" in entry_points
    assert "framewise-studio = framewise.app.gui:main" in entry_points


def test_repository_only_folders_stay_out_of_the_wheel(wheel_names: list[str]) -> None:
    for name in wheel_names:
        parts = PurePosixPath(name).parts
        assert not set(parts) & set(REPOSITORY_ONLY), f"{name} belongs to the repository, not the wheel"


def test_every_module_and_asset_of_the_installed_folders_is_in_the_wheel(wheel_names: list[str]) -> None:
    """A subpackage missing from pyproject's package list, or an asset its package-data misses, fails here."""
    shipped = set(wheel_names)
    expected = {
        f"{INSTALLED_FOLDERS[path.split('/', 1)[0]]}/{path.split('/', 1)[1]}"
        for path in source_files()
        if path.split("/", 1)[0] in INSTALLED_FOLDERS
    }
    assert {f"{INSTALLED_FOLDERS['assets']}/{CLIP}", "framewise/assets/demo_model/model.safetensors"} <= expected
    missing = sorted(expected - shipped)
    assert not missing, f"in the repository but not in the wheel: {missing}"


def test_framewise_ask_answers_from_a_fresh_venv_outside_the_repository(installed_venv: Path, tmp_path: Path) -> None:
    env = clean_env(tmp_path)
    python = installed_venv / "bin" / "python"
    located = subprocess.run(
        [str(python), "-c", "import framewise.core, framewise.assets; print(framewise.core.__file__)"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60,
    )
    assert located.returncode == 0, located.stderr
    assert Path(located.stdout.strip()).is_relative_to(installed_venv), "framewise was imported from outside the venv"

    clip = Path(located.stdout.strip()).parent.parent / "assets" / CLIP  # the copy the wheel installed
    result = subprocess.run(
        [str(installed_venv / "bin" / "framewise"), "ask", str(clip), "What color is the square?",
         "--device", "cpu", "--max-new-tokens", "8"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    label, answer, *_ = result.stdout.splitlines()
    assert label.startswith("[Demo model"), result.stdout
    assert answer.strip(), "the demo model gave no answer"
