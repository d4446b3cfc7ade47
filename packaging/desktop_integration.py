"""Install or remove the Framewise desktop launcher, icons and AppStream metainfo for the current user.

    python packaging/desktop_integration.py install [--exec PATH]
    python packaging/desktop_integration.py uninstall

Files go under $XDG_DATA_HOME (default ~/.local/share), as the freedesktop specifications say:

    applications/io.github.framewise.Framewise.desktop
    metainfo/io.github.framewise.Framewise.metainfo.xml
    icons/hicolor/<N>x<N>/apps/io.github.framewise.Framewise.png   (N = 16 ... 512)
    icons/hicolor/scalable/apps/io.github.framewise.Framewise.svg

The launcher's Exec line is the absolute path of the `framewise-studio` entry point found next to
the Python running this script (the project's virtual environment), or on PATH; --exec overrides it
(for example with dist/framewise/framewise-studio from the one-folder bundle). Both commands can be
run any number of times. Standard library only: this file is not part of the installed package.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

APP_ID = "io.github.framewise.Framewise"
ENTRY_POINT = "framewise-studio"
ICON_SIZES = (16, 24, 32, 48, 64, 128, 256, 512)

REPO_ROOT = Path(__file__).resolve().parents[1]
PACKAGING_DIR = REPO_ROOT / "packaging"
ICONS_DIR = REPO_ROOT / "assets" / "icons"


def data_home() -> Path:
    """$XDG_DATA_HOME when it is an absolute path (the spec ignores relative ones), else ~/.local/share."""
    configured = os.environ.get("XDG_DATA_HOME", "")
    if configured and os.path.isabs(configured):
        return Path(configured)
    return Path.home() / ".local" / "share"


def installed_files(root: Path) -> dict[Path, Path]:
    """Destination under `root` -> source file in the repository, for everything the install writes."""
    hicolor = root / "icons" / "hicolor"
    files = {
        root / "applications" / f"{APP_ID}.desktop": PACKAGING_DIR / f"{APP_ID}.desktop",
        root / "metainfo" / f"{APP_ID}.metainfo.xml": PACKAGING_DIR / f"{APP_ID}.metainfo.xml",
        hicolor / "scalable" / "apps" / f"{APP_ID}.svg": ICONS_DIR / "framewise.svg",
    }
    for size in ICON_SIZES:
        files[hicolor / f"{size}x{size}" / "apps" / f"{APP_ID}.png"] = ICONS_DIR / f"framewise-{size}.png"
    return files


def find_entry_point(python: Path | None = None) -> Path:
    """Absolute path of `framewise-studio`: beside `python` (default: this interpreter), else on PATH.

    Raises FileNotFoundError with the command that fixes it when neither has one.
    """
    python = python or Path(sys.executable)
    names = (ENTRY_POINT + ".exe", ENTRY_POINT) if os.name == "nt" else (ENTRY_POINT,)
    for name in names:
        beside = python.parent / name
        if beside.is_file() and os.access(beside, os.X_OK):
            return beside.absolute()
    on_path = shutil.which(ENTRY_POINT)
    if on_path:
        return Path(on_path).absolute()
    raise FileNotFoundError(
        f"no '{ENTRY_POINT}' next to {python} or on PATH. Install Framewise into this environment first "
        f"('{python} -m pip install -e .'), or pass --exec with the program to launch "
        f"(for the bundle: --exec dist/framewise/{ENTRY_POINT})."
    )


def quote_exec_argument(argument: str) -> str:
    """Quote one Exec argument per the Desktop Entry spec, then escape it as a desktop-file string."""
    reserved = set(' \t\n"\'\\><~|&;$*?#()`')
    if argument and not reserved.intersection(argument):
        quoted = argument
    else:
        inner = "".join("\\" + char if char in '"`$\\' else char for char in argument)
        quoted = f'"{inner}"'
    return quoted.replace("%", "%%").replace("\\", "\\\\")


def render_desktop_entry(template: str, program: Path) -> str:
    """The launcher text with Exec and TryExec pointing at the absolute `program`."""
    lines = []
    for line in template.splitlines():
        if line.startswith("Exec="):
            arguments = line[len("Exec="):].split(" ")[1:]
            line = "Exec=" + " ".join([quote_exec_argument(str(program)), *arguments])
        elif line.startswith("TryExec="):
            line = "TryExec=" + str(program).replace("\\", "\\\\")
        lines.append(line)
    return "\n".join(lines) + "\n"


def install(root: Path, program: Path) -> list[Path]:
    """Write the launcher, metainfo and icons under `root`; returns the files written."""
    program = program.absolute()
    if not program.is_file():
        raise FileNotFoundError(f"{program} does not exist: pass --exec with the Framewise program to launch")
    written = []
    for destination, source in installed_files(root).items():
        destination.parent.mkdir(parents=True, exist_ok=True)
        if destination.suffix == ".desktop":
            text = render_desktop_entry(source.read_text(encoding="utf-8"), program)
            destination.write_text(text, encoding="utf-8")
        else:
            shutil.copyfile(source, destination)
        written.append(destination)
    # Icon themes notice new icons by the theme folder's modification time.
    os.utime(root / "icons" / "hicolor")
    return written


def uninstall(root: Path) -> list[Path]:
    """Remove what install() writes under `root`, and the folders it leaves empty; returns the files removed."""
    removed = []
    for destination in installed_files(root):
        if destination.exists():
            destination.unlink()
            removed.append(destination)
        remove_empty_parents(destination.parent, stop=root)
    return removed


def remove_empty_parents(folder: Path, stop: Path) -> None:
    """Delete `folder` and its parents while they are empty, never `stop` or anything above it."""
    while folder != stop and stop in folder.parents:
        try:
            folder.rmdir()
        except OSError:  # not empty, or already gone
            if folder.exists():
                return
        folder = folder.parent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Install or remove the Framewise desktop launcher for this user.")
    commands = parser.add_subparsers(dest="command", required=True)
    install_command = commands.add_parser("install", help="install launcher, icons and metainfo")
    install_command.add_argument("--exec", dest="program", type=Path, help=f"program to launch (default: {ENTRY_POINT})")
    commands.add_parser("uninstall", help="remove them again")
    args = parser.parse_args(argv)

    root = data_home()
    try:
        if args.command == "install":
            program = args.program or find_entry_point()
            written = install(root, program)
            print(f"Installed the Framewise launcher ({len(written)} files under {root}), launching {program.absolute()}")
        else:
            removed = uninstall(root)
            print(f"Removed {len(removed)} Framewise launcher files from {root}")
    except (FileNotFoundError, PermissionError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
