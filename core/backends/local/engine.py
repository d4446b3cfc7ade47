"""The question-answering engine: a clip and a question in, a streamed answer out.

:class:`Engine` is a plain object with a blocking API. It reports what it does through an
:data:`~framewise.core.events.EventSink`; the CLI runs it on the main thread, the GUI on a worker thread.
Only :meth:`Engine.cancel` may be called from another thread.

Each public call is one request: every event sent while serving it carries its id (the caller's
``request_id``, or a new one), so listeners route events without inferring from their order. The
engine keeps the one conversation record (:attr:`Engine.turns`) and announces every time it
empties it, with the reason, as a :class:`~framewise.core.events.ConversationReset`.

Cancelling follows the backends' one scope (:mod:`~framewise.core.backends.cancel`) and reaches
every stage: reading the clip, preprocessing, every vision-tower block of every encoder pass, every
decoder layer of the prefill and every generated token.

The engine composes its parts: the model, encoder and decoder it answers with
(:class:`~framewise.core.backends.local.parts.ModelParts`), the clip encoder
(:class:`~framewise.core.backends.local.clip_encoder.ClipEncoder`), the answerer
(:class:`~framewise.core.backends.local.answerer.Answerer`) and, for new settings, a transaction
(:class:`~framewise.core.backends.local.transaction.SettingsTransaction`): when any part of a
switch fails, the engine keeps the model, encoder, decoder, clip and conversation it had, and the
error says what failed.

A clip is encoded once, when it is opened; every question about it reuses the vision features.
Answers are decoded by :class:`~framewise.core.decoding.Decoder` over a static KV cache allocated
at load, with decode steps through CUDA graphs on a GPU; a follow-up question prefills only what
the cache does not already hold. The model loader hands the engine the model family's adapter,
which the vision encoder is built on; the same adapter can inject the features into transformers'
own ``generate()`` for one call (the demo model's training and the tests use it).
"""

from __future__ import annotations

from pathlib import Path

import torch

from framewise.core.backends.base import BackendBase
from framewise.core.backends.local.answerer import Answerer
from framewise.core.backends.local.clip_encoder import ClipEncoder, EncodedClip
from framewise.core.backends.local.parts import ModelParts
from framewise.core.backends.local.transaction import SettingsTransaction
from framewise.core.decoding import Decoder
from framewise.core.events import DecoderInfo, Done, EncodeDone, EngineInfo, EventSink, Progress, ResetReason, ignore_events
from framewise.core.held_memory import host_weight_bytes, weight_shares
from framewise.core.loading import LoadedModel
from framewise.core.memory_plan import HeldMemory
from framewise.core.model_source import family_limits_of
from framewise.core.seam import FamilyLimits
from framewise.core.settings import AppSettings
from framewise.core.video import SampledFrames


