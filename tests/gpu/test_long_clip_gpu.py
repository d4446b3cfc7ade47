"""768 frames at the full pixel budget on the 8B shapes (random weights, bf16): the whole GPU path of
a long clip — the encoder graphs, the first question's prefill, the decode-step graphs, a
follow-up's prefill graph — against the eager path.

The encoder graphs are checked against the eager tower by relative error (the fused kernels round
differently in bf16); the decoder through its graphs is checked token for token against its direct
steps fed the same features (graph replays run the very kernels the direct steps run).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

from framewise.core.decoding import Decoder, Prompt, SamplingRule
from framewise.core.encoding.defs import EncodedItem, VisionItem
from framewise.core.encoding.eager import EagerVisionEncoder
from framewise.core.encoding.held_features import DEVICE_FEATURE_BYTES
from framewise.core.encoding.manager import GraphVisionEncoder, make_vision_encoder
from framewise.core.families.qwen3_vl.adapter import Qwen3VLAdapter
from framewise.core.families.qwen3_vl.language import Qwen3VLLanguageModel
from framewise.core.families.qwen3_vl.limits import QWEN3_VL_LIMITS as QWEN3_VL
from framewise.core.families.qwen3_vl.prompt import TEXT_TOKEN, VIDEO_TOKEN, vision_spans
from framewise.core.settings import EncoderSettings
from tests.core.families.qwen3_vl.references import stock_attention

pytestmark = pytest.mark.gpu

# 768 frames of 128x224 pixels: 384 frame pairs of 8x14 patches, 43,008 patches (the full
# 24,576-block pixel budget spread over 768 frames), 10,752 merged video tokens.
FRAME_PAIRS, PATCH_ROWS, PATCH_COLUMNS = 384, 8, 14
VIDEO_PAD, VISION_START, VISION_END, IMAGE_PAD = 151656, 151652, 151653, 151655
NEW_TOKENS = 16


def qwen3_vl_8b_config() -> Qwen3VLConfig:
    """Qwen3-VL-8B's shapes: the 27-block tower with head dim 72, the 36-layer text model, the real
    vocabulary."""
    config = Qwen3VLConfig(
        text_config=dict(
            hidden_size=4096, intermediate_size=12288, num_hidden_layers=36, num_attention_heads=32,
            num_key_value_heads=8, head_dim=128, vocab_size=151936, max_position_embeddings=262144,
            rope_parameters={"rope_type": "default", "rope_theta": 5_000_000.0, "mrope_section": [24, 20, 20],
                             "mrope_interleaved": True},
            tie_word_embeddings=False,
        ),
        vision_config=dict(
            depth=27, hidden_size=1152, num_heads=16, intermediate_size=4304, out_hidden_size=4096,
            num_position_embeddings=2304, deepstack_visual_indexes=[8, 16, 24],
        ),
        image_token_id=IMAGE_PAD, video_token_id=VIDEO_PAD, vision_start_token_id=VISION_START,
        vision_end_token_id=VISION_END, tie_word_embeddings=False,
    )
    config._attn_implementation = "sdpa"
    return config


@pytest.fixture(scope="module")
def model() -> Iterator[Qwen3VLForConditionalGeneration]:
    torch.manual_seed(0)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)  # built in bf16: no fp32 copy of 8B parameters
    try:
        with torch.device("cuda"):
            built = Qwen3VLForConditionalGeneration(qwen3_vl_8b_config()).eval()
    finally:
        torch.set_default_dtype(previous)
    yield built
    del built
    torch.cuda.empty_cache()


def long_clip() -> VisionItem:
    """(43008, 1536) random patches: 384 frame pairs of 8x14 patches."""
    generator = torch.Generator(device="cuda").manual_seed(1)
    rows = FRAME_PAIRS * PATCH_ROWS * PATCH_COLUMNS
    pixels = torch.randn(rows, 1536, generator=generator, device="cuda", dtype=torch.bfloat16)
    return VisionItem(pixel_values=pixels, grid_thw=(FRAME_PAIRS, PATCH_ROWS, PATCH_COLUMNS), modality="video")


def relative_error(got: torch.Tensor, expected: torch.Tensor) -> float:
    return (torch.linalg.vector_norm((got - expected).double()) / torch.linalg.vector_norm(expected.double())).item()


def prompt_ids(pads_per_pair: int, follow_up: bool) -> list[int]:
    """Framewise's layout for one clip: a system text, per frame pair a time marker and its video
    pads between vision start and end, the question; a follow-up appends a turn."""
    generator = torch.Generator().manual_seed(2)

    def text(count: int) -> list[int]:
        return torch.randint(1000, 100000, (count,), generator=generator).tolist()

    ids = text(20)
    for _ in range(FRAME_PAIRS):
        ids += text(6) + [VISION_START] + [VIDEO_PAD] * pads_per_pair + [VISION_END]
    ids += text(30)
    return ids + text(40) if follow_up else ids


def make_prompt(ids: list[int], features: EncodedItem) -> Prompt:
    input_ids = torch.tensor([ids])
    types = torch.full_like(input_ids, TEXT_TOKEN)
    types[input_ids == VIDEO_PAD] = VIDEO_TOKEN
    grids = (("video", (FRAME_PAIRS, PATCH_ROWS, PATCH_COLUMNS)),)
    return Prompt(input_ids, types, vision_spans(types, grids, merge_area=4), grids, (features,), owner=features)


def test_768_frames_at_the_full_pixel_budget_answer_through_the_graphs_like_eager(model) -> None:
    adapter = Qwen3VLAdapter(model.model.visual)
    clip = long_clip()
    encoder, reason = make_vision_encoder(adapter, EncoderSettings(), limits=QWEN3_VL)
    assert isinstance(encoder, GraphVisionEncoder), reason
    with torch.inference_mode():
        through_graphs = encoder.encode([clip])
        with stock_attention(adapter.visual):
            eager = EagerVisionEncoder(adapter).encode([clip])
    assert through_graphs.chunks and all(chunk.graph_hit for chunk in through_graphs.chunks)
    mine, theirs = through_graphs.items[0], eager.items[0]
    assert mine.embeds.shape == (FRAME_PAIRS * PATCH_ROWS * PATCH_COLUMNS // 4, 4096)
    # 352 MiB of features: they wait for the decoder in the host's memory, moved there pass by pass.
    assert mine.nbytes > DEVICE_FEATURE_BYTES and mine.embeds.device.type == "cpu"
    for got, expected in zip((mine.embeds, *mine.deepstack), (theirs.embeds, *theirs.deepstack), strict=True):
        assert torch.isfinite(got).all()
        assert relative_error(got.cuda(), expected) <= 3e-2
    encoder.clear()
    del eager, theirs

    language = Qwen3VLLanguageModel(model)
    pads = PATCH_ROWS * PATCH_COLUMNS // 4
    first, follow_up = prompt_ids(pads, follow_up=False), prompt_ids(pads, follow_up=True)
    context = len(follow_up) + 2 * NEW_TOKENS + 64
    answers = {}
    for use_graphs in (True, False):
        decoder = Decoder(language, context, 256, use_graphs=use_graphs)
        assert decoder.graphs_enabled is use_graphs, decoder.graphs_reason
        results = [decoder.answer(make_prompt(first, mine), SamplingRule(NEW_TOKENS), lambda _: None, lambda: False)]
        follow = first + results[0].token_ids + follow_up[len(first):]
        results.append(decoder.answer(make_prompt(follow, mine), SamplingRule(NEW_TOKENS), lambda _: None, lambda: False))
        answers[use_graphs] = results
        decoder.close()
        del decoder
        torch.cuda.empty_cache()
    graphs, direct = answers[True], answers[False]
    assert first.count(VIDEO_PAD) == FRAME_PAIRS * pads == 10_752
    for through, plain in zip(graphs, direct, strict=True):
        assert len(through.token_ids) == NEW_TOKENS
        assert through.token_ids == plain.token_ids
        assert through.graph_steps == NEW_TOKENS - 1 and plain.graph_steps == 0
    assert graphs[-1].prefill_graph and not direct[-1].prefill_graph  # the follow-up's prefill replayed a graph


def last_pass_logits(decoder: Decoder, prompt: Prompt) -> torch.Tensor:
    """The logits (1, vocab) float32 of the last prefill pass of ``decoder``'s first answer to ``prompt``."""
    seen: list[torch.Tensor | None] = []
    prefill = decoder.language.prefill
    decoder.language.prefill = lambda *args, **options: seen.append(prefill(*args, **options)) or seen[-1]
    try:
        result = decoder.answer(prompt, SamplingRule(1), lambda token: None, lambda: False)
    finally:
        del decoder.language.prefill
    assert result.prefill_chunks == len(seen) and seen[-1] is not None
    return seen[-1].float()


