"""The vision encoder through CUDA graphs: captured once per token budget, replayed per request.

At construction one graph is captured per budget (largest first, into one shared memory pool).
Every graph reads the leading rows of one set of static input buffers (patch rows,
interpolation taps, rotary positions, cu_seqlens) and copies its outputs into one set of
static output buffers, all sized for the largest budget. A request is planned into batches
(:mod:`framewise.core.encoder_planning`), each batch's metadata comes from a cache
(:mod:`framewise.core.vision_metadata`), and each batch is copied in (tails zeroed), replayed and sliced
back per item, deepstack features included. Only what no graph can hold runs eagerly, with the
reason recorded. Every pass is timed with CUDA events and counted.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass
from typing import Callable, Sequence

import torch

from framewise.core.attention import REGISTERED_NAMES, available_attention_backends, register_backends, resolve_backend
from framewise.core.encoder import EagerVisionEncoder, EncodedItem, EncoderOutput, StageTimer, VisionEncoder, VisionItem
from framewise.core.encoder_planning import Batch, BatchLimits, PlanItem, plan_batches
from framewise.core.errors import EncoderError, FramewiseError
from framewise.core.events import ChunkStats, Progress
from framewise.core.settings import EncoderSettings
from framewise.core.vision_metadata import MetadataCache, TowerGeometry

__all__ = [
    "CaptureReport",
    "EncoderStats",
    "GraphVisionEncoder",
    "available_attention_backends",
    "make_vision_encoder",
]

ProgressCallback = Callable[[Progress], None]
LATENCY_SAMPLES = 10_000


@dataclass(frozen=True)
class CaptureReport:
    """What capturing cost: wall seconds and the device memory the graphs (and their buffers) hold."""

    budgets: tuple[int, ...]
    attention_backend: str
    seconds: float
    graph_memory_bytes: int
    pool_reserved_bytes: int


@dataclass(frozen=True)
class EncoderStats:
    """Cumulative counters over the encoder's life (plain numbers, safe to send to the GUI)."""

    items_replayed: int
    items_eager: int
    replays: int
    eager_passes: int
    metadata_hits: int
    metadata_misses: int
    ms_per_frame_mean: float | None
    ms_per_frame_p50: float | None
    ms_per_frame_p99: float | None
    fallback_reasons: tuple[str, ...]

    @property
    def hit_rate(self) -> float | None:
        """Share of items that went through a graph; ``None`` before the first item."""
        total = self.items_replayed + self.items_eager
        return self.items_replayed / total if total else None


@dataclass
class _BudgetGraph:
    """One budget's graph and its views of the shared static buffers (leading ``budget`` rows).

    Every graph reads its inputs from, and copies its outputs into, the same buffers sized for
    the largest budget, so a budget costs no buffer memory of its own.
    """

    budget: int
    pixels: torch.Tensor  # (budget, patch_dim) model dtype
    interp_indices: torch.Tensor  # (budget, 4) int64
    interp_weights: torch.Tensor  # (budget, 4) float32
    position_ids: torch.Tensor  # (budget, 2) int64
    cu_seqlens: torch.Tensor  # (max_sequences + 2,) int32
    embeds: torch.Tensor  # (budget / merge_unit, out_hidden)
    deepstack: tuple[torch.Tensor, ...]  # one (budget / merge_unit, out_hidden) per deepstack layer
    graph: torch.cuda.CUDAGraph | None = None


