"""Which of a Qwen3.5 checkpoint's linear layers a quantized weight format holds, and loading them.

A quantized format (Qwen's block-quantized releases, or one quantized while a bf16 checkpoint loads) takes
the large projections of every language layer: a full-attention layer's q (with its output gate),
k, v and o; a Gated DeltaNet layer's in_proj_qkv, in_proj_z and out_proj; every layer's MLP. These
are what a decode step reads. The rest stays in the activations' dtype:

- the Gated DeltaNet's ``in_proj_b`` and ``in_proj_a`` (one output row per value head: 16 or 32
  rows). They make beta and the decay that scale the recurrent state at every token, so an
  error in them is carried forward through the whole clip rather than landing in one token; and at
  a few dozen rows they are a fraction of a percent of a layer's bytes, nothing a decode step
  would gain by halving. A checkpoint that stores them quantized has them turned back into floats.
- the convolution (``conv1d``, a depthwise Conv1d, not a linear layer), ``A_log``, ``dt_bias`` and
  every norm: vectors, read in full precision by the state update;
- the vision tower (its encoder graphs read plain weights, as for Qwen3-VL), the embeddings and
  the output head (248,320 rows, kept float as for Qwen3-VL).

The model is built and filled tensor by tensor as Qwen3-VL's is (:mod:`~framewise.core.families.qwen3_vl.streamed`):
the architecture is built the same way (a vision tower, ``model.language_model``, ``lm_head``).
Released checkpoints also hold ``mtp.*`` (multi-token prediction), which no module takes and which
is left unread. The projections the fused decode step (:mod:`.step`) multiplies as one matrix are
written into one stack where a quantized format holds them all (:data:`STACKED_PROJECTIONS`), so
that laying the layers out for the step copies nothing; prefills call them as modules, views of
the stack.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import torch
from torch import nn

from framewise.core.families.qwen3_vl import streamed
from framewise.core.quantization.weight_format import WeightFormat

# The linear layers a quantized weight format holds, by module name.
QUANTIZED_LINEAR = re.compile(
    r"model\.language_model\.layers\.\d+\."
    r"(self_attn\.(q|k|v|o)_proj|linear_attn\.(in_proj_qkv|in_proj_z|out_proj)|mlp\.(gate|up|down)_proj)"
)

# The projections stacked while loading, in row order, as the fused step stacks them (in_proj_b and
# in_proj_a, kept float, are stacked after loading: a few dozen rows).
STACKED_PROJECTIONS = (("q_proj", "k_proj", "v_proj"), ("in_proj_qkv", "in_proj_z"), ("gate_proj", "up_proj"))


def stays_float(module_name: str) -> bool:
    """Whether the linear layer ``module_name`` stays in floating point (see the module docstring)."""
    return QUANTIZED_LINEAR.fullmatch(module_name) is None


def load_streamed(
    model_class: type, path: Path, weight_format: WeightFormat, dtype: torch.dtype, device: torch.device
) -> tuple[nn.Module, dict[str, Any]]:
    """The checkpoint in ``path`` as ``model_class`` on ``device``, the linear layers
    :data:`QUANTIZED_LINEAR` names in ``weight_format``, the rest in ``dtype``; and the loading
    report (``missing_keys``, ``mismatched_keys``)."""
    return streamed.load_streamed(
        model_class, path, weight_format, dtype, device, keep_float=stays_float,
        stacked_with=lambda name: streamed.stacked_projections(name, STACKED_PROJECTIONS),
    )
