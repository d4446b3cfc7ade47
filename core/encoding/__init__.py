"""The vision-encoder seam and the model-agnostic CUDA-graph manager behind it."""
