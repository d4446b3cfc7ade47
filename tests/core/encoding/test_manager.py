"""The graph manager with a second, toy model family: the manager holds nothing of Qwen3-VL.

The toy tower mixes each row with the mean of its slice (so rows of one slice depend on each
other, and a padding row that leaked into a slice would change it), merges pairs of rows into
one token and gives a second feature layer. A video slice stands for three frames. Run
``direct`` (the same buffers and forward, no CUDA graph) so it runs on the CPU.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import pytest
import torch

from framewise.core.encoding import manager as manager_module
from framewise.core.encoding.defs import BufferSpec, CaptureReport, GraphBuffers, VisionItem
from framewise.core.encoding.eager import EagerVisionEncoder
from framewise.core.encoding.manager import GraphVisionEncoder, make_vision_encoder
from framewise.core.errors import EncoderError
from framewise.core.seam import FamilyLimits, PieceGrid
from framewise.core.settings import EncoderSettings

ROW_WIDTH, HIDDEN, OUT = 6, 8, 5
SETTINGS = EncoderSettings(budgets=(16, 32, 64), max_items_per_batch=3, max_frame_pairs_per_batch=6)
# The toy tower's limits: rows merge by four into budgets, a video slice is three frames.
TOY_LIMITS = FamilyLimits(name="Toy", patch_size=1, merge_size=2, frames_per_slice=3, max_frames=768, max_clip_blocks=24576)


class ToyTower(torch.nn.Module):
    """rows (n, ROW_WIDTH) -> tokens (n/2, OUT) and their tanh; ``segments`` (n,) slice of each row,
    ``mask`` (n,) 1 for real rows. Static shapes only, so it could be captured."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Linear(ROW_WIDTH, HIDDEN)
        self.merge = torch.nn.Linear(2 * HIDDEN, OUT)

    def forward(self, rows: torch.Tensor, segments: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, ...]:
        hidden = self.embed(rows) * mask[:, None]
        sums = torch.zeros_like(hidden).index_add_(0, segments, hidden)
        counts = torch.zeros_like(mask).index_add_(0, segments, mask).clamp(min=1)
        hidden = hidden + sums[segments] / counts[segments, None]
        tokens = self.merge(hidden.reshape(-1, 2 * HIDDEN))
        return tokens, torch.tanh(tokens)


def slice_segments(pieces: Sequence[PieceGrid]) -> torch.Tensor:
    """(rows,) int64: every slice of every piece its own id, in order."""
    lengths = [h * w for _, (t, h, w) in pieces for _ in range(t)]
    return torch.repeat_interleave(torch.arange(len(lengths)), torch.tensor(lengths))


