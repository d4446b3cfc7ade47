"""Qwen3-VL: the model family's adapter to Framewise's encoder seam, its geometry, vision metadata,
graph-safe attention and the injection of precomputed features into the language model."""
