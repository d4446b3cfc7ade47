"""The per-user folders Framewise writes to, by platform, each with an environment override."""

from __future__ import annotations

import os
import sys
from pathlib import Path


def user_folder(override: str, *, linux: tuple[str, str, str], macos: str, windows: tuple[str, str, str]) -> Path:
    """The folder named by the environment variable ``override``, else the platform's own.

    ``linux``: (XDG variable, its default under the home folder, the path below it);
    ``macos``: the path below ``~/Library``; ``windows``: (variable, its default under the home
    folder, the path below it). A relative XDG value is ignored, as the XDG rules say.
    """
    value = os.environ.get(override)
    if value:
        return Path(value).expanduser()
    home = Path.home()
    if sys.platform == "darwin":
        return home / "Library" / macos
    if sys.platform == "win32":
        variable, default, below = windows
        base = os.environ.get(variable)
        return (Path(base) if base else home / default) / below
    variable, default, below = linux
    base = os.environ.get(variable, "")
    return (Path(base) if os.path.isabs(base) else home / default) / below