class GraphVisionEncoder:
    """Qwen3-VL's vision tower replayed through one CUDA graph per token budget.

    ``visual`` is a transformers ``Qwen3VLVisionModel`` (any released size; the MoE models use
    the same tower) already on its device and dtype. Graphs are captured at construction unless
    ``capture=False``. ``direct=True`` runs the same buffers and forward without a graph, which
    lets the whole path be tested on a CPU.
    """

    def __init__(
        self,
        visual: torch.nn.Module,
        settings: EncoderSettings,
        *,
        progress: ProgressCallback | None = None,
        capture: bool = True,
        direct: bool = False,
    ) -> None:
        settings.validate()
        parameter = next(visual.parameters())
        self.visual = visual
        self.device = parameter.device
        self.dtype = parameter.dtype
        self.direct = direct
        if not direct and self.device.type != "cuda":
            raise EncoderError("CUDA graphs need the vision tower on a CUDA device; it is on the CPU.")
        self._progress = progress
        self._geometry = TowerGeometry.from_visual(visual)
        self._merge_unit = self._geometry.merge_size**2
        self._patch_dim = _patch_dim(visual.config)
        self._original_attention = visual.config._attn_implementation
        self.metadata = MetadataCache(self._geometry)
        self._graphs: dict[int, _BudgetGraph] = {}
        self._configure(settings)
        self._reset_counters()
        self.report: CaptureReport | None = None
        if capture:
            self.capture()

    # ------------------------------------------------------------------ public state

    @property
    def name(self) -> str:
        return f"cuda-graphs ({self.attention_backend})" if not self.direct else f"direct ({self.attention_backend})"

    @property
    def budgets(self) -> tuple[int, ...]:
        return self.limits.budgets

    @property
    def captured(self) -> bool:
        return bool(self._graphs)

    @property
    def capture_seconds(self) -> float | None:
        return self.report.seconds if self.report else None

    @property
    def graph_memory_mb(self) -> float | None:
        return self.report.graph_memory_bytes / 2**20 if self.report else None

    def static_outputs(self, budget: int) -> tuple[torch.Tensor, ...]:
        """The whole output buffers of one budget's graph (merged tokens, then deepstack), padding rows included."""
        graph = self._graphs[budget]
        return (graph.embeds, *graph.deepstack)

    def stats(self) -> EncoderStats:
        """A snapshot of the cumulative counters and the per-frame latency distribution."""
        samples = sorted(self._ms_per_frame)
        return EncoderStats(
            items_replayed=self._items_replayed,
            items_eager=self._items_eager,
            replays=self._replays,
            eager_passes=self._eager_passes,
            metadata_hits=self.metadata.hits,
            metadata_misses=self.metadata.misses,
            ms_per_frame_mean=sum(samples) / len(samples) if samples else None,
            ms_per_frame_p50=percentile(samples, 50),
            ms_per_frame_p99=percentile(samples, 99),
            fallback_reasons=tuple(self._fallback_reasons),
        )

    # ------------------------------------------------------------------ capture and settings

    def capture(self) -> CaptureReport:
        """Capture one graph per budget, largest first, into one shared pool; report time and memory."""
        if self._graphs:
            assert self.report is not None
            return self.report
        register_backends()
        self.visual.config._attn_implementation = REGISTERED_NAMES[self.attention_backend]
        budgets = sorted(self.limits.budgets, reverse=True)
        memory_before = _memory_reserved(self.device)
        started = time.perf_counter()
        pool = torch.cuda.graph_pool_handle() if not self.direct else None
        try:
            with torch.inference_mode():
                buffers = self._allocate()
                for done, budget in enumerate(budgets):
                    self._report_progress(done, len(budgets), f"Capturing encoder graph for {budget} patches")
                    self._graphs[budget] = self._capture_budget(buffers, budget, pool)
        except RuntimeError as error:  # out of memory included
            self.clear()
            raise EncoderError(
                f"Capturing the encoder graphs failed ({error}); lower the max budget "
                "or turn CUDA graphs off in the encoder settings."
            ) from error
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        memory_after = _memory_reserved(self.device)
        self.report = CaptureReport(
            budgets=tuple(sorted(budgets)),
            attention_backend=self.attention_backend,
            seconds=time.perf_counter() - started,
            graph_memory_bytes=max(0, memory_after - memory_before),
            pool_reserved_bytes=memory_after,
        )
        self._report_progress(len(budgets), len(budgets), f"Captured {len(budgets)} encoder graphs")
        return self.report

    def clear(self) -> None:
        """Drop every graph and buffer and give their memory back; the tower's attention is restored."""
        self._graphs.clear()
        self.report = None
        self.visual.config._attn_implementation = self._original_attention
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.empty_cache()

    def reconfigure(self, settings: EncoderSettings) -> bool:
        """Apply new encoder settings; re-capture when they change the graphs. Returns whether it did."""
        settings.validate()
        if settings == self.settings and self._graphs:
            return False
        self.clear()
        self._configure(settings)
        self.capture()
        return True

    # ------------------------------------------------------------------ encoding

    def encode(self, items: Sequence[VisionItem]) -> EncoderOutput:
        """Encode ``items`` through the graphs; outputs in input order, one ChunkStats per pass."""
        if not items:
            return EncoderOutput(items=[], chunks=[])
        if not self._graphs:
            raise EncoderError("The encoder graphs are not captured; capture them before encoding.")
        for item in items:
            _check_item(item, self._patch_dim)
        plan = plan_batches([PlanItem(item.modality, item.grid_thw) for item in items], self.limits)
        parts: list[list[tuple[torch.Tensor, tuple[torch.Tensor, ...]]]] = [[] for _ in items]
        timed: list[tuple[Batch, StageTimer]] = []
        with torch.inference_mode():
            for batch in plan:
                if batch.budget is None:
                    timer, embeds, deepstack = self._run_eager(batch, items)
                else:
                    timer, embeds, deepstack = self._replay(batch, items)
                timed.append((batch, timer))
                self._slice_pieces(batch, embeds, deepstack, parts)
        chunks = [self._chunk_stats(index, batch, timer, items) for index, (batch, timer) in enumerate(timed)]
        return EncoderOutput(items=[_stitch(item_parts) for item_parts in parts], chunks=chunks)

    # ------------------------------------------------------------------ internals

    def _configure(self, settings: EncoderSettings) -> None:
        self.settings = settings
        self.limits = BatchLimits.from_settings(settings)
        self.attention_backend = resolve_backend(settings.attention_backend, self.device, self.dtype)

    def _reset_counters(self) -> None:
        self._items_replayed = 0
        self._items_eager = 0
        self._replays = 0
        self._eager_passes = 0
        self._ms_per_frame: deque[float] = deque(maxlen=LATENCY_SAMPLES)
        self._fallback_reasons: deque[str] = deque(maxlen=16)

    def _report_progress(self, current: int, total: int, message: str) -> None:
        if self._progress is not None:
            self._progress(Progress(stage="capture", current=current, total=total, message=message))

    def _allocate(self) -> dict[str, torch.Tensor]:
        """The shared static buffers, sized for the largest budget."""
        rows, device, config = self.limits.max_budget, self.device, self.visual.config
        tokens = rows // self._merge_unit
        return {
            "pixels": torch.zeros(rows, self._patch_dim, device=device, dtype=self.dtype),
            "interp_indices": torch.zeros(rows, 4, device=device, dtype=torch.int64),
            "interp_weights": torch.zeros(rows, 4, device=device, dtype=torch.float32),
            "position_ids": torch.zeros(rows, 2, device=device, dtype=torch.int64),
            "cu_seqlens": torch.zeros(self.limits.max_sequences + 2, device=device, dtype=torch.int32),
            "embeds": torch.zeros(tokens, config.out_hidden_size, device=device, dtype=self.dtype),
            "deepstack": torch.zeros(
                len(config.deepstack_visual_indexes), tokens, config.out_hidden_size, device=device, dtype=self.dtype
            ),
        }

    def _views(self, buffers: dict[str, torch.Tensor], budget: int) -> _BudgetGraph:
        tokens = budget // self._merge_unit
        return _BudgetGraph(
            budget=budget,
            pixels=buffers["pixels"][:budget],
            interp_indices=buffers["interp_indices"][:budget],
            interp_weights=buffers["interp_weights"][:budget],
            position_ids=buffers["position_ids"][:budget],
            cu_seqlens=buffers["cu_seqlens"],
            embeds=buffers["embeds"][:tokens],
            deepstack=tuple(layer[:tokens] for layer in buffers["deepstack"]),
        )

    def _run(self, graph: _BudgetGraph) -> None:
        """The tower on one budget's buffers, outputs copied into them. ``max_seqlen`` is the budget:
        it bounds every sequence, the trailing padding one included."""
        output = self.visual(
            graph.pixels,
            grid_thw=None,
            interp_indices=graph.interp_indices,
            interp_weights=graph.interp_weights,
            position_ids=graph.position_ids,
            cu_seqlens=graph.cu_seqlens,
            max_seqlen=graph.budget,
            return_dict=True,
        )
        graph.embeds.copy_(output.pooler_output)
        for buffer, layer in zip(graph.deepstack, output.deepstack_features, strict=True):
            buffer.copy_(layer)

    def _capture_budget(self, buffers: dict[str, torch.Tensor], budget: int, pool: object) -> _BudgetGraph:
        graph = self._views(buffers, budget)
        graph.cu_seqlens.fill_(budget)
        graph.cu_seqlens[0] = 0
        graph.pixels.normal_()
        if self.direct:
            return graph
        side_stream = torch.cuda.Stream(self.device)
        side_stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side_stream):
            self._run(graph)  # warm-up: kernels loaded, library handles and workspaces created
        torch.cuda.current_stream(self.device).wait_stream(side_stream)
        graph.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph.graph, pool=pool, capture_error_mode="thread_local"):
            self._run(graph)
        return graph

    def _replay(self, batch: Batch, items: Sequence[VisionItem]):
        assert batch.budget is not None
        graph = self._graphs[batch.budget]
        metadata = self.metadata.batch(
            [(items[p.item].modality, (p.count, *items[p.item].grid_thw[1:])) for p in batch.pieces],
            rows=batch.budget,
            max_sequences=self.limits.max_sequences,
        )
        with StageTimer(self.device) as timer:
            row = 0
            for piece in batch.pieces:
                source = items[piece.item].pixel_values
                start = piece.first * piece.patches_per_slice
                graph.pixels[row : row + piece.patches].copy_(source[start : start + piece.patches], non_blocking=True)
                row += piece.patches
            graph.pixels[row:].zero_()
            graph.interp_indices.copy_(metadata.interp_indices, non_blocking=True)
            graph.interp_weights.copy_(metadata.interp_weights, non_blocking=True)
            graph.position_ids.copy_(metadata.position_ids, non_blocking=True)
            graph.cu_seqlens.copy_(metadata.cu_seqlens, non_blocking=True)
            if graph.graph is None:
                self._run(graph)
            else:
                graph.graph.replay()
            tokens = batch.patches // self._merge_unit
            embeds = graph.embeds[:tokens].clone()
            deepstack = tuple(layer[:tokens].clone() for layer in graph.deepstack)
        self._replays += 1
        self._items_replayed += sum(1 for piece in batch.pieces if piece.first == 0)
        return timer, embeds, deepstack

    def _run_eager(self, batch: Batch, items: Sequence[VisionItem]):
        (piece,) = batch.pieces
        item = items[piece.item]
        pixels = item.pixel_values.to(device=self.device, dtype=self.dtype)
        grid = torch.tensor([item.grid_thw], device=self.device)
        with StageTimer(self.device) as timer:
            output = self.visual(pixels, grid_thw=grid, return_dict=True)
        self._eager_passes += 1
        self._items_eager += 1
        self._fallback_reasons.append(batch.fallback_reason or "")
        return timer, output.pooler_output, tuple(output.deepstack_features)

    def _slice_pieces(self, batch: Batch, embeds: torch.Tensor, deepstack: tuple[torch.Tensor, ...], parts) -> None:
        """Hand each piece its rows of the pass's output."""
        row = 0
        for piece in batch.pieces:
            tokens = piece.patches // self._merge_unit
            rows = slice(row, row + tokens)
            parts[piece.item].append((embeds[rows], tuple(layer[rows] for layer in deepstack)))
            row += tokens

    def _chunk_stats(self, index: int, batch: Batch, timer: StageTimer, items: Sequence[VisionItem]) -> ChunkStats:
        frames = sum(piece.count * (2 if items[piece.item].modality == "video" else 1) for piece in batch.pieces)
        encode_ms = timer.elapsed_ms()
        self._ms_per_frame.append(encode_ms / frames)
        return ChunkStats(
            chunk_index=index,
            items=len(batch.pieces),
            frames=frames,
            patches=batch.patches,
            budget=batch.budget,
            padding_fraction=batch.padding_fraction,
            encode_ms=encode_ms,
            ms_per_frame=encode_ms / frames,
            graph_hit=batch.budget is not None,
            fallback_reason=batch.fallback_reason,
        )


