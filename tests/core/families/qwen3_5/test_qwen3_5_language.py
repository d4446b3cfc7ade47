"""Qwen3.5's language model over Framewise's hybrid state, against transformers' own
``Qwen3_5ForConditionalGeneration`` (tiny random weights, the CPU): prompts with a clip, or a
picture and a clip, whose features come from the model's own tower; the prefill's logits, greedy
decode steps, a prefill split in two, padded text prefills and state snapshots."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import pytest
import torch

from framewise.core.decoding.defs import VisionRows
from framewise.core.decoding.hybrid_state import HybridState
from framewise.core.decoding.prefill_graphs import PrefillGraphs
from framewise.core.decoding.step_graphs import context_buckets
from framewise.core.families.qwen3_5.language import Qwen35LanguageModel
from framewise.core.quantization.kv_formats import E4M3_KV_CACHE, FLOAT_KV_CACHE
from tests.core.families.qwen3_5.checkpoint import tiny_config, tiny_model

STEPS = 5
MAX_TOKENS = 256
# Largest difference from transformers' logits allowed, relative to the largest logit. fp32: the
# same arithmetic, partly in another order. bf16: both sides run the model's own bf16 modules, but
# the gated delta rule sums its float32 products in another order, which can flip the last bit of a
# bf16 output; two units in the last place of the largest logit (one was the most seen).
RELATIVE = {torch.float32: 1e-4, torch.bfloat16: 2**-6}


@dataclass(frozen=True)
class Item:
    """One vision item of a prompt: ``modality`` ("image" or "video"), its ``grid`` (t, h, w) in
    patches and random ``pixels`` (t*h*w, 1536)."""

    modality: str
    grid: tuple[int, int, int]
    pixels: torch.Tensor


@dataclass(frozen=True)
class PromptCase:
    """Token ids (1, n), token types (1, n) (0 text, 1 image, 2 video) and the items in prompt order."""

    input_ids: torch.Tensor
    token_types: torch.Tensor
    items: tuple[Item, ...]


def build_prompt(config, items: tuple[Item, ...], seed: int = 0) -> PromptCase:
    """Text, then each item (a clip one slice of two frames at a time after a text time marker, as
    the processor lays it out), then a question; text ids random below the special ones."""
    generator = torch.Generator().manual_seed(seed)

    def text(count: int) -> list[int]:
        return torch.randint(0, 250, (count,), generator=generator).tolist()

    ids, types = text(5), [0] * 5
    for item in items:
        slices, tokens = (item.grid[0], item.grid[1] * item.grid[2] // 4)
        pad = config.video_token_id if item.modality == "video" else config.image_token_id
        for _ in range(slices):
            marker = text(3) if item.modality == "video" else []
            ids += marker + [config.vision_start_token_id] + [pad] * tokens + [config.vision_end_token_id]
            types += [0] * (len(marker) + 1) + [2 if item.modality == "video" else 1] * tokens + [0]
    ids += text(7)
    types += [0] * 7
    return PromptCase(torch.tensor([ids]), torch.tensor([types]), items)


def items_for(kinds: str, dtype: torch.dtype) -> tuple[Item, ...]:
    """``kinds`` "video" (a clip of two slices, 8x8 patches a frame), "image" (a 4x6-patch picture)
    or "image and video" (the picture, then the clip)."""
    generator = torch.Generator().manual_seed(3)
    image = Item("image", (1, 4, 6), torch.randn(24, 1536, generator=generator).to(dtype))
    video = Item("video", (2, 8, 8), torch.randn(128, 1536, generator=generator).to(dtype))
    return {"video": (video,), "image": (image,), "image and video": (image, video)}[kinds]


def reference_inputs(case: PromptCase) -> dict[str, torch.Tensor]:
    """What transformers' forward and generate() take for ``case``."""
    inputs = {"input_ids": case.input_ids, "attention_mask": torch.ones_like(case.input_ids),
              "mm_token_type_ids": case.token_types}
    for modality, pixels_key, grid_key in [("image", "pixel_values", "image_grid_thw"),
                                           ("video", "pixel_values_videos", "video_grid_thw")]:
        chosen = [item for item in case.items if item.modality == modality]
        if chosen:
            inputs[pixels_key] = torch.cat([item.pixels for item in chosen])
            inputs[grid_key] = torch.tensor([item.grid for item in chosen])
    return inputs


