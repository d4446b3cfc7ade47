"""Small random-weight checkpoints in each weight format, written by the tests that read them.

:class:`TinyModel` has the module names of a Qwen3-VL checkpoint in miniature: a language model
with embeddings, norms and linear layers (sides that are and are not multiples of 128), a vision
tower with a biased linear layer, and an output head. The writers store its state dict as bf16,
as Qwen's block-wise FP8 (``weight_scale_inv``) or as compressed-tensors per-channel FP8
(``weight_scale``), quantizing the language model's linear layers with an e4m3 rounding of their
own, so that loading is checked against something other than the loader's quantizer.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch
from safetensors.torch import save_file
from torch import nn

HIDDEN, INTERMEDIATE, VOCAB, VISION = 256, 300, 50, 72
LANGUAGE_LINEARS = ("self_attn.q_proj", "self_attn.o_proj", "mlp.up_proj", "mlp.down_proj")
LAYERS = 2


class TinyLayer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.input_layernorm = nn.RMSNorm(HIDDEN)
        self.self_attn = nn.Module()
        self.self_attn.q_proj = nn.Linear(HIDDEN, HIDDEN, bias=False)
        self.self_attn.o_proj = nn.Linear(HIDDEN, HIDDEN, bias=False)
        self.mlp = nn.Module()
        self.mlp.up_proj = nn.Linear(HIDDEN, INTERMEDIATE, bias=False)
        self.mlp.down_proj = nn.Linear(INTERMEDIATE, HIDDEN, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn.o_proj(self.self_attn.q_proj(self.input_layernorm(x)))
        return x + self.mlp.down_proj(torch.relu(self.mlp.up_proj(x)))


class TinyModel(nn.Module):
    """``forward`` takes token ids (T,) and returns logits (T, VOCAB)."""

    def __init__(self) -> None:
        super().__init__()
        self.model = nn.Module()
        self.model.language_model = nn.Module()
        self.model.language_model.embed_tokens = nn.Embedding(VOCAB, HIDDEN)
        self.model.language_model.layers = nn.ModuleList(TinyLayer() for _ in range(LAYERS))
        self.model.language_model.norm = nn.RMSNorm(HIDDEN)
        self.model.visual = nn.Module()
        self.model.visual.proj = nn.Linear(VISION, HIDDEN)
        self.lm_head = nn.Linear(HIDDEN, VOCAB, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        language = self.model.language_model
        x = language.embed_tokens(tokens)
        for layer in language.layers:
            x = layer(x)
        return self.lm_head(language.norm(x))


def language_linear_names() -> list[str]:
    return [f"model.language_model.layers.{i}.{name}" for i in range(LAYERS) for name in LANGUAGE_LINEARS]


def is_language_linear(module_name: str) -> bool:
    return module_name in language_linear_names()


def random_state(seed: int = 0) -> dict[str, torch.Tensor]:
    """A bf16 state dict for :class:`TinyModel`, with norm weights away from 1 so they matter."""
    torch.manual_seed(seed)
    state = {name: tensor.detach().to(torch.bfloat16).clone() for name, tensor in TinyModel().state_dict().items()}
    for name in state:
        if "norm" in name:
            state[name] = (torch.rand_like(state[name], dtype=torch.float32) + 0.5).to(torch.bfloat16)
    return state


def reference_e4m3(values: torch.Tensor) -> torch.Tensor:
    """Round float32 ``values`` (already within ±448) to e4m3, by hand: 3 mantissa bits on the
    value's power of two, no exponent below e4m3's smallest normal's (2**-6)."""
    exponent = torch.floor(torch.log2(values.abs().clamp(min=2.0**-6)))
    step = 2.0 ** (exponent - 3)
    return (torch.round(values / step) * step).to(torch.float8_e4m3fn)


def block_fp8(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(e4m3 (N, K), weight_scale_inv (ceil(N/128), ceil(K/128)) float32)."""
    rows, columns = weight.shape
    scales = torch.empty(math.ceil(rows / 128), math.ceil(columns / 128))
    quantized = torch.empty(rows, columns)
    for i in range(scales.shape[0]):
        for j in range(scales.shape[1]):
            block = weight[i * 128 : (i + 1) * 128, j * 128 : (j + 1) * 128].float()
            scales[i, j] = block.abs().max() / 448
            quantized[i * 128 : (i + 1) * 128, j * 128 : (j + 1) * 128] = block / scales[i, j]
    return reference_e4m3(quantized), scales


def channel_fp8(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(e4m3 (N, K), weight_scale (N, 1) bf16, as compressed-tensors stores it)."""
    scales = (weight.float().abs().amax(dim=1, keepdim=True) / 448).to(torch.bfloat16)
    return reference_e4m3(weight.float() / scales.float()), scales


BLOCK_CONFIG = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                "weight_block_size": [128, 128], "modules_to_not_convert": ["lm_head", "model.visual"]}
CHANNEL_CONFIG = {
    "quant_method": "compressed-tensors", "format": "float-quantized", "quantization_status": "compressed",
    "ignore": ["lm_head", "re:.*visual.*"],
    "config_groups": {"group_0": {
        "targets": ["Linear"],
        "weights": {"num_bits": 8, "type": "float", "strategy": "channel", "symmetric": True, "dynamic": False},
        "input_activations": {"num_bits": 8, "type": "float", "strategy": "token", "symmetric": True, "dynamic": True},
    }},
}


def write_checkpoint(folder: Path, state: dict[str, torch.Tensor], fmt: str, shards: int = 1) -> list[Path]:
    """Write ``state`` to ``folder`` as ``fmt`` (``"bf16"``, ``"block"``, ``"channel"``): config.json
    and ``shards`` safetensors files, the tensors dealt round-robin (a weight and its scale may land
    in different shards). Returns the safetensors files."""
    stored: dict[str, torch.Tensor] = {}
    for name, tensor in state.items():
        module = name.removesuffix(".weight")
        if fmt != "bf16" and name.endswith(".weight") and is_language_linear(module):
            if fmt == "block":
                stored[name], stored[f"{module}.weight_scale_inv"] = block_fp8(tensor)
            else:
                stored[name], stored[f"{module}.weight_scale"] = channel_fp8(tensor)
        else:
            stored[name] = tensor
    config: dict = {"model_type": "tiny"}
    if fmt != "bf16":
        config["quantization_config"] = BLOCK_CONFIG if fmt == "block" else CHANNEL_CONFIG
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    names = sorted(stored)
    files = []
    for shard in range(shards):
        file = folder / f"model-{shard + 1:05d}-of-{shards:05d}.safetensors"
        save_file({name: stored[name].contiguous() for name in names[shard::shards]}, file)
        files.append(file)
    return files


def read_config(folder: Path) -> dict:
    return json.loads((folder / "config.json").read_text())
