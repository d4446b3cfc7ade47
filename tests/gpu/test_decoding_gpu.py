"""The decoder on CUDA: decode steps replay their bucket's graph, answers equal generate() with the
model's own vision pass (float32), graphs equal the same steps run directly (bfloat16), and a
failed capture falls back to direct steps with the reason."""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch

from framewise.core.decoding import Decoded, Decoder
from framewise.core.decoding.decoder import prefill_chunks
from framewise.core.decoding.host_embedding import HostEmbedding, move_input_embedding_to_host
from framewise.core.encoding.eager import EagerVisionEncoder
from framewise.core.backends.local.engine import Engine
from framewise.core.events import Progress
from framewise.core.families.qwen3_vl.adapter import Qwen3VLAdapter
from framewise.core.families.qwen3_vl.language import Qwen3VLLanguageModel
from framewise.core.graph_capture import GraphCapture
from framewise.core.settings import AppSettings
from tests.conftest import SAMPLE_CLIPS
from tests.core.test_decoding import Setup, answer, prompt_for, reference, rule_for
from tests.core.test_decoding import setup as cpu_setup  # noqa: F401 - the fixture, moved to CUDA below

pytestmark = pytest.mark.gpu


def on_cuda(setup: Setup, dtype: torch.dtype) -> Setup:
    model = copy.deepcopy(setup.model).to("cuda", dtype)
    encoder = EagerVisionEncoder(Qwen3VLAdapter(model.model.visual))
    with torch.inference_mode():
        features = [encoder.encode([clip.item]).items[0] for clip in setup.clips]
    return dataclasses.replace(setup, model=model, features=features)


@pytest.fixture()
def cuda_fp32(cpu_setup: Setup) -> Setup:  # noqa: F811
    return on_cuda(cpu_setup, torch.float32)


@pytest.fixture()
def cuda_bf16(cpu_setup: Setup) -> Setup:  # noqa: F811
    return on_cuda(cpu_setup, torch.bfloat16)


def test_graph_steps_answer_like_generate_on_first_question_and_follow_ups(cuda_fp32: Setup) -> None:
    progress: list[Progress] = []
    decoder = Decoder(Qwen3VLLanguageModel(cuda_fp32.model), 512, 16, use_graphs=True, progress=progress.append)
    assert decoder.graphs_enabled, decoder.graphs_reason
    steps, prefills = len(decoder.steps.buckets), len(decoder.prefills.shapes)
    assert [event.current for event in progress] == list(range(steps + 1)) + list(range(prefills + 1))
    assert converse_like_generate(cuda_fp32, decoder).prefix_tokens_reused > 0


def converse_like_generate(setup: Setup, decoder: Decoder) -> Decoded:
    """Three turns about the first clip through ``decoder``: each answer is generate()'s with
    ``setup``'s model, every step after an answer's first replays a graph, and each follow-up's
    prefill replays one. The last turn's result."""
    rule = rule_for(setup)
    history: list[tuple[str, str]] = []
    for question in ("What color is the square?", "Where does it go?", "And the circle?"):
        inputs, prompt = prompt_for(setup, question, history)
        result = answer(decoder, prompt, rule)
        assert result.token_ids == reference(setup, inputs)
        assert result.graph_steps == len(result.token_ids) - 1 and result.eager_steps == 0
        assert result.prefill_graph  # the last chunk is the question's text
        if history:
            assert result.graph_passes == result.prefill_chunks
        else:
            assert 0 < result.graph_passes < result.prefill_chunks
        history.append((question, setup.tokenizer.decode(result.token_ids, skip_special_tokens=True).strip()))
    return result