def vision_rows(model, case: PromptCase, start: int = 0, stop: int | None = None) -> VisionRows | None:
    """The features of ``case``'s items from the model's own tower, for the tokens [start, stop)."""
    features, device = [], next(model.parameters()).device
    for item in case.items:
        encode = model.model.get_video_features if item.modality == "video" else model.model.get_image_features
        features.append(torch.cat(encode(item.pixels.to(device), torch.tensor([item.grid], device=device)).pooler_output))
    mask = case.token_types[:, start:stop] > 0
    if not mask.any():
        return None
    before = int((case.token_types[0, :start] > 0).sum())
    embeds = torch.cat(features)[before : before + int(mask.sum())]
    return VisionRows(mask=mask, embeds=embeds, deepstack=())


@dataclass
class Run:
    """A language model over its state, after a prefill of ``case``."""

    language: Qwen35LanguageModel
    state: HybridState
    case: PromptCase
    rope_offset: int


def prefilled(model, case: PromptCase, linear_kernels: bool | None = None) -> tuple[Run, torch.Tensor]:
    """A fresh state prefilled with ``case`` in one pass, and the last token's logits."""
    language = Qwen35LanguageModel(model, linear_kernels)
    state = language.new_state(MAX_TOKENS)
    positions = language.positions(case.input_ids, case.token_types, tuple((i.modality, i.grid) for i in case.items))
    logits = language.prefill(state, 0, case.input_ids, positions.rope, vision_rows(model, case))
    return Run(language, state, case, positions.rope_offset), logits


def decode(run: Run, first: torch.Tensor, position: int, steps: int) -> tuple[list[int], list[torch.Tensor]]:
    """Greedy steps after ``first`` (1,) at cache ``position``: the tokens picked and each step's logits."""
    tokens, logits_seen, token = [], [], first
    for offset in range(steps):
        run.state.kv.view_length = MAX_TOKENS
        at = position + offset
        logits = run.language.step(
            run.state, run.language.embed(token.view(1, 1)), torch.tensor([at]), torch.tensor([at + run.rope_offset])
        )
        logits_seen.append(logits.clone())
        token = logits.argmax(dim=-1)
        tokens.append(int(token))
    return tokens, logits_seen


def assert_relatively_close(actual: torch.Tensor, expected: torch.Tensor, relative: float) -> None:
    """Every entry within ``relative`` times the largest magnitude of ``expected``."""
    worst = (actual.float() - expected.float()).abs().max().item()
    scale = expected.float().abs().max().item()
    assert worst <= relative * scale, f"largest difference {worst:.3g} against logits up to {scale:.3g}"


@pytest.fixture(scope="module")
def fp32_model():
    return tiny_model(tiny_config(), seed=1)


