"""The FP8 layout every FP8 path agrees on, the quantizers in torch and the Triton kernels alike:
the e4m3 dtype and its largest finite value (448), the smallest scale used (so that an all-zero
row or block quantizes to zeros instead of 0/0), and the side of the square weight blocks that
share one scale in the block-wise layout."""

from __future__ import annotations

import torch

E4M3 = torch.float8_e4m3fn
E4M3_MAX = torch.finfo(E4M3).max
MIN_SCALE = 1e-12
BLOCK_SIZE = 128
