"""Where questions are answered: the engine's seam and its two implementations.

:class:`AnsweringBackend` is what the CLI and the window's worker hold. ``local`` is
:class:`framewise.core.engine.Engine` (transformers and Framewise's CUDA graphs on this machine);
``vllm`` is :class:`framewise.core.backends.vllm_server.VllmServerEngine`, which samples the clip
here and asks a vLLM server over its OpenAI-compatible API. :func:`create_engine` picks one from
``settings.backend.kind``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol, Sequence

import numpy as np

from framewise.core.events import Done, EncodeDone, EngineInfo, EventSink, ignore_events
from framewise.core.settings import AppSettings


class AnsweringBackend(Protocol):
    """A clip and questions in, streamed answers out (``Engine``'s public API).

    Only :meth:`cancel` may be called from another thread. ``history`` holds the finished
    (question, answer) turns about the open clip: the one conversation record, whose every reset is
    sent as a ``ConversationReset``. Every event a call sends carries its ``request_id``.
    """

    settings: AppSettings
    history: list[tuple[str, str]]

    def load(self, request_id: int | None = None) -> EngineInfo: ...
    def apply_settings(self, settings: AppSettings, request_id: int | None = None) -> EngineInfo | None: ...
    def info(self) -> EngineInfo: ...
    def open_clip(self, path: str | Path, request_id: int | None = None) -> EncodeDone: ...
    def open_frames(
        self, frames: np.ndarray, timestamps: Sequence[float], name: str, request_id: int | None = None
    ) -> EncodeDone: ...
    def ask(self, question: str, request_id: int | None = None) -> Done: ...
    def cancel(self, request_id: int | None = None) -> None: ...
    def new_conversation(self, request_id: int | None = None) -> None: ...
    def open_clip_path(self) -> Path | None: ...


def create_engine(settings: AppSettings, sink: EventSink = ignore_events) -> AnsweringBackend:
    """The backend ``settings.backend.kind`` names, not loaded yet (call ``load()``)."""
    if settings.backend.kind == "vllm":
        from framewise.core.backends.vllm_server import VllmServerEngine

        return VllmServerEngine(settings, sink=sink)
    from framewise.core.engine import Engine  # imports torch and transformers

    return Engine(settings, sink=sink)


def same_backend(old: AppSettings, new: AppSettings) -> bool:
    """Whether ``new`` keeps the backend ``old`` runs on (then ``apply_settings`` suffices)."""
    if old.backend.kind != new.backend.kind:
        return False
    return old.backend.kind == "local" or old.backend == new.backend
