"""Where questions are answered: the engine's seam and its two implementations, one folder each.

:class:`~framewise.core.backends.base.AnsweringBackend` (in ``base``, with the plumbing both
backends share) is what the CLI, the window's worker and session, and the test fake hold.
:mod:`.local` is :class:`~framewise.core.backends.local.engine.Engine` (transformers and
Framewise's CUDA graphs on this machine); :mod:`.vllm` is
:class:`~framewise.core.backends.vllm.server.VllmServerEngine`, which samples the clip here and
asks a vLLM server over its OpenAI-compatible API. :func:`create_engine` picks one from
``settings.backend.kind``.
"""

from __future__ import annotations

from framewise.core.backends.base import AnsweringBackend, BackendCall
from framewise.core.events import EventSink, ignore_events
from framewise.core.seam import FamilyLimits
from framewise.core.settings import AppSettings

__all__ = ["AnsweringBackend", "BackendCall", "create_engine", "family_limits_for", "same_backend"]


def create_engine(settings: AppSettings, sink: EventSink = ignore_events) -> AnsweringBackend:
    """The backend ``settings.backend.kind`` names, not loaded yet (call ``load()``)."""
    if settings.backend.kind == "vllm":
        from framewise.core.backends.vllm.server import VllmServerEngine

        return VllmServerEngine(settings, sink=sink)
    from framewise.core.backends.local.engine import Engine  # imports torch and transformers

    return Engine(settings, sink=sink)


def family_limits_for(settings: AppSettings) -> FamilyLimits | None:
    """The limits of the model family the backend ``settings`` choose will answer with, known before
    it loads and without torch: a vLLM server's served family; on this machine the family the
    checkpoint's config.json names, or ``None`` while that cannot be read (loading then says why)."""
    if settings.backend.kind == "vllm":
        from framewise.core.backends.vllm.family import served_family

        return served_family(settings.backend.server_model).limits
    from framewise.core.model_source import family_limits_of

    return family_limits_of(settings.model.source)


def same_backend(old: AppSettings, new: AppSettings) -> bool:
    """Whether ``new`` keeps the backend ``old`` runs on (then ``apply_settings`` suffices)."""
    if old.backend.kind != new.backend.kind:
        return False
    return old.backend.kind == "local" or old.backend == new.backend
