"""The desktop launcher, AppStream metainfo and icons: valid, complete, and installable for one user."""

from __future__ import annotations

import configparser
import importlib.util
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from types import ModuleType

import pytest
from PySide6.QtGui import QImage
from PySide6.QtSvg import QSvgRenderer

from tests.conftest import REPO_ROOT

PACKAGING = REPO_ROOT / "packaging"
ICONS = REPO_ROOT / "assets" / "icons"
APP_ID = "io.github.framewise.Framewise"
DESKTOP_FILE = PACKAGING / f"{APP_ID}.desktop"
METAINFO_FILE = PACKAGING / f"{APP_ID}.metainfo.xml"
ICON_SIZES = (16, 24, 32, 48, 64, 128, 256, 512)
INSTALL_HINT = "apt-get install -y desktop-file-utils appstream (.ci/run installs them)"


def load_desktop_integration() -> ModuleType:
    # packaging/ must not be a package: it would shadow the PyPI `packaging` library.
    spec = importlib.util.spec_from_file_location("framewise_desktop_integration", PACKAGING / "desktop_integration.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def require_tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} is not installed; {INSTALL_HINT}")
    return path


def read_desktop_entry(path: Path) -> configparser.SectionProxy:
    parser = configparser.ConfigParser(interpolation=None, delimiters=("=",))
    parser.optionxform = str  # keys are case-sensitive
    parser.read(path, encoding="utf-8")
    return parser["Desktop Entry"]


def test_desktop_file_passes_desktop_file_validate() -> None:
    validator = require_tool("desktop-file-validate")
    result = subprocess.run([validator, str(DESKTOP_FILE)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "error" not in result.stdout.lower(), result.stdout


def test_metainfo_passes_appstreamcli_validate() -> None:
    appstreamcli = require_tool("appstreamcli")
    result = subprocess.run(
        [appstreamcli, "validate", "--no-net", str(METAINFO_FILE)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_launcher_and_metainfo_agree_on_id_entry_point_and_release() -> None:
    entry = read_desktop_entry(DESKTOP_FILE)
    assert entry["Icon"] == APP_ID
    assert entry["Exec"].split()[0] == "framewise-studio"

    component = ElementTree.parse(METAINFO_FILE).getroot()
    assert component.findtext("id") == APP_ID
    assert component.findtext("launchable") == DESKTOP_FILE.name
    assert {b.text for b in component.iter("binary")} >= {"framewise-studio", "framewise"}
    assert component.findtext("metadata_license") == "CC0-1.0"
    assert component.find("content_rating") is not None
    releases = [(r.get("version"), r.get("date")) for r in component.iter("release")]
    assert ("0.1.0", "2026-12-03") in releases

    from framewise import __version__

    assert releases[0][0] == __version__, "the newest <release> in the metainfo must match framewise.__version__"


@pytest.mark.parametrize("size", ICON_SIZES)
def test_png_icon_has_its_size_and_a_transparent_corner(size: int) -> None:
    image = QImage(str(ICONS / f"framewise-{size}.png"))
    assert not image.isNull()
    assert (image.width(), image.height()) == (size, size)
    assert image.hasAlphaChannel()
    assert image.pixelColor(0, 0).alpha() == 0
    assert image.pixelColor(size // 2, size // 2).alpha() == 255


def test_svg_icon_is_square_and_renders() -> None:
    renderer = QSvgRenderer(str(ICONS / "framewise.svg"))
    assert renderer.isValid()
    box = renderer.viewBoxF()
    assert box.width() == box.height() > 0


def test_install_then_uninstall_leaves_nothing(tmp_path: Path) -> None:
    data_home = tmp_path / "data"
    program = tmp_path / "bin dir" / "framewise-studio"
    program.parent.mkdir()
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    env = {**os.environ, "XDG_DATA_HOME": str(data_home), "PYTHON": sys.executable}

    def run(script: str, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", str(PACKAGING / script), *args], env=env, capture_output=True, text=True, timeout=60
        )

    for _ in range(2):  # installing twice is harmless
        result = run("install-desktop.sh", "--exec", str(program))
        assert result.returncode == 0, result.stderr

    desktop = data_home / "applications" / f"{APP_ID}.desktop"
    entry = read_desktop_entry(desktop)
    assert entry["Exec"] == f'"{program}" %f'  # the space in the path is quoted
    assert entry["TryExec"] == str(program)
    assert (data_home / "metainfo" / f"{APP_ID}.metainfo.xml").read_bytes() == METAINFO_FILE.read_bytes()
    assert (data_home / "icons/hicolor/scalable/apps" / f"{APP_ID}.svg").is_file()
    for size in ICON_SIZES:
        installed = data_home / f"icons/hicolor/{size}x{size}/apps/{APP_ID}.png"
        assert installed.read_bytes() == (ICONS / f"framewise-{size}.png").read_bytes()
    if shutil.which("desktop-file-validate"):
        check = subprocess.run(["desktop-file-validate", str(desktop)], capture_output=True, text=True)
        assert check.returncode == 0, check.stdout

    for _ in range(2):  # so is removing twice
        result = run("uninstall-desktop.sh")
        assert result.returncode == 0, result.stderr
    assert list(data_home.rglob("*")) == []


def test_uninstall_keeps_other_applications_files(tmp_path: Path) -> None:
    module = load_desktop_integration()
    program = tmp_path / "framewise-studio"
    program.write_text("")
    other = tmp_path / "icons" / "hicolor" / "48x48" / "apps" / "other.png"
    other.parent.mkdir(parents=True)
    other.write_bytes(b"png")

    module.install(tmp_path, program)
    module.uninstall(tmp_path)

    assert other.read_bytes() == b"png"
    assert not (tmp_path / "applications").exists()


def test_entry_point_is_found_beside_the_interpreter(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    module = load_desktop_integration()
    python = tmp_path / "venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))

    with pytest.raises(FileNotFoundError, match="--exec"):
        module.find_entry_point(python)

    script = python.parent / "framewise-studio"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    assert module.find_entry_point(python) == script


def test_exec_arguments_are_quoted_per_the_desktop_entry_spec() -> None:
    quote = load_desktop_integration().quote_exec_argument
    assert quote("/opt/framewise/framewise-studio") == "/opt/framewise/framewise-studio"
    assert quote("/home/a b/fw") == '"/home/a b/fw"'
    # `$` is escaped inside the quotes, then the backslash itself is escaped as a desktop-file string.
    assert quote("/home/$x/fw") == '"/home/\\\\$x/fw"'
    assert quote("/data/100%/fw") == "/data/100%%/fw"


def test_data_home_ignores_a_relative_xdg_data_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    module = load_desktop_integration()
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_DATA_HOME", "relative/dir")
    assert module.data_home() == tmp_path / ".local" / "share"
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert module.data_home() == tmp_path / "xdg"
