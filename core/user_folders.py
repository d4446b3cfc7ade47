"""The per-user folders Framewise writes to, from ``platformdirs``, each with an environment override."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Literal

from platformdirs.api import PlatformDirsABC
from platformdirs.macos import MacOS
from platformdirs.unix import Unix
from platformdirs.windows import Windows

FolderKind = Literal["data", "cache", "log"]


def user_folder(override: str, kind: FolderKind) -> Path:
    """The folder named by the environment variable ``override``, else the platform's own folder of ``kind``.

    On Linux ``~/.local/share/framewise``, ``~/.cache/framewise`` and ``~/.local/state/framewise/log``
    (or below ``$XDG_DATA_HOME``, ``$XDG_CACHE_HOME``, ``$XDG_STATE_HOME``); on macOS
    ``~/Library/Application Support/Framewise``, ``~/Library/Caches/Framewise`` and
    ``~/Library/Logs/Framewise``; on Windows ``%APPDATA%\\Framewise`` (roaming: conversations
    follow the user) and ``%LOCALAPPDATA%\\Framewise\\Cache`` and ``...\\Logs``.
    """
    value = os.environ.get(override)
    if value:
        return Path(value).expanduser()
    return Path(getattr(_platform_dirs(roaming=kind == "data"), f"user_{kind}_dir"))


def _platform_dirs(*, roaming: bool) -> PlatformDirsABC:
    # Chosen from sys.platform on each call, not once at import as platformdirs.PlatformDirs is,
    # so that the mapping of every platform can be checked on any one machine.
    if sys.platform == "darwin":
        return MacOS("Framewise")
    if sys.platform == "win32":
        return Windows("Framewise", appauthor=False, roaming=roaming)
    return Unix("framewise")
