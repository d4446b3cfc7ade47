"""Where the files that ship inside the ``framewise`` package are, installed or not."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path


def asset_path(*parts: str) -> Path:
    """The path of ``assets/<parts...>`` as installed (a plain folder: the package is never zipped)."""
    return Path(str(files("framewise.assets").joinpath(*parts)))
