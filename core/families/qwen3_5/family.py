"""Qwen3.5 as a :class:`~framewise.core.families.base.ModelFamily`: Qwen3-VL's family with its
own classes, weights, language model, language sizes for the memory estimate (:mod:`.memory`) and
chat-template options.

Everything that touches pixels and prompts is Qwen3-VL's, as transformers has it (the tower is
Qwen3-VL's, ``qwen3_5`` maps to ``Qwen3VLProcessor``): frame sizing, preprocessing, the prompt's
time markers, placeholders and vision spans, the chat layout. Like Qwen3-VL's, this module needs no
torch until a checkpoint is loaded or a clip preprocessed."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from framewise.core.families.base import CancelPoints
from framewise.core.families.qwen3_5.limits import MODEL_TYPES, QWEN3_5_LIMITS
from framewise.core.families.qwen3_vl.family import Qwen3VLFamily
from framewise.core.seam import LanguageLayout

if TYPE_CHECKING:
    import torch

    from framewise.core.families.qwen3_5.adapter import Qwen35Adapter
    from framewise.core.families.qwen3_5.memory import HybridShape
    from framewise.core.quantization.weight_format import WeightFormat

# Layer kinds as transformers names them -> as people are told them.
LAYER_KIND_WORDS = {"linear_attention": "linear-attention", "full_attention": "full-attention"}


class Qwen35Family(Qwen3VLFamily):
    """Qwen3.5 dense checkpoints (0.8B to 27B): a Qwen3-VL vision tower before a hybrid language
    model of Gated DeltaNet and gated full-attention layers.

    Its checkpoints' chat template is asked without thinking (``enable_thinking=False``: the
    answer opens with an empty thinking block and streams at once)."""

    name = QWEN3_5_LIMITS.name
    model_types = MODEL_TYPES
    limits = QWEN3_5_LIMITS
    model_classes: Mapping[str, str] = MappingProxyType({"qwen3_5": "Qwen3_5ForConditionalGeneration"})
    chat_template_options: Mapping[str, Any] = MappingProxyType({"enable_thinking": False})

    def load_streamed(
        self, model_class: type, path: Path, weight_format: WeightFormat, dtype: torch.dtype, device: torch.device
    ) -> tuple[torch.nn.Module, dict[str, Any]]:
        """The checkpoint streamed onto ``device``, the linear layers :mod:`.weights` names in the
        quantized ``weight_format``."""
        from framewise.core.families.qwen3_5 import weights

        return weights.load_streamed(model_class, path, weight_format, dtype, device)

    def language_shape(self, config: Mapping[str, Any]) -> HybridShape:
        """The hybrid language model's sizes for the memory estimate (:mod:`.memory`)."""
        from framewise.core.families.qwen3_5.memory import HybridShape

        return HybridShape.from_config(config)

    def language_layout(self, config: Mapping[str, Any]) -> LanguageLayout:
        """Linear-attention and full-attention layers; only the latter keep keys and values."""
        from framewise.core.families.qwen3_5.config import TextShape

        text = TextShape.from_text_config(config["text_config"])
        kinds = tuple(dict.fromkeys(text.layer_kinds))
        return LanguageLayout(
            tuple((LAYER_KIND_WORDS[kind], text.layer_kinds.count(kind)) for kind in kinds),
            text.full_layers, text.kv_heads, text.head_dim,
        )

    def adapter(self, model: torch.nn.Module) -> Qwen35Adapter:
        from framewise.core.families.qwen3_5.adapter import Qwen35Adapter

        return Qwen35Adapter.for_model(model)

    def cancel_points(self, model: torch.nn.Module) -> CancelPoints:
        """The tower's blocks, and each language layer's MLP: the language model calls the MLP of
        every layer as a module, but not the Gated DeltaNet layers themselves."""
        layers = model.model.language_model.layers
        return CancelPoints(vision=model.model.visual.blocks, language=[layer.mlp for layer in layers])


FAMILY = Qwen35Family()
