"""Where a clip's encoded features wait for the decoder.

An item's features come from the tower in parts (one per encoder pass) and are kept until the
clip is closed: the decoder's prefill reads them, a span of tokens at a time. A short clip's stay
on the device, where its one prefill pass reads them. A long clip's would sit there beside its
whole KV cache (2 GiB for 2,048 frames of Qwen3-VL-8B, and as much again while the parts are
joined), while its prefill runs in many passes, each taking only its own rows to the device: they
wait in the host's memory instead, moved there part by part as they come.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from framewise.core.encoding.defs import EncodedItem

# An item whose features take more than this keeps them in the host's memory.
DEVICE_FEATURE_BYTES = 256 * 2**20


def device_feature_bytes(feature_bytes: int) -> int:
    """Bytes of an item's ``feature_bytes`` of features that wait on a CUDA device: all of them,
    or none when they are many enough to wait in the host's memory."""
    return feature_bytes if feature_bytes <= DEVICE_FEATURE_BYTES else 0


def settled(parts: list[EncodedItem]) -> list[EncodedItem]:
    """One item's ``parts`` (feature rows in order, as the passes made them) where they should
    wait: as they are while together they take at most :data:`DEVICE_FEATURE_BYTES`, else each
    in the host's memory. A copy off the device waits for the passes queued before it."""
    if device_feature_bytes(sum(part.nbytes for part in parts)):
        return parts
    return [part.to_host() for part in parts]


def joined(parts: Sequence[EncodedItem]) -> EncodedItem:
    """One item of ``parts``' rows, part after part, each output (tokens, hidden) joined where
    the parts lie."""
    if len(parts) == 1:
        return parts[0]
    return EncodedItem(
        embeds=torch.cat([part.embeds for part in parts]),
        deepstack=tuple(torch.cat(layers) for layers in zip(*(part.deepstack for part in parts), strict=True)),
    )