@pytest.mark.parametrize("kinds", ["video", "image", "image and video"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_prefill_and_greedy_steps_equal_transformers_generate(fp32_model, kinds: str, dtype: torch.dtype) -> None:
    model = fp32_model if dtype == torch.float32 else tiny_model(tiny_config(), seed=1, dtype=dtype)
    case = build_prompt(model.config, items_for(kinds, dtype))
    with torch.inference_mode():
        expected = model.generate(
            **reference_inputs(case), max_new_tokens=STEPS + 1, do_sample=False, output_logits=True,
            return_dict_in_generate=True, pad_token_id=0,
        )
        run, logits = prefilled(model, case)
        first = logits.argmax(dim=-1)
        tokens, step_logits = decode(run, first, case.input_ids.shape[1], STEPS)
    expected_tokens = expected.sequences[0, case.input_ids.shape[1]:].tolist()
    assert [int(first), *tokens] == expected_tokens
    for ours, theirs in zip([logits, *step_logits], expected.logits):
        assert_relatively_close(ours, theirs, RELATIVE[dtype])


def test_the_prefill_logits_equal_transformers_forward_and_differ_between_prompts(fp32_model) -> None:
    case = build_prompt(fp32_model.config, items_for("image and video", torch.float32))
    other = build_prompt(fp32_model.config, items_for("image and video", torch.float32), seed=5)
    with torch.inference_mode():
        theirs = fp32_model(**reference_inputs(case)).logits[:, -1]
        ours = prefilled(fp32_model, case)[1]
        assert_relatively_close(ours, theirs, RELATIVE[torch.float32])
        assert (prefilled(fp32_model, other)[1] - ours).abs().max() > 0.1 * ours.abs().max()


@pytest.mark.parametrize("split", [4, 20, 50], ids=["text", "inside the clip", "after the clip"])
def test_a_prefill_split_in_two_equals_one_prefill(fp32_model, split: int) -> None:
    case = build_prompt(fp32_model.config, items_for("video", torch.float32))
    with torch.inference_mode():
        whole, whole_logits = prefilled(fp32_model, case)
        language = whole.language
        state = language.new_state(MAX_TOKENS)
        positions = language.positions(case.input_ids, case.token_types, (("video", case.items[0].grid),))
        language.prefill(state, 0, case.input_ids[:, :split], positions.rope[:, :split],
                         vision_rows(fp32_model, case, 0, split))
        logits = language.prefill(state, split, case.input_ids[:, split:], positions.rope[:, split:],
                                  vision_rows(fp32_model, case, split))
    torch.testing.assert_close(logits, whole_logits, rtol=1e-4, atol=1e-4)
    for ours, theirs in zip((*state.conv_states, *state.recurrent_states),
                            (*whole.state.conv_states, *whole.state.recurrent_states)):
        torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-5)


def test_restoring_a_snapshot_decodes_again_exactly_and_a_new_question_matches_a_fresh_prefill(fp32_model) -> None:
    case = build_prompt(fp32_model.config, items_for("video", torch.float32))
    length = case.input_ids.shape[1]
    with torch.inference_mode():
        run, logits = prefilled(fp32_model, case)
        run.state.kv.tokens = case.input_ids[0].tolist()
        snapshot = run.state.snapshot()
        first = logits.argmax(dim=-1)
        tokens, before = decode(run, first, length, 3)
        run.state.kv.tokens += [int(first), *tokens[:2]]  # a stopped answer: the cache holds it
        run.state.restore(snapshot)
        again_tokens, again = decode(run, first, length, 3)
        # A new question after the restored prompt, as a follow-up's prefill would put it.
        question = torch.randint(0, 250, (1, 6), generator=torch.Generator().manual_seed(9))
        rope = torch.arange(length, length + 6).expand(3, -1) + run.rope_offset
        run.state.restore(snapshot)
        follow_up = run.language.prefill(run.state, length, question, rope, None)
        fresh_case = PromptCase(torch.cat((case.input_ids, question), dim=1),
                                torch.cat((case.token_types, torch.zeros_like(question)), dim=1), case.items)
        fresh = prefilled(fp32_model, fresh_case)[1]
    assert again_tokens == tokens
    for ours, theirs in zip(again, before):
        torch.testing.assert_close(ours, theirs, rtol=0, atol=0)
    torch.testing.assert_close(follow_up, fresh, rtol=1e-4, atol=1e-4)


def test_a_padded_text_prefill_equals_the_prefill_of_its_real_tokens(fp32_model) -> None:
    case = build_prompt(fp32_model.config, items_for("video", torch.float32))
    length, real, padded = case.input_ids.shape[1], 5, 16
    question = torch.randint(0, 250, (1, padded), generator=torch.Generator().manual_seed(11))
    with torch.inference_mode():
        runs = [prefilled(fp32_model, case)[0] for _ in range(2)]
        rope = torch.arange(length, length + padded).expand(3, -1) + runs[0].rope_offset
        runs[0].state.kv.view_length = MAX_TOKENS
        through_padding = runs[0].language.head(runs[0].language.text_prefill(
            runs[0].state, runs[0].language.embed(question), torch.arange(length, length + padded), rope,
            torch.tensor([real - 1]),
        ))
        real_only = runs[1].language.prefill(runs[1].state, length, question[:, :real], rope[:, :real], None)
        steps = [decode(run, torch.tensor([7]), length + real, 2)[1] for run in runs]
    torch.testing.assert_close(through_padding, real_only, rtol=1e-4, atol=1e-4)
    for ours, theirs in zip(*steps):
        torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-4)


