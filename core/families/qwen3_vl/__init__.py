"""Qwen3-VL, the one model family Framewise runs today: everything that knows it lives here.

:mod:`.family` is its :class:`~framewise.core.families.base.ModelFamily` (classes and loading,
cancel points), :mod:`.limits` its limits, :mod:`.processor` its preprocessing (frame sizes,
resampling, patches, frame-pair times), :mod:`.prompt` its chat prompt, placeholder tokens and
vision spans, :mod:`.adapter` its side of the encoder seam (with :mod:`.geometry`,
:mod:`.metadata`, :mod:`.attention`, :mod:`.fused` and the Triton kernels), :mod:`.injection` the
precomputed features handed to transformers' ``generate()``, :mod:`.language` the language model
as the decoder runs it (3-D rotary positions and their offset across turns), and
:mod:`.demo_model` the recipe of the bundled demo model."""
