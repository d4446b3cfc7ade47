"""Qwen3.5 behind Framewise's encoder seam: Qwen3-VL's adapter over the same tower (without
deepstack outputs), whose language model is the hybrid one of :mod:`.language`."""

from __future__ import annotations

import torch

from framewise.core.errors import FramewiseError
from framewise.core.families.qwen3_5.language import Qwen35LanguageModel
from framewise.core.families.qwen3_vl.adapter import Qwen3VLAdapter
from framewise.core.quantization.kv_formats import FLOAT_KV_CACHE, KVCacheFormat


class Qwen35Adapter(Qwen3VLAdapter):
    """A ``Qwen3_5ForConditionalGeneration``'s tower for the graph manager, and its language half
    for the decoder."""

    @classmethod
    def for_model(cls, model: torch.nn.Module) -> Qwen35Adapter:
        return cls(model.model.visual, model)

    def language_model(self, cache_format: KVCacheFormat = FLOAT_KV_CACHE) -> Qwen35LanguageModel:
        """The whole model's language half over a hybrid decoder state, its full-attention layers'
        keys and values in ``cache_format`` (:class:`Qwen35LanguageModel`)."""
        if self.model is None:
            raise FramewiseError("This adapter holds a vision tower alone; it has no language model to decode with.")
        return Qwen35LanguageModel(self.model, cache_format=cache_format)
