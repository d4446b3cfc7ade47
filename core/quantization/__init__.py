"""Weight formats, independent of any model family: how a model's linear layers hold their weights.

:mod:`.weight_format` says what every format answers (its linear layer, the products the dense
decoder passes call, the bytes it takes, how its checkpoint tensors are checked); one module per
format implements it (:mod:`.float_weights`, :mod:`.fp8_formats`), and :mod:`.registry` lists them
and chooses one, once, when a checkpoint is loaded. :mod:`.loading` streams a checkpoint into a
module tree in the chosen format; :mod:`.formats` reads the layout a checkpoint's config.json
declares and checks its tensors. The FP8 formats' arithmetic: quantizing and dequantizing e4m3
(:mod:`.fp8`), the linear layer (:mod:`.linear`), the prefill's products (:mod:`.matmul`) and the
dense passes' (:mod:`.fp8_products`). The Triton kernels these call live in
:mod:`framewise.core.kernels`."""