class ToyAdapter:
    """The toy tower behind the manager's protocol; counts its attention switches."""

    def __init__(self, tower: ToyTower) -> None:
        self.tower = tower
        self.device = torch.device("cpu")
        self.dtype = torch.float32
        self.attention = "stock"

    def output_rows(self, rows: int) -> int:
        return rows // 2

    def frames_per_slice(self, modality: str) -> int:
        return 3 if modality == "video" else 1

    def check_item(self, item: VisionItem) -> None:
        if item.pixel_values.shape != (item.patches, ROW_WIDTH):
            raise EncoderError("rows do not match the grid")

    def attention_backends(self) -> list[str]:
        return ["toy", "eager"]

    def resolve_attention(self, requested: str, excluded: tuple[str, ...] = ()) -> str:
        return "toy"

    def use_attention(self, backend: str) -> None:
        self.attention = backend

    def use_fused_forward(self, enabled: bool) -> bool:
        return False  # a toy tower has no fused forward

    def release_graphs(self) -> None:
        self.attention = "stock"

    def graph_buffers(self, rows: int, max_sequences: int) -> GraphBuffers:
        out = BufferSpec((rows // 2, OUT), torch.float32)
        inputs = {"segments": BufferSpec((rows,), torch.int64), "mask": BufferSpec((rows,), torch.float32)}
        return GraphBuffers(row_width=ROW_WIDTH, inputs=inputs, outputs=(out, out))

    def fill_capture_inputs(self, inputs: Mapping[str, torch.Tensor], rows: int) -> None:
        inputs["mask"].fill_(1.0)

    def replay_inputs(self, pieces: Sequence[PieceGrid], rows: int, max_sequences: int) -> dict[str, torch.Tensor]:
        segments = slice_segments(pieces)  # real rows only: the manager zeroes the tails
        return {"segments": segments, "mask": torch.ones(len(segments))}

    def graph_forward(self, pixels: torch.Tensor, inputs: Mapping[str, torch.Tensor], rows: int):
        return self.tower(pixels, inputs["segments"], inputs["mask"])

    def eager_forward(self, items: Sequence[VisionItem]):
        segments = slice_segments([(item.modality, item.grid_thw) for item in items])
        return self.tower(torch.cat([item.pixel_values for item in items]), segments, torch.ones(len(segments)))

    def metadata_counts(self) -> tuple[int, int]:
        return 0, 0


@pytest.fixture()
def adapter() -> ToyAdapter:
    torch.manual_seed(0)
    return ToyAdapter(ToyTower().eval())


def toy_item(grid: tuple[int, int, int], modality: str = "video", seed: int = 0) -> VisionItem:
    generator = torch.Generator().manual_seed(seed)
    t, h, w = grid
    return VisionItem(torch.randn(t * h * w, ROW_WIDTH, generator=generator), grid, modality)  # type: ignore[arg-type]


def assert_same(got, expected) -> None:
    assert len(got.items) == len(expected.items)
    for mine, theirs in zip(got.items, expected.items):
        assert mine.embeds.shape == theirs.embeds.shape
        torch.testing.assert_close(mine.embeds, theirs.embeds, rtol=1e-5, atol=1e-5)
        assert len(mine.deepstack) == len(theirs.deepstack) == 1
        torch.testing.assert_close(mine.deepstack[0], theirs.deepstack[0], rtol=1e-5, atol=1e-5)


def alone(adapter: ToyAdapter, items: list[VisionItem]):
    """Each item through the eager encoder by itself: what every batching must reproduce."""
    outputs = [EagerVisionEncoder(adapter).encode([item]).items[0] for item in items]
    return type("Expected", (), {"items": outputs})


def test_toy_family_runs_through_the_manager_like_its_eager_forward(adapter):
    items = [
        toy_item((1, 2, 4), "image", 1),
        toy_item((3, 2, 3), "video", 2),
        toy_item((9, 2, 2), "video", 3),  # 9 slices > 6 sequences: cut between slices
        toy_item((1, 10, 8), "image", 4),  # 80 rows > every budget: eager
        *[toy_item((1, 2, 2), "image", 5 + i) for i in range(4)],  # more items than one batch takes
    ]
    encoder = GraphVisionEncoder(adapter, SETTINGS, direct=True, limits=TOY_LIMITS)
    try:
        assert adapter.attention == "toy"
        got = encoder.encode(items)
        assert_same(got, alone(adapter, items))
        assert [chunk.budget for chunk in got.chunks if not chunk.graph_hit] == [None]
        assert "80 patches" in next(chunk.fallback_reason for chunk in got.chunks if not chunk.graph_hit)
        # three frames per toy video slice, one per image: counted by the adapter, not by the manager
        assert sum(chunk.frames for chunk in got.chunks) == 3 * (3 + 9) + 1 + 1 + 4
        assert all(chunk.patches <= chunk.budget and chunk.items <= 3 for chunk in got.chunks if chunk.graph_hit)
        stats = encoder.stats()
        assert (stats.items_replayed, stats.items_eager, stats.eager_passes) == (7, 1, 1)
    finally:
        encoder.clear()
    assert adapter.attention == "stock"


def test_a_smaller_batch_after_a_larger_one_sees_no_stale_rows(adapter):
    """The tails of every input buffer are zeroed: rows a previous pass filled must not join a slice."""
    encoder = GraphVisionEncoder(adapter, SETTINGS, direct=True, limits=TOY_LIMITS)
    try:
        big, small = [toy_item((6, 2, 4), "video", 1)], [toy_item((1, 2, 2), "image", 2)]
        first = encoder.encode(big)
        second = encoder.encode(small)
        assert [chunk.budget for chunk in first.chunks + second.chunks] == [64, 16]
        assert_same(second, alone(adapter, small))
        third = encoder.encode([toy_item((1, 2, 6), "image", 3)])  # 12 rows into budget 16 after 48 into 64
        assert_same(third, alone(adapter, [toy_item((1, 2, 6), "image", 3)]))
    finally:
        encoder.clear()


class CachingToyAdapter(ToyAdapter):
    """Returns the very same (never written) input tensors for a pass it has seen, as a cache does."""

    def __init__(self, tower: ToyTower) -> None:
        super().__init__(tower)
        self.passes: dict = {}

    def replay_inputs(self, pieces: Sequence[PieceGrid], rows: int, max_sequences: int) -> dict[str, torch.Tensor]:
        key = (tuple(pieces), rows)
        if key not in self.passes:
            self.passes[key] = super().replay_inputs(pieces, rows, max_sequences)
        return dict(self.passes[key])


def test_cached_inputs_are_copied_again_whenever_another_pass_wrote_the_buffers():
    """Passes of other budgets and shapes in between a repeat: every output still equals the item alone."""
    torch.manual_seed(0)
    adapter = CachingToyAdapter(ToyTower().eval())
    small, other_small, big = toy_item((1, 2, 2), "image", 1), toy_item((1, 2, 3), "image", 2), toy_item((6, 2, 4))
    encoder = GraphVisionEncoder(adapter, SETTINGS, direct=True, limits=TOY_LIMITS)
    try:
        for request in ([small], [small], [big], [small], [other_small], [small], [small, other_small], [big]):
            output = encoder.encode(request)
            assert_same(output, alone(adapter, request))
        assert len(adapter.passes) == 4
    finally:
        encoder.clear()


def test_an_input_tensor_already_in_its_buffer_is_not_copied_again():
    state = manager_module._BufferState(torch.zeros(6, 2))
    buffers = {"a": torch.zeros(6)}
    source, other = torch.arange(1.0, 5.0), torch.arange(1.0, 5.0)
    state.copy_inputs(buffers, {"a": source})
    assert buffers["a"].tolist() == [1, 2, 3, 4, 0, 0]
    buffers["a"].fill_(7)  # nothing but the manager writes the buffers; this shows the copy is skipped
    state.copy_inputs(buffers, {"a": source})
    assert buffers["a"].tolist() == [7] * 6
    state.copy_inputs(buffers, {"a": other})  # equal values, another tensor: copied
    assert buffers["a"].tolist() == [1, 2, 3, 4, 0, 0]
    buffers["a"].fill_(7)
    state.copy_inputs({"a": buffers["a"][:5]}, {"a": other})  # another budget's view: copied
    assert buffers["a"].tolist() == [1, 2, 3, 4, 0, 7]
    state.captured_into(6)
    buffers["a"].fill_(7)
    state.copy_inputs(buffers, {"a": other})  # a capture wrote the buffers: copied
    assert buffers["a"].tolist() == [1, 2, 3, 4, 0, 0]


def test_the_pixel_rows_a_graph_reads_past_a_pass_are_always_zero():
    """Over random passes of several budgets on one shared buffer, as if every tail were zeroed."""
    generator = torch.Generator().manual_seed(0)
    shared = torch.zeros(64, 2)
    state = manager_module._BufferState(shared)
    shared.normal_(generator=generator)
    state.captured_into(64)
    for _ in range(300):
        budget = (16, 32, 64)[int(torch.randint(3, (1,), generator=generator))]
        rows = int(torch.randint(budget + 1, (1,), generator=generator))
        view = shared[:budget]
        view[:rows] = 1.0 + torch.rand(rows, 2, generator=generator)
        state.zero_pixels_from(rows)
        assert (view[rows:] == 0).all() and (view[:rows] >= 1).all()


def test_outputs_split_by_the_adapters_row_ratio(adapter):
    items = [toy_item((2, 2, 3), "video", 1), toy_item((1, 4, 4), "image", 2)]
    for encoder in (EagerVisionEncoder(adapter), GraphVisionEncoder(adapter, SETTINGS, direct=True, limits=TOY_LIMITS)):
        output = encoder.encode(items)
        assert [item.embeds.shape for item in output.items] == [(6, OUT), (8, OUT)]  # rows / 2, not / 4
        assert sum(chunk.frames for chunk in output.chunks) == 2 * 3 + 1
        encoder.clear()


def test_the_factory_runs_the_toy_eager_without_cuda(adapter):
    encoder, reason = make_vision_encoder(adapter, SETTINGS, limits=TOY_LIMITS)
    assert encoder.name == "eager" and not encoder.captured and encoder.budgets == () and encoder.report is None
    assert reason == "CUDA not available: the encoder runs eager on the CPU"
    with pytest.raises(EncoderError, match="CUDA device"):
        GraphVisionEncoder(adapter, SETTINGS, limits=TOY_LIMITS)



class CudaAdapterStub:
    """An adapter that says it is on CUDA and whose ``auto`` attention is "triton", then "varlen"."""

    device = torch.device("cuda")

    def resolve_attention(self, requested: str, excluded: tuple[str, ...] = ()) -> str:
        if requested != "auto":
            return requested
        left = [name for name in ("triton", "varlen") if name not in excluded]
        return left[0] if left else "sdpa_masked"


def capturing_only(monkeypatch, works) -> list[tuple[str, bool]]:
    """Replace the graph encoder by one that captures when ``works(backend, fused)``; returns the attempts."""
    attempts: list[tuple[str, bool]] = []

    class Graphs:
        def __init__(self, adapter, settings, progress=None, limits=None):
            attempts.append((settings.attention_backend, settings.fuse_kernels))
            if not works(settings.attention_backend, settings.fuse_kernels):
                raise EncoderError(f"{settings.attention_backend} broke")
            self.report = CaptureReport(
                budgets=(64, 256), attention_backend=settings.attention_backend, fused=settings.fuse_kernels,
                seconds=1.0, graph_memory_bytes=0,
            )

    monkeypatch.setattr(manager_module, "GraphVisionEncoder", Graphs)
    return attempts


def test_auto_attention_falls_back_to_the_next_backend_when_capture_fails(monkeypatch):
    attempts = capturing_only(monkeypatch, lambda backend, fused: backend == "varlen")
    encoder, reason = make_vision_encoder(CudaAdapterStub(), EncoderSettings(), limits=TOY_LIMITS)
    assert attempts == [("triton", True), ("triton", False), ("varlen", True)]
    assert encoder.report.attention_backend == "varlen" and encoder.report.fused
    assert reason.startswith("2 CUDA graphs captured (varlen attention, fused kernels)")
    assert "triton attention with fused kernels unavailable (triton broke)" in reason
    assert "triton attention with the tower's own kernels unavailable (triton broke)" in reason


def test_a_chosen_backend_is_never_swapped_and_eager_is_the_last_resort(monkeypatch):
    attempts = capturing_only(monkeypatch, lambda backend, fused: False)
    encoder, reason = make_vision_encoder(CudaAdapterStub(), EncoderSettings(attention_backend="varlen"), limits=TOY_LIMITS)
    assert attempts == [("varlen", True), ("varlen", False)]
    assert encoder.name == "eager" and reason.startswith("CUDA graphs unavailable: the encoder runs eager; ")

    attempts.clear()
    make_vision_encoder(CudaAdapterStub(), EncoderSettings(fuse_kernels=False), limits=TOY_LIMITS)
    assert attempts == [("triton", False), ("varlen", False), ("sdpa_masked", False)]
