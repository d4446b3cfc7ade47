"""Settings: validation messages name the field and say what to change; round-trips keep values."""

from __future__ import annotations

import re

import pytest

from framewise.core.errors import SettingsError
from framewise.core.families import family_for
from framewise.core.settings import (
    AUTO_PRUNING_ABOVE_TOKENS,
    AUTO_PRUNING_RATE,
    CHAT_TEMPLATE_TOKENS,
    AppSettings,
    EncoderSettings,
    SamplingSettings,
    clip_context_tokens,
    geometric_budgets,
)

# The bounds the messages below name are Qwen3-VL's (the demo model's family).
QWEN3_VL = family_for("qwen3_vl").limits


def test_defaults_are_valid_and_budgets_are_finer_than_powers_of_two() -> None:
    settings = AppSettings().validate(QWEN3_VL)
    budgets = settings.encoder.token_budgets(QWEN3_VL)
    assert budgets[0] == settings.encoder.min_budget and budgets[-1] == settings.encoder.max_budget
    assert all(b % 4 == 0 for b in budgets)
    ratios = [later / earlier for earlier, later in zip(budgets, budgets[1:])]
    assert max(ratios) < 2.0


@pytest.mark.parametrize(
    ("low", "high", "ratio"), [(256, 16384, 1.25), (100, 1000, 1.5), (4, 4, 2.0), (256, 16000, 3.9)]
)
def test_geometric_budgets_cover_the_range_ascending(low: int, high: int, ratio: float) -> None:
    budgets = geometric_budgets(low, high, ratio, 4)
    assert list(budgets) == sorted(set(budgets))
    assert budgets[-1] == high and budgets[0] >= low
    assert all(later / earlier <= ratio + 0.05 for earlier, later in zip(budgets, budgets[1:]) if earlier >= 64)


@pytest.mark.parametrize(
    ("section", "changes", "field", "hint"),
    [
        ("encoder", {"attention_backend": "magic"}, "encoder.attention_backend", "varlen"),
        ("encoder", {"budgets": (256, 1000, 1001)}, "encoder.budgets", "multiple of 4"),
        ("encoder", {"max_items_per_batch": 512}, "encoder.max_items_per_batch", "smallest budget"),
        ("encoder", {"max_frame_pairs_per_batch": 2}, "encoder.max_frame_pairs_per_batch", "max items per batch"),
        ("encoder", {"min_budget": 1024, "max_budget": 512}, "encoder.max_budget", "at least min budget"),
        ("encoder", {"budget_ratio": 1.0}, "encoder.budget_ratio", "between"),
        ("encoder", {"budget_ratio": 1.011, "min_budget": 4}, "encoder.budget_ratio", "too many"),
        ("sampling", {"max_frames": 7}, "sampling.max_frames", "even"),
        ("sampling", {"max_frames": 2050, "max_pixels": 2050 * 4096}, "sampling.max_frames", "at most 2,048 frames"),
        ("sampling", {"fps": 0}, "sampling.fps", "between"),
        ("sampling", {"pruning": "1"}, "sampling.pruning", "below 1"),
        ("sampling", {"pruning": "-0.25"}, "sampling.pruning", "at least 0"),
        ("sampling", {"pruning": "most"}, "sampling.pruning", "off, auto, or a rate"),
        ("sampling", {"pruning": "nan"}, "sampling.pruning", "below 1"),
        ("sampling", {"max_pixels": 1000}, "sampling.max_pixels", "need at least 131,072"),
        ("sampling", {"max_pixels": 10**12}, "sampling.max_pixels", "lower max pixels"),
        ("encoder", {"max_budget": 10**7}, "encoder.max_budget", "at most 1,835,008"),
        ("encoder", {"budgets": (256, 2**21)}, "encoder.budgets", "above 1,835,008"),
        ("encoder", {"max_frame_pairs_per_batch": 5000}, "encoder.max_frame_pairs_per_batch", "at most 4096"),
        ("decoding", {"min_bucket": 1 << 17}, "decoding.min_bucket", "at most 65536"),
        ("decoding", {"min_bucket": 4096, "max_context_tokens": 3072}, "decoding.min_bucket", "must not exceed"),
        ("decoding", {"prefill_chunk_tokens": 255}, "decoding.prefill_chunk_tokens", "at least 256"),
        ("model", {"device": "tpu"}, "model.device", "cuda"),
        ("model", {"source": "  "}, "model.source", "demo"),
        ("generation", {"max_new_tokens": 0}, "generation.max_new_tokens", "between"),
        ("generation", {"temperature": -1.0}, "generation.temperature", "greedy"),
    ],
)
def test_invalid_settings_name_the_field_and_the_fix(section: str, changes: dict, field: str, hint: str) -> None:
    with pytest.raises(SettingsError) as raised:
        AppSettings().replace(section, **changes).validate(QWEN3_VL)
    assert raised.value.field == field
    assert hint in raised.value.message