class Engine(BackendBase[EncodedClip]):
    """Loads a vision-language model, encodes clips once, answers questions about them as a stream.

    Usage::

        engine = Engine(settings, sink=print)
        engine.load()
        engine.open_clip("clip.mp4")
        engine.ask("What color is the square?")

    Every public method takes an optional ``request_id``; the events it sends carry it (a caller that
    passes ids passes them on every call). Without one, a call gets the next id of the engine's own,
    except that a call made while serving a request is part of that request.

    :meth:`new_conversation` keeps the decoder's KV entries of the prompt's part that does not
    depend on the conversation (system text and clip); everything after it is prefilled anew.
    """

    def __init__(self, settings: AppSettings | None = None, sink: EventSink = ignore_events) -> None:
        self.parts = ModelParts(progress=self._emit)  # before the base checks the settings (_limits_for reads it)
        super().__init__(settings, sink)
        self._clips = ClipEncoder(self.parts, self._emit, self._requests.stamp, self._cancel)
        self._answerer = Answerer(self.parts, self._emit, self._cancel)
        self.metrics = self._clips.metrics

    @property
    def loaded(self) -> LoadedModel | None:
        """The model answering, ``None`` before it is loaded."""
        return self.parts.loaded

    # ----------------------------------------------------------------- lifecycle

    def load(self, request_id: int | None = None) -> EngineInfo:
        """Load the model named by the settings, build its vision encoder and its decoder (capturing
        the encoder's graphs, then the decode step graphs, on CUDA)."""
        with self._serving(request_id):
            self.parts.load_weights(self.settings)
            self.parts.build_encoder(self.settings)
            self.parts.build_decoder(self.settings)
            return self._emit(self.info())

    def apply_settings(self, settings: AppSettings, request_id: int | None = None) -> EngineInfo | None:
        """Switch to new settings, redoing only what they change, all or nothing.

        A new model is loaded beside the old one (when that runs out of memory, the old one is
        released first and, should the new one still fail, loaded again) and re-encodes the open
        clip; new encoder settings re-capture the graphs; new sampling settings re-sample and
        re-encode the open clip (emptying the conversation, with reason ``resampled``) and every
        item added to it (clips and closer looks re-sampled, pictures encoded again); a new
        context length or decoding setting re-allocates the KV cache and re-captures the decode
        graphs. Returns the new :class:`EngineInfo`, which is also sent, when the model, encoder or
        decoder changed. On any failure the engine is as it was before the call (settings, model,
        encoder, decoder, clip, conversation) and the error is raised.
        """
        settings.validate(self._limits_for(settings))
        if self.parts.loaded is None:
            self.settings = settings
            return None
        with self._serving(request_id):
            info = SettingsTransaction(self, settings, reopen_clip=self._open_clip, sample_again=self._sample_again).run()
            return None if info is None else self._emit(info)

    def _limits_for(self, settings: AppSettings) -> FamilyLimits | None:
        """The family limits ``settings`` are checked against: the loaded checkpoint's while they keep
        its source, else those of the family the chosen source's config.json names (no weights are
        read), else ``None`` (it cannot be read yet: loading it then says why)."""
        loaded = self.parts.loaded
        if loaded is not None and settings.model.source == self.settings.model.source:
            return loaded.limits
        return family_limits_of(settings.model.source)

    def info(self) -> EngineInfo:
        """What the engine runs on now."""
        parts = self.parts
        loaded = parts.require_model()
        encoder = parts.encoder
        report = encoder.report if encoder else None
        return EngineInfo(
            device=_device_description(loaded.device),
            device_kind=loaded.device.type,
            dtype=str(loaded.dtype).removeprefix("torch."),
            weight_dtype=loaded.weight_format.weight_dtype,
            model_name=loaded.name,
            model_label=loaded.label,
            encoder_name=encoder.name if encoder else "none",
            graphs_enabled=encoder is not None and encoder.captured,
            graphs_reason=parts.graphs_reason,
            attention_backends=tuple(loaded.adapter.attention_backends()),
            graph_budgets=encoder.budgets if encoder else (),
            capture_seconds=report.seconds if report else None,
            graph_memory_mb=report.graph_memory_bytes / 2**20 if report else None,
            decoder=_decoder_info(parts.decoder),
            limits=loaded.limits,
            held_memory=_held_memory(parts, loaded),
            family=loaded.family.name,
            layout=loaded.layout,
        )

    # ----------------------------------------------------------------- the backend's parts of a request

    def _open_clip(self, path: Path, reason: ResetReason | None) -> EncodeDone:
        """Sample, preprocess and encode ``path`` and make it the only open item; ``reason`` is why
        the conversation empties (``None``: it is being put back).

        Emits Progress (decode, encode), FramesRead while reading, ClipSampled, one ChunkStats per
        encoder pass, EncoderMetrics, ConversationReset and EncodeDone.
        """
        self.parts.require_model()
        return self._keep(self._clips.read(path, self.settings), reason)

    def _add_clip(self, path: Path, span: tuple[float, float] | None) -> EncodeDone:
        """Sample (its ``span`` only, densely, when given), preprocess and encode ``path`` and add it
        to the conversation (no reset); the events are :meth:`_open_clip`'s but for ConversationReset."""
        self.parts.require_model()
        clip = self._clips.read(path, self.settings, span)
        self._answerer.check_items_fit([*self.clips, clip], self.settings.generation)
        self.added.append(clip)
        self._emit(Progress("encode", 1, 1, f"{clip.summary.clip_name} is added to the conversation"))
        return self._emit(clip.summary)

    def _use_frames(self, sampled: SampledFrames) -> EncodeDone:
        """Encode frames sampled elsewhere, as :meth:`open_clip` does after decoding.

        The frames are already at the model family's frame size (sides whole merge blocks).
        Settings changes cannot re-sample such a clip.
        """
        self.parts.require_model()
        return self._keep(self._clips.encode_frames(sampled, self.settings.sampling), "new_clip")

    def _keep(self, clip: EncodedClip, reason: ResetReason | None) -> EncodeDone:
        """Make ``clip`` the open one and, unless ``reason`` is ``None``, start its conversation afresh."""
        self._make_open(clip, reason)
        self._emit(Progress("encode", 1, 1, f"{clip.summary.clip_name} is ready"))
        return self._emit(clip.summary)

    def _ask(self, question: str) -> Done:
        """Answer ``question`` about every open item after the conversation so far; a completed
        answer is kept in the conversation."""
        self.parts.require_model()
        done, answer = self._answerer.answer(question, self.clips, self.turns, self.settings.generation)
        if answer is not None:
            self.turns.append((question, answer))
        return self._emit(done)


def _held_memory(parts: ModelParts, loaded: LoadedModel) -> HeldMemory:
    """What the model, its encoder and its decoder hold, as measured when they were built."""
    report = parts.encoder.report if parts.encoder else None
    decoder = parts.decoder
    decode_graphs = 0
    if decoder is not None and decoder.graphs_enabled:
        decode_graphs = decoder.steps.graph_memory_bytes + decoder.prefills.graph_memory_bytes
    steps = ("weights", "encoder", "decoder")
    measured = all(step in parts.reserved_by_step for step in steps)
    return HeldMemory(
        weights=weight_shares(loaded.model, loaded.family.vision_tower(loaded.model)),
        kv_cache=decoder.state_bytes if decoder else 0,
        encoder_graphs=report.graph_memory_bytes if report else 0,
        decode_graphs=decode_graphs,
        reserved=sum(parts.reserved_by_step[step] for step in steps) if measured else None,
        host_weights=host_weight_bytes(loaded.model),
    )


def _decoder_info(decoder: Decoder | None) -> DecoderInfo | None:
    if decoder is None:
        return None
    steps, cache = decoder.steps, decoder.cache
    return DecoderInfo(
        graphs_enabled=decoder.graphs_enabled,
        graphs_reason=decoder.graphs_reason,
        context_tokens=decoder.max_tokens,
        buckets=steps.buckets,
        kv_cache_mb=decoder.state_bytes / 2**20,
        capture_seconds=steps.capture_seconds if decoder.graphs_enabled else None,
        graph_memory_mb=steps.graph_memory_bytes / 2**20 if decoder.graphs_enabled else None,
        kv_cache_dtype=cache.format.describe(cache.dtype),
        kv_bytes_per_token=cache.bytes_per_token,
    )


def _device_description(device: torch.device) -> str:
    if device.type == "cuda":
        return f"cuda ({torch.cuda.get_device_name(device)})"
    return device.type
