"""Answer decoding: a static KV cache allocated at load, one-token decode steps through CUDA graphs
per context-length bucket, and follow-up questions that prefill only what the cache lacks. The
model family's language model comes in through :class:`~framewise.core.decoding.defs.LanguageModel`
(Qwen3-VL's: :mod:`framewise.core.families.qwen3_vl.language`)."""

from framewise.core.decoding.decoder import Decoded, Decoder, Prompt, SamplingRule, context_for
from framewise.core.decoding.defs import LanguageModel, PromptPositions, VisionRows

__all__ = [
    "Decoded", "Decoder", "LanguageModel", "Prompt", "PromptPositions", "SamplingRule", "VisionRows", "context_for",
]