def test_pruning_is_off_by_default_a_rate_when_set_and_auto_prunes_only_clips_past_its_threshold() -> None:
    assert SamplingSettings().pruning == "off" and SamplingSettings().pruning_rate(10**6) == 0.0
    assert SamplingSettings(pruning="0.75").pruning_rate(1) == 0.75
    auto = SamplingSettings(pruning="auto")
    assert auto.pruning_rate(AUTO_PRUNING_ABOVE_TOKENS) == 0.0
    assert auto.pruning_rate(AUTO_PRUNING_ABOVE_TOKENS + 1) == AUTO_PRUNING_RATE
    for valid in ("off", "auto", "0", "0.5", "0.99"):
        SamplingSettings(pruning=valid).validate(QWEN3_VL)


def test_a_pruning_rate_has_one_spelling_so_the_same_rate_is_the_same_setting() -> None:
    assert SamplingSettings(pruning=" 0.50") == SamplingSettings(pruning="0.5")
    assert SamplingSettings(pruning="AUTO").pruning == "auto"
    assert AppSettings.from_dict({"sampling": {"pruning": 0.25}}).sampling.pruning == "0.25"
    settings = AppSettings().replace("sampling", pruning="0.75")
    assert AppSettings.from_dict(settings.to_dict()) == settings


def test_2048_frames_are_reachable_with_a_pixel_budget_that_leaves_each_its_least() -> None:
    # Qwen's long-video evaluations: 2,048 frames; at 64k video tokens each 16:9 frame is 192x320.
    long = AppSettings().replace("sampling", max_frames=2048, max_pixels=65536 * 2048).validate(QWEN3_VL)
    assert clip_context_tokens(long.sampling, QWEN3_VL) == 65536 + 1024 * 10  # video tokens, then a marker per frame pair
    with pytest.raises(SettingsError) as raised:
        AppSettings().replace("sampling", max_frames=2048).validate(QWEN3_VL)  # the default: 1,024 video tokens
    assert raised.value.field == "sampling.max_pixels"
    assert raised.value.message == (
        "2,048 frames of at least 4,096 pixels each (min pixels per frame) need at least 8,388,608 (4,096 video "
        "tokens), not 2,097,152; raise it, or lower sampling max frames to at most 512"
    )


def test_the_largest_clip_is_qwens_long_video_budget_and_the_message_says_its_tokens() -> None:
    most = 224 * 1024 * 2 * 32 * 32  # 224k video tokens of two 32x32 blocks each
    AppSettings().replace("sampling", max_frames=2048, max_pixels=most).validate(QWEN3_VL)
    with pytest.raises(SettingsError) as raised:
        AppSettings().replace("sampling", max_frames=2048, max_pixels=most + 1).validate(QWEN3_VL)
    assert "229,376 video tokens" in raised.value.message and "lower max pixels" in raised.value.message


def test_explicit_budgets_win_over_the_range() -> None:
    encoder = EncoderSettings(budgets=(1024, 256, 256, 4096), max_items_per_batch=4)
    assert encoder.token_budgets(QWEN3_VL) == (256, 1024, 4096)


def test_round_trip_through_dict_keeps_every_value() -> None:
    settings = (
        AppSettings()
        .replace("encoder", budgets=(256, 512), use_graphs=False, attention_backend="sdpa_masked")
        .replace("sampling", fps=1.5, max_frames=16)
        .replace("model", source="/models/qwen", dtype="bfloat16")
    )
    assert AppSettings.from_dict(settings.to_dict()) == settings


def test_from_dict_ignores_unknown_keys_and_fills_missing_ones() -> None:
    settings = AppSettings.from_dict({"encoder": {"use_graphs": "false", "unknown": 1}, "extra": {}})
    assert settings.encoder.use_graphs is False
    assert settings.sampling == AppSettings().sampling


def test_from_dict_reads_a_value_saved_under_the_fields_earlier_name() -> None:
    assert AppSettings.from_dict({"encoder": {"max_frames_per_batch": 12}}).encoder.max_frame_pairs_per_batch == 12
    both = {"encoder": {"max_frames_per_batch": 12, "max_frame_pairs_per_batch": 24}}
    assert AppSettings.from_dict(both).encoder.max_frame_pairs_per_batch == 24  # the current name wins


def test_from_dict_rejects_wrong_types_with_the_field_name() -> None:
    with pytest.raises(SettingsError) as raised:
        AppSettings.from_dict({"sampling": {"max_frames": "many"}})
    assert raised.value.field == "sampling.max_frames"


def test_a_context_below_one_question_is_named_before_the_bucket_size_that_exceeds_it() -> None:
    with pytest.raises(SettingsError) as raised:
        AppSettings().replace("decoding", max_context_tokens=1).validate(QWEN3_VL)
    assert raised.value.field == "decoding.max_context_tokens"
    assert "1 tokens cannot hold one question" in raised.value.message


