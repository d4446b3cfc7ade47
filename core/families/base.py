"""What the rest of core asks of a model family: the :class:`ModelFamily` protocol, the
:class:`FamilyAdapter` a loaded model gives the encoder and the decoder, and the shapes of what a
family's preprocessing and prompt hand back.

Nothing here names a model. The plain values of the seam (limits, vision spans, decoded answers)
live in :mod:`framewise.core.seam`, below everything that reads them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Protocol, Sequence

from framewise.core.encoding.defs import SupportsEncoderGraphs
from framewise.core.seam import FamilyLimits, LanguageLayout, PieceGrid, VisionSpan

if TYPE_CHECKING:
    import numpy as np
    import torch

    from framewise.core.decoding.defs import LanguageModel
    from framewise.core.decoding.pruned_positions import UnprunedPrompt
    from framewise.core.encoding.defs import VisionItem
    from framewise.core.encoding.pruning import Retention
    from framewise.core.memory_plan import MemoryEstimate
    from framewise.core.quantization.kv_formats import KVCacheFormat
    from framewise.core.quantization.weight_format import WeightFormat
    from framewise.core.settings import SamplingSettings
    from framewise.core.video import FrameSizing, Resize


class FamilyAdapter(SupportsEncoderGraphs, Protocol):
    """A loaded model's side of the encoder seam, which also gives the decoder its language model."""

    def language_model(self, cache_format: KVCacheFormat) -> LanguageModel:
        """The language half for the decoder, whose states keep keys and values in ``cache_format``."""
        ...


class PromptInputs(Protocol):
    """A prompt the language model takes, tensors (1, L) int64 on the CPU.

    ``token_types`` are the family's own per-token kinds, passed through to its language model;
    ``spans`` place the items' features; ``grids`` give every item's ``(modality, grid_thw)`` in
    item order; ``text`` is the prompt as tokenized. ``unpruned`` is, for a prompt about a clip
    whose video tokens were pruned (:meth:`ModelFamily.with_retention`), the prompt it was cut
    from, whose positions the kept tokens keep; ``None`` when nothing was pruned.
    """

    @property
    def input_ids(self) -> torch.Tensor: ...

    @property
    def token_types(self) -> torch.Tensor: ...

    @property
    def spans(self) -> tuple[VisionSpan, ...]: ...

    @property
    def grids(self) -> tuple[PieceGrid, ...]: ...

    @property
    def text(self) -> str: ...

    @property
    def unpruned(self) -> UnprunedPrompt | None: ...


class PreparedVideo(Protocol):
    """A clip the family preprocessed: ``item`` is the tower's input; the rest is what the
    family's prompt needs of the clip (its frame times)."""

    @property
    def item(self) -> VisionItem: ...


@dataclass(frozen=True)
class CancelPoints:
    """Modules before each of which a cancel is checked: the vision tower's blocks and the
    language model's layers (hooks fire where Python calls them, not inside a graph replay)."""

    vision: Sequence[torch.nn.Module]
    language: Sequence[torch.nn.Module]


