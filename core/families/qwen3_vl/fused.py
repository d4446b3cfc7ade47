"""A fused forward for Qwen3-VL's vision tower, for capture inside the encoder's CUDA graphs.

It computes what transformers' ``Qwen3VLVisionModel.forward`` computes from precomputed
metadata, written as plain tensor code over the tower's own weights so that ``torch.compile``
(inductor) can fuse the elementwise work around the matrix products. Three functions are
compiled, with the row count dynamic so that one compile serves every token budget:

- the stem: patch embedding (the Conv3d whose kernel equals its stride is one matrix product),
  the interpolated learned position embedding, and the rotary cos/sin shared by every block;
- one vision block, called once per layer with that layer's weights;
- one patch merger (the final one and each deepstack one).

A block leaves its last residual add to whatever reads its output next (the next block's first
layer norm, or a merger), so that the add and the norm are one pass over the rows. What runs
inside a block comes from its :class:`BlockKernels`: on CUDA with Triton, Framewise's kernels
for the rotary embedding, attention (:mod:`~framewise.core.kernels.vision_attention`) and the
residual add with its layer norm (:mod:`~framewise.core.kernels.add_layer_norm`); elsewhere plain
torch, fused by inductor where compiled. The MLP's bias and tanh-GELU run in the matrix
product's epilogue on CUDA. Per-pass attention preparation (the tile list) runs once, outside
the blocks. Compiled code is cached on disk by inductor; :func:`compile_cache_dir` names the folder.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
from pathlib import Path
from typing import Callable, NamedTuple

import torch
import torch.nn.functional as F

from framewise.core.errors import EncoderError
from framewise.core.encoding.attention_backends import flash_attn_kernel, flash_attn_rows, masked_rows, varlen_rows
from framewise.core.families.qwen3_vl.geometry import deepstack_indexes
from framewise.core.user_folders import user_folder

LAYER_NORM_EPS = 1e-6
# transformers' activation names for the blocks' MLP -> F.gelu's ``approximate`` argument.
GELU_APPROXIMATIONS = {"gelu_pytorch_tanh": "tanh", "gelu": "none"}

class BlockWeights(NamedTuple):
    """One vision block's parameters, the tensors the block holds (no copies).

    A tuple of tensors, so that one compiled block serves every layer: the compiled code is
    specialised on the tensors' shapes, not on which layer's tensors they are.
    """

    norm1_weight: torch.Tensor
    norm1_bias: torch.Tensor
    qkv_weight: torch.Tensor  # (3 * hidden, hidden)
    qkv_bias: torch.Tensor
    proj_weight: torch.Tensor  # (hidden, hidden)
    proj_bias: torch.Tensor
    norm2_weight: torch.Tensor
    norm2_bias: torch.Tensor
    fc1_weight: torch.Tensor  # (mlp, hidden)
    fc1_bias: torch.Tensor
    fc2_weight: torch.Tensor  # (hidden, mlp)
    fc2_bias: torch.Tensor

    @classmethod
    def of(cls, block: torch.nn.Module) -> BlockWeights:
        return cls(
            block.norm1.weight, block.norm1.bias, block.attn.qkv.weight, block.attn.qkv.bias,
            block.attn.proj.weight, block.attn.proj.bias, block.norm2.weight, block.norm2.bias,
            block.mlp.linear_fc1.weight, block.mlp.linear_fc1.bias,
            block.mlp.linear_fc2.weight, block.mlp.linear_fc2.bias,
        )


class MergerWeights(NamedTuple):
    """One patch merger's parameters; ``postshuffle`` norms after the 2x2 gather (deepstack mergers)."""

    norm_weight: torch.Tensor
    norm_bias: torch.Tensor
    fc1_weight: torch.Tensor
    fc1_bias: torch.Tensor
    fc2_weight: torch.Tensor
    fc2_bias: torch.Tensor
    postshuffle: bool

    @classmethod
    def of(cls, merger: torch.nn.Module) -> MergerWeights:
        return cls(
            merger.norm.weight, merger.norm.bias, merger.linear_fc1.weight, merger.linear_fc1.bias,
            merger.linear_fc2.weight, merger.linear_fc2.bias, merger.use_postshuffle_norm,
        )