def test_a_pass_whose_logits_are_not_asked_for_skips_the_output_head(fp32_model) -> None:
    """A pass before a prompt's last (a first question's clip pass): no logits, no output head, and
    the state it leaves is the pass's with them, to the bit."""
    case = build_prompt(fp32_model.config, items_for("video", torch.float32))
    heads = []
    handle = fp32_model.lm_head.register_forward_hook(lambda module, args, output: heads.append(output))
    try:
        with torch.inference_mode():
            with_logits, logits = prefilled(fp32_model, case)
            assert logits is not None and len(heads) == 1
            language = Qwen35LanguageModel(fp32_model)
            state = language.new_state(MAX_TOKENS)
            positions = language.positions(case.input_ids, case.token_types, tuple((i.modality, i.grid) for i in case.items))
            skipped = language.prefill(state, 0, case.input_ids, positions.rope, vision_rows(fp32_model, case), logits=False)
    finally:
        handle.remove()
    assert skipped is None and len(heads) == 1
    for ours, theirs in zip((*state.conv_states, *state.recurrent_states, *state.kv.keys, *state.kv.values),
                            (*with_logits.state.conv_states, *with_logits.state.recurrent_states,
                             *with_logits.state.kv.keys, *with_logits.state.kv.values), strict=True):
        assert torch.equal(ours, theirs)


def test_sizes_and_state_follow_the_config(fp32_model) -> None:
    language = Qwen35LanguageModel(fp32_model)
    state = language.new_state(MAX_TOKENS)
    assert (language.layers, language.kv_heads, language.head_dim) == (1, 2, 64)
    assert language.vocab_size == 300 and language.rope_axes == 3
    assert len(state.conv_states) == 2 and state.conv_states[0].shape == (1, 2 * 32 + 64, 4)
    assert state.recurrent_states[0].shape == (1, 4, 16, 16)
    assert state.nbytes == language.state_bytes(MAX_TOKENS)
    assert not language.linear_kernels and "torch ops" in language.step_description


def test_deepstack_features_are_refused(fp32_model) -> None:
    case = build_prompt(fp32_model.config, items_for("video", torch.float32))
    rows = vision_rows(fp32_model, case)
    language = Qwen35LanguageModel(fp32_model)
    with_deepstack = VisionRows(rows.mask, rows.embeds, (rows.embeds,))
    with pytest.raises(ValueError, match="deepstack"), torch.inference_mode():
        language.prefill(language.new_state(MAX_TOKENS), 0, case.input_ids, torch.zeros(3, case.input_ids.shape[1],
                         dtype=torch.long), with_deepstack)


def test_asking_for_the_linear_kernels_off_cuda_says_why(fp32_model) -> None:
    with pytest.raises(ValueError, match="CUDA"):
        Qwen35LanguageModel(fp32_model, linear_kernels=True)


def test_an_e4m3_cache_keeps_the_full_attention_layers_close_to_the_float_cache(fp32_model) -> None:
    """The full-attention layers' keys and values in e4m3 with a scale per token and head (the
    linear layers' states stay as they are): logits of the prefill and of steps on fixed tokens
    within a few per cent of the float cache's, in about a quarter of its bytes (float32 here)."""
    case = build_prompt(fp32_model.config, items_for("video", torch.float32))
    grids = (("video", case.items[0].grid),)
    results = {}
    for layout in (FLOAT_KV_CACHE, E4M3_KV_CACHE):
        language = Qwen35LanguageModel(fp32_model, cache_format=layout)
        state = language.new_state(MAX_TOKENS)
        positions = language.positions(case.input_ids, case.token_types, grids)
        length = case.input_ids.shape[1]
        with torch.inference_mode():
            logits = [language.prefill(state, 0, case.input_ids, positions.rope, vision_rows(fp32_model, case))]
            for at, token in enumerate((5, 9, 13, 2), start=length):
                state.kv.view_length = at + 1
                rope = torch.tensor([at + positions.rope_offset])
                logits.append(language.step(state, language.embed(torch.tensor([[token]])), torch.tensor([at]), rope))
        results[layout.setting] = (torch.cat(logits), state)
    (want, float_state), (got, scaled_state) = results["auto"], results["fp8"]
    assert scaled_state.kv.keys[0].dtype == torch.float8_e4m3fn
    assert scaled_state.kv.nbytes == float_state.kv.nbytes * (scaled_state.kv.head_dim + 4) // (4 * float_state.kv.head_dim)
    error = float((got - want).norm() / want.norm())
    assert 0 < error < 0.05


