"""Answer decoding: a state allocated at load (a static KV cache, or a hybrid model's KV cache and
linear-layer states with their snapshots), prefills in chunks of bounded size, one-token decode
steps through CUDA graphs per context-length bucket, and follow-up questions that prefill only what
the state lacks. The model family's language model comes in through
:class:`~framewise.core.decoding.defs.LanguageModel`, and a prompt places the encoded items through
vision spans (:class:`~framewise.core.decoding.decoder.Prompt`)."""

from framewise.core.decoding.decoder import Decoded, Decoder, Prompt, SamplingRule, context_for
from framewise.core.decoding.defs import LanguageModel, PromptPositions, VisionRows

__all__ = [
    "Decoded", "Decoder", "LanguageModel", "Prompt", "PromptPositions", "SamplingRule", "VisionRows", "context_for",
]
