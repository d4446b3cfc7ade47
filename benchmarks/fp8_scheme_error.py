"""Round-trip error of FP8 (e4m3) weights with 128x128-block scales against per-channel scales.

For each weight family, the relative Frobenius error of the dequantized weight and of its
product with random activations, ``||(W' - W) x|| / ||W x||``. Runs on the CPU in seconds; this
is the measurement behind :data:`framewise.core.quantization.fp8.QUANTIZE_ON_LOAD_SCHEME`.

    python3 benchmarks/fp8_scheme_error.py
"""

from __future__ import annotations

import re

import torch
from safetensors.torch import load_file

from framewise.core.quantization import fp8
from framewise.core.resources import asset_path

LANGUAGE_LINEAR = re.compile(r"language_model\.layers\.\d+\.(self_attn|mlp)\.\w+_proj\.weight")


def errors(weights: list[torch.Tensor], scheme: str, activations: torch.Tensor) -> tuple[float, float]:
    """(weight error, output error), each pooled over ``weights`` (each (N, K), K matching ``activations``' rows)."""
    weight_error = weight_norm = output_error = output_norm = 0.0
    for weight in weights:
        weight = weight.float()
        restored = fp8.dequantize(*fp8.quantize(weight, scheme), scheme, torch.float32)
        x = activations[: weight.shape[1]]
        weight_error += float((restored - weight).norm() ** 2)
        weight_norm += float(weight.norm() ** 2)
        output_error += float(((restored - weight) @ x).norm() ** 2)
        output_norm += float((weight @ x).norm() ** 2)
    return (weight_error / weight_norm) ** 0.5, (output_error / output_norm) ** 0.5


def weight_families(generator: torch.Generator) -> dict[str, list[torch.Tensor]]:
    gaussian = torch.randn(4096, 4096, generator=generator)
    outlier_columns = gaussian.clone()
    outlier_columns[:, torch.randperm(4096, generator=generator)[:8]] *= 30
    demo = load_file(asset_path("demo_model") / "model.safetensors")
    return {
        "Gaussian 4096x4096": [gaussian],
        "Gaussian, 8 input columns x30": [outlier_columns],
        "Gaussian, log-normal row scales": [gaussian * torch.exp(torch.randn(4096, 1, generator=generator))],
        "Student-t (3 dof), heavy tails": [torch.distributions.StudentT(3.0).sample((4096, 4096))],
        "demo model language linear layers": [tensor for name, tensor in demo.items() if LANGUAGE_LINEAR.search(name)],
    }


def main() -> None:
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(0)
    activations = torch.randn(4096, 64, generator=generator)
    print(f"{'weights':<36} {'block W':>9} {'block Wx':>9} {'chan W':>9} {'chan Wx':>9}")
    for name, weights in weight_families(generator).items():
        block, channel = errors(weights, "block", activations), errors(weights, "channel", activations)
        print(f"{name:<36} {block[0]:9.4f} {block[1]:9.4f} {channel[0]:9.4f} {channel[1]:9.4f}")


if __name__ == "__main__":
    main()