def stem(
    pixels: torch.Tensor,
    patch_weight: torch.Tensor,
    patch_bias: torch.Tensor,
    position_table: torch.Tensor,
    interp_indices: torch.Tensor,
    interp_weights: torch.Tensor,
    position_ids: torch.Tensor,
    inv_freq: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Patch rows to the first block's input and the rotary tables.

    ``pixels`` (rows, 3*2*16*16); ``patch_weight`` (hidden, 3*2*16*16); ``position_table``
    (48*48, hidden); ``interp_indices`` / ``interp_weights`` (rows, 4) bilinear taps;
    ``position_ids`` (rows, 2) row and column; ``inv_freq`` (head_dim/4,) float32.
    Returns the first block's input as a pair whose sum it is, patch embedding and position
    embedding, each (rows, hidden); and cos, sin (rows, head_dim) float32.
    """
    patches = F.linear(pixels.to(patch_weight.dtype), patch_weight, patch_bias)
    positions = (position_table[interp_indices] * interp_weights[:, :, None]).sum(1)
    half = (position_ids[:, :, None].float() * inv_freq.float()).flatten(1)  # (rows, head_dim/2): rows' then columns' angles
    angles = torch.cat([half, half], dim=-1)
    return patches, positions.to(patches.dtype), angles.cos(), angles.sin()


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    first, second = x.chunk(2, dim=-1)
    return torch.cat([-second, first], dim=-1)


def _rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x (rows, heads, head_dim) rotated in float32, returned in x's dtype."""
    x32 = x.float()
    return (x32 * cos[:, None] + _rotate_half(x32) * sin[:, None]).to(x.dtype)


def _rotate_qk(qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """qkv (rows, 3, heads, head_dim) -> rotated q, rotated k, v: each (rows, heads, head_dim)."""
    query, key, value = qkv.unbind(1)
    return _rotary(query, cos, sin), _rotary(key, cos, sin), value


def block(
    hidden: torch.Tensor,
    delta: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    attention_arguments: tuple,
    weights: BlockWeights,
    heads: int,
    approximate: str,
    kernels: BlockKernels,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One vision block on the input ``hidden + delta``, each (rows, hidden); returns the next
    block's input as such a pair (the residual stream and the MLP's output, not yet added).
    Attention is within each sequence (``kernels`` and ``attention_arguments`` from
    :func:`block_kernels`)."""
    rows, width = hidden.shape
    hidden, normed = kernels.add_norm(hidden, delta, weights.norm1_weight, weights.norm1_bias)
    qkv = F.linear(normed, weights.qkv_weight, weights.qkv_bias).view(rows, 3, heads, -1)
    query, key, value = kernels.rotate(qkv, cos, sin)
    attended = kernels.attend(query, key, value, attention_arguments, qkv.shape[-1] ** -0.5)
    projected = F.linear(attended.reshape(rows, width), weights.proj_weight, weights.proj_bias)
    hidden, normed = kernels.add_norm(hidden, projected, weights.norm2_weight, weights.norm2_bias)
    inner = _linear_gelu(normed, weights.fc1_weight, weights.fc1_bias, approximate)
    return hidden, F.linear(inner, weights.fc2_weight, weights.fc2_bias)


def _linear_gelu(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, approximate: str) -> torch.Tensor:
    """``gelu(x @ weight.T + bias)``; on CUDA the tanh form runs in the product's epilogue (cuBLASLt)."""
    if x.is_cuda and approximate == "tanh":
        # Not on a CPU: there this operator applies the exact GELU, not the tanh form.
        return torch._addmm_activation(bias, x, weight.t(), use_gelu=True)
    return F.gelu(F.linear(x, weight, bias), approximate=approximate)


def merger(hidden: torch.Tensor, delta: torch.Tensor, weights: MergerWeights) -> torch.Tensor:
    """Merge each 2x2 block of rows of ``hidden + delta`` (rows, hidden) -> (rows/4, out_hidden)."""
    hidden = hidden + delta
    gathered = weights.fc1_weight.shape[1]
    if weights.postshuffle:
        normed = F.layer_norm(hidden.reshape(-1, gathered), (gathered,), weights.norm_weight, weights.norm_bias, LAYER_NORM_EPS)
    else:
        width = hidden.shape[1]
        normed = F.layer_norm(hidden, (width,), weights.norm_weight, weights.norm_bias, LAYER_NORM_EPS)
        normed = normed.reshape(-1, gathered)
    inner = F.gelu(F.linear(normed, weights.fc1_weight, weights.fc1_bias))
    return F.linear(inner, weights.fc2_weight, weights.fc2_bias)


class BlockKernels(NamedTuple):
    """What a fused block calls for its attention and its residual adds with layer norms.

    ``prepare(cu_seqlens, max_seqlen, rows)`` runs once per pass and returns the arguments every
    block hands to ``attend(query, key, value, arguments, scale)``; ``rotate(qkv, cos, sin)``
    applies the rotary embedding and splits the qkv product (rows, 3, heads, head_dim) into the
    q, k, v that ``attend`` takes; q, k, v and the result are (rows, heads, head_dim).
    ``add_norm(hidden, delta, weight, bias)`` returns ``hidden + delta`` and its layer norm, each
    (rows, width). Module-level functions, not closures: the compiled block is specialised on
    which function it calls, so every fused forward of a backend shares one compile.
    """

    prepare: Callable[[torch.Tensor, int, int], tuple]
    rotate: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor, torch.Tensor]]
    attend: Callable[[torch.Tensor, torch.Tensor, torch.Tensor, tuple, float], torch.Tensor]
    add_norm: Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