def test_a_prefill_in_chunks_holds_its_activations_to_the_chunk(model) -> None:
    """The 768-frame prompt prefilled in chunks of 1,024 tokens: its peak above what was held before
    stays within what a chunk needs (see settings.PREFILL_CHUNK_TOKENS: twice the 145 KiB a token
    computed, for the allocator's slack, and attention's repeated keys and values and mask over
    the whole cache), a small part of one pass's; the first token's logits are one pass's."""
    generator = torch.Generator(device="cuda").manual_seed(3)
    pads = PATCH_ROWS * PATCH_COLUMNS // 4

    def draw() -> torch.Tensor:
        return torch.randn(FRAME_PAIRS * pads, 4096, generator=generator, device="cuda", dtype=torch.bfloat16) * 0.02

    features = EncodedItem(embeds=draw(), deepstack=(draw(), draw(), draw()))
    ids = prompt_ids(pads, follow_up=False)
    prompt = make_prompt(ids, features)
    decoder = Decoder(Qwen3VLLanguageModel(model), len(ids) + 64, 256, use_graphs=False)
    peaks, logits = {}, {}
    with torch.inference_mode():
        for chunk in (len(ids), 1024):
            decoder.prefill_chunk_tokens = chunk
            decoder.state.reset()
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
            held = torch.cuda.memory_allocated()
            logits[chunk] = last_pass_logits(decoder, prompt)
            peaks[chunk] = torch.cuda.max_memory_allocated() - held
        # The same chunks from features the host holds: the rows go to the device pass by pass.
        decoder.state.reset()
        assert torch.equal(last_pass_logits(decoder, make_prompt(ids, features.to_host())), logits[1024])
    context = len(ids)
    bound = 1024 * 2 * 145 * 1024 + context * 16 * 1024 + 1024 * context * 2
    assert peaks[1024] <= bound, f"{peaks[1024] / 2**20:.0f} MiB for chunks of 1,024 tokens"
    assert peaks[1024] < 0.3 * peaks[len(ids)]
    # The two prefills differ only in how attention's sums are split; in bf16 each of 36 random-weight
    # layers rounds them differently and the differences grow: the same first token, logits within 2^-4.
    assert logits[1024].argmax() == logits[len(ids)].argmax()
    assert relative_error(logits[1024], logits[len(ids)]) <= 2**-4
