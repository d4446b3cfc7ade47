"""Qwen3.5, the second model family: a Qwen3-VL vision tower before a hybrid language model.

:mod:`.family` is its :class:`~framewise.core.families.base.ModelFamily`, Qwen3-VL's family with
Qwen3.5's classes (frame sizing, preprocessing, prompt and chat layout are Qwen3-VL's, as
transformers has them), and :mod:`.limits` its model types and limits (no torch); :mod:`.config`
reads the language model's sizes, :mod:`.language` runs it over a
:class:`~framewise.core.decoding.hybrid_state.HybridState` (its layers' mixing in :mod:`.mixers`,
its few-launch decode step in :mod:`.step`), :mod:`.adapter` is Qwen3-VL's encoder
adapter giving that language model, :mod:`.weights` says which linear layers a quantized weight
format holds (and why the others stay float) and loads them, :mod:`.memory` estimates what a
checkpoint will take.

Facts as transformers 5.17 has them (``transformers/models/qwen3_5``):

- **Config.** ``model_type`` ``"qwen3_5"``, class ``Qwen3_5ForConditionalGeneration``; ``text_config``
  (``"qwen3_5_text"``, Qwen3-Next's text config without its MoE fields) and ``vision_config``
  (``"qwen3_5_vision"``, Qwen3-VL's without ``deepstack_visual_indexes``). Token ids by default:
  image 248056, video 248057, vision start 248053, vision end 248054; ``vocab_size`` 248320.
  ``text_config.layer_types`` lists ``"linear_attention"`` / ``"full_attention"`` per layer; where
  absent, layer i is full attention when (i + 1) is a multiple of ``full_attention_interval``
  (default 4). Full attention: ``num_attention_heads``, ``num_key_value_heads``, ``head_dim``
  (default 256), rotary on the first ``partial_rotary_factor`` (default 0.25) of each head;
  ``rope_parameters`` holds ``rope_theta``, ``partial_rotary_factor``, ``mrope_section`` (default
  [11, 11, 10], half the rotary dims) and ``mrope_interleaved`` (frequency j takes its height
  position when j % 3 == 1, width when j % 3 == 2, below 3 x the axis's section; temporal else:
  Qwen3-VL's code). Linear attention: ``linear_num_key_heads`` (16), ``linear_num_value_heads``
  (32), ``linear_key_head_dim`` / ``linear_value_head_dim`` (128), ``linear_conv_kernel_dim`` (4).
- **Weights** (``model.language_model.layers.N.``): linear layers ``linear_attn.in_proj_qkv``
  (query, key, value channels in that order), ``in_proj_z`` (output gate), ``in_proj_b`` (beta
  logits), ``in_proj_a`` (decay input), ``conv1d.weight`` (channels, 1, kernel; no bias),
  ``A_log``, ``dt_bias`` (per value head), ``norm.weight`` (gated RMS norm over a value head, scale
  ``w``), ``out_proj``; full layers ``self_attn.q_proj`` (per head: head_dim query rows, then head_dim
  output-gate rows), ``k_proj``, ``v_proj``, ``o_proj``, ``q_norm``, ``k_norm``; every layer
  ``mlp.gate_proj/up_proj/down_proj``, ``input_layernorm``, ``post_attention_layernorm``. Every
  other RMS norm scales by ``1 + w`` (weights stored around 0). Released checkpoints also hold
  ``mtp.*`` (multi-token prediction), which loading ignores.
- **Linear layer**: q/k/v through the depthwise causal conv with SiLU; ``beta = sigmoid(b)``;
  ``decay = -exp(A_log) * softplus(a + dt_bias)`` in float32; key heads repeated over value heads;
  the gated delta rule with q and k L2-normalized; ``norm(o) * silu(z)``; ``out_proj``.
  Full layer: the output gate ``sigmoid(gate)`` multiplies the attention output before ``o_proj``.
- **Vision tower.** ``Qwen3_5VisionModel`` is ``Qwen3VLVisionModel`` with the deepstack mergers
  deleted: it returns ``pooler_output`` (merged tokens) and ``last_hidden_state``, no
  ``deepstack_features``; patch 16, two frames a slice, 2x2 merge, the same precomputed-metadata
  keywords. ``get_image_features`` / ``get_video_features`` split ``pooler_output`` per item.
- **Processor.** AutoProcessor maps ``qwen3_5`` to ``Qwen3VLProcessor`` (image processor
  ``Qwen2VLImageProcessor``, video processor ``Qwen3VLVideoProcessor``): per two-frame slice
  ``"<{t:.1f} seconds>"`` then vision start, video pads, vision end, as for Qwen3-VL. The tokenizer
  is ``Qwen3_5Tokenizer`` (byte-level BPE; its split pattern keeps combining marks with letters and
  splits digits one by one).
- **Positions.** ``Qwen3_5Model.get_rope_index`` is Qwen3-VL's code line for line: each video slice
  is its own vision group, all three axes starting where the text before it ends; it returns
  positions (3, batch, n) and the offset of the tokens after the prompt.
- **Chat template**: not in transformers; it ships with a checkpoint. Copies of the released one
  in public repositories (not checked against a checkpoint here) are ChatML with
  ``<|vision_start|><|video_pad|><|vision_end|>`` per clip and ``<|image_pad|>`` per picture, and
  open the answer with ``<think>\\n`` (a thinking model), or ``<think>\\n\\n</think>\\n\\n`` with
  ``enable_thinking=False``, which Framewise passes; earlier answers are shown without the block,
  so a follow-up puts the opening back before an earlier answer's token ids (what the model saw).
- transformers' own torch code for the linear layers runs fla-core's kernels instead wherever the
  ``fla`` package imports.
"""

# Family packages whose modules this one reuses (see framewise.core.families): the vision tower,
# its preprocessing, prompt tokens and 3-D positions are Qwen3-VL's.
REUSES: tuple[str, ...] = ("qwen3_vl",)
