"""What the window needs from the application around it, passed in by ``app`` so ``ui`` stays torch-free."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from framewise.core.settings import AppSettings


@dataclass(frozen=True)
class AppServices:
    """``collect_versions()`` lists component versions for Help ▸ About (Framewise, torch, CUDA,
    transformers, Qt, GPU); ``log_file_path()`` is the log Help ▸ Show log opens;
    ``memory_estimate(settings)`` is the line Settings ▸ Model shows under the dtype (what the model
    will take on the device), "" where there is none."""

    collect_versions: Callable[[], dict[str, str]]
    log_file_path: Callable[[], Path]
    memory_estimate: Callable[[AppSettings], str] = lambda settings: ""
