"""Qwen3-VL behind Framewise's encoder seam: what the graph manager asks of a model family.

:class:`Qwen3VLAdapter` supplies the tower's buffer specs and capture inputs, the forward
captured into every graph, how its outputs split per item, the metadata cache, the switch to a
graph-safe attention backend (undone by :meth:`Qwen3VLAdapter.release_graphs`, which the
manager calls on ``clear()``), and, for a whole model, the language model the decoder runs.

The tower's forward takes the precomputed ``interp_indices``, ``interp_weights``,
``position_ids``, ``cu_seqlens`` and ``max_seqlen`` as keyword arguments instead of deriving
them from ``grid_thw`` with host-side loops, which is what lets it run inside a CUDA graph.
"""

from __future__ import annotations

from typing import Callable, Mapping, Sequence

import torch

from framewise.core.encoding.defs import BufferSpec, GraphBuffers, VisionItem
from framewise.core.errors import EncoderError, FramewiseError
from framewise.core.encoding.attention_backends import (
    REGISTERED_NAMES,
    available_attention_backends,
    register_backends,
    resolve_backend,
)
from framewise.core.families.qwen3_vl.fused import FusedVisionForward, compile_cache_dir, use_compile_cache
from framewise.core.families.qwen3_vl.geometry import VisionGeometry
from framewise.core.families.qwen3_vl.language import Qwen3VLLanguageModel
from framewise.core.families.qwen3_vl.metadata import MetadataCache
from framewise.core.quantization.kv_formats import FLOAT_KV_CACHE, KVCacheFormat
from framewise.core.seam import PieceGrid

# The metadata inputs of the tower's forward: (trailing shape, dtype), leading dim the rows.
_ROW_INPUTS = {
    "interp_indices": ((4,), torch.int64),  # bilinear taps into the position table
    "interp_weights": ((4,), torch.float32),
    "position_ids": ((2,), torch.int64),  # rotary (row, col) in merge-block order
}


