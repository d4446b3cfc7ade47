"""The plain types of the vision-encoder seam, and the protocol a model family implements for graphs.

Nothing here names a model: :class:`VisionEncoder` is what the engine asks of an encoder (the
eager one or the graph manager); :class:`SupportsEncoderGraphs` is what the graph manager
(:mod:`framewise.core.encoding.manager`) asks of a model family's adapter, as vLLM's
``EncoderCudaGraphManager`` asks a model for ``SupportsEncoderCudaGraph``. The dataclasses are
shared by the manager, the eager encoder and the adapters, which keeps their imports one-way.

An item's patch rows are laid out as ``grid_thw = (t, h, w)``: ``t`` *slices* of ``h * w`` rows
each. A slice is one attention sequence of the tower (a frame pair of a Qwen3-VL video), so an
item may be cut between slices without changing the result.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Mapping, Protocol, Sequence

from framewise.core.events import ChunkStats
from framewise.core.seam import PieceGrid

if TYPE_CHECKING:
    import torch

Modality = Literal["image", "video"]


@dataclass(frozen=True)
class VisionItem:
    """One image or video ready for the tower.

    ``pixel_values``: (t*h*w, row_width) patch rows in the model's order, where
    ``grid_thw = (t, h, w)`` counts slices (temporal patches) and patches along each side.
    ``repeated_frames`` counts the frames repeated to complete the last slice: they are encoded
    but were not sampled, so they are not counted as frames.
    """

    pixel_values: torch.Tensor
    grid_thw: tuple[int, int, int]
    modality: Modality
    repeated_frames: int = 0

    @property
    def patches(self) -> int:
        t, h, w = self.grid_thw
        return t * h * w

    def without_pixels(self) -> VisionItem:
        """This item once the tower has encoded it: its grid, modality and repeated frames, with
        ``pixel_values`` emptied to (0, row_width). A prompt needs only the grid, and the rows of a
        long clip (float32) take four times its uint8 frames."""
        empty = self.pixel_values.new_empty((0, *self.pixel_values.shape[1:]))
        return dataclasses.replace(self, pixel_values=empty)


@dataclass(frozen=True)
class EncodedItem:
    """The tower's output for one item.

    ``embeds``: (tokens, out_hidden) merged tokens; ``deepstack``: one tensor of the same
    shape per extra feature layer the language model takes (empty for towers without them).
    """

    embeds: torch.Tensor
    deepstack: tuple[torch.Tensor, ...]

    @classmethod
    def from_outputs(cls, outputs: Sequence[torch.Tensor]) -> EncodedItem:
        """The item of a tower's outputs in their order: merged tokens first, then the extra layers."""
        embeds, *layers = outputs
        return cls(embeds=embeds, deepstack=tuple(layers))

    @property
    def nbytes(self) -> int:
        """Bytes of the item's tensors."""
        return sum(tensor.numel() * tensor.element_size() for tensor in (self.embeds, *self.deepstack))

    def to_host(self) -> EncodedItem:
        """This item with its tensors in the host's memory (itself where they already are)."""
        if self.embeds.device.type == "cpu":
            return self
        return EncodedItem(embeds=self.embeds.cpu(), deepstack=tuple(layer.cpu() for layer in self.deepstack))


@dataclass(frozen=True)
class BufferSpec:
    """One static buffer of a captured graph: ``shape`` and ``dtype``.

    With ``per_budget`` the leading dimension is rows (input rows, or output rows for an
    output buffer) and each budget's graph reads its leading rows; without it every graph reads
    the whole buffer.
    """

    shape: tuple[int, ...]
    dtype: torch.dtype
    per_budget: bool = True


@dataclass(frozen=True)
class GraphBuffers:
    """What the static buffers of a set of graphs must be, sized for ``rows`` input rows.

    ``row_width``: values per input row (the pixel rows are the manager's own buffer, in the
    model's dtype); ``inputs``: the model's other inputs, by name; ``outputs``: the tower's
    outputs in order, merged tokens first.
    """

    row_width: int
    inputs: Mapping[str, BufferSpec]
    outputs: tuple[BufferSpec, ...]


@dataclass(frozen=True)
class CaptureReport:
    """What capturing cost: wall seconds and the device memory the graphs (and their buffers) hold."""

    budgets: tuple[int, ...]
    attention_backend: str
    fused: bool
    seconds: float
    graph_memory_bytes: int


