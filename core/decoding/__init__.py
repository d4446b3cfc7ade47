"""Answer decoding: a static KV cache allocated at load, one-token decode steps through CUDA graphs
per context-length bucket, and follow-up questions that prefill only what the cache lacks."""

from framewise.core.decoding.decoder import Decoded, Decoder, Prompt, SamplingRule, context_for
from framewise.core.decoding.qwen3_vl_language import Qwen3VLLanguageModel

__all__ = ["Decoded", "Decoder", "Prompt", "Qwen3VLLanguageModel", "SamplingRule", "context_for"]
