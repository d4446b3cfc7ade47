"""Qwen3-VL as a :class:`~framewise.core.families.base.ModelFamily`: its classes and loading, its
limits, preprocessing, prompt and cancel points, each delegated to the module that holds it.

torch, transformers, the tensor preprocessing and the encoder adapter are imported when they are
first used, not with this module, so that the vLLM backend sizes frames and lays out its chat
messages without them (:mod:`.sizing` and :mod:`.chat` need no torch)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np

from framewise.core.families.base import CancelPoints
from framewise.core.families.qwen3_vl import chat, sizing
from framewise.core.families.qwen3_vl.geometry import VisionGeometry
from framewise.core.families.qwen3_vl.limits import MODEL_TYPES, QWEN3_VL_LIMITS
from framewise.core.seam import FamilyLimits, LanguageLayout
from framewise.core.settings import SamplingSettings
from framewise.core.video import FrameSizing, Resize

if TYPE_CHECKING:
    import torch

    from framewise.core.encoding.defs import VisionItem
    from framewise.core.encoding.pruning import Retention
    from framewise.core.families.qwen3_vl.adapter import Qwen3VLAdapter
    from framewise.core.families.qwen3_vl.memory import LanguageShape
    from framewise.core.families.qwen3_vl.processor import VideoInputs
    from framewise.core.families.qwen3_vl.prompt import ChatInputs
    from framewise.core.memory_plan import MemoryEstimate
    from framewise.core.quantization.kv_formats import KVCacheFormat
    from framewise.core.quantization.weight_format import WeightFormat

def geometry_of(limits: FamilyLimits) -> VisionGeometry:
    """The preprocessing geometry of a Qwen3-VL checkpoint with ``limits`` (released mean and std)."""
    return VisionGeometry(
        patch_size=limits.patch_size, temporal_patch_size=limits.frames_per_slice, merge_size=limits.merge_size
    )


def limits_of_geometry(geometry: VisionGeometry, released: FamilyLimits) -> FamilyLimits:
    """The limits of a tower of ``geometry``: the ``released`` checkpoints' bounds at its patch sizes."""
    return dataclasses.replace(
        released,
        patch_size=geometry.patch_size,
        merge_size=geometry.merge_size,
        frames_per_slice=geometry.temporal_patch_size,
    )


