"""The card-fit table of docs/models.md is the memory estimate of each released size of both
families (:mod:`tests.core.families.released_configs`) at default settings, in bf16 and fp8, and
in fp8 with a long context, counted as loading counts it (the largest clip's features included):
when the estimate or a shape changes, this test prints the table to paste."""

from __future__ import annotations

import dataclasses

import torch

from framewise.core.families import family_for
from framewise.core.memory_plan import GIB
from framewise.core.quantization.kv_formats import FLOAT_KV_CACHE
from framewise.core.quantization.registry import choose_weight_format
from framewise.core.settings import AppSettings
from tests.conftest import REPO_ROOT
from tests.core.families.released_configs import RELEASED

DOC = REPO_ROOT / "docs" / "models.md"
LONG_CONTEXT = 131_072
HEADER = (
    "| model | layers | keys and values a token (bf16) | bf16 | fp8 | fp8, context of 131,072 tokens |\n"
    "|---|---|---|---|---|---|"
)


def estimated_gib(config: dict, setting: str, settings: AppSettings) -> str:
    """The estimate's total on a CUDA card for ``settings`` with the dtype ``setting``, in GiB."""
    family = family_for(config["model_type"])
    weight_format = choose_weight_format(config, setting, torch.device("cuda"))
    limits = family.limits
    budgets, context = settings.encoder.token_budgets(limits), settings.context_tokens(limits)
    clip_tokens = limits.video_tokens(settings.sampling.max_pixels)  # as loading's estimate counts them
    estimate = family.estimate_memory(config, weight_format, torch.bfloat16, context, budgets, "cuda", clip_tokens)
    return f"{estimate.total / GIB:.1f} GiB"


def table() -> str:
    """One row per released size: layers, keys and values a token, and the estimates."""
    defaults = AppSettings()
    long = dataclasses.replace(defaults, decoding=dataclasses.replace(defaults.decoding, max_context_tokens=LONG_CONTEXT))
    rows = [HEADER]
    for name, config in RELEASED.items():
        layout = family_for(config["model_type"]).language_layout(config)
        bf16 = FLOAT_KV_CACHE.bytes_per_token(layout.kv_layers, layout.kv_heads, layout.head_dim, torch.bfloat16)
        per_token = f"{bf16 // 1024} KiB"
        estimates = [estimated_gib(config, "bfloat16", defaults), estimated_gib(config, "fp8", defaults),
                     estimated_gib(config, "fp8", long)]
        rows.append(f"| {name} | {layout.describe()} | {per_token} | " + " | ".join(estimates) + " |")
    return "\n".join(rows)


def test_the_docs_table_is_the_estimate_of_each_released_size() -> None:
    expected = table()
    assert expected in DOC.read_text(encoding="utf-8"), f"docs/models.md should hold this table:\n\n{expected}\n"
