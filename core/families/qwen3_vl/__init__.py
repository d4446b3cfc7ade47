"""Qwen3-VL: the model family's adapter to Framewise's encoder seam, its geometry, vision metadata,
graph-safe attention, the injection of precomputed features into the language model, and the
language model as the decoder runs it (3-D rotary positions and their offset across turns)."""
