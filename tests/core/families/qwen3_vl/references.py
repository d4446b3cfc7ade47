"""Reference runs the GPU tests and the encoder benchmark compare Framewise's encoder against."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch


@contextmanager
def stock_attention(visual: torch.nn.Module) -> Iterator[None]:
    """Run ``visual`` with transformers' own ``sdpa`` attention inside the block (the eager reference)."""
    saved = visual.config._attn_implementation
    visual.config._attn_implementation = "sdpa"
    try:
        yield
    finally:
        visual.config._attn_implementation = saved