class Qwen3VLFamily:
    """Qwen3-VL and Qwen3-VL-MoE checkpoints (the two share the vision tower and the prompt)."""

    name = QWEN3_VL_LIMITS.name
    model_types = MODEL_TYPES
    limits = QWEN3_VL_LIMITS
    # transformers' class of each model type, by name (imported when a checkpoint is loaded).
    model_classes: Mapping[str, str] = MappingProxyType(
        {"qwen3_vl": "Qwen3VLForConditionalGeneration", "qwen3_vl_moe": "Qwen3VLMoeForConditionalGeneration"}
    )
    # Keywords every rendering of the chat template gets (a served model's too): none.
    chat_template_options: Mapping[str, Any] = MappingProxyType({})

    def load_weights(
        self, path: Path, model_type: str, weight_format: WeightFormat, dtype: torch.dtype, device: torch.device
    ) -> tuple[torch.nn.Module, dict[str, Any]]:
        """The checkpoint's weights through transformers' own classes (safetensors only, no remote
        code), and its loading report. Errors propagate to the generic loader, which words them.

        A quantized ``weight_format`` streams the weights onto ``device`` (:meth:`load_streamed`);
        float weights load on the CPU in ``dtype``."""
        import transformers

        model_class = getattr(transformers, self.model_classes[model_type])
        if weight_format.quantized:
            return self.load_streamed(model_class, path, weight_format, dtype, device)
        return model_class.from_pretrained(
            path,
            dtype=dtype,
            local_files_only=True,
            use_safetensors=True,
            attn_implementation="sdpa",
            output_loading_info=True,
            ignore_mismatched_sizes=True,  # reported, with names, by the loader's weight check
        )

    def load_streamed(
        self, model_class: type, path: Path, weight_format: WeightFormat, dtype: torch.dtype, device: torch.device
    ) -> tuple[torch.nn.Module, dict[str, Any]]:
        """The checkpoint streamed onto ``device``, the decoder layers' linear layers in the
        quantized ``weight_format`` (:mod:`.streamed`)."""
        from framewise.core.families.qwen3_vl import streamed

        return streamed.load_streamed(model_class, path, weight_format, dtype, device)

    def estimate_memory(
        self, config: Mapping[str, Any], weight_format: WeightFormat, activations: torch.dtype, context_tokens: int,
        encoder_budgets: Sequence[int], device_type: str, clip_tokens: int = 0,
        cache_format: KVCacheFormat | None = None, tower_dtype: torch.dtype | None = None,
    ) -> MemoryEstimate:
        from framewise.core.families.qwen3_vl import memory

        return memory.estimate_parts(
            self.language_shape(config), config["vision_config"], weight_format, activations, context_tokens,
            encoder_budgets, device_type, clip_tokens, cache_format, tower_dtype,
        )

    def language_shape(self, config: Mapping[str, Any]) -> LanguageShape:
        """The language model's sizes as the memory estimate asks them, from config.json (a dict)."""
        from framewise.core.families.qwen3_vl.memory import DecoderShape

        return DecoderShape.from_config(config["text_config"], bool(config.get("tie_word_embeddings", False)))

    def language_layout(self, config: Mapping[str, Any]) -> LanguageLayout:
        """Every layer full attention."""
        text = config["text_config"]
        layers = int(text["num_hidden_layers"])
        head_dim = int(text.get("head_dim") or text["hidden_size"] // text["num_attention_heads"])
        return LanguageLayout((("full-attention", layers),), layers, int(text["num_key_value_heads"]), head_dim)

    def adapter(self, model: torch.nn.Module) -> Qwen3VLAdapter:
        from framewise.core.families.qwen3_vl.adapter import Qwen3VLAdapter

        return Qwen3VLAdapter.for_model(model)

    def limits_of(self, model: torch.nn.Module) -> FamilyLimits:
        return limits_of_geometry(VisionGeometry.from_vision_config(model.config.vision_config), self.limits)

    def cancel_points(self, model: torch.nn.Module) -> CancelPoints:
        return CancelPoints(vision=model.model.visual.blocks, language=model.model.language_model.layers)

    def vision_tower(self, model: torch.nn.Module) -> torch.nn.Module:
        return model.model.visual

    def frame_sizing(self, sampling: SamplingSettings, limits: FamilyLimits, resize: Resize | None = None) -> FrameSizing:
        if resize is None:
            from framewise.core.families.qwen3_vl.processor import resize_on_one_thread as resize
        return sizing.frame_sizing(sampling, geometry_of(limits), resize)

    def preprocess_video(self, frames: np.ndarray, timestamps: Sequence[float], limits: FamilyLimits) -> VideoInputs:
        from framewise.core.families.qwen3_vl.processor import preprocess_video

        return preprocess_video(frames, timestamps, geometry_of(limits))

    def join_videos(self, parts: Sequence[VideoInputs]) -> VideoInputs:
        from framewise.core.families.qwen3_vl.processor import join_videos

        return join_videos(parts)

    def with_retention(self, video: VideoInputs, retention: Retention) -> VideoInputs:
        return dataclasses.replace(video, retention=retention)

    def preprocess_image(self, image: np.ndarray, limits: FamilyLimits) -> VisionItem:
        from framewise.core.families.qwen3_vl.processor import preprocess_image

        return preprocess_image(image, geometry_of(limits))

    def build_prompt(
        self,
        tokenizer: Any,
        question: str,
        *,
        videos: Sequence[VideoInputs] = (),
        images: Sequence[VisionItem] = (),
        history: Sequence[tuple[str, str]] = (),
        limits: FamilyLimits,
    ) -> ChatInputs:
        from framewise.core.families.qwen3_vl.prompt import build_chat_inputs

        return build_chat_inputs(
            tokenizer, question, videos=videos, images=images, history=history, geometry=geometry_of(limits),
            template_options=self.chat_template_options,
        )

    def chat_messages(
        self, question: str, *, videos: int = 0, images: int = 0, history: Sequence[tuple[str, str]] = ()
    ) -> list[dict[str, Any]]:
        return chat.chat_messages(question, videos=videos, images=images, history=history)


FAMILY = Qwen3VLFamily()
