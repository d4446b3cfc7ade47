"""The model-family seam with a family that is not Qwen3-VL: other patch and merge sizes, three
frames per slice, its own prompt tokens and a toy language model. Settings validation, encoder
planning, frame sampling and the decoder all run on its limits, as the toy tower proves the
encoder's seam."""

from __future__ import annotations

import importlib
from collections.abc import Iterator

import pytest
import torch

from framewise.core import families
from framewise.core.decoding import Decoder, Prompt, PromptPositions, SamplingRule, VisionRows
from framewise.core.decoding.kv_cache import StaticKVCache
from framewise.core.encoding.defs import EncodedItem
from framewise.core.encoding.planning import BatchLimits, PlanItem, plan_batches
from framewise.core.errors import SettingsError, UnsupportedModelError
from framewise.core.seam import FamilyLimits, VisionSpan
from framewise.core.settings import AppSettings, EncoderSettings, SamplingSettings, clip_context_tokens
from framewise.core.video import sample_count

TOY_LIMITS = FamilyLimits(
    name="Toy-VL", patch_size=8, merge_size=3, frames_per_slice=3, max_frames=30, max_clip_blocks=5000
)
VOCAB, HIDDEN = 40, 8
VISION_PAD = 1  # the toy prompt's placeholder token: its embedding is replaced by a feature row


class ToyFamily:
    """The parts of a model family the generic code reads without a checkpoint: the limits and a
    prompt of token ids with one span per item (loading and preprocessing are not exercised here)."""

    name = TOY_LIMITS.name
    model_types = ("toy_vl",)
    limits = TOY_LIMITS

    def build_prompt(
        self, question_ids: list[int], item_tokens: list[int]
    ) -> tuple[torch.Tensor, tuple[VisionSpan, ...]]:
        """``[2] + per item: [3] + pads + [4] + question_ids`` as (1, L) ids, and the items' spans."""
        ids, spans = [2], []
        for item, tokens in enumerate(item_tokens):
            ids.append(3)
            spans.append(VisionSpan(item=item, start=len(ids), length=tokens))
            ids += [VISION_PAD] * tokens + [4]
        return torch.tensor([ids + question_ids]), tuple(spans)


class BagOfTokensModel:
    """A language model whose next token is argmax(W @ sum of every embedding so far): it reads
    its whole context from the cache, so reused prefixes, spans and steps all show in its answers.
    Rotary positions have one axis and no offset."""

    device = torch.device("cpu")
    dtype = torch.float32
    layers, kv_heads, head_dim, vocab_size, max_positions, rope_axes = 1, 1, HIDDEN, VOCAB, 4096, 1
    step_kernels = False
    vision_in_embeddings = True
    step_description = "torch ops"

    def __init__(self) -> None:
        generator = torch.Generator().manual_seed(7)
        self.embedding = torch.randn(VOCAB, HIDDEN, generator=generator)
        self.unembedding = torch.randn(VOCAB, HIDDEN, generator=generator)

    def disable_step_kernels(self) -> None:
        pass

    def new_state(self, max_tokens: int) -> StaticKVCache:
        return StaticKVCache(self.layers, self.kv_heads, self.head_dim, max_tokens, self.dtype, self.device)

    def state_bytes(self, max_tokens: int) -> int:
        return StaticKVCache.bytes_needed(self.layers, self.kv_heads, self.head_dim, max_tokens, self.dtype)

    def positions(self, input_ids, token_types, grids) -> PromptPositions:
        return PromptPositions(rope=torch.arange(input_ids.shape[1])[None], rope_offset=0)

    def prefill(
        self, cache: StaticKVCache, start: int, input_ids, rope, vision: VisionRows | None, *, logits: bool = True
    ) -> torch.Tensor | None:
        embeds = self.embedding[input_ids[0]]
        if vision is not None:
            embeds[vision.mask[0]] = vision.embeds
        end = start + embeds.shape[0]
        hidden = self._write_and_read(cache, torch.arange(start, end), embeds, end - 1)
        return self.head(hidden) if logits else None

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        return self.embedding[ids]

    def text_prefill(self, cache: StaticKVCache, embeds, cache_positions, rope, last) -> torch.Tensor:
        return self._write_and_read(cache, cache_positions, embeds[0], int(cache_positions[last]))

    def head(self, hidden: torch.Tensor) -> torch.Tensor:
        return (self.unembedding @ hidden[0])[None]

    def step(self, cache: StaticKVCache, embeds, cache_position, rope_position) -> torch.Tensor:
        return self.head(self._write_and_read(cache, cache_position, embeds.view(1, -1), int(cache_position[0])))

    def _write_and_read(self, cache: StaticKVCache, positions, embeds, last_position: int) -> torch.Tensor:
        """Write ``embeds`` at ``positions``; the final "hidden state" (1, hidden): the cache's sum to ``last_position``."""
        cache.keys[0][0, 0, positions] = embeds
        return cache.keys[0][0, 0, : last_position + 1].sum(0)[None]


