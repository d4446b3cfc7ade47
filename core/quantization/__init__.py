"""FP8 weights, independent of any model family: which format a checkpoint's weights are in
(:mod:`.formats`), quantizing and dequantizing e4m3 with block or per-channel scales (:mod:`.fp8`),
a linear layer holding FP8 weights (:mod:`.linear`), streaming a checkpoint into a module tree
with quantize-on-load (:mod:`.loading`), and the GPU paths: FP8 tensor cores in prefill (:mod:`.matmul`) and the decode step's matrix-vector
kernels (:mod:`.gemv_kernels`, needs Triton). A model family's load and decode step call these."""
