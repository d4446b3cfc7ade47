"""Switching the engine to new settings, all or nothing.

:class:`SettingsTransaction` redoes only what new settings change (the model, the encoder's graphs,
the decoder's cache and graphs, the open clip's sampling) and, when any part fails, puts back the
settings, model, encoder, decoder, clip and conversation the engine had. The engine keeps the
orchestration (:meth:`~framewise.core.backends.local.engine.Engine.apply_settings`); the transaction knows it only
through :class:`SwitchableEngine` (its steps), :class:`EngineParts` (the parts it snapshots and
puts back), the function that re-opens its clip and the one that samples every item of its
conversation anew.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Callable, Protocol, Sequence

from framewise.core.errors import is_out_of_memory
from framewise.core.events import EncodeDone, EngineInfo, ResetReason
from framewise.core.seam import FamilyLimits
from framewise.core.settings import AppSettings


@dataclass
class EngineParts:
    """The engine's parts a transaction swaps: a snapshot of them is what a failed switch puts back.
    ``turns`` is the conversation record (copied: the engine empties and extends its own in place);
    ``reserved_by_step`` what each build step reserved (copied: the engine records into its own)."""

    settings: AppSettings
    loaded: Any
    encoder: Any
    graphs_reason: str
    decoder: Any
    clip: Any
    added: list[Any]
    turns: list[tuple[str, str]]
    reserved_by_step: dict[str, int]

    @classmethod
    def of(cls, engine: SwitchableEngine) -> EngineParts:
        parts = cls(**{part.name: getattr(engine, part.name) for part in fields(cls)})
        parts.added, parts.turns = list(parts.added), list(parts.turns)
        parts.reserved_by_step = dict(parts.reserved_by_step)
        return parts

    def put_back(self, engine: SwitchableEngine) -> None:
        for part in fields(self):
            setattr(engine, part.name, getattr(self, part.name))


class SwitchableEngine(Protocol):
    """An engine with the attributes :class:`EngineParts` names, and the steps that build them for
    its ``settings``."""

    def load(self, request_id: int | None = None) -> EngineInfo: ...
    def info(self) -> EngineInfo: ...
    def load_weights(self) -> None: ...
    def build_encoder(self) -> None: ...
    def build_decoder(self) -> None: ...
    def release_model(self) -> None: ...
    def free_cached_memory(self) -> None: ...


# Re-open the clip at a path in the request being served; the reason is why the conversation
# empties (None: it is being put back).
ReopenClip = Callable[[Path, ResetReason | None], EncodeDone]
# Sample and encode the conversation's items (the opened clip first) anew, in the request being served.
SampleAgain = Callable[[Sequence[Any]], EncodeDone]


class SettingsTransaction:
    """One switch of ``engine`` to ``settings``: :meth:`run` it inside the engine's request."""

    def __init__(
        self, engine: SwitchableEngine, settings: AppSettings, reopen_clip: ReopenClip, sample_again: SampleAgain
    ) -> None:
        self.engine: Any = engine  # its parts are read and set by name (EngineParts)
        self.settings = settings
        self.reopen_clip = reopen_clip
        self.sample_again = sample_again
        self.before = EngineParts.of(engine)
        # The model had to be dropped to make room for the new one, so restoring loads it again.
        self.released = False

    def run(self) -> EngineInfo | None:
        """Switch; returns the new :class:`EngineInfo` when the model, encoder or decoder changed.
        On any failure the engine is put back as it was and the error is raised."""
        try:
            info = self._switch()
        except BaseException:
            self._restore()
            raise
        self._close_replaced()
        return info

    def _switch(self) -> EngineInfo | None:
        engine, before = self.engine, self.before
        old, engine.settings = before.settings, self.settings
        rebuilt = False
        if self.settings.model != old.model:
            self._load_beside()
            rebuilt = True
        else:
            if self.settings.encoder != old.encoder:
                # Two encoders cannot share a tower (the attention switch is the tower's): the old
                # one is cleared first, and _restore builds it again should the new one fail.
                before.encoder = None
                engine.build_encoder()
                rebuilt = True
            limits = engine.loaded.limits  # the model stays, and so do its limits
            if _decoder_shape(self.settings, limits) != _decoder_shape(old, limits):
                self._rebuild_decoder()
                rebuilt = True
        clip_path = before.clip.path if before.clip else None
        if clip_path and (self.settings.model != old.model or self.settings.sampling != old.sampling):
            self.sample_again([before.clip, *before.added])  # every item stays in the conversation
        return engine.info() if rebuilt else None

    def _load_beside(self) -> None:
        """Load the new model while the old one stays in memory; if that runs out of memory,
        release the old one (``released`` tells :meth:`_restore` to load it again) and retry."""
        engine = self.engine
        try:
            engine.load_weights()
        except Exception as error:
            if not is_out_of_memory(error):
                raise
            engine.release_model()
            self.released = True
            engine.load_weights()
        engine.encoder = None
        engine.decoder = None
        engine.build_encoder()
        engine.build_decoder()

    def _rebuild_decoder(self) -> None:
        """A decoder for the new settings while the old one stays usable; if both do not fit,
        the old one is closed first (``before.decoder`` becomes ``None``: :meth:`_restore` rebuilds it)."""
        engine, before = self.engine, self.before
        engine.decoder = None
        try:
            engine.build_decoder()
        except Exception as error:
            if not is_out_of_memory(error) or before.decoder is None:
                raise
            before.decoder.close()
            before.decoder = None
            engine.build_decoder()

    def _restore(self) -> None:
        """Put back what the transaction saw at its start; a released model is loaded again and its
        clip re-opened, a cleared encoder or closed decoder built again."""
        engine, before = self.engine, self.before
        if engine.decoder is not None and engine.decoder is not before.decoder:
            engine.decoder.close()
        if engine.encoder is not None and engine.encoder is not before.encoder:
            engine.encoder.clear()
        if self.released:
            engine.settings = before.settings
            engine.loaded = engine.encoder = engine.decoder = None
            engine.clip = None
            engine.load()
            if before.clip is not None and before.clip.path is not None:
                self.reopen_clip(before.clip.path, None)  # the conversation stays: it is put back
            engine.added, engine.turns = before.added, before.turns
            return
        before.put_back(engine)
        if engine.encoder is None:
            engine.build_encoder()
        if engine.decoder is None:
            engine.build_decoder()

    def _close_replaced(self) -> None:
        """Give back what the old model's parts held once the new ones are in use."""
        engine, before = self.engine, self.before
        if self.released:
            return
        if before.decoder is not None and before.decoder is not engine.decoder:
            before.decoder.close()
        if before.encoder is not None and before.encoder is not engine.encoder:
            before.encoder.clear()
        if before.loaded is not engine.loaded:
            engine.free_cached_memory()


def _decoder_shape(settings: AppSettings, limits: FamilyLimits) -> tuple[Any, int]:
    """The settings that decide the decoder's cache and graphs, for a model of ``limits``."""
    return settings.decoding, settings.context_tokens(limits)
