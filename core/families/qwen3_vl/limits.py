"""Qwen3-VL's model types and limits, importable without torch (the vLLM backend and the window
check settings against them without loading a model)."""

from __future__ import annotations

from framewise.core.seam import FamilyLimits

MODEL_TYPES = ("qwen3_vl", "qwen3_vl_moe")

QWEN3_VL_LIMITS = FamilyLimits(
    name="Qwen3-VL",
    patch_size=16,
    merge_size=2,
    frames_per_slice=2,  # the tower's temporal patch: one attention sequence per frame pair
    max_frames=768,
    # The released checkpoints' video preprocessing caps a whole clip at 24,576 merge blocks; more
    # pixels than that only cost memory.
    max_clip_blocks=24576,
)
