"""Framewise's Triton kernels, each named by what it computes, whichever model runs it: the vision
tower's tile attention (:mod:`.vision_attention`, its tile list in :mod:`.tile_schedule`) and
residual add with layer norm (:mod:`.add_layer_norm`); a dense decoder layer's decode step
(:mod:`.decode_step`) and its FP8 matrix-vector products (:mod:`.fp8_gemv`); an RMS norm times a
float32 scale, alone or after a residual add (:mod:`.scaled_rms_norm`), and a Gated DeltaNet
layer's gated RMS norm (:mod:`.gated_rms_norm`), each in one launch with torch's arithmetic; the
prefill's per-token FP8 activation quantizer (:mod:`.fp8_row_quant`); the loads the matrix-vector kernels share
(:mod:`.gemv_loads`) and their dependent launches (:mod:`.dependent_launch`). :mod:`.e4m3` holds the
FP8 layout the kernels and the quantizers share.

Kernels import nothing of the rooms above them (families, decoding, encoding, quantization,
backends): their callers choose among them and pass what they compute with. Every module but
:mod:`.tile_schedule` and :mod:`.e4m3` needs Triton."""
