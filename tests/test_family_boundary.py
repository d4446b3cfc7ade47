"""The model-family rule: outside the family packages (``core/families/<family>/``) nothing in core,
ui or app names a Qwen3-VL class, prompt token, config field or constant; the registry alone names
the package. A sibling family's package may (Qwen3.5 reuses Qwen3-VL's tokens, tower and positions)."""

from __future__ import annotations

import re

import pytest

from tests.conftest import REPO_ROOT

FAMILIES = REPO_ROOT / "core" / "families"
FAMILY_PACKAGE = FAMILIES / "qwen3_vl"
REGISTRY = FAMILIES / "__init__.py"

FORBIDDEN = {
    "a Qwen-VL class": r"\bQwen[0-9.]*_?VL[A-Za-z]+",
    "a Qwen chat or vision token": r"<\|(vision_start|vision_end|vision_pad|video_pad|image_pad|im_start|im_end)\|>",
    "a Qwen3-VL config field or model attribute": (
        r"\b(spatial_merge_size|temporal_patch_size|num_position_embeddings|deepstack_visual_indexes|out_hidden_size"
        r"|vision_config|text_config|mm_token_type_ids|video_grid_thw|image_grid_thw|pixel_values_videos"
        r"|get_rope_index|visual\.blocks|language_model\.layers)\b"
    ),
    "a Qwen3-VL constant": (
        r"\b(PATCH_PIXELS|PIXELS_PER_VIDEO_TOKEN|MAX_CLIP_PIXELS|VIDEO_TOKEN|IMAGE_TOKEN|TEXT_TOKEN|VIDEO_PAD"
        r"|IMAGE_PAD|VISION_START|VISION_END)\b|\b2x2\b|\b24576\b"
    ),
    "the Qwen3-VL package (only the registry imports it)": r"families\.qwen3_vl\b",
}


def checked_files() -> list:
    files = [
        path
        for layer in ("core", "ui", "app")
        for path in sorted((REPO_ROOT / layer).rglob("*.py"))
        if not in_a_family_package(path) and path != REGISTRY
    ]
    assert len(files) > 20, "found too few files to check"
    return files


def in_a_family_package(path) -> bool:
    """Whether ``path`` lies in one family's package (a folder under core/families/), not beside them."""
    return FAMILIES in path.parents and path.parent != FAMILIES


def hits(text: str, pattern: str) -> list[str]:
    return [f"line {text.count(chr(10), 0, match.start()) + 1}: {match.group()}" for match in re.finditer(pattern, text)]


@pytest.mark.parametrize("what", FORBIDDEN)
def test_nothing_outside_the_family_names_qwen3_vl(what: str) -> None:
    found = {
        str(path.relative_to(REPO_ROOT)): found
        for path in checked_files()
        if (found := hits(path.read_text(encoding="utf-8"), FORBIDDEN[what]))
    }
    assert not found, f"{what} outside the family packages: {found}"


@pytest.mark.parametrize("what", FORBIDDEN)
def test_each_pattern_finds_what_it_forbids_in_the_family_package(what: str) -> None:
    """The check itself works: every pattern has a hit where Qwen3-VL is allowed to be named."""
    allowed = [FAMILY_PACKAGE / name for name in ("prompt.py", "family.py", "language.py", "geometry.py", "limits.py")]
    texts = "\n".join(path.read_text(encoding="utf-8") for path in [*allowed, REGISTRY])
    assert hits(texts, FORBIDDEN[what])
