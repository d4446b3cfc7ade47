"""transformers' Qwen3.5 module with its own torch code for the Gated DeltaNet layers.

Where fla-core (or causal-conv1d) imports, transformers routes ``torch_chunk_gated_delta_rule``,
``torch_recurrent_gated_delta_rule``, ``causal_conv1d_fn`` and ``causal_conv1d_update`` to that
library's kernels, even for CPU tensors (which they refuse) and with TF32 products inside for
float32. The tests compare Framewise with transformers' plain torch code, so importing this module
points those names back at the functions they wrap, for the whole test process."""

from __future__ import annotations

import inspect

from transformers.models.qwen3_5 import modeling_qwen3_5 as modeling

TORCH_CODE_NAMES = (
    "torch_chunk_gated_delta_rule",
    "torch_recurrent_gated_delta_rule",
    "causal_conv1d_fn",
    "causal_conv1d_update",
)

for _name in TORCH_CODE_NAMES:
    setattr(modeling, _name, inspect.unwrap(getattr(modeling, _name)))

__all__ = ["modeling"]
