"""Qwen3.5's model types and limits, importable without torch (the vLLM backend and the window
check settings against them without loading a model)."""

from __future__ import annotations

import dataclasses

from framewise.core.families.qwen3_vl.limits import QWEN3_VL_LIMITS

MODEL_TYPES = ("qwen3_5",)

# transformers maps qwen3_5 to Qwen3-VL's processor and the tower is Qwen3-VL's (patch 16, two
# frames a slice, 2x2 merge): Qwen3-VL's bounds, the released preprocessing's and the long-video
# ones beside them. (No Qwen3.5 checkpoint's video_preprocessor_config.json was at hand to read
# other bounds from.)
QWEN3_5_LIMITS = dataclasses.replace(QWEN3_VL_LIMITS, name="Qwen3.5")