def test_an_e4m3_cache_read_back_a_segment_at_a_time_gives_the_logits_of_one_read(fp32_model) -> None:
    """The full-attention layer over an e4m3 cache read back 16 positions at a time, each segment's
    attention merged by its log-sum-exp: a prefill in three chunks (the later two after cached
    positions), a padded text prefill and steps over the whole bucket give the logits of reading the
    whole context at once (a segment longer than the cache: the path without segments), within
    float32 rounding."""
    case = build_prompt(fp32_model.config, items_for("video", torch.float32))
    grids = (("video", case.items[0].grid),)
    length, question = case.input_ids.shape[1], torch.tensor([[17, 4, 99, 23, 8, 61]])
    splits = (0, 20, 50, length)
    assert E4M3_KV_CACHE.read_segment >= MAX_TOKENS and length > 3 * 16
    results = []
    for layout in (E4M3_KV_CACHE, dataclasses.replace(E4M3_KV_CACHE, read_segment=16)):
        language = Qwen35LanguageModel(fp32_model, cache_format=layout)
        state = language.new_state(MAX_TOKENS)
        positions = language.positions(case.input_ids, case.token_types, grids)
        run = Run(language, state, case, positions.rope_offset)
        with torch.inference_mode():
            logits = [
                language.prefill(state, start, case.input_ids[:, start:stop], positions.rope[:, start:stop],
                                 vision_rows(fp32_model, case, start, stop))
                for start, stop in zip(splits, splits[1:])
            ]
            state.kv.view_length = MAX_TOKENS
            rope = torch.arange(length, length + 6).expand(3, -1) + run.rope_offset
            hidden = language.text_prefill(state, language.embed(question), torch.arange(length, length + 6), rope,
                                           torch.tensor([5]))
            logits.append(language.head(hidden).clone())
            logits += decode(run, logits[-1].argmax(dim=-1), length + 6, 3)[1]
        results.append(torch.cat(logits))
    whole, segmented = results
    assert_relatively_close(segmented, whole, 1e-5)


def test_a_clip_pass_padded_to_a_prefill_graphs_bucket_equals_the_plain_pass(fp32_model) -> None:
    """A first question's clip pass, its features in the embeddings, through the prefill graphs'
    padded pass (run directly here): the plain prefill's logits, and the same states after it."""
    case = build_prompt(fp32_model.config, items_for("image and video", torch.float32))
    length = case.input_ids.shape[1]
    with torch.inference_mode():
        plain, plain_logits = prefilled(fp32_model, case)
        language = Qwen35LanguageModel(fp32_model)
        state = language.new_state(MAX_TOKENS)
        bucket = 32 * -(-(length + 1) // 32)  # past the pass's length: some padding
        graphs = PrefillGraphs(language, state, context_buckets(64, MAX_TOKENS), direct=True, token_buckets=(16,),
                               clip_buckets=(bucket,))
        assert language.vision_in_embeddings and not graphs.takes(0, length)  # run directly, no graph holds it
        positions = language.positions(case.input_ids, case.token_types, tuple((i.modality, i.grid) for i in case.items))
        logits, replayed = graphs.run(0, case.input_ids, positions.rope, vision_rows(fp32_model, case))
        steps = [decode(run, torch.tensor([7]), length, 2)[1]
                 for run in (plain, Run(language, state, case, positions.rope_offset))]
    assert not replayed
    torch.testing.assert_close(logits, plain_logits, rtol=1e-4, atol=1e-4)
    for ours, theirs in zip(*steps):
        torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-4)