def test_graphs_replay_exactly_what_the_eager_steps_compute_in_bfloat16(cuda_bf16: Setup) -> None:
    language = Qwen3VLLanguageModel(cuda_bf16.model)
    graphs = Decoder(language, 512, 16, use_graphs=True)
    direct = Decoder(language, 512, 16, use_graphs=False)
    rule = rule_for(cuda_bf16)
    history: list[tuple[str, str]] = []
    for question in ("What color is the square?", "Where does it go?"):
        _, prompt = prompt_for(cuda_bf16, question, history)
        through_graphs = answer(graphs, prompt, rule)
        directly = answer(direct, prompt, rule)
        assert through_graphs.token_ids == directly.token_ids
        assert through_graphs.graph_steps > 0 and directly.graph_steps == 0
        assert through_graphs.prefill_graph == bool(history) and not directly.prefill_graph
        text = cuda_bf16.tokenizer.decode(through_graphs.token_ids, skip_special_tokens=True).strip()
        history.append((question, text))
    assert graphs.cache.tokens == direct.cache.tokens
    length = len(graphs.cache.tokens)
    for layer in range(language.layers):  # the caches hold the same entries
        torch.testing.assert_close(graphs.cache.keys[layer][:, :, :length], direct.cache.keys[layer][:, :, :length])


def test_every_follow_up_prefill_graph_computes_what_the_direct_prefill_computes(cuda_bf16: Setup) -> None:
    """Each (token bucket, context bucket) graph, those captured without a warm-up of their own
    included, gives the logits and cache entries of the same padded prefill run op by op."""
    language = Qwen3VLLanguageModel(cuda_bf16.model)
    graphs = Decoder(language, 512, 16, use_graphs=True)
    direct = Decoder(language, 512, 16, use_graphs=False)
    generator = torch.Generator().manual_seed(0)
    for tokens, context in graphs.prefills.shapes:
        count = tokens - 3  # three positions of padding
        start = context - tokens
        input_ids = torch.randint(0, language.vocab_size, (1, count), generator=generator)
        rope = torch.arange(start, start + count).expand(language.rope_axes, count)
        for layer in range(language.layers):  # the same earlier cache entries for both to attend to
            direct.cache.keys[layer].copy_(graphs.cache.keys[layer])
            direct.cache.values[layer].copy_(graphs.cache.values[layer])
        with torch.inference_mode():
            through_graph, replayed = graphs.prefills.run(start, input_ids, rope)
            directly, _ = direct.prefills.run(start, input_ids, rope)
        assert replayed, (tokens, context)
        shape = f"{tokens} tokens over {context} positions"
        torch.testing.assert_close(through_graph, directly, rtol=1e-2, atol=1e-2, msg=shape)
        written = slice(start, start + count)
        for layer in (0, language.layers - 1):
            torch.testing.assert_close(graphs.cache.keys[layer][:, :, written], direct.cache.keys[layer][:, :, written])


def test_prefills_in_chunks_answer_like_generate_through_the_graphs(cuda_fp32: Setup) -> None:
    """Chunks of 7 tokens, boundaries inside the clip's spans, on CUDA: generate()'s answers on the
    first question and a follow-up. A chunk of text alone replays a prefill graph, one that carries
    the clip's features (with deepstack features, outside the graphs) runs op by op."""
    decoder = Decoder(Qwen3VLLanguageModel(cuda_fp32.model), 512, 16, use_graphs=True, prefill_chunk_tokens=7)
    rule = rule_for(cuda_fp32)
    history: list[tuple[str, str]] = []
    for question in ("What color is the square?", "Where does it go?"):
        inputs, prompt = prompt_for(cuda_fp32, question, history)
        result = answer(decoder, prompt, rule)
        assert result.token_ids == reference(cuda_fp32, inputs)
        assert result.prefill_chunks == len(prefill_chunks(result.prefix_tokens_reused, result.prompt_tokens, 0, 7))
        assert result.prefill_graph  # the last chunk is the question's text
        if history:
            assert result.graph_passes == result.prefill_chunks
        else:
            assert 0 < result.graph_passes < result.prefill_chunks
        history.append((question, cuda_fp32.tokenizer.decode(result.token_ids, skip_special_tokens=True).strip()))