def make_vision_encoder(
    visual: torch.nn.Module,
    settings: EncoderSettings,
    device: torch.device,
    progress: ProgressCallback | None = None,
) -> tuple[VisionEncoder, str]:
    """The encoder the settings and the machine call for, and a plain sentence saying why.

    Graphs on CUDA when the settings ask for them; the stock eager forward otherwise (and when
    capture fails, with the error in the reason).
    """
    if not settings.use_graphs:
        return EagerVisionEncoder(visual), "CUDA graphs are off in the encoder settings: the encoder runs eager"
    if device.type != "cuda":
        return EagerVisionEncoder(visual, "no CUDA"), "CUDA not available: the encoder runs eager on the CPU"
    if settings.attention_backend == "eager":
        reason = "attention backend 'eager' cannot run inside CUDA graphs: the encoder runs eager"
        return EagerVisionEncoder(visual, "eager attention"), reason
    try:
        encoder = GraphVisionEncoder(visual, settings, progress=progress)
    except FramewiseError as error:
        return EagerVisionEncoder(visual, "capture failed"), f"CUDA graphs unavailable ({error}): the encoder runs eager"
    report = encoder.report
    assert report is not None
    return encoder, (
        f"{len(report.budgets)} CUDA graphs captured ({report.attention_backend} attention) "
        f"in {report.seconds:.1f} s, holding {report.graph_memory_bytes / 2**20:.0f} MiB"
    )


