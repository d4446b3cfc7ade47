"""Qwen3-VL, the one model family Framewise runs today: everything that knows it lives here, and
nothing that computes the same for another family.

:mod:`.family` is its :class:`~framewise.core.families.base.ModelFamily` (classes and loading,
cancel points), :mod:`.limits` its model types and limits, :mod:`.sizing` its frame and image sizes
and frame-pair times and :mod:`.chat` its chat layout (these three without torch, for the vLLM
backend), :mod:`.processor` its preprocessing (resampling, patches), :mod:`.prompt` its chat
prompt, placeholder tokens, vision spans and the splicing of earlier answers' token ids,
:mod:`.adapter` its side of the encoder seam (with :mod:`.geometry`, :mod:`.metadata` and
:mod:`.fused`, its tower's forward fused for the graphs, which picks generic attention backends and
kernels), :mod:`.language` the language model as the decoder runs it (3-D rotary positions and
their offset across turns, deepstack features, over the generic dense layers), :mod:`.streamed`
the loading of its language weights in a quantized weight format (which linear layers the format
quantizes, which stay float), and :mod:`.memory` the memory a checkpoint will take.

The Triton kernels, the attention backends and the dense decoder layers it uses live with what
they compute (:mod:`framewise.core.kernels`, :mod:`framewise.core.encoding.attention_backends`,
:mod:`framewise.core.decoding.dense_layers`); the demo model's recipe and the feature injector for
transformers' ``generate()`` live in the repository's ``training/`` folder, outside the product."""

# Family packages whose modules this one reuses (see framewise.core.families): none.
REUSES: tuple[str, ...] = ()
