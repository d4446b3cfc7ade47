"""What the local engine answers with: the loaded model, its vision encoder and its decoder.

:class:`ModelParts` holds them and builds each for given settings; the engine builds all three
at load, and a settings transaction (:mod:`.transaction`) rebuilds only those new settings change,
keeping a copy (:meth:`ModelParts.copy`) to put back (:meth:`ModelParts.put_back`) should the switch
fail.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import torch

from framewise.core.decoding import Decoder, context_for
from framewise.core.encoding.defs import VisionEncoder
from framewise.core.encoding.manager import make_vision_encoder
from framewise.core.errors import FramewiseError
from framewise.core.events import EventSink, ignore_events
from framewise.core.held_memory import recording_growth
from framewise.core.loading import LoadedModel, check_memory_fits, load_model, pick_device
from framewise.core.quantization.kv_formats import kv_cache_format
from framewise.core.settings import AppSettings


@dataclass
class ModelParts:
    """The model (``loaded``), its ``encoder`` (with ``graphs_reason``, why it runs graphs or not)
    and its ``decoder``; ``None`` until built. ``reserved_by_step`` is what each build step
    (``"weights"``, ``"encoder"``, ``"decoder"``) added to the device's reserved memory (CUDA only).
    The build steps send their progress to ``progress``."""

    loaded: LoadedModel | None = None
    encoder: VisionEncoder | None = None
    graphs_reason: str = ""
    decoder: Decoder | None = None
    reserved_by_step: dict[str, int] = field(default_factory=dict)
    progress: EventSink = field(default=ignore_events, repr=False, compare=False)

    def copy(self) -> ModelParts:
        """These parts, with their own record of what each step reserved."""
        return dataclasses.replace(self, reserved_by_step=dict(self.reserved_by_step))

    def put_back(self, other: ModelParts) -> None:
        """Hold ``other``'s parts (a copy taken earlier) again."""
        self.loaded, self.encoder, self.graphs_reason = other.loaded, other.encoder, other.graphs_reason
        self.decoder, self.reserved_by_step = other.decoder, dict(other.reserved_by_step)

    # ----------------------------------------------------------------- the build steps

    def load_weights(self, settings: AppSettings) -> None:
        """Load the model ``settings`` name (its encoder and decoder are built separately), after
        checking that its memory estimate fits the device."""
        check_memory_fits(settings)
        device = pick_device(settings.model.device)
        with recording_growth(device, self.reserved_by_step, "weights"):
            self.loaded = load_model(settings.model, progress=self.progress)

    def build_encoder(self, settings: AppSettings) -> None:
        """Replace the encoder: the old one gives back its graphs and the tower's attention first."""
        loaded = self.require_model()
        self.drop_encoder()
        with recording_growth(loaded.device, self.reserved_by_step, "encoder"):
            self.encoder, self.graphs_reason = make_vision_encoder(
                loaded.adapter, settings.encoder, progress=self.progress, limits=loaded.limits
            )

    def build_decoder(self, settings: AppSettings) -> None:
        """Allocate the decoder's state for the settings' context and capture the decode step graphs."""
        loaded = self.require_model()
        self.close_decoder()
        with recording_growth(loaded.device, self.reserved_by_step, "decoder"):
            decoding = settings.decoding
            language = loaded.adapter.language_model(kv_cache_format(decoding.kv_cache_dtype))
            self.decoder = Decoder(
                language,
                context_for(settings, language, loaded.limits),
                decoding.min_bucket,
                use_graphs=decoding.use_graphs,
                progress=self.progress,
                prefill_chunk_tokens=decoding.prefill_chunk_tokens,
            )

    def drop_encoder(self) -> None:
        """Give back the encoder's graphs and the tower's attention, and hold no encoder."""
        if self.encoder is not None:
            self.encoder.clear()
        self.encoder = None

    def close_decoder(self) -> None:
        """Give back the decoder's cache and graphs, and hold no decoder."""
        if self.decoder is not None:
            self.decoder.close()
        self.decoder = None

    def release(self) -> None:
        """Drop the model with its encoder and decoder, giving their memory back."""
        self.close_decoder()
        self.drop_encoder()
        self.loaded = None
        free_cached_memory()

    # ----------------------------------------------------------------- what a request needs

    def require_model(self) -> LoadedModel:
        if self.loaded is None:
            raise FramewiseError("The model is not loaded yet; wait for loading to finish.")
        return self.loaded

    def require_encoder(self) -> VisionEncoder:
        if self.encoder is None:
            raise FramewiseError("The vision encoder is not ready; wait for loading to finish.")
        return self.encoder

    def require_decoder(self) -> Decoder:
        if self.decoder is None:
            raise FramewiseError("The decoder is not ready; wait for loading to finish.")
        return self.decoder


def free_cached_memory() -> None:
    """Hand the memory cached by dropped tensors back to the device."""
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
