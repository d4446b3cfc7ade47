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
    # Qwen's own long-video evaluations sample up to 2,048 frames and up to 224k video tokens (a
    # token is one merge block of each frame of a pair: two blocks). A person may raise the
    # sampling settings that far; frames then get smaller as the clip's pixel budget is shared out.
    max_frames=2048,
    max_clip_blocks=2 * 224 * 1024,
    # The released checkpoints' video preprocessing: 768 frames, a whole clip within 24,576 merge
    # blocks (12,288 video tokens).
    released_frames=768,
    released_clip_blocks=24576,
)