def test_dependent_launches_change_no_result(cuda_bf16: Setup, monkeypatch: pytest.MonkeyPatch) -> None:
    """The step kernels launched as programmatic dependents (each waits for the kernel before it)
    give the answer, and the cache entries bit for bit, that ordinary launches give."""
    if torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("programmatic dependent launch needs compute capability 9.0")
    language = Qwen3VLLanguageModel(cuda_bf16.model)
    _, prompt = prompt_for(cuda_bf16, "What color is the square?")
    runs = {}
    for setting in ("1", "0"):
        monkeypatch.setenv("FRAMEWISE_PDL", setting)
        decoder = Decoder(language, 512, 16, use_graphs=True)
        result = answer(decoder, prompt, rule_for(cuda_bf16))
        assert result.graph_steps > 0
        length = len(decoder.cache.tokens)
        runs[setting] = (result.token_ids, [keys[:, :, :length].clone() for keys in decoder.cache.keys])
    assert runs["1"][0] == runs["0"][0]
    for with_pdl, without in zip(runs["1"][1], runs["0"][1]):
        assert torch.equal(with_pdl, without)


def test_a_failed_capture_falls_back_to_eager_steps_with_the_reason(
    cuda_fp32: Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fail(capture, forward, **options):
        raise RuntimeError("CUDA out of memory (simulated)")

    monkeypatch.setattr(GraphCapture, "capture", fail)
    decoder = Decoder(Qwen3VLLanguageModel(cuda_fp32.model), 512, 16, use_graphs=True)
    assert not decoder.graphs_enabled and "out of memory (simulated)" in decoder.graphs_reason
    inputs, prompt = prompt_for(cuda_fp32, "What color is the square?")
    result = answer(decoder, prompt, rule_for(cuda_fp32))
    assert result.token_ids == reference(cuda_fp32, inputs) and result.graph_steps == 0


def test_the_engine_decodes_through_graphs_and_reports_it() -> None:
    settings = (
        AppSettings()
        .replace("model", device="cuda", dtype="float32")
        .replace("encoder", min_budget=256, max_budget=4096)
        .replace("generation", max_new_tokens=12)
    )
    engine = Engine(settings)
    info = engine.load()
    assert info.decoder.graphs_enabled and "captured" in info.decoder.graphs_reason
    assert info.decoder.capture_seconds is not None and info.decoder.kv_cache_mb > 0
    engine.open_clip(sorted(SAMPLE_CLIPS.glob("*.mp4"))[0])
    first = engine.ask("What color is the square?").stats
    second = engine.ask("How many shapes are there?").stats
    for stats in (first, second):
        assert stats.decoder.eager_steps == 0 and stats.decoder.graph_steps == stats.new_tokens - 1
    assert second.decoder.prefix_tokens_reused >= first.decoder.prompt_tokens


def test_an_embedding_held_by_the_host_answers_through_the_graphs_like_generate(cuda_fp32: Setup) -> None:
    """The demo model untied from its head and its input embedding moved to pinned host memory, as
    loading moves an untied one on CUDA: the first question and follow-ups (a step graph per token, a
    prefill graph per follow-up) answer as generate() does with the table on the device."""
    model = copy.deepcopy(cuda_fp32.model)
    model.lm_head.weight = torch.nn.Parameter(model.lm_head.weight.detach().clone(), requires_grad=False)
    allocated = torch.cuda.memory_allocated()
    assert move_input_embedding_to_host(model, torch.device("cuda"))
    embedding = model.get_input_embeddings()
    assert isinstance(embedding, HostEmbedding) and embedding.weight.is_pinned()
    assert allocated - torch.cuda.memory_allocated() >= embedding.weight.numel() * embedding.weight.element_size()
    decoder = Decoder(Qwen3VLLanguageModel(model), 512, 16, use_graphs=True)
    assert decoder.graphs_enabled, decoder.graphs_reason
    converse_like_generate(cuda_fp32, decoder)
