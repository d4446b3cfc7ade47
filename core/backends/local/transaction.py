"""Switching the local engine to new settings, all or nothing.

:class:`SettingsTransaction` redoes only what new settings change (the model, the encoder's graphs,
the decoder's cache and graphs, the open clip's sampling) and, when any part fails, puts back the
settings, model, encoder, decoder, clip and conversation the engine had. It knows the engine only
through :class:`SwitchableEngine`: its settings, the :class:`~framewise.core.backends.local.parts.ModelParts`
it answers with (whose build steps the transaction runs), the items and turns of its conversation,
``load`` and ``info``; and through the function that re-opens its clip and the one that samples
every item of its conversation anew.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from framewise.core.backends.base import Turns
from framewise.core.backends.local.clip_encoder import EncodedClip
from framewise.core.backends.local.parts import ModelParts, free_cached_memory
from framewise.core.errors import is_out_of_memory
from framewise.core.events import EncodeDone, EngineInfo, ResetReason
from framewise.core.seam import FamilyLimits
from framewise.core.settings import AppSettings, DecodingSettings


class SwitchableEngine(Protocol):
    """What a settings transaction reads and sets on the engine it switches."""

    settings: AppSettings
    clip: EncodedClip | None
    added: list[EncodedClip]
    turns: Turns

    @property
    def parts(self) -> ModelParts: ...
    def load(self, request_id: int | None = None) -> EngineInfo: ...
    def info(self) -> EngineInfo: ...


# Re-open the clip at a path in the request being served; the reason is why the conversation
# empties (None: it is being put back).
ReopenClip = Callable[[Path, ResetReason | None], EncodeDone]
# Sample and encode the conversation's items (the opened clip first) anew, in the request being served.
SampleAgain = Callable[[Sequence[EncodedClip]], EncodeDone]


@dataclass
class _Before:
    """What the engine had when the transaction began: what a failed switch puts back. ``parts`` is
    a copy; ``added`` and ``turns`` are copies (the engine empties and extends its own in place)."""

    settings: AppSettings
    parts: ModelParts
    clip: EncodedClip | None
    added: list[EncodedClip]
    turns: Turns

    @classmethod
    def of(cls, engine: SwitchableEngine) -> _Before:
        return cls(engine.settings, engine.parts.copy(), engine.clip, list(engine.added), list(engine.turns))

    def put_back(self, engine: SwitchableEngine) -> None:
        engine.settings = self.settings
        engine.parts.put_back(self.parts)
        engine.clip, engine.added, engine.turns = self.clip, self.added, self.turns


class SettingsTransaction:
    """One switch of ``engine`` to ``settings``: :meth:`run` it inside the engine's request."""

    def __init__(
        self, engine: SwitchableEngine, settings: AppSettings, reopen_clip: ReopenClip, sample_again: SampleAgain
    ) -> None:
        self.engine = engine
        self.parts = engine.parts
        self.settings = settings
        self.reopen_clip = reopen_clip
        self.sample_again = sample_again
        self.before = _Before.of(engine)
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
        parts, before = self.parts, self.before
        old, self.engine.settings = before.settings, self.settings
        rebuilt = False
        if self.settings.model != old.model:
            self._load_beside()
            rebuilt = True
        else:
            if self.settings.encoder != old.encoder:
                # Two encoders cannot share a tower (the attention switch is the tower's): the old
                # one is cleared first, and _restore builds it again should the new one fail.
                before.parts.encoder = None
                parts.build_encoder(self.settings)
                rebuilt = True
            limits = parts.require_model().limits  # the model stays, and so do its limits
            if _decoder_shape(self.settings, limits) != _decoder_shape(old, limits):
                self._rebuild_decoder()
                rebuilt = True
        clip = before.clip
        if clip is not None and clip.path and (self.settings.model != old.model or self.settings.sampling != old.sampling):
            self.sample_again([clip, *before.added])  # every item stays in the conversation
        return self.engine.info() if rebuilt else None

    def _load_beside(self) -> None:
        """Load the new model while the old one stays in memory; if that runs out of memory,
        release the old one (``released`` tells :meth:`_restore` to load it again) and retry."""
        parts = self.parts
        try:
            parts.load_weights(self.settings)
        except Exception as error:
            if not is_out_of_memory(error):
                raise
            parts.release()
            self.released = True
            parts.load_weights(self.settings)
        parts.encoder = None
        parts.decoder = None
        parts.build_encoder(self.settings)
        parts.build_decoder(self.settings)

    def _rebuild_decoder(self) -> None:
        """A decoder for the new settings while the old one stays usable; if both do not fit,
        the old one is closed first (``before.parts.decoder`` becomes ``None``: :meth:`_restore` rebuilds it)."""
        parts, before = self.parts, self.before.parts
        parts.decoder = None
        try:
            parts.build_decoder(self.settings)
        except Exception as error:
            if not is_out_of_memory(error) or before.decoder is None:
                raise
            before.close_decoder()
            parts.build_decoder(self.settings)

    def _restore(self) -> None:
        """Put back what the transaction saw at its start; a released model is loaded again and its
        clip re-opened, a cleared encoder or closed decoder built again."""
        parts, before = self.parts, self.before
        if parts.decoder is not None and parts.decoder is not before.parts.decoder:
            parts.decoder.close()
        if parts.encoder is not None and parts.encoder is not before.parts.encoder:
            parts.encoder.clear()
        if self.released:
            self.engine.settings = before.settings
            parts.loaded = parts.encoder = parts.decoder = None
            self.engine.clip = None
            self.engine.load()
            if before.clip is not None and before.clip.path is not None:
                self.reopen_clip(before.clip.path, None)  # the conversation stays: it is put back
            self.engine.added, self.engine.turns = before.added, before.turns
            return
        before.put_back(self.engine)
        if parts.encoder is None:
            parts.build_encoder(before.settings)
        if parts.decoder is None:
            parts.build_decoder(before.settings)

    def _close_replaced(self) -> None:
        """Give back what the old model's parts held once the new ones are in use."""
        parts, before = self.parts, self.before.parts
        if self.released:
            return
        if before.decoder is not None and before.decoder is not parts.decoder:
            before.decoder.close()
        if before.encoder is not None and before.encoder is not parts.encoder:
            before.encoder.clear()
        if before.loaded is not parts.loaded:
            free_cached_memory()


def _decoder_shape(settings: AppSettings, limits: FamilyLimits) -> tuple[DecodingSettings, int]:
    """The settings that decide the decoder's cache and graphs, for a model of ``limits``."""
    return settings.decoding, settings.context_tokens(limits)
