"""Qwen3.5 at the released 0.8B and 9B shapes against transformers' eager model, collected where
``make gpu-test`` looks: the tests of ``tests/core/families/qwen3_5/test_qwen3_5_shapes.py``, whose
0.8B and 9B shapes are marked ``gpu`` (each prefill prints its worst layer's error; ``-s`` shows it)."""

from tests.core.families.qwen3_5.test_qwen3_5_shapes import (  # noqa: F401
    model,
    test_a_conversation_through_the_decoder_is_generates,
    test_every_layer_of_a_prefill_is_transformers_eager,
)
