"""Reference runs the tests and the encoder benchmark compare Framewise's encoder against."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
from transformers.models.qwen3_vl.configuration_qwen3_vl import Qwen3VLVisionConfig
from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLVisionModel

from framewise.core.families.qwen3_vl.fused import FusedVisionForward
from framewise.core.families.qwen3_vl.geometry import VisionGeometry
from framewise.core.families.qwen3_vl.metadata import MetadataCache


@contextmanager
def stock_attention(visual: torch.nn.Module) -> Iterator[None]:
    """Run ``visual`` with transformers' own ``sdpa`` attention inside the block (the eager reference)."""
    saved = visual.config._attn_implementation
    visual.config._attn_implementation = "sdpa"
    try:
        yield
    finally:
        visual.config._attn_implementation = saved


def tiny_tower(hidden_act: str = "gelu_pytorch_tanh") -> Qwen3VLVisionModel:
    """A random three-block tower (hidden 32, two heads) with transformers' ``sdpa`` attention, on the CPU."""
    config = Qwen3VLVisionConfig(
        depth=3, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=48,
        num_position_embeddings=64, deepstack_visual_indexes=[0, 2], hidden_act=hidden_act,
    )
    config._attn_implementation = "sdpa"
    return Qwen3VLVisionModel(config).eval()


def run_both(tower: Qwen3VLVisionModel, fused: FusedVisionForward, grids, padded_rows: int | None = None):
    """The tower's output for ``grids`` (a list of (t, h, w)) and the fused forward's on the same pixels,
    in buffers of ``padded_rows`` rows when given, on the tower's device.

    Returns the tower's output (``pooler_output`` (patches/4, out_hidden) and
    ``deepstack_features``), the fused merged tokens (patches/4, out_hidden) and the fused
    deepstack tokens, one (patches/4, out_hidden) tensor per deepstack layer.
    """
    device = next(tower.parameters()).device
    pieces = [("video", grid) for grid in grids]
    patches = sum(t * h * w for t, h, w in grids)
    pixels = torch.randn(patches, 3 * 2 * 16 * 16, device=device)
    with torch.inference_mode():
        reference = tower(pixels, grid_thw=torch.tensor(grids, device=device))
        metadata = MetadataCache(VisionGeometry.from_visual(tower)).batch(
            pieces, rows=padded_rows, max_sequences=None if padded_rows is None else 16
        )
        buffer = torch.zeros(metadata.rows, pixels.shape[1], device=device)
        buffer[:patches] = pixels
        tables = (metadata.interp_indices, metadata.interp_weights, metadata.position_ids, metadata.cu_seqlens)
        embeds, deepstack = fused(buffer, *(table.to(device) for table in tables), max(metadata.max_sequence_length, 1))
    return reference, embeds[: patches // 4], [layer[: patches // 4] for layer in deepstack]


def graphs_compiled_at_two_row_counts(
    tower: Qwen3VLVisionModel, compare: Callable[[torch.Tensor, torch.Tensor], None]
) -> int:
    """Compile ``tower``'s fused forward (masked SDPA) from a reset dynamo, run it on buffers of 64
    and then 96 rows, hand ``compare`` its merged tokens and the tower's (each (patches/4,
    out_hidden)) at each, and return how many graphs dynamo compiled meanwhile."""
    torch._dynamo.reset()  # forgets compiled code, not the counters: count from here
    graphs_before = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    fused = FusedVisionForward(tower, "sdpa_masked", compiled=True)
    for rows, grids in ((64, [(2, 4, 4)]), (96, [(1, 4, 6), (2, 4, 4)])):
        reference, embeds, _ = run_both(tower, fused, grids, padded_rows=rows)
        compare(embeds, reference.pooler_output)
    return torch._dynamo.utils.counters["stats"]["unique_graphs"] - graphs_before
