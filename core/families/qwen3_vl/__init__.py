"""Qwen3-VL, the one model family Framewise runs today: everything that knows it lives here.

:mod:`.family` is its :class:`~framewise.core.families.base.ModelFamily` (classes and loading,
cancel points), :mod:`.limits` its limits, :mod:`.sizing` its frame and image sizes and frame-pair
times and :mod:`.chat` its chat layout (these two without torch, for the vLLM backend),
:mod:`.processor` its preprocessing (resampling, patches), :mod:`.prompt` its chat prompt,
placeholder tokens, vision spans and the splicing of earlier answers' token ids, :mod:`.adapter` its side of the encoder seam (with :mod:`.geometry`,
:mod:`.metadata`, :mod:`.attention`, :mod:`.fused` and the Triton kernels), :mod:`.injection` the
precomputed features handed to transformers' ``generate()``, :mod:`.language` the language model
as the decoder runs it (3-D rotary positions and their offset across turns), :mod:`.memory` the
memory a checkpoint will take, and :mod:`.demo_model` the recipe of the bundled demo model."""
