"""The decode step's Triton kernels compile for Hopper (sm_90, with programmatic dependent launch)
and Ampere (sm_80, without), down to a cubin through Triton's own ptxas, with no GPU: a kernel
that Triton or ptxas refuses fails here rather than on the device. The launches' pointer
alignment is given as Triton specializes it (16 bytes), so the loops are software-pipelined as
on the device; the instructions the FP8 kernel is built around are checked too (the hardware e4m3
conversion, the dependent-launch wait). CI has no Triton, so it skips them; to run them on a
machine without a GPU, install the Triton the GPU machine has (``pip install triton==3.6.0``)."""

from __future__ import annotations

import re
import subprocess
import tempfile
from pathlib import Path

import pytest

triton = pytest.importorskip("triton", reason="compiling the kernels needs Triton (no GPU needed)")

from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from framewise.core.kernels import decode_step  # noqa: E402
from framewise.core.kernels import fp8_gemv  # noqa: E402

HOPPER, AMPERE = 90, 80
GEMV_TYPES = {"x_ptr": "*bf16", "norm_ptr": "*bf16", "w_ptr": "*fp8e4nv", "scale_ptr": "*fp32", "residual_ptr": "*bf16",
              "out_ptr": "*bf16", "N": "i32", "eps": "fp32"}


def compile_ptx(kernel, types: dict[str, str], constexprs: dict[str, object], arch: int, num_warps: int) -> str:
    """``kernel`` compiled for compute capability ``arch`` (PDL on where it exists); its PTX."""
    return compile_kernel(kernel, types, constexprs, arch, num_warps).asm["ptx"]


def compile_kernel(kernel, types: dict[str, str], constexprs: dict[str, object], arch: int, num_warps: int):
    """``kernel`` compiled for compute capability ``arch`` (PDL on where it exists), down to a cubin."""
    pdl = arch >= HOPPER
    constexprs = {**constexprs, "PDL": pdl}
    signature = {name: "constexpr" if name in constexprs else types[name] for name in kernel.arg_names}
    aligned = {
        (index,): [["tt.divisibility", 16]]
        for index, name in enumerate(kernel.arg_names)
        if name not in constexprs and (types[name].startswith("*") or name == "N")
    }
    source = ASTSource(fn=kernel, signature=signature, constexprs=constexprs, attrs=aligned)
    compiled = triton.compile(
        source, target=GPUTarget("cuda", arch, 32), options={"num_warps": num_warps, "launch_pdl": pdl}
    )
    assert compiled.asm["cubin"]
    return compiled


def count(pattern: str, ptx: str) -> int:
    return len(re.findall(pattern, ptx))


@pytest.mark.parametrize("arch", [HOPPER, AMPERE])
@pytest.mark.parametrize("native", [True, False], ids=["hardware-e4m3", "bit-decoded-e4m3"])
@pytest.mark.parametrize("block_scales", [False, True], ids=["channel", "block"])
@pytest.mark.parametrize(
    ("rows", "columns", "kind"),
    [
        (6144, 4096, "norm"), (24576, 4096, "gate_up"), (4096, 12288, "residual"), (4096, 4096, "residual"),
        (4096, 2048, "norm"), (12288, 2048, "gate_up"), (2048, 6144, "residual"),
    ],
)
def test_fp8_decode_kernels_compile(
    arch: int, native: bool, block_scales: bool, rows: int, columns: int, kind: str
) -> None:
    if native and arch < 89:
        pytest.skip("hardware e4m3 conversion needs compute capability 8.9")
    config = fp8_gemv._fp8_gemv_config(rows, columns)
    # A normed product of the 9B-like shapes takes a zero-centred norm's float32 scale (Qwen3.5).
    float_scale = kind != "residual" and columns == 4096
    types = GEMV_TYPES if native else {**GEMV_TYPES, "w_ptr": "*u8"}
    types = {**types, "norm_ptr": "*fp32"} if float_scale else types
    constexprs = dict(
        K=columns, SCALE_COLUMNS=columns // 128 if block_scales else 1, BLOCK_SCALES=block_scales,
        NORM=kind != "residual", FLOAT_SCALE=float_scale, GATE_UP=kind == "gate_up", RESIDUAL=kind == "residual",
        NATIVE_FP8=native,
        BLOCK_N=config[0], OUTPUTS=config[0] // 2 if kind == "gate_up" else config[0], BLOCK_K=config[1],
        SCALE_BLOCK=128, EVEN_K=True, EVEN_N=True,
    )
    ptx = compile_ptx(fp8_gemv._fp8_gemv_kernel, types, constexprs, arch, config[2])
    if native:
        assert count(r"cvt\.rn\.f16x2\.e4m3x2", ptx) > 0
    assert count(r"griddepcontrol\.wait", ptx) == (1 if arch >= HOPPER else 0)


