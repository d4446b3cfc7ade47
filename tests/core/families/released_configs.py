"""The shapes of the released checkpoints of both families, as config.json dicts (the fields the
memory estimate and the layer layout read; weights are never downloaded here).

Read from public copies of the released configs and model cards, not from the checkpoints
themselves: Qwen3-VL's from the configs Framewise's benchmarks already use (text sizes of
``benchmarks/decode_bench.py``, towers of ``benchmarks/encoder_bench.py``; the 4B's text model
from its published config: width 2560, 36 layers, 32 heads over 8 KV heads of 128); Qwen3.5's
from a public table of the four dense configs (towers, widths, layers, heads, MLP widths, tied
heads), agreeing where they overlap with the model cards (0.8B: 24 layers of 1,024, 8 heads over
2 KV heads of 256, MLP 3,584; 9B: 32 layers of 4,096, 16 over 4 KV heads, MLP 12,288, 16 key and
32 value heads of 128 in the linear layers) and with transformers' defaults for the rest. The
9B's output head is untied in that table (the default), the smaller sizes' tied.
"""

from __future__ import annotations

from typing import Any

QWEN3_VL_TOWERS = {  # depth, hidden, MLP, out hidden, deepstack layers (DESIGN.md §4)
    "2B": (24, 1024, 4096, 2048, [5, 11, 17]),
    "4B": (24, 1024, 4096, 2560, [5, 11, 17]),
    "8B": (27, 1152, 4304, 4096, [8, 16, 24]),
}
QWEN3_VL_TEXTS = {  # hidden, MLP, layers, heads, KV heads, tied head
    "2B": (2048, 6144, 28, 16, 8, True),
    "4B": (2560, 9728, 36, 32, 8, True),
    "8B": (4096, 12288, 36, 32, 8, False),
}
QWEN3_5_TOWERS = {  # depth, hidden, MLP, heads, out hidden
    "0.8B": (12, 768, 3072, 12, 1024),
    "2B": (24, 1024, 4096, 16, 2048),
    "4B": (24, 1024, 4096, 16, 2560),
    "9B": (27, 1152, 4304, 16, 4096),
}
QWEN3_5_TEXTS = {  # hidden, MLP, layers, heads, KV heads, linear value heads, tied head
    "0.8B": (1024, 3584, 24, 8, 2, 16, True),
    "2B": (2048, 6144, 24, 8, 2, 16, True),
    "4B": (2560, 9216, 32, 16, 4, 32, True),
    "9B": (4096, 12288, 32, 16, 4, 32, False),
}


def _tower(depth: int, hidden: int, mlp: int, heads: int, out_hidden: int) -> dict[str, Any]:
    return {
        "depth": depth, "hidden_size": hidden, "intermediate_size": mlp, "num_heads": heads,
        "out_hidden_size": out_hidden, "patch_size": 16, "temporal_patch_size": 2, "spatial_merge_size": 2,
        "in_channels": 3, "num_position_embeddings": 2304,
    }


def qwen3_vl(size: str) -> dict[str, Any]:
    """A Qwen3-VL checkpoint's config.json (2B, 4B or 8B)."""
    depth, hidden, mlp, out_hidden, deepstack = QWEN3_VL_TOWERS[size]
    width, intermediate, layers, heads, kv_heads, tied = QWEN3_VL_TEXTS[size]
    return {
        "model_type": "qwen3_vl",
        "tie_word_embeddings": tied,
        "text_config": {
            "hidden_size": width, "intermediate_size": intermediate, "num_hidden_layers": layers,
            "num_attention_heads": heads, "num_key_value_heads": kv_heads, "head_dim": 128, "vocab_size": 151936,
        },
        "vision_config": {**_tower(depth, hidden, mlp, 16, out_hidden), "deepstack_visual_indexes": deepstack},
    }


def qwen3_5(size: str) -> dict[str, Any]:
    """A Qwen3.5 checkpoint's config.json (0.8B, 2B, 4B or 9B): every fourth layer full attention."""
    width, intermediate, layers, heads, kv_heads, value_heads, tied = QWEN3_5_TEXTS[size]
    return {
        "model_type": "qwen3_5",
        "tie_word_embeddings": tied,
        "text_config": {
            "hidden_size": width, "intermediate_size": intermediate, "num_hidden_layers": layers,
            "full_attention_interval": 4, "num_attention_heads": heads, "num_key_value_heads": kv_heads,
            "head_dim": 256, "vocab_size": 248320, "max_position_embeddings": 262144,
            "linear_num_key_heads": 16, "linear_num_value_heads": value_heads, "linear_key_head_dim": 128,
            "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4,
            "rope_parameters": {"rope_theta": 10_000_000, "partial_rotary_factor": 0.25,
                                "mrope_section": [11, 11, 10], "mrope_interleaved": True},
        },
        "vision_config": _tower(*QWEN3_5_TOWERS[size]),
    }


RELEASED = {
    **{f"Qwen3.5-{size}": qwen3_5(size) for size in QWEN3_5_TEXTS},
    **{f"Qwen3-VL-{size}": qwen3_vl(size) for size in QWEN3_VL_TEXTS},
}
