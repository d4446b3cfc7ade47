"""Graph replay against transformers' eager vision forward, on a GPU, for every scenario of DESIGN §3.

Small random towers (depth 3) with the real head dims (72: the 8B/32B/30B-A3B towers; 64: the
2B/4B towers) keep capture quick. The Triton tile kernel (the default) runs in fp32 and bf16;
fp32 also runs the masked-SDPA backend (the flash kernels have no fp32), bf16 varlen; each with
fused kernels (the default) and with the tower's own. The
reference is always transformers' own forward with stock ``sdpa``.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

pytestmark = pytest.mark.gpu

if not torch.cuda.is_available():  # pragma: no cover - the conftest marks these skipped as well
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

from transformers.models.qwen3_vl.configuration_qwen3_vl import Qwen3VLVisionConfig  # noqa: E402
from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLVisionModel  # noqa: E402

from framewise.core.encoding.defs import VisionItem  # noqa: E402
from framewise.core.encoding.eager import EagerVisionEncoder  # noqa: E402
from framewise.core.encoding.manager import GraphVisionEncoder, make_vision_encoder  # noqa: E402
from framewise.core.families.qwen3_vl.adapter import Qwen3VLAdapter  # noqa: E402
from framewise.core.families.qwen3_vl.limits import QWEN3_VL_LIMITS as QWEN3_VL  # noqa: E402
from framewise.core.metrics import EncoderMetricsAccumulator  # noqa: E402
from framewise.core.settings import EncoderSettings  # noqa: E402
from tests.core.families.qwen3_vl.references import stock_attention  # noqa: E402

SETTINGS = EncoderSettings(budgets=(64, 256, 1024, 4096), max_items_per_batch=4, max_frame_pairs_per_batch=8)
TOLERANCE = {torch.float32: 1e-4, torch.bfloat16: 3e-2}
TOWERS = {"head_dim_72": (288, 4), "head_dim_64": (256, 4)}
# dtype, attention backend, fused kernels (the default) or the tower's own
MODES = {
    "fp32-triton-fused": (torch.float32, "triton", True),
    "bf16-triton-fused": (torch.bfloat16, "triton", True),
    "bf16-triton-unfused": (torch.bfloat16, "triton", False),
    "fp32-sdpa_masked-fused": (torch.float32, "sdpa_masked", True),
    "bf16-varlen-fused": (torch.bfloat16, "varlen", True),
    "fp32-sdpa_masked-unfused": (torch.float32, "sdpa_masked", False),
    "bf16-varlen-unfused": (torch.bfloat16, "varlen", False),
}

SCENARIOS = {
    "one image": [("image", (1, 28, 28))],
    "one video": [("video", (4, 12, 20))],
    "several images": [("image", (1, 8, 8)), ("image", (1, 16, 12)), ("image", (1, 6, 10))],
    "image and video": [("image", (1, 16, 16)), ("video", (3, 8, 12))],
    "more items than a batch takes": [("image", (1, 4, 4 + 2 * i)) for i in range(7)],
    "video over the largest budget": [("video", (10, 24, 24))],
    "non-square grids": [("image", (1, 6, 40)), ("video", (2, 40, 6))],
    "video of one frame pair": [("video", (1, 16, 16))],
}


@pytest.fixture(scope="module", autouse=True)
def exact_float32():
    """fp32 means fp32: no TF32 in the patch-embedding convolution or the matmuls, from capture on."""
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved


@pytest.fixture(scope="module", params=list(TOWERS))
def tower_name(request) -> str:
    return request.param


@pytest.fixture(scope="module", params=list(MODES))
def encoder(request, tower_name):
    dtype, backend, fuse_kernels = MODES[request.param]
    hidden, heads = TOWERS[tower_name]
    torch.manual_seed(0)
    config = Qwen3VLVisionConfig(
        depth=3, hidden_size=hidden, num_heads=heads, intermediate_size=2 * hidden, out_hidden_size=384,
        num_position_embeddings=2304, deepstack_visual_indexes=[0, 2],
    )
    visual = Qwen3VLVisionModel(config).eval().to(device="cuda", dtype=dtype)
    settings = dataclasses.replace(SETTINGS, attention_backend=backend, fuse_kernels=fuse_kernels)
    graph_encoder = GraphVisionEncoder(Qwen3VLAdapter(visual), settings, limits=QWEN3_VL)
    assert graph_encoder.fused is fuse_kernels
    yield graph_encoder
    graph_encoder.clear()


def make_items(spec, seed=0) -> list[VisionItem]:
    generator = torch.Generator().manual_seed(seed)
    items = []
    for modality, (t, h, w) in spec:
        pixels = torch.randn(t * h * w, 1536, generator=generator).cuda()
        items.append(VisionItem(pixel_values=pixels, grid_thw=(t, h, w), modality=modality))
    return items


def eager_reference(adapter, items):
    with stock_attention(adapter.visual), torch.inference_mode():
        return EagerVisionEncoder(adapter).encode(items)


def relative_error(got: torch.Tensor, expected: torch.Tensor) -> float:
    return (torch.linalg.vector_norm((got - expected).double()) / torch.linalg.vector_norm(expected.double())).item()


def assert_matches(encoder: GraphVisionEncoder, got, expected) -> None:
    tolerance = TOLERANCE[encoder.dtype]
    assert len(got.items) == len(expected.items)
    for mine, theirs in zip(got.items, expected.items):
        assert mine.embeds.shape == theirs.embeds.shape
        assert len(mine.deepstack) == len(theirs.deepstack) == 2
        for tensor, reference in zip((mine.embeds, *mine.deepstack), (theirs.embeds, *theirs.deepstack)):
            assert torch.isfinite(tensor).all()
            assert relative_error(tensor, reference) <= tolerance
    for chunk in got.chunks:
        if chunk.graph_hit:
            for buffer in encoder.static_outputs(chunk.budget):
                assert torch.isfinite(buffer).all(), f"NaN/inf in the output buffer of budget {chunk.budget}"


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_graph_output_matches_eager(encoder, scenario):
    items = make_items(SCENARIOS[scenario], seed=len(scenario))
    expected = eager_reference(encoder.adapter, items)
    before = encoder.stats()
    got = encoder.encode(items)
    assert_matches(encoder, got, expected)
    assert all(chunk.graph_hit for chunk in got.chunks)
    after = encoder.stats()
    assert after.items_replayed - before.items_replayed == len(items)
    assert after.items_eager == before.items_eager
    assert after.replays - before.replays == len(got.chunks)


def test_long_video_is_split_and_stitched(encoder):
    items = make_items(SCENARIOS["video over the largest budget"])
    got = encoder.encode(items)
    assert len(got.chunks) >= 2 and all(chunk.budget <= 4096 for chunk in got.chunks)
    assert sum(chunk.frames for chunk in got.chunks) == 20


def test_same_request_twice_reuses_buffers_and_cache(encoder):
    items = make_items(SCENARIOS["image and video"], seed=11)
    expected = eager_reference(encoder.adapter, items)
    first = encoder.encode(items)
    hits = encoder.stats().metadata_hits
    second = encoder.encode(items)
    assert_matches(encoder, first, expected)
    assert_matches(encoder, second, expected)
    assert encoder.stats().metadata_hits > hits
    for a, b in zip(first.items, second.items):
        assert torch.equal(a.embeds, b.embeds)  # outputs were copied out, not aliased to the buffers


def test_oversized_frame_runs_eager_and_counts_a_miss(encoder):
    items = make_items([("image", (1, 66, 64)), ("image", (1, 8, 8))], seed=5)  # 4224 patches > 4096
    expected = eager_reference(encoder.adapter, items)
    before = encoder.stats()
    got = encoder.encode(items)
    assert_matches(encoder, got, expected)
    eager = [chunk for chunk in got.chunks if not chunk.graph_hit]
    assert len(eager) == 1 and "4224 patches" in eager[0].fallback_reason
    after = encoder.stats()
    assert (after.items_replayed - before.items_replayed, after.items_eager - before.items_eager) == (1, 1)


def test_request_after_clear_and_recapture(encoder):
    items = make_items(SCENARIOS["several images"], seed=3)
    expected = eager_reference(encoder.adapter, items)
    encoder.clear()
    assert not encoder.captured
    report = encoder.capture()
    assert report.seconds > 0 and report.graph_memory_bytes > 0 and report.budgets == SETTINGS.token_budgets(QWEN3_VL)
    assert_matches(encoder, encoder.encode(items), expected)


def test_stats_and_timing_are_recorded(encoder):
    got = encoder.encode(make_items(SCENARIOS["one video"], seed=9))
    (chunk,) = got.chunks
    assert chunk.encode_ms > 0 and chunk.ms_per_frame == pytest.approx(chunk.encode_ms / 8)
    assert chunk.budget == 1024 and chunk.padding_fraction == pytest.approx(1 - 960 / 1024)
    metrics = EncoderMetricsAccumulator().add_item(got.chunks)
    assert metrics.ms_per_frame_p99 >= metrics.ms_per_frame_p50 > 0


def test_factory_captures_graphs_on_cuda(encoder):
    events = []
    graph_encoder, reason = make_vision_encoder(
        encoder.adapter, dataclasses.replace(encoder.settings, budgets=(64, 256)), events.append, limits=QWEN3_VL
    )
    try:
        assert isinstance(graph_encoder, GraphVisionEncoder) and "2 CUDA graphs captured" in reason
        assert [event.current for event in events] == [0, 1, 2]
    finally:
        graph_encoder.clear()