def block_kernels(backend: str) -> BlockKernels:
    """The block kernels that go with a graph-safe attention backend (EncoderError for any other):
    Framewise's Triton kernels with ``triton``, plain torch with the others."""
    if backend == "flash_attn":
        flash_attn_kernel()
    if backend == "triton":
        from framewise.core.kernels import add_layer_norm, vision_attention  # need Triton: imported when chosen

        vision_attention.register_op()
        add_layer_norm.register_op()
        return BlockKernels(_tile_schedule, _rotate_qk_triton, _tile_attention, _add_layer_norm_triton)
    backends = {
        "varlen": BlockKernels(_boundaries, _rotate_qk, varlen_rows, _add_layer_norm),
        "flash_attn": BlockKernels(_boundaries, _rotate_qk, flash_attn_rows, _add_layer_norm),
        "sdpa_masked": BlockKernels(_boundaries, _rotate_qk, masked_rows, _add_layer_norm),
    }
    if backend not in backends:
        raise EncoderError(
            f"The fused encoder has no attention backend {backend!r}; choose triton, varlen or sdpa_masked."
        )
    return backends[backend]


def _add_layer_norm(hidden, delta, weight, bias):
    """The add and the norm in plain torch (one kernel where inductor compiles the block)."""
    total = hidden + delta
    return total, F.layer_norm(total, (total.shape[-1],), weight, bias, LAYER_NORM_EPS)


def _add_layer_norm_triton(hidden, delta, weight, bias):
    """Framewise's Triton kernel: one pass over the rows for the add and the norm."""
    return torch.ops.framewise.add_layer_norm(hidden, delta, weight, bias, LAYER_NORM_EPS)


def _boundaries(cu_seqlens: torch.Tensor, max_seqlen: int, rows: int) -> tuple[torch.Tensor, int]:
    return cu_seqlens, max_seqlen