class Qwen3VLAdapter:
    """A transformers ``Qwen3VLVisionModel`` (any released size; the MoE models use the same tower).

    ``visual`` is on its device and dtype; ``model`` is the whole model it belongs to (see
    :meth:`for_model`), whose language half the decoder runs; a tower alone has none. The attention
    the tower was built with is recorded here, once, and is what :meth:`release_graphs` puts back.

    :attr:`graph_tower` is the module :meth:`graph_forward` runs (the one captured into every
    graph); it defaults to ``visual`` and may be replaced by any module with the same weights and
    keyword interface. With :meth:`use_fused_forward` the graphs capture
    :class:`~framewise.core.families.qwen3_vl.fused.FusedVisionForward` instead.
    """

    def __init__(self, visual: torch.nn.Module, model: torch.nn.Module | None = None) -> None:
        parameter = next(visual.parameters())
        self.visual = visual
        self.model = model
        self.device = parameter.device
        self.dtype = parameter.dtype
        self.geometry = VisionGeometry.from_visual(visual)
        self.metadata = MetadataCache(self.geometry)
        self.graph_tower: Callable[..., object] = visual
        self._loaded_attention = visual.config._attn_implementation
        self._fuse = False
        self._fused: FusedVisionForward | None = None

    @classmethod
    def for_model(cls, model: torch.nn.Module) -> Qwen3VLAdapter:
        """The adapter of a whole Qwen3-VL model (``model.model.visual`` its tower)."""
        return cls(model.model.visual, model)

    # ------------------------------------------------------------------ items and outputs

    def output_rows(self, rows: int) -> int:
        return rows // self.geometry.merge_area

    def frames_per_slice(self, modality: str) -> int:
        return self.geometry.temporal_patch_size if modality == "video" else 1

    def check_item(self, item: VisionItem) -> None:
        t, h, w = item.grid_thw
        if min(t, h, w) < 1:
            raise EncoderError(f"Grid {item.grid_thw} is empty; every item needs at least one patch.")
        expected = (t * h * w, self.geometry.patch_dim)
        if tuple(item.pixel_values.shape) != expected:
            raise EncoderError(
                f"Pixel rows {tuple(item.pixel_values.shape)} do not match grid {item.grid_thw} "
                f"(expected {expected}); re-run preprocessing."
            )

    # ------------------------------------------------------------------ attention

    def attention_backends(self) -> list[str]:
        return available_attention_backends()

    def resolve_attention(self, requested: str, excluded: tuple[str, ...] = ()) -> str:
        return resolve_backend(requested, self.device, self.dtype, excluded)

    def use_attention(self, backend: str) -> None:
        register_backends()
        self.visual.config._attn_implementation = REGISTERED_NAMES[backend]
        # Compiled on CUDA; on a CPU (direct mode, for tests) the same code runs uncompiled.
        compiled = self.device.type == "cuda"
        self._fused = FusedVisionForward(self.visual, backend, compiled=compiled) if self._fuse else None

    def use_fused_forward(self, enabled: bool) -> bool:
        """Compiled kernels land in the user's cache (:func:`~framewise.core.families.qwen3_vl.fused.compile_cache_dir`)."""
        self._fuse = enabled
        if enabled:
            use_compile_cache(compile_cache_dir(self.visual, self.device))
        else:
            self._fused = None
        return True

    def release_graphs(self) -> None:
        self.visual.config._attn_implementation = self._loaded_attention
        self._fused = None
        self.metadata.drop_passes()

    # ------------------------------------------------------------------ graphs

    def graph_buffers(self, rows: int, max_sequences: int) -> GraphBuffers:
        """Patch rows, the metadata inputs and ``cu_seqlens`` (one slot per frame pair, one for the
        padding sequence, one leading zero); outputs merged tokens, then one per deepstack layer."""
        config = self.visual.config
        inputs = {name: BufferSpec((rows, *shape), dtype) for name, (shape, dtype) in _ROW_INPUTS.items()}
        inputs["cu_seqlens"] = BufferSpec((max_sequences + 2,), torch.int32, per_budget=False)
        output = BufferSpec((self.output_rows(rows), config.out_hidden_size), self.dtype)
        return GraphBuffers(
            row_width=self.geometry.patch_dim,
            inputs=inputs,
            outputs=(output,) * (1 + len(config.deepstack_visual_indexes)),
        )

    def fill_capture_inputs(self, inputs: Mapping[str, torch.Tensor], rows: int) -> None:
        """One sequence over all rows: the other slots repeat the final boundary."""
        inputs["cu_seqlens"].fill_(rows)
        inputs["cu_seqlens"][0] = 0

    def replay_inputs(self, pieces: Sequence[PieceGrid], rows: int, max_sequences: int) -> dict[str, torch.Tensor]:
        metadata = self.metadata.padded_pass(pieces, rows, max_sequences, self.device)
        return {
            "interp_indices": metadata.interp_indices,
            "interp_weights": metadata.interp_weights,
            "position_ids": metadata.position_ids,
            "cu_seqlens": metadata.cu_seqlens,
        }

    def graph_forward(
        self, pixels: torch.Tensor, inputs: Mapping[str, torch.Tensor], rows: int
    ) -> tuple[torch.Tensor, ...]:
        """The tower on one budget's buffers. ``max_seqlen`` is the budget: it bounds every
        sequence, the trailing padding one included."""
        if self._fused is not None:
            embeds, deepstack = self._fused(
                pixels, inputs["interp_indices"], inputs["interp_weights"], inputs["position_ids"],
                inputs["cu_seqlens"], rows,
            )
            return (embeds, *deepstack)
        output = self.graph_tower(pixels, grid_thw=None, max_seqlen=rows, return_dict=True, **inputs)
        return (output.pooler_output, *output.deepstack_features)

    def eager_forward(self, items: Sequence[VisionItem]) -> tuple[torch.Tensor, ...]:
        """The stock forward on ``items`` together, which derives its metadata from ``grid_thw`` itself."""
        pixels = torch.cat([item.pixel_values for item in items]).to(device=self.device, dtype=self.dtype)
        grid = torch.tensor([item.grid_thw for item in items], device=self.device)
        output = self.visual(pixels, grid_thw=grid, return_dict=True)
        return (output.pooler_output, *output.deepstack_features)

    def metadata_counts(self) -> tuple[int, int]:
        return self.metadata.hits + self.metadata.pass_hits, self.metadata.misses + self.metadata.pass_misses

    # ------------------------------------------------------------------ the language model

    def language_model(
        self, cache_format: KVCacheFormat = FLOAT_KV_CACHE, fused_steps: bool = True
    ) -> Qwen3VLLanguageModel:
        """The whole model's language half for the decoder, its states' keys and values in
        ``cache_format`` (see :class:`Qwen3VLLanguageModel`)."""
        if self.model is None:
            raise FramewiseError("This adapter holds a vision tower alone; it has no language model to decode with.")
        return Qwen3VLLanguageModel(self.model, fused_steps=fused_steps, cache_format=cache_format)