def reference_answer(model: BagOfTokensModel, prompt: Prompt, new_tokens: int) -> list[int]:
    """Greedy decoding of the bag-of-tokens model, recomputed from scratch, features placed by hand."""
    context = model.embedding[prompt.input_ids[0]].clone()
    for span in prompt.spans:
        context[span.start : span.end] = prompt.items[span.item].embeds[span.row : span.row + span.length]
    total, answer = context.sum(0), []
    for _ in range(new_tokens):
        token = int((model.unembedding @ total).argmax())
        answer.append(token)
        total = total + model.embedding[token]
    return answer


@pytest.fixture
def registered() -> Iterator[ToyFamily]:
    family = ToyFamily()
    families.register("toy_vl", lambda: family)
    yield family
    families.unregister("toy_vl")


def test_the_registry_picks_the_family_by_model_type_and_names_the_supported_ones(registered: ToyFamily) -> None:
    assert families.family_for("toy_vl") is registered
    assert "toy_vl" in families.supported_model_types()
    with pytest.raises(UnsupportedModelError, match=r"'llama'.*qwen3_vl or qwen3_vl_moe or qwen3_5 or toy_vl"):
        families.family_for("llama")


def test_each_registry_line_names_the_model_types_its_family_loads() -> None:
    for module, model_types in families.BUILT_IN_FAMILIES.items():
        family = importlib.import_module(module).FAMILY
        assert family.model_types == model_types
        assert all(families.family_for(model_type) is family for model_type in model_types)


@pytest.mark.parametrize(
    ("section", "changes", "field", "hint"),
    [
        ("sampling", {"min_frames": 4, "max_frames": 12}, "sampling.min_frames", "multiple of 3"),
        ("sampling", {"min_frames": 3, "max_frames": 32}, "sampling.max_frames", "multiple of 3"),
        ("sampling", {"min_frames": 3, "max_frames": 33}, "sampling.max_frames", "Toy-VL takes at most 30"),
        (
            "sampling", {"min_frames": 3, "max_frames": 30, "min_pixels_per_frame": 500},
            "sampling.min_pixels_per_frame", "one 24x24 block",
        ),
        ("encoder", {"budgets": (256, 1024)}, "encoder.budgets", "multiple of 9 (the 3x3 patch merge)"),
        ("encoder", {"budgets": (90, 90000)}, "encoder.budgets", "above 45,000"),
    ],
)
def test_settings_are_checked_against_the_familys_limits(section: str, changes: dict, field: str, hint: str) -> None:
    settings = AppSettings().replace("sampling", min_frames=3, max_frames=30).replace(section, **changes)
    with pytest.raises(SettingsError) as raised:
        settings.validate(TOY_LIMITS)
    assert raised.value.field == field and hint in raised.value.message


