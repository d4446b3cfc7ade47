"""The vision-encoder seam (:mod:`.defs`) and its two encoders: the eager one (:mod:`.eager`) and the
model-agnostic CUDA-graph manager (:mod:`.manager`, with its batch planning in :mod:`.planning`);
:mod:`.timing` times their passes."""