class ModelFamily(Protocol):
    """One family of vision-language checkpoints (e.g. Qwen3-VL), as the rest of core uses it.

    ``limits`` are those of the family's released checkpoints, against which settings are checked
    before a model is loaded; :meth:`limits_of` gives a loaded model's own. ``chat_template_options``
    are the keywords every rendering of a checkpoint's chat template gets, here or on a server
    (Qwen3.5's ``enable_thinking=False``, so that the answer begins at once).
    """

    name: str
    model_types: tuple[str, ...]
    limits: FamilyLimits
    chat_template_options: Mapping[str, Any]

    def load_weights(
        self, path: Path, model_type: str, weight_format: WeightFormat, dtype: torch.dtype, device: torch.device
    ) -> tuple[torch.nn.Module, dict[str, Any]]:
        """The checkpoint in ``path``, and transformers' loading report (``missing_keys``,
        ``mismatched_keys``). Its linear layers are held in ``weight_format``, chosen once by the
        loader (:func:`~framewise.core.quantization.registry.choose_weight_format`), except those
        the family keeps in floating point; everything else is in ``dtype``. Float weights may load
        on the CPU (the loader moves them to ``device``); a quantized format streams onto ``device``
        through :func:`~framewise.core.quantization.loading.load_checkpoint`, never holding the
        whole model in full precision."""
        ...

    def estimate_memory(
        self, config: Mapping[str, Any], weight_format: WeightFormat, activations: torch.dtype, context_tokens: int,
        encoder_budgets: Sequence[int], device_type: str, clip_tokens: int = 0,
        cache_format: KVCacheFormat | None = None, tower_dtype: torch.dtype | None = None,
    ) -> MemoryEstimate:
        """The memory a checkpoint with this config.json (a dict) takes on a ``device_type``
        device (``"cuda"``, ``"cpu"``, ...), before loading it: its linear layers in
        ``weight_format`` (:meth:`~framewise.core.quantization.weight_format.WeightFormat.linear_bytes`),
        the vision tower in ``tower_dtype`` (None: in ``activations``), everything else in
        ``activations``, a KV cache of ``context_tokens`` positions in ``cache_format`` (None: in
        ``activations``), encoder graphs for ``encoder_budgets``, and the features an open clip of
        ``clip_tokens`` video tokens keeps."""
        ...

    def language_layout(self, config: Mapping[str, Any]) -> LanguageLayout:
        """The language model's layers by kind, and the keys and values they keep of a token, read
        from a checkpoint's config.json (a dict) without torch."""
        ...

    def adapter(self, model: torch.nn.Module) -> FamilyAdapter:
        """The model's side of the encoder seam, which also gives the decoder's language model."""
        ...

    def limits_of(self, model: torch.nn.Module) -> FamilyLimits:
        """The limits of one loaded checkpoint (its patch and merge sizes)."""
        ...

    def cancel_points(self, model: torch.nn.Module) -> CancelPoints:
        """Where a running pass of ``model`` checks for a cancel."""
        ...

    def vision_tower(self, model: torch.nn.Module) -> torch.nn.Module:
        """The module that holds ``model``'s vision tower (its weights are reported apart from the
        language model's)."""
        ...

    def frame_sizing(
        self, sampling: SamplingSettings, limits: FamilyLimits, resize: Resize | None = None
    ) -> FrameSizing:
        """How clip readers size sampled frames for this family, resampled by ``resize`` (``None``:
        the family's own resampler, as its tower was trained on; a backend that sends the frames
        elsewhere may pass one that needs no torch)."""
        ...

    def preprocess_video(
        self, frames: np.ndarray, timestamps: Sequence[float], limits: FamilyLimits
    ) -> PreparedVideo:
        """Sampled frames (T, h, w, 3) uint8 at :meth:`frame_sizing`'s size and their T times in
        seconds, ready for the tower and the prompt."""
        ...

    def join_videos(self, parts: Sequence[PreparedVideo]) -> PreparedVideo:
        """One clip from consecutive parts of it preprocessed one by one (each but the last a whole
        number of slices), as :meth:`preprocess_video` would have made it at once."""
        ...

    def with_retention(self, video: PreparedVideo, retention: Retention) -> PreparedVideo:
        """``video`` after its merged tokens were pruned (its features cut to the rows ``retention``
        keeps, :func:`~framewise.core.encoding.pruning.prune_encoded`): its prompt then holds, per
        slice, only the tokens kept, each at the position it had, and says each slice's kept count."""
        ...

    def preprocess_image(self, image: np.ndarray, limits: FamilyLimits) -> VisionItem:
        """One (H, W, 3) uint8 image resized and patchified."""
        ...

    def build_prompt(
        self,
        tokenizer: Any,
        question: str,
        *,
        videos: Sequence[PreparedVideo] = (),
        images: Sequence[VisionItem] = (),
        history: Sequence[tuple[str, str]] = (),
        limits: FamilyLimits,
    ) -> PromptInputs:
        """The prompt asking ``question`` after the ``history`` turns about ``videos`` (from
        :meth:`preprocess_video`) and ``images``; items are numbered videos first, then images.
        An answer that is a :class:`~framewise.core.seam.DecodedAnswer` enters the prompt as its token ids."""
        ...

    def chat_messages(
        self, question: str, *, videos: int = 0, images: int = 0, history: Sequence[tuple[str, str]] = ()
    ) -> list[dict[str, Any]]:
        """The conversation in the transformers chat format, visual content first."""
        ...
