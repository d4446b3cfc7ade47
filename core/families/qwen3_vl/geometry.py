"""The geometry of a Qwen3-VL vision tower: patches, merge, position table, normalization.

One type serves preprocessing (frame sizes, patch rows) and the tower's metadata (position
taps, rotary ids); it is read from the vision config, or from the tower module itself where the
module holds what the config does not (the position table's resampling rule).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from framewise.core.errors import EncoderError

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class VisionGeometry:
    """Patch geometry, position table and pixel normalization of a Qwen3-VL vision tower.

    ``num_grid_per_side``: side of the learned (side x side) position table;
    ``align_corners``: how the table is resampled (bilinearly) to a frame's patch grid.
    """

    patch_size: int = 16
    temporal_patch_size: int = 2
    merge_size: int = 2
    in_channels: int = 3
    num_grid_per_side: int = 48
    align_corners: bool = True
    image_mean: tuple[float, float, float] = (0.5, 0.5, 0.5)
    image_std: tuple[float, float, float] = (0.5, 0.5, 0.5)

    @classmethod
    def from_vision_config(cls, config: Any) -> VisionGeometry:
        """Sizes from a Qwen3-VL vision config (object or dict); mean, std and resampling keep their defaults."""
        if isinstance(config, Mapping):
            read = config.get
        else:
            def read(name: str, default: int) -> int:
                return getattr(config, name, default)
        return cls(
            patch_size=int(read("patch_size", cls.patch_size)),
            temporal_patch_size=int(read("temporal_patch_size", cls.temporal_patch_size)),
            merge_size=int(read("spatial_merge_size", cls.merge_size)),
            in_channels=int(read("in_channels", cls.in_channels)),
            num_grid_per_side=math.isqrt(int(read("num_position_embeddings", cls.num_grid_per_side**2))),
        )

    @classmethod
    def from_visual(cls, visual: torch.nn.Module) -> VisionGeometry:
        """The geometry of a transformers ``Qwen3VLVisionModel`` (or a tower shaped like it).

        Raises EncoderError for a tower that resamples its position table other than bilinearly.
        """
        mode = getattr(visual, "interpolation_mode", "bilinear")
        if mode != "bilinear":
            raise EncoderError(
                f"The vision tower resamples its position table with {mode!r}; only bilinear is supported. "
                "Turn CUDA graphs off in the encoder settings to run this model."
            )
        return dataclasses.replace(
            cls.from_vision_config(visual.config),
            num_grid_per_side=int(visual.num_grid_per_side),
            align_corners=bool(getattr(visual, "interpolation_align_corners", True)),
        )

    @property
    def factor(self) -> int:
        """Frame sides are multiples of this: one merged block of patches, in pixels."""
        return self.patch_size * self.merge_size

    @property
    def patch_dim(self) -> int:
        """Values in one patch row: channels x temporal patch x patch x patch (1536 for Qwen3-VL)."""
        return self.in_channels * self.temporal_patch_size * self.patch_size * self.patch_size

    @property
    def merge_area(self) -> int:
        """Patches merged into one language-model token."""
        return self.merge_size * self.merge_size


def deepstack_indexes(vision_config: Any) -> tuple[int, ...]:
    """The tower layers whose merged features go to the language model besides its output
    (Qwen3-VL's deepstack layers); none for a tower without them, such as Qwen3.5's."""
    return tuple(getattr(vision_config, "deepstack_visual_indexes", None) or ())