def _smallest_accepted_context(settings: AppSettings) -> int:
    """The smallest max context ``validate`` accepts beside ``settings``' other fields (by bisection)."""
    low, high = 1, 1 << 20
    while low < high:
        middle = (low + high) // 2
        try:
            settings.replace("decoding", max_context_tokens=middle).validate(QWEN3_VL)
            high = middle
        except SettingsError:
            low = middle + 1
    return low


_PARTS = re.compile(r"([\d,]+) for the largest clip .* ([\d,]+) for the chat template and ([\d,]+) for one answer")


def test_the_context_messages_agree_on_what_one_question_needs() -> None:
    """Once 2,335 tokens were refused as too few for any question, while the question check let a
    1,000-token question beside the same clip through: the check at load and the check of a
    question now draw the same line, and say the same parts."""
    settings = AppSettings()
    smallest = _smallest_accepted_context(settings)
    at, below = (settings.replace("decoding", max_context_tokens=tokens) for tokens in (smallest, smallest - 1))
    at.check_question_fits(1, QWEN3_VL)
    with pytest.raises(SettingsError) as too_short:
        below.validate(QWEN3_VL)
    with pytest.raises(SettingsError) as no_room:
        below.check_question_fits(1, QWEN3_VL)
    with pytest.raises(SettingsError) as one_more:
        at.check_question_fits(2, QWEN3_VL)
    assert f"must hold {smallest:,} tokens" in too_short.value.message
    assert f"to at least {smallest:,} tokens" in no_room.value.message
    assert f"to at least {smallest + 1:,} tokens" in one_more.value.message
    parts = {_PARTS.search(raised.value.message).groups() for raised in (too_short, no_room, one_more)}
    assert parts == {(f"{clip_context_tokens(settings.sampling, QWEN3_VL):,}", str(CHAT_TEMPLATE_TOKENS), "128")}


def test_a_question_is_checked_against_the_room_beside_the_largest_clip_and_one_answer() -> None:
    settings = AppSettings().replace("decoding", max_context_tokens=4096)
    room = 4096 - clip_context_tokens(settings.sampling, QWEN3_VL) - CHAT_TEMPLATE_TOKENS - settings.generation.max_new_tokens
    settings.check_question_fits(room, QWEN3_VL)
    with pytest.raises(SettingsError) as raised:
        settings.check_question_fits(room + 1, QWEN3_VL)
    assert raised.value.field == "decoding.max_context_tokens"
    assert f"shorten the question to at most {room:,} tokens" in raised.value.message
    assert "raise the context (now 4,096) to at least 4,097 tokens" in raised.value.message


@pytest.mark.parametrize(
    ("section", "changes"),
    [
        ("sampling", {"max_frames": 7}),  # Qwen3-VL's frames come in pairs
        ("sampling", {"max_frames": 2050, "max_pixels": 2050 * 4096}),
        ("sampling", {"max_pixels": 10**12}),
        ("encoder", {"budgets": (256, 1000, 1001)}),
        ("encoder", {"max_budget": 10**6}),
        ("encoder", {"max_frame_pairs_per_batch": 5000}),
        ("decoding", {"max_context_tokens": 300}),  # no room for the largest Qwen3-VL clip
    ],
)
def test_without_a_known_family_its_bounds_are_left_to_the_backend(section: str, changes: dict) -> None:
    settings = AppSettings().replace(section, **changes)
    assert settings.validate(None) is settings, "no family is assumed when none is known"
    with pytest.raises(SettingsError):
        settings.validate(QWEN3_VL)


@pytest.mark.parametrize(
    ("section", "changes", "field", "hint"),
    [
        ("sampling", {"min_frames": 0}, "sampling.min_frames", "whole number of at least 1"),
        ("sampling", {"min_frames": 8, "max_frames": 4}, "sampling.max_frames", "at least min frames (8)"),
        ("sampling", {"max_pixels": 1000}, "sampling.max_pixels", "need at least 131,072, not 1,000; raise it"),
        ("encoder", {"budgets": (256, -4)}, "encoder.budgets", "-4 is not a positive number"),
        ("encoder", {"min_budget": 1024, "max_budget": 512}, "encoder.max_budget", "a number that is at least min budget"),
        ("encoder", {"max_frame_pairs_per_batch": 2}, "encoder.max_frame_pairs_per_batch", "max items per batch"),
    ],
)
def test_the_checks_that_need_no_family_run_without_one(section: str, changes: dict, field: str, hint: str) -> None:
    with pytest.raises(SettingsError) as raised:
        AppSettings().replace(section, **changes).validate(None)
    assert raised.value.field == field
    assert hint in raised.value.message


def test_a_question_is_not_checked_against_a_clip_of_no_known_family() -> None:
    AppSettings().replace("decoding", max_context_tokens=4096).check_question_fits(10**6, None)
