"""Precomputed vision features into Qwen3-VL's language model, for the span of one call: how the
demo model is trained on features Framewise's encoder computed, how benchmarks time transformers'
own ``generate()`` on them, and how the tests hold the encoder's features to the model's own vision
pass. The application never needs it: its decoder places the features itself.

transformers' ``Qwen3VLModel.forward`` (and, from 5.24, ``generate``'s multimodal pre-encoding)
calls ``get_video_features`` / ``get_image_features`` when pixel values are passed. Inside
:meth:`FeatureInjector.serving` both are replaced on the instance by functions that hand back
the features Framewise's encoder computed; outside it the model is the stock one.

What those methods return is not a stable interface: transformers 5.17 gives the deepstack
features as one (sum of tokens, hidden) tensor per layer, 5.24 as a tuple of per-item tensors
per layer, and its forward concatenates them itself. So the layout is not assumed: at
construction the class's own ``get_image_features`` runs once on two one-token images and the
injector answers in exactly the layout it saw, or raises :class:`FeatureInjectionError` when the
method or its output is no longer one it understands.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import torch
import transformers

from framewise.core.encoding.defs import EncodedItem
from framewise.core.errors import FramewiseError
from framewise.core.families.qwen3_vl.geometry import VisionGeometry

PROBE_ITEMS = 2


class FeatureInjectionError(FramewiseError):
    """The installed transformers does not take precomputed vision features the way they are given."""


@dataclass(frozen=True)
class FeatureLayout:
    """How this transformers shapes what ``get_*_features`` return.

    ``pooled_per_item``: ``pooler_output`` is a tuple of (tokens_i, hidden) tensors (else one
    (sum, hidden) tensor); ``deepstack_per_item``: each deepstack layer likewise.
    ``output_type``: the class of the returned object.
    """

    pooled_per_item: bool
    deepstack_per_item: bool
    output_type: type


class FeatureInjector:
    """Serves precomputed features to a Qwen3-VL model (``model.model`` is its ``Qwen3VLModel``).

    Raises :class:`FeatureInjectionError` at construction when the installed transformers'
    ``get_image_features`` cannot be probed or returns a layout this injector does not know.
    """

    def __init__(self, model: torch.nn.Module) -> None:
        self.language_model = model.model
        self.layout = probe_layout(self.language_model)

    @contextmanager
    def serving(
        self, video: Sequence[EncodedItem] = (), images: Sequence[EncodedItem] = ()
    ) -> Iterator[None]:
        """Within the block the model takes ``video`` / ``images`` features instead of running its tower.

        Pass an empty pixel tensor and the real grids to the call inside. Raises
        FeatureInjectionError after the block when features were given but the model never asked
        for them (a transformers that no longer calls these methods).
        """
        base = self.language_model
        asked: set[str] = set()

        # The parameter names matter: generate() in transformers >= 5.24 reads this signature.
        def video_features(pixel_values_videos: Any = None, video_grid_thw: Any = None, **_: Any) -> Any:
            asked.add("video")
            return self._as_output(video, "video")

        def image_features(pixel_values: Any = None, image_grid_thw: Any = None, **_: Any) -> Any:
            asked.add("image")
            return self._as_output(images, "image")

        base.get_video_features = video_features
        base.get_image_features = image_features
        try:
            yield
        finally:
            del base.get_video_features, base.get_image_features
        missing = [name for name, given in (("video", video), ("image", images)) if given and name not in asked]
        if missing:
            raise _seam_error(f"the model never asked for the precomputed {' and '.join(missing)} features")

    def _as_output(self, items: Sequence[EncodedItem], modality: str) -> Any:
        """``items`` in the form this transformers' ``get_*_features`` returns."""
        if not items:
            raise FeatureInjectionError(
                f"The language model asked for {modality} features but none were encoded; open the clip again."
            )
        layout = self.layout
        embeds = tuple(item.embeds for item in items)
        layers = [tuple(item.deepstack[layer] for item in items) for layer in range(len(items[0].deepstack))]
        return layout.output_type(
            pooler_output=embeds if layout.pooled_per_item else torch.cat(embeds),
            deepstack_features=[per_item if layout.deepstack_per_item else torch.cat(per_item) for per_item in layers],
        )


def probe_layout(language_model: torch.nn.Module) -> FeatureLayout:
    """Run the class's own ``get_image_features`` on two one-token images and read its layout."""
    vision = language_model.config.vision_config
    geometry = VisionGeometry.from_vision_config(vision)
    parameter = next(language_model.visual.parameters())
    merge = geometry.merge_size
    generator = torch.Generator().manual_seed(0)
    pixels = torch.randn(PROBE_ITEMS * geometry.merge_area, geometry.patch_dim, generator=generator)
    grid = torch.tensor([[1, merge, merge]] * PROBE_ITEMS, device=parameter.device)
    stock = type(language_model).get_image_features  # the class's method, whatever the instance holds
    try:
        with torch.inference_mode():
            output = stock(language_model, pixels.to(parameter.device, parameter.dtype), grid, return_dict=True)
        pooled, deepstack = output.pooler_output, output.deepstack_features
    except (TypeError, AttributeError, ValueError, RuntimeError) as error:
        raise _seam_error(f"Qwen3VLModel.get_image_features could not be called as before ({error})") from error
    hidden = int(vision.out_hidden_size)
    if not isinstance(deepstack, (list, tuple)) or len(deepstack) != len(vision.deepstack_visual_indexes):
        raise _seam_error("get_image_features no longer returns one deepstack entry per deepstack layer")
    layer_layouts = {_per_item(layer, hidden) for layer in deepstack}
    if len(layer_layouts) > 1:
        raise _seam_error("get_image_features returns deepstack layers in mixed layouts")
    pooled_per_item = _per_item(pooled, hidden)
    return FeatureLayout(pooled_per_item, layer_layouts.pop() if layer_layouts else pooled_per_item, type(output))


def _per_item(value: Any, hidden: int) -> bool:
    """True for a tuple of per-item (1, hidden) tensors, False for one (items, hidden) tensor; else raise."""
    if isinstance(value, torch.Tensor) and tuple(value.shape) == (PROBE_ITEMS, hidden):
        return False
    if (
        isinstance(value, (tuple, list))
        and len(value) == PROBE_ITEMS
        and all(isinstance(part, torch.Tensor) and tuple(part.shape) == (1, hidden) for part in value)
    ):
        return True
    raise _seam_error(f"get_image_features returns its features as {type(value).__name__}, a layout not known here")


def _seam_error(what: str) -> FeatureInjectionError:
    return FeatureInjectionError(
        f"transformers {transformers.__version__} is not supported: {what}. Framewise hands the language model "
        "its precomputed vision features through Qwen3VLModel.get_video_features/get_image_features; install a "
        "transformers version within the range Framewise declares (pip install -c constraints.txt .)."
    )