def percentile(sorted_values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile ``q`` (0-100) of already sorted values; ``None`` when empty."""
    if not sorted_values:
        return None
    rank = max(1, -(-len(sorted_values) * q // 100))
    return sorted_values[int(rank) - 1]


def _patch_dim(config) -> int:
    """Values per patch row: channels x temporal patch x patch x patch (1536 for Qwen3-VL)."""
    return config.in_channels * config.temporal_patch_size * config.patch_size * config.patch_size


def _memory_reserved(device: torch.device) -> int:
    """Device memory the caching allocator holds once its unused blocks are released."""
    if device.type != "cuda":
        return 0
    torch.cuda.synchronize(device)
    torch.cuda.empty_cache()
    return torch.cuda.memory_reserved(device)


def _check_item(item: VisionItem, patch_dim: int) -> None:
    t, h, w = item.grid_thw
    if min(t, h, w) < 1:
        raise EncoderError(f"Grid {item.grid_thw} is empty; every item needs at least one patch.")
    if tuple(item.pixel_values.shape) != (t * h * w, patch_dim):
        raise EncoderError(
            f"Pixel rows {tuple(item.pixel_values.shape)} do not match grid {item.grid_thw} "
            f"(expected ({t * h * w}, {patch_dim})); re-run preprocessing."
        )


def _stitch(parts: list[tuple[torch.Tensor, tuple[torch.Tensor, ...]]]) -> EncodedItem:
    """One item's output from its pieces, in temporal order."""
    if len(parts) == 1:
        embeds, deepstack = parts[0]
        return EncodedItem(embeds=embeds, deepstack=deepstack)
    embeds = torch.cat([embeds for embeds, _ in parts])
    layers = len(parts[0][1])
    deepstack = tuple(torch.cat([layer_parts[i] for _, layer_parts in parts]) for i in range(layers))
    return EncodedItem(embeds=embeds, deepstack=deepstack)
