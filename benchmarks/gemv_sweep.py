"""The decode step's matrix-vector kernels alone, at the Qwen3-VL text shapes: the bf16 step
kernels and the FP8 ones at their chosen launch shapes (hardware e4m3 conversion, and the bit
decoding cards without it take), the FP8 product on the tensor cores as a prefill runs it with the
one token padded to 16 rows (the input quantized per row, then ``torch._scaled_mm``), and the FP8
kernel over a small grid of launch shapes (BLOCK_N, BLOCK_K, num_warps), each against the
weight-read floor.

Every kernel runs 48 times inside one CUDA graph, cycling over enough copies of the weight that
they never sit in the L2 cache (as in a decode step, where every weight is read once); the graph
is replayed and timed with CUDA events. The floor is the weight's bytes over the device-to-device
copy bandwidth measured in the same run.

    python3 benchmarks/gemv_sweep.py [--sizes 8B,2B] [--sweep-sizes 8B] [--out results/]
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path
from typing import Callable

import torch
import triton

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from decode_bench import copy_bandwidth  # noqa: E402
from graph_timing import graph_replay_ms  # noqa: E402

from framewise.core.kernels import decode_step  # noqa: E402
from framewise.core.kernels import fp8_gemv  # noqa: E402
from framewise.core.quantization.fp8 import quantize_per_channel  # noqa: E402
from framewise.core.quantization.matmul import fp8_linear  # noqa: E402

# name -> (rows, columns, kind) per text size, each product as the decode step runs it. Kind "norm":
# rms_norm_linear; "residual": linear_residual; "gate_up": rms_norm_linear, and in FP8 the kernel that
# also forms silu(gate) * up; "down": linear_residual, which in bf16 forms silu(gate) * up from the
# gate/up product as it reads it and in FP8 reads it ready.
SHAPES = {
    "8B": {"qkv": (6144, 4096, "norm"), "o": (4096, 4096, "residual"), "gate_up": (24576, 4096, "gate_up"),
           "down": (4096, 12288, "down")},
    # Qwen3.5-9B: a linear layer's [qkv|z] and out_proj, a full-attention layer's [q+gate|k|v] and o
    "3.5-9B": {"in_qkvz": (12288, 4096, "norm"), "out": (4096, 4096, "residual"), "attn_qkv": (10240, 4096, "norm"),
               "gate_up": (24576, 4096, "gate_up"), "down": (4096, 12288, "down")},
    "2B": {"qkv": (4096, 2048, "norm"), "o": (2048, 2048, "residual"), "gate_up": (12288, 2048, "gate_up"),
           "down": (2048, 6144, "down")},
}
LAUNCHES = 48
CACHE_CLEARING_BYTES = 512 * 2**20
SWEEP = list(itertools.product((2, 4, 8), (512, 1024, 2048), (4, 8)))
TENSOR_CORE_ROWS = 16  # the fewest rows torch._scaled_mm multiplies


def graph_us(launches: list[Callable[[], object]], replays: int = 10) -> float:
    """Mean microseconds of one call of ``launches`` (called in turn, ``LAUNCHES`` in all) in a
    CUDA graph."""

    def all_launches() -> None:
        for index in range(LAUNCHES):
            launches[index % len(launches)]()

    return graph_replay_ms(all_launches, replays) * 1e3 / LAUNCHES


def bench_shape(rows: int, columns: int, kind: str, bandwidth: float, sweep_shapes: bool) -> dict:
    """bf16 and FP8 kernel times for one (rows, columns) weight, with the sweep over FP8 launch
    shapes when ``sweep_shapes``."""
    device = torch.device("cuda")
    x = torch.randn(2 * columns if kind == "down" else columns, device=device, dtype=torch.bfloat16)
    norm = torch.randn(columns, device=device, dtype=torch.bfloat16)
    residual = torch.randn(rows, device=device, dtype=torch.bfloat16)
    copies = max(2, CACHE_CLEARING_BYTES // (rows * columns))
    bf16 = [torch.randn(rows, columns, device=device, dtype=torch.bfloat16) / columns**0.5 for _ in range(copies // 2 + 1)]
    fp8 = [quantize_per_channel(weight) for weight in bf16 for _ in range(2)][:copies]

    def bf16_call(weight: torch.Tensor) -> Callable[[], object]:
        if kind in ("norm", "gate_up"):
            return lambda: decode_step.rms_norm_linear(x, norm, weight, 1e-6)
        return lambda: decode_step.linear_residual(x, weight, residual, silu_mul=kind == "down")

    def fp8_call(weight: torch.Tensor, scale: torch.Tensor, config: tuple[int, int, int] | None,
                 native: bool | None = None) -> Callable[[], object]:
        if kind in ("norm", "gate_up"):
            options = dict(norm_weight=norm, eps=1e-6, gate_up=kind == "gate_up")
        else:
            options = dict(residual=residual)
        out = torch.empty(rows // 2 if kind == "gate_up" else rows, device=device, dtype=torch.bfloat16)
        return lambda: fp8_gemv._launch(x, weight, scale, out, native_fp8=native, config=config, **options)

    def tensor_core_call(weight: torch.Tensor, scale: torch.Tensor) -> Callable[[], object]:
        tokens = x[:columns].expand(TENSOR_CORE_ROWS, columns).contiguous()
        return lambda: fp8_linear(tokens, weight, scale, "channel", path="tensor_cores")

    floor_bf16_us = rows * columns * 2 / bandwidth * 1e6
    floor_fp8_us = rows * columns / bandwidth * 1e6
    result = {"rows": rows, "columns": columns, "kind": kind,
              "bf16_us": graph_us([bf16_call(weight) for weight in bf16]), "bf16_floor_us": floor_bf16_us,
              "fp8_us": graph_us([fp8_call(weight, scale, None) for weight, scale in fp8]), "fp8_floor_us": floor_fp8_us,
              "fp8_bits_us": graph_us([fp8_call(weight, scale, None, native=False) for weight, scale in fp8]),
              "fp8_tensor_cores_us": graph_us([tensor_core_call(weight, scale) for weight, scale in fp8]),
              "fp8_default": list(fp8_gemv._fp8_gemv_config(rows, columns))}
    sweep: dict[str, float | str] = {}
    for config in SWEEP if sweep_shapes else []:
        if config[1] > triton.next_power_of_2(columns):
            continue
        try:
            sweep[",".join(map(str, config))] = round(graph_us([fp8_call(w, s, config) for w, s in fp8]), 2)
        except Exception as error:  # a launch shape the compiler refuses (too many registers)
            sweep[",".join(map(str, config))] = f"{type(error).__name__}"
    timed = {key: value for key, value in sweep.items() if isinstance(value, float)}
    timed.setdefault(",".join(map(str, result["fp8_default"])), result["fp8_us"])
    best = min(timed, key=timed.get)
    result.update(sweep=sweep, fp8_best=best, fp8_best_us=timed[best])
    for key in ("bf16", "fp8", "fp8_bits", "fp8_tensor_cores", "fp8_best"):
        floor = floor_bf16_us if key == "bf16" else floor_fp8_us
        result[f"{key}_over_floor"] = round(result[f"{key}_us"] / floor, 3)
    del bf16, fp8
    torch.cuda.empty_cache()
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="8B,2B")
    parser.add_argument("--sweep-sizes", default="8B", help="sizes whose FP8 launch shapes are swept")
    parser.add_argument("--out", type=Path, default=Path("results"))
    args = parser.parse_args(argv)
    bandwidth = copy_bandwidth(torch.device("cuda"))
    results = {"device": torch.cuda.get_device_name(), "bandwidth_gbs": bandwidth / 1e9, "shapes": {}}
    print(f"copy bandwidth {bandwidth / 1e9:.0f} GB/s", flush=True)
    print("| size | product | shape | bf16 µs (× floor) | fp8 µs (× floor) | fp8 bit-decoded µs (× floor) "
          "| fp8 on tensor cores, 16 rows µs (× floor) | fp8 best launch shape: µs (× floor) |")
    print("|---|---|---|---|---|---|---|---|")
    for size in args.sizes.split(","):
        for name, (rows, columns, kind) in SHAPES[size].items():
            measured = bench_shape(rows, columns, kind, bandwidth, size in args.sweep_sizes.split(","))
            results["shapes"][f"{size} {name}"] = measured
            print(f"| {size} | {name} | {rows}×{columns} | {measured['bf16_us']:.1f} ({measured['bf16_over_floor']:.2f}) | "
                  f"{measured['fp8_us']:.1f} ({measured['fp8_over_floor']:.2f}) | "
                  f"{measured['fp8_bits_us']:.1f} ({measured['fp8_bits_over_floor']:.2f}) | "
                  f"{measured['fp8_tensor_cores_us']:.1f} ({measured['fp8_tensor_cores_over_floor']:.2f}) | {measured['fp8_best']}: "
                  f"{measured['fp8_best_us']:.1f} ({measured['fp8_best_over_floor']:.2f}) |", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "gemv_sweep.json").write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