def test_settings_valid_for_the_toy_family_but_not_for_qwen3_vl() -> None:
    qwen3_vl = families.family_for("qwen3_vl").limits
    settings = (
        AppSettings()
        .replace("sampling", min_frames=3, max_frames=9, max_pixels=9 * 64 * 64)
        .replace("encoder", budgets=(90, 900), max_items_per_batch=4, max_frame_pairs_per_batch=8)
    )
    assert settings.validate(TOY_LIMITS) is settings
    with pytest.raises(SettingsError):
        settings.validate(qwen3_vl)
    # A clip's tokens: one per 3 frames of a 24x24 block (not 2 frames of 32x32), one time marker per 3 frames.
    assert clip_context_tokens(settings.sampling, TOY_LIMITS) == 36864 // (3 * 24 * 24) + 3 * 10
    assert clip_context_tokens(settings.sampling, qwen3_vl) == 36864 // (2 * 32 * 32) + 4 * 10


def test_automatic_budgets_are_multiples_of_the_merge_area() -> None:
    encoder = EncoderSettings(min_budget=90, max_budget=900, budget_ratio=1.5)
    budgets = encoder.token_budgets(TOY_LIMITS)
    assert budgets[0] == 90 and budgets[-1] == 900 and all(budget % 9 == 0 for budget in budgets)
    assert any(budget % 4 for budget in budgets)


def test_planning_packs_slices_into_budgets_of_the_familys_multiple() -> None:
    encoder = EncoderSettings(budgets=(90, 900), max_items_per_batch=4, max_frame_pairs_per_batch=8)
    limits = BatchLimits.from_settings(encoder, TOY_LIMITS)
    assert limits.budget_multiple == 9
    # A clip of 10 slices of 9x9 patches and a 6x6 image: 8 slices fill the first pass (its
    # sequences), the last 2 and the image share the second.
    batches = plan_batches([PlanItem("video", (10, 9, 9)), PlanItem("image", (1, 6, 6))], limits)
    assert [batch.budget for batch in batches] == [900, 900]
    assert [[piece.count for piece in batch.pieces] for batch in batches] == [[8], [2, 1]]
    small = plan_batches([PlanItem("image", (1, 6, 6))], limits)
    assert [batch.budget for batch in small] == [90]
    with pytest.raises(SettingsError, match="multiple of 9"):
        BatchLimits(budgets=(256,), max_items=1, max_sequences=1, budget_multiple=9)


def test_frame_counts_are_multiples_of_the_frames_per_slice() -> None:
    sampling = SamplingSettings(fps=2.0, min_frames=3, max_frames=30)
    assert sample_count(4.0, sampling, multiple=TOY_LIMITS.frames_per_slice) == 9
    assert sample_count(4.0, sampling, frame_count=4, multiple=TOY_LIMITS.frames_per_slice) == 6


def test_the_decoder_places_every_items_features_and_reuses_the_prefix_with_a_toy_model(registered: ToyFamily) -> None:
    model = BagOfTokensModel()
    generator = torch.Generator().manual_seed(1)
    items = tuple(EncodedItem(embeds=torch.randn(rows, HIDDEN, generator=generator), deepstack=()) for rows in (5, 3))
    decoder = Decoder(model, max_tokens=128, min_bucket=16, use_graphs=True)
    rule = SamplingRule(max_new_tokens=6)
    answered: list[int] = []
    for turn, question in enumerate(([10, 11, 12], [10, 11, 12, 13, 14])):
        ids, spans = registered.build_prompt(question + answered, [5, 3])
        grids = (("video", (1, 3, 5)), ("image", (1, 3, 3)))
        prompt = Prompt(ids, torch.zeros_like(ids), spans, grids, items, owner=items)
        result = decoder.answer(prompt, rule, lambda token: None, lambda: False)
        assert result.token_ids == reference_answer(model, prompt, 6), f"turn {turn}"
        assert (result.prefix_tokens_reused > spans[-1].end) == (turn > 0)
        answered = result.token_ids
    without_features = Prompt(ids, torch.zeros_like(ids), owner=object())
    assert decoder.answer(without_features, rule, lambda token: None, lambda: False).token_ids != result.token_ids
