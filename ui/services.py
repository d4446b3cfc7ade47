"""What the window needs from the application around it, passed in by ``app`` so ``ui`` stays torch-free."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable


@dataclass(frozen=True)
class AppServices:
    """``collect_versions()`` lists component versions for Help ▸ About (Framewise, torch, CUDA,
    transformers, Qt, GPU); ``log_file_path()`` is the log Help ▸ Show log opens."""

    collect_versions: Callable[[], dict[str, str]]
    log_file_path: Callable[[], Path]