def _tile_schedule(cu_seqlens: torch.Tensor, max_seqlen: int, rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    from framewise.core.kernels.tile_schedule import tile_schedule

    return cu_seqlens, tile_schedule(cu_seqlens, rows)


def _rotate_qk_triton(qkv, cos, sin):
    """The Triton rotary kernel that writes q and k in the tile kernel's layout."""
    query, key = torch.ops.framewise.rotary_qk(qkv, cos, sin)
    return query, key, qkv[:, 2]


def _tile_attention(query, key, value, arguments, scale):
    """Framewise's Triton tile kernel; the tile list was made once for the pass."""
    cu_seqlens, schedule = arguments
    return torch.ops.framewise.tile_attention(query, key, value, cu_seqlens, schedule, scale)


class FusedVisionForward:
    """Qwen3-VL's vision tower as three (optionally compiled) functions over its own weights.

    Call with the graph buffers: ``pixels`` (rows, patch_dim), ``interp_indices`` /
    ``interp_weights`` (rows, 4), ``position_ids`` (rows, 2), ``cu_seqlens`` (sequences + 1,)
    int32 and ``max_seqlen``; returns merged tokens (rows/4, out_hidden) and one
    (rows/4, out_hidden) tensor per deepstack layer (none for a tower without them).
    ``compiled=False`` runs the same code uncompiled (the reference for the compiled path, and what
    a CPU test can afford).
    """

    def __init__(self, visual: torch.nn.Module, attention_backend: str, *, compiled: bool = True) -> None:
        config = visual.config
        if config.hidden_act not in GELU_APPROXIMATIONS:
            raise EncoderError(f"The fused encoder does not know the activation {config.hidden_act!r}.")
        self.approximate = GELU_APPROXIMATIONS[config.hidden_act]
        self.heads = config.num_heads
        self.kernels = block_kernels(attention_backend)
        proj = visual.patch_embed.proj
        self.patch_weight = proj.weight.reshape(proj.weight.shape[0], -1)  # a view: the kernel covers the whole patch
        self.patch_bias = proj.bias
        self.position_table = visual.pos_embed.weight
        self.inv_freq = visual.rotary_pos_emb.inv_freq
        self.blocks = [BlockWeights.of(layer) for layer in visual.blocks]
        self.deepstack_layers = {layer: index for index, layer in enumerate(deepstack_indexes(config))}
        self.deepstack_mergers = [MergerWeights.of(m) for m in getattr(visual, "deepstack_merger_list", ())]
        self.final_merger = MergerWeights.of(visual.merger)
        compile_ = (lambda fn: torch.compile(fn, dynamic=True)) if compiled else (lambda fn: fn)
        self._stem, self._block, self._merger = compile_(stem), compile_(block), compile_(merger)

    def __call__(
        self,
        pixels: torch.Tensor,
        interp_indices: torch.Tensor,
        interp_weights: torch.Tensor,
        position_ids: torch.Tensor,
        cu_seqlens: torch.Tensor,
        max_seqlen: int,
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
        hidden, delta, cos, sin = self._stem(
            pixels, self.patch_weight, self.patch_bias, self.position_table,
            interp_indices, interp_weights, position_ids, self.inv_freq,
        )
        attention_arguments = self.kernels.prepare(cu_seqlens, max_seqlen, pixels.shape[0])
        deepstack: list[torch.Tensor] = []
        for layer, weights in enumerate(self.blocks):
            hidden, delta = self._block(
                hidden, delta, cos, sin, attention_arguments, weights, self.heads, self.approximate, self.kernels
            )
            if layer in self.deepstack_layers:
                deepstack.append(self._merger(hidden, delta, self.deepstack_mergers[self.deepstack_layers[layer]]))
        return self._merger(hidden, delta, self.final_merger), tuple(deepstack)


def compile_cache_dir(visual: torch.nn.Module, device: torch.device) -> Path:
    """The folder for this tower's compiled kernels in the user's cache, keyed by what makes them valid.

    The key covers torch, transformers and Triton versions, the GPU and the tower's shape;
    the root is the user's cache folder (on Linux ``$XDG_CACHE_HOME``, default ``~/.cache``);
    ``FRAMEWISE_CACHE_DIR`` overrides it.
    """
    import transformers

    config = visual.config
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else device.type
    key = "|".join(
        str(part)
        for part in (
            torch.__version__, transformers.__version__, _triton_version(), gpu, next(visual.parameters()).dtype,
            config.depth, config.hidden_size, config.num_heads, config.intermediate_size,
            config.out_hidden_size, deepstack_indexes(config), config.hidden_act,
        )
    )
    root = user_folder("FRAMEWISE_CACHE_DIR", "cache")
    return root / "inductor" / hashlib.sha256(key.encode()).hexdigest()[:16]


def use_compile_cache(folder: Path) -> None:
    """Point inductor's on-disk cache (its FX graphs and Triton kernels) at ``folder``.

    Only before the first compile in this process: inductor reads the setting once.
    """
    folder.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(folder))


def _triton_version() -> str:
    """The installed Triton's version, read from its package metadata (Triton is not imported here)."""
    try:
        return importlib.metadata.version("triton")
    except importlib.metadata.PackageNotFoundError:
        return "no triton"