@pytest.mark.parametrize(("rows", "columns"), list(fp8_gemv.SWEPT_FP8_GEMV_CONFIGS))
def test_swept_launch_shapes_fit_their_weights(rows: int, columns: int) -> None:
    """A swept shape must keep a program's rows in one row of 128x128 block scales and need no
    masks (the kernel's even-block path), whatever the sweep preferred."""
    block_n, block_k, num_warps = fp8_gemv._fp8_gemv_config(rows, columns)
    assert 128 % block_n == 0 and rows % block_n == 0
    assert block_k == triton.next_power_of_2(block_k) and columns % block_k == 0
    assert num_warps in (4, 8)


@pytest.mark.parametrize("arch", [HOPPER, AMPERE])
@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
@pytest.mark.parametrize(("heads", "kv_heads", "head_dim"), [(32, 8, 128), (16, 8, 128), (4, 2, 64)])
@pytest.mark.parametrize("scaled", [False, True], ids=["cache-in-dtype", "e4m3-cache"])
def test_attention_step_kernels_compile(
    arch: int, dtype: str, heads: int, kv_heads: int, head_dim: int, scaled: bool
) -> None:
    if scaled and arch < 89:
        pytest.skip("the step kernels read an e4m3 cache only with hardware e4m3 conversion (8.9)")
    cache = "fp8e4nv" if scaled else dtype
    split_types = {
        "qkv_ptr": f"*{dtype}", "qk_norm_ptr": f"*{dtype}", "inv_freq_ptr": "*fp32", "rope_position_ptr": "*i64",
        "cache_position_ptr": "*i64", "key_cache_ptr": f"*{cache}", "value_cache_ptr": f"*{cache}",
        "key_scale_ptr": "*fp32" if scaled else f"*{cache}", "value_scale_ptr": "*fp32" if scaled else f"*{cache}",
        "partial_max_ptr": "*fp32", "partial_sum_ptr": "*fp32", "partial_out_ptr": "*fp32", "eps": "fp32",
        "attention_scaling": "fp32", "scale_log2": "fp32", "max_tokens": "i32", "split_size": "i32", "splits": "i32",
    }
    split = dict(HEADS=heads, KV_HEADS=kv_heads, GROUP=heads // kv_heads, BLOCK_GROUP=16, HEAD_DIM=head_dim,
                 BLOCK=decode_step.ATTENTION_BLOCK, IEEE=dtype == "fp32", SCALED=scaled)
    ptx = compile_ptx(decode_step._attention_split_kernel, split_types, split, arch, 4)
    assert count(r"bar\.sync", ptx) > 0  # the step's own key is written before the block reads it
    if scaled:  # the step's entries rounded to e4m3 and the cache's converted back, in hardware
        assert count(r"cvt\.rn\.satfinite\.e4m3x2\.f32", ptx) > 0 and count(r"cvt\.rn\.f16x2\.e4m3x2", ptx) > 0
    combine_types = {"partial_max_ptr": "*fp32", "partial_sum_ptr": "*fp32", "partial_out_ptr": "*fp32",
                     "cache_position_ptr": "*i64", "out_ptr": f"*{dtype}", "split_size": "i32", "splits": "i32"}
    combine = dict(GROUP=heads // kv_heads, BLOCK_GROUP=16, HEAD_DIM=head_dim, BLOCK_SPLITS=32)
    compile_ptx(decode_step._attention_combine_kernel, combine_types, combine, arch, 2)


@pytest.mark.parametrize("arch", [HOPPER, AMPERE])
@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_bf16_step_products_compile(arch: int, dtype: str) -> None:
    norm_types = {"x_ptr": f"*{dtype}", "norm_ptr": f"*{dtype}", "w_ptr": f"*{dtype}", "out_ptr": f"*{dtype}",
                  "N": "i32", "eps": "fp32"}
    block_n, block_k, warps = decode_step._gemv_config(6144, 4096)
    shape = dict(K=4096, BLOCK_N=block_n, BLOCK_K=block_k, EVEN_K=True, EVEN_N=True)
    compile_ptx(decode_step._rms_norm_linear_kernel, norm_types, {**shape, "FLOAT_SCALE": False}, arch, warps)
    zero_centred = {**norm_types, "norm_ptr": "*fp32"}  # Qwen3.5's norm: a float32 scale, one rounding
    compile_ptx(decode_step._rms_norm_linear_kernel, zero_centred, {**shape, "FLOAT_SCALE": True}, arch, warps)
    residual_types = {"x_ptr": f"*{dtype}", "w_ptr": f"*{dtype}", "residual_ptr": f"*{dtype}", "out_ptr": f"*{dtype}",
                      "N": "i32"}
    for silu_mul in (False, True):
        compile_ptx(decode_step._linear_residual_kernel, residual_types, {**shape, "SILU_MUL": silu_mul}, arch, warps)


def ptxas_usage(ptx: str, arch: int) -> tuple[int, int]:
    """(registers a thread, bytes spilled to local memory) of ``ptx`` as Triton's ptxas assembles it
    for compute capability ``arch``."""
    from triton.backends.nvidia.compiler import get_ptxas, sm_arch_from_capability

    with tempfile.TemporaryDirectory() as folder:
        source = Path(folder) / "kernel.ptx"
        source.write_text(ptx)
        result = subprocess.run(
            [get_ptxas(arch).path, "-v", f"--gpu-name={sm_arch_from_capability(arch)}", str(source),
             "-o", str(Path(folder) / "kernel.cubin")],
            capture_output=True, text=True, check=True,
        )
    registers = int(re.search(r"Used (\d+) registers", result.stderr).group(1))
    spilled = sum(int(count) for count in re.findall(r"(\d+) bytes spill (?:stores|loads)", result.stderr))
    return registers, spilled


# Shared memory and registers of one multiprocessor (H100, A100).
SHARED_BYTES = {HOPPER: 228 * 1024, AMPERE: 164 * 1024}
REGISTERS = 65536


@pytest.mark.parametrize("arch", [HOPPER, AMPERE])
@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
@pytest.mark.parametrize(("group", "head_dim"), [(4, 256), (8, 256), (4, 128), (8, 128)])
@pytest.mark.parametrize("scaled", [False, True], ids=["cache-in-dtype", "e4m3-cache"])
def test_the_cached_attention_kernel_compiles_and_its_programs_fit_a_multiprocessor(
    arch: int, dtype: str, group: int, head_dim: int, scaled: bool
) -> None:
    """Qwen3.5's split attention over a filled cache (heads of 256, 4 query heads a key/value head
    in the 9B) at its launch's block and warps: in bf16 no register spilled to local memory, and
    the programs the launch aims for a multiprocessor fit one at once, in its shared memory (the
    software pipeline's turns of keys and values) and its registers. (float32, the exact products
    of the tests, is not what a GPU runs a model in: its tiles take twice the shared memory, and
    over an e4m3 cache it spills on sm_90, as the Qwen3-VL step's kernel does.)"""
    if scaled and arch < 89:
        pytest.skip("the step kernels read an e4m3 cache only with hardware e4m3 conversion (8.9)")
    cache = "fp8e4nv" if scaled else dtype
    types = {
        "query_ptr": f"*{dtype}", "cache_position_ptr": "*i64", "key_cache_ptr": f"*{cache}",
        "value_cache_ptr": f"*{cache}", "key_scale_ptr": "*fp32" if scaled else f"*{cache}",
        "value_scale_ptr": "*fp32" if scaled else f"*{cache}", "partial_max_ptr": "*fp32", "partial_sum_ptr": "*fp32",
        "partial_out_ptr": "*fp32", "scale_log2": "fp32", "max_tokens": "i32", "split_size": "i32", "splits": "i32",
    }
    block = decode_step.cached_attention_block(head_dim)
    constexprs = dict(GROUP=group, BLOCK_GROUP=16, HEAD_DIM=head_dim, BLOCK=block, IEEE=dtype == "fp32", SCALED=scaled)
    warps = decode_step.ATTENTION_WARPS
    compiled = compile_kernel(decode_step._cached_attention_split_kernel, types, constexprs, arch, warps)
    ptx = compiled.asm["ptx"]
    if scaled:  # the cache's entries converted in hardware
        assert count(r"cvt\.rn\.f16x2\.e4m3x2", ptx) > 0
    assert count(r"griddepcontrol\.wait", ptx) == (1 if arch >= HOPPER else 0)
    if dtype == "bf16":
        programs = decode_step.ATTENTION_PROGRAMS_PER_SM
        assert programs * compiled.metadata.shared <= SHARED_BYTES[arch]
        registers, spilled = ptxas_usage(ptx, arch)
        assert spilled == 0, f"{spilled} bytes spilled at {registers} registers a thread"
        assert programs * registers * warps * 32 <= REGISTERS
