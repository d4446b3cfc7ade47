"""The FP8 layout every FP8 path agrees on, the quantizers in torch and the Triton kernels alike:
the e4m3 dtype and its largest finite value (448), the smallest scale used (so that an all-zero
row or block quantizes to zeros instead of 0/0), and the side of the square weight blocks that
share one scale in the block-wise layout."""

from __future__ import annotations

import torch

E4M3 = torch.float8_e4m3fn
E4M3_MAX = torch.finfo(E4M3).max
# A row's scale is its largest magnitude times this, not divided by E4M3_MAX: torch on CUDA turns a
# division by a number into that product, so the CPU, CUDA and the Triton kernels all compute it so.
INVERSE_E4M3_MAX = 1.0 / E4M3_MAX
MIN_SCALE = 1e-12
BLOCK_SIZE = 128