@dataclass(frozen=True)
class EncoderOutput:
    """Per-item outputs in the order the items were given, and one stats record per pass."""

    items: list[EncodedItem]
    chunks: list[ChunkStats]


class SupportsEncoderGraphs(Protocol):
    """A model family's vision tower, as the graph manager and the eager encoder drive it.

    Every tensor the model's forward takes or returns, every keyword and config field, stays
    behind these methods; the manager handles only rows, budgets and buffers.
    """

    device: torch.device
    dtype: torch.dtype

    def output_rows(self, rows: int) -> int:
        """Output rows (merged tokens) the tower makes of ``rows`` input rows of whole slices."""
        ...

    def frames_per_slice(self, modality: str) -> int:
        """Frames one slice of an item of ``modality`` stands for."""
        ...

    def check_item(self, item: VisionItem) -> None:
        """Raise :class:`~framewise.core.errors.EncoderError` when ``item`` cannot be encoded."""
        ...

    def attention_backends(self) -> list[str]:
        """Attention backends that can run here, graph-safe ones first, ``eager`` last."""
        ...

    def resolve_attention(self, requested: str, excluded: tuple[str, ...] = ()) -> str:
        """The graph-safe backend to use for ``requested`` (``auto`` or a name), or raise EncoderError;
        ``auto`` passes over the ``excluded`` ones (those that failed) while another is left."""
        ...

    def use_attention(self, backend: str) -> None:
        """Switch the tower to ``backend`` for capture and replay."""
        ...

    def use_fused_forward(self, enabled: bool) -> bool:
        """Capture a fused forward from the next :meth:`use_attention` on (or the tower's own);
        returns whether the model family has one. Its kernels compile at the first forward."""
        ...

    def release_graphs(self) -> None:
        """Undo what capture set on the tower (attention, fused forward) and drop what
        :meth:`replay_inputs` keeps for later passes, device memory included."""
        ...

    def graph_buffers(self, rows: int, max_sequences: int) -> GraphBuffers:
        """The static buffers for graphs of up to ``rows`` rows and ``max_sequences`` slices."""
        ...

    def fill_capture_inputs(self, inputs: Mapping[str, torch.Tensor], rows: int) -> None:
        """Fill one budget's input views (``rows`` rows) with values valid to capture a graph on."""
        ...

    def replay_inputs(self, pieces: Sequence[PieceGrid], rows: int, max_sequences: int) -> dict[str, torch.Tensor]:
        """Tensors for one pass over ``pieces`` padded to ``rows`` rows, by input name.

        The manager copies each into the leading rows of its buffer and zeroes the rest. A returned
        tensor must never be written afterwards: when a pass returns the very tensor the buffer
        already holds, the manager skips the copy.
        """
        ...

    def graph_forward(
        self, pixels: torch.Tensor, inputs: Mapping[str, torch.Tensor], rows: int
    ) -> Sequence[torch.Tensor]:
        """The forward captured into a graph: ``pixels`` (rows, row_width) and the input views of
        one budget in, the outputs (output_rows(rows), hidden) each, in :attr:`GraphBuffers.outputs` order."""
        ...

    def eager_forward(self, items: Sequence[VisionItem]) -> Sequence[torch.Tensor]:
        """The tower's own forward on ``items`` together: outputs with the items' rows one after another."""
        ...

    def metadata_counts(self) -> tuple[int, int]:
        """Hits and misses of the adapter's metadata caches so far (per pass and per grid, summed)."""
        ...


class VisionEncoder(Protocol):
    """What the engine needs of a vision encoder.

    ``captured``: whether graphs run the tower; ``budgets``: the captured token budgets
    (empty without graphs); ``report``: what capturing cost, ``None`` without graphs.
    """

    name: str

    @property
    def captured(self) -> bool: ...

    @property
    def budgets(self) -> tuple[int, ...]: ...

    @property
    def report(self) -> CaptureReport | None: ...

    def encode(self, items: Sequence[VisionItem]) -> EncoderOutput:
        """Encode ``items``; outputs keep their order."""
        ...

    def clear(self) -> None:
        """Give back what the encoder holds and undo what it changed on the model."""
        ...
