"""FP8 weights, independent of any model family: which format a checkpoint's weights are in
(:mod:`.formats`), quantizing and dequantizing e4m3 with block or per-channel scales (:mod:`.fp8`),
a linear layer holding FP8 weights (:mod:`.linear`), streaming a checkpoint into a module tree
with quantize-on-load (:mod:`.loading`), and FP8 tensor cores in prefill (:mod:`.matmul`). The
Triton kernels these paths use (the prefill's activation quantizer, the decode step's FP8
matrix-vector products) live in :mod:`framewise.core.kernels`, with the e4m3 layout they share.
A model family's load and decode step call these."""
