"""Variable-length attention over packed rows in one Triton kernel that walks a list of tiles,
and the rotary embedding that feeds it.

The vision tower attends within each frame pair (one sequence per temporal patch) over rows
packed end to end, the boundaries in ``cu_seqlens``. A CUDA graph fixes the launch, not the
boundaries, so its ``cu_seqlens`` has a slot for every frame pair a batch could hold and the
unused slots are empty. Kernels that launch a program per (slot, query block of the longest
possible sequence) spend most of their programs on nothing there. This kernel instead launches a
bounded list of tiles, each one query block of one real sequence:

- :func:`~framewise.core.kernels.tile_schedule.tile_schedule` turns ``cu_seqlens`` into that
  list on the device, once per pass (every layer attends over the same sequences);
- :func:`tile_attention` runs one program per (tile, head); tiles past the real ones return at
  once. There are at most ``ceil(rows / BLOCK_M) + sequences`` tiles, so the wasted programs are
  one per slot, not one per slot and query block.

A head dim that is not a power of two (Qwen3-VL-8B's 72) is covered inside the kernel (masked
loads, nothing copied) either by one column block padded to the next power of two, the products
doing 128/72 of the needed work, or by two blocks, a power of two and a masked 16, doing 80/72
(:func:`column_blocks`). Triton 3.6 compiles two blocks correctly for an H200 only in one shape:
a second block 16 wide and 32 keys per loop turn. With 64 keys per turn, or a second block 32
wide (head dim 96 as 64 + 32) at 32, 64 or 128 keys, it gave illegal addresses or wrong results
in bfloat16 on random packed layouts (float32 and Triton's interpreter were right), so those
shapes are never launched. Two blocks are the faster choice for budgets of many sequences, one
padded block at 64 keys for small budgets (:data:`SPLIT_FROM_ROWS`; measured, docs/benchmarks.md). Sums and the softmax run in float32;
float32 inputs multiply in full precision (no TF32).

:func:`rotary_qk` rotates q and k straight out of the qkv product into the layout the attention
reads, all heads of a row from one load of the row's angles (inductor's own kernel for the same
arithmetic was several times slower than its memory traffic needs, docs/benchmarks.md). Needs
Triton and a CUDA device.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from framewise.core.kernels.tile_schedule import BLOCK_M

# Key rows per loop turn with one column block, with two, and the launch shape (measured,
# docs/benchmarks.md). Two blocks only ever run with a TAIL_DIM-wide second block at
# SPLIT_BLOCK_N keys per turn: the one shape Triton 3.6 compiled correctly (module docstring).
BLOCK_N = 64
SPLIT_BLOCK_N = 32
TAIL_DIM = 16
NUM_WARPS = 4
NUM_STAGES = 3
# Budgets from this many rows split a head dim in two column blocks; smaller ones, a few hundred
# programs on 132 SMs, wait on the loop's latency, which the shorter key blocks lengthen.
SPLIT_FROM_ROWS = 2048
# Rows per program of the rotary kernel (each program does every head of its rows) and its warps:
# the fastest of 1, 4 and 8 rows measured (docs/benchmarks.md).
ROTARY_ROWS = 1
ROTARY_WARPS = 1


@triton.jit
def _load_head_block(ptr, row_offsets, row_mask, columns, HEAD_DIM: tl.constexpr, MASK_COLUMNS: tl.constexpr):
    """Block (rows, columns) of one head; zeros outside the rows (and past the head dim)."""
    mask = row_mask[:, None]
    if MASK_COLUMNS:
        mask = mask & (columns < HEAD_DIM)[None, :]
    return tl.load(ptr + row_offsets[:, None] + columns[None, :], mask=mask, other=0.0)


@triton.jit
def _attend_block(
    q, q_tail, k_ptr, v_ptr, key_rows, key_mask, key_stride, value_stride, columns, tail_columns,
    m_i, l_i, acc, acc_tail, scale_log2e, HEAD_DIM: tl.constexpr, MASK_COLUMNS: tl.constexpr,
    TAIL_DIM: tl.constexpr, MASK_TAIL: tl.constexpr, MASK_KEYS: tl.constexpr, PRECISION: tl.constexpr,
):
    """One online-softmax step over the keys ``key_rows``: updates the running max ``m_i``, sum
    ``l_i`` and the accumulators of the head dim's two column blocks (``acc_tail`` passes through
    unchanged when ``TAIL_DIM`` is 0)."""
    key_offsets = key_rows * key_stride
    k = _load_head_block(k_ptr, key_offsets, key_mask, columns, HEAD_DIM, MASK_COLUMNS)
    scores = tl.dot(q, tl.trans(k), input_precision=PRECISION)
    if TAIL_DIM > 0:
        k_tail = _load_head_block(k_ptr, key_offsets, key_mask, tail_columns, HEAD_DIM, MASK_TAIL)
        scores += tl.dot(q_tail, tl.trans(k_tail), input_precision=PRECISION)
    scores = scores * scale_log2e
    if MASK_KEYS:
        scores = tl.where(key_mask[None, :], scores, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(scores, 1))
    p = tl.exp2(scores - m_new[:, None])
    alpha = tl.exp2(m_i - m_new)
    l_i = l_i * alpha + tl.sum(p, 1)
    value_offsets = key_rows * value_stride
    v = _load_head_block(v_ptr, value_offsets, key_mask, columns, HEAD_DIM, MASK_COLUMNS)
    p = p.to(v.dtype)
    acc = acc * alpha[:, None] + tl.dot(p, v, input_precision=PRECISION)
    if TAIL_DIM > 0:
        v_tail = _load_head_block(v_ptr, value_offsets, key_mask, tail_columns, HEAD_DIM, MASK_TAIL)
        acc_tail = acc_tail * alpha[:, None] + tl.dot(p, v_tail, input_precision=PRECISION)
    return m_new, l_i, acc, acc_tail


@triton.jit
def _tile_attention_kernel(
    q_ptr, k_ptr, v_ptr, out_ptr, cu_seqlens_ptr, schedule_ptr, tiles, scale_log2e,
    q_stride, q_head_stride, k_stride, k_head_stride, v_stride, v_head_stride, out_stride, out_head_stride,
    HEAD_DIM: tl.constexpr, MAIN_DIM: tl.constexpr, TAIL_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr, PRECISION: tl.constexpr,
):
    tile = tl.program_id(0)
    head = tl.program_id(1)
    sequence = tl.load(schedule_ptr + tile)
    if sequence < 0:
        return
    first_row = tl.load(schedule_ptr + tiles + tile)
    start = tl.load(cu_seqlens_ptr + sequence)
    end = tl.load(cu_seqlens_ptr + sequence + 1)

    # Head offsets are multiples of the head dim (72 elements = 144 bytes): say so, or the loads
    # are not vectorised.
    q_ptr += tl.multiple_of(head * q_head_stride, 8)
    k_ptr += tl.multiple_of(head * k_head_stride, 8)
    v_ptr += tl.multiple_of(head * v_head_stride, 8)
    out_ptr += tl.multiple_of(head * out_head_stride, 8)
    # The head dim in two column blocks, [0, MAIN_DIM) and [MAIN_DIM, MAIN_DIM + TAIL_DIM); only
    # the part past HEAD_DIM is masked. Without a tail, the tail's names alias the main block's.
    MASK_COLUMNS: tl.constexpr = MAIN_DIM > HEAD_DIM
    MASK_TAIL: tl.constexpr = MAIN_DIM + TAIL_DIM > HEAD_DIM
    columns = tl.arange(0, MAIN_DIM)
    query_rows = first_row + tl.arange(0, BLOCK_M)
    query_mask = query_rows < end
    query_offsets = query_rows * q_stride
    q = _load_head_block(q_ptr, query_offsets, query_mask, columns, HEAD_DIM, MASK_COLUMNS)
    acc = tl.zeros([BLOCK_M, MAIN_DIM], dtype=tl.float32)
    if TAIL_DIM > 0:
        tail_columns = MAIN_DIM + tl.arange(0, TAIL_DIM)
        q_tail = _load_head_block(q_ptr, query_offsets, query_mask, tail_columns, HEAD_DIM, MASK_TAIL)
        acc_tail = tl.zeros([BLOCK_M, TAIL_DIM], dtype=tl.float32)
    else:
        tail_columns = columns
        q_tail = q
        acc_tail = acc
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    full_end = start + (end - start) // BLOCK_N * BLOCK_N
    key_offsets = tl.arange(0, BLOCK_N)
    for block_start in range(start, full_end, BLOCK_N):
        key_rows = block_start + key_offsets
        m_i, l_i, acc, acc_tail = _attend_block(
            q, q_tail, k_ptr, v_ptr, key_rows, key_rows < end, k_stride, v_stride, columns, tail_columns,
            m_i, l_i, acc, acc_tail, scale_log2e, HEAD_DIM, MASK_COLUMNS, TAIL_DIM, MASK_TAIL, False, PRECISION,
        )
    if full_end < end:
        key_rows = full_end + key_offsets
        m_i, l_i, acc, acc_tail = _attend_block(
            q, q_tail, k_ptr, v_ptr, key_rows, key_rows < end, k_stride, v_stride, columns, tail_columns,
            m_i, l_i, acc, acc_tail, scale_log2e, HEAD_DIM, MASK_COLUMNS, TAIL_DIM, MASK_TAIL, True, PRECISION,
        )
    _store_output(
        out_ptr, query_rows, query_mask, out_stride, columns, tail_columns, acc, acc_tail, l_i,
        HEAD_DIM, MASK_COLUMNS, TAIL_DIM,
    )


@triton.jit
def _store_output(
    out_ptr, query_rows, query_mask, out_stride, columns, tail_columns, acc, acc_tail, l_i,
    HEAD_DIM: tl.constexpr, MASK_COLUMNS: tl.constexpr, TAIL_DIM: tl.constexpr,
):
    """Store one head's output rows: the accumulated blocks divided by the softmax sums ``l_i``."""
    normaliser = tl.where(query_mask, l_i, 1.0)[:, None]
    out_rows = out_ptr + (query_rows * out_stride)[:, None]
    dtype = out_ptr.dtype.element_ty
    out_mask = query_mask[:, None]
    if MASK_COLUMNS:
        out_mask = out_mask & (columns < HEAD_DIM)[None, :]
    tl.store(out_rows + columns[None, :], (acc / normaliser).to(dtype), mask=out_mask)
    if TAIL_DIM > 0:
        tail_mask = query_mask[:, None] & (tail_columns < HEAD_DIM)[None, :]
        tl.store(out_rows + tail_columns[None, :], (acc_tail / normaliser).to(dtype), mask=tail_mask)


def column_blocks(head_dim: int, split: bool) -> tuple[int, int]:
    """How the kernel covers ``head_dim``: (main, tail) column-block widths, powers of two >= 16
    (tail 0 for one block). With ``split``, two blocks where a :data:`TAIL_DIM`-wide second block
    covers what the first leaves and pads less than one block: 72 -> (64, 16) rather than 128;
    96 stays 128 (its 64 + 32 was miscompiled)."""
    padded = max(16, triton.next_power_of_2(head_dim))
    main = padded // 2
    if split and main >= 16 and 0 < head_dim - main <= TAIL_DIM and main + TAIL_DIM < padded:
        return main, TAIL_DIM
    return padded, 0


def tile_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    cu_seqlens: torch.Tensor,
    schedule: torch.Tensor,
    scale: float,
    *,
    block_m: int = BLOCK_M,
    block_n: int | None = None,
    num_warps: int = NUM_WARPS,
    num_stages: int = NUM_STAGES,
    split_head_dim: bool | None = None,
) -> torch.Tensor:
    """Softmax attention within each sequence of packed rows.

    ``query``/``key``/``value`` (rows, heads, head_dim), any row and head strides with the head
    dim contiguous; ``cu_seqlens`` (sequences + 1,) int32 boundaries covering every row;
    ``schedule`` from :func:`~framewise.core.kernels.tile_schedule.tile_schedule` on the same
    boundaries, made with the same ``block_m``. Returns (rows, heads, head_dim) in the query's
    dtype. The launch shape is the measured default unless given: ``split_head_dim`` (two column
    blocks, :func:`column_blocks`) from :data:`SPLIT_FROM_ROWS` rows, and ``block_n`` keys per
    loop turn to go with it. ValueError for two column blocks with other than
    :data:`SPLIT_BLOCK_N` keys per turn (miscompiled, see the module docstring).
    """
    query, key, value = (t if t.stride(-1) == 1 else t.contiguous() for t in (query, key, value))
    rows, heads, head_dim = query.shape
    if split_head_dim is None:
        split_head_dim = rows >= SPLIT_FROM_ROWS
    main_dim, tail_dim = column_blocks(head_dim, split_head_dim)
    if block_n is None:
        block_n = SPLIT_BLOCK_N if tail_dim else BLOCK_N
    if tail_dim and block_n != SPLIT_BLOCK_N:
        raise ValueError(
            f"Two column blocks take {SPLIT_BLOCK_N} keys per loop turn, not {block_n}: "
            "Triton 3.6 compiled other key counts into wrong results."
        )
    out = torch.empty(rows, heads, head_dim, dtype=query.dtype, device=query.device)
    tiles = schedule.shape[1]
    precision = "ieee" if query.dtype == torch.float32 else "tf32"
    _tile_attention_kernel[(tiles, heads)](
        query, key, value, out, cu_seqlens, schedule, tiles, scale * math.log2(math.e),
        query.stride(0), query.stride(1), key.stride(0), key.stride(1),
        value.stride(0), value.stride(1), out.stride(0), out.stride(1),
        HEAD_DIM=head_dim, MAIN_DIM=main_dim, TAIL_DIM=tail_dim, BLOCK_M=block_m, BLOCK_N=block_n,
        PRECISION=precision, num_warps=num_warps, num_stages=num_stages,
    )
    return out


@triton.jit
def _rotate_heads(source, target, cos, sin, mask, HALF: tl.constexpr):
    """Rotate one row block of q or k: halves ``first``/``second`` of every head, in float32."""
    first = tl.load(source, mask=mask, other=0.0).to(tl.float32)
    second = tl.load(source + HALF, mask=mask, other=0.0).to(tl.float32)
    dtype = target.dtype.element_ty
    tl.store(target, (first * cos - second * sin).to(dtype), mask=mask)
    tl.store(target + HALF, (second * cos + first * sin).to(dtype), mask=mask)


@triton.jit
def _rotary_qk_kernel(
    qkv_ptr, cos_ptr, sin_ptr, q_ptr, k_ptr, rows, qkv_stride, table_stride,
    HEADS: tl.constexpr, HEADS_P2: tl.constexpr, HALF: tl.constexpr, HALF_P2: tl.constexpr, BLOCK_R: tl.constexpr,
):
    row = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    head = tl.arange(0, HEADS_P2)
    column = tl.arange(0, HALF_P2)
    table_mask = (row < rows)[:, None] & (column < HALF)[None, :]
    table = row[:, None] * table_stride + column[None, :]
    cos = tl.load(cos_ptr + table, mask=table_mask, other=0.0)[:, None, :]
    sin = tl.load(sin_ptr + table, mask=table_mask, other=0.0)[:, None, :]
    mask = table_mask[:, None, :] & (head < HEADS)[None, :, None]
    within_row = head[None, :, None] * (2 * HALF) + column[None, None, :]
    source = qkv_ptr + row[:, None, None] * qkv_stride + within_row
    target = row[:, None, None] * (HEADS * 2 * HALF) + within_row
    _rotate_heads(source, q_ptr + target, cos, sin, mask, HALF)
    _rotate_heads(source + HEADS * 2 * HALF, k_ptr + target, cos, sin, mask, HALF)


def rotary_qk(qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The 2-D rotary embedding of q and k, read from the qkv product and written in the layout
    :func:`tile_attention` reads.

    ``qkv`` (rows, 3, heads, head_dim); ``cos``/``sin`` (rows, head_dim) float32 whose two halves
    are equal (the tower's tables). Returns q and k, each (rows, heads, head_dim) contiguous in
    qkv's dtype, rotated in float32 like the tower: ``x * cos + rotate_half(x) * sin``.
    """
    qkv, cos, sin = qkv.contiguous(), cos.contiguous(), sin.contiguous()
    rows, _, heads, head_dim = qkv.shape
    query = torch.empty(rows, heads, head_dim, dtype=qkv.dtype, device=qkv.device)
    key = torch.empty_like(query)
    half = head_dim // 2
    _rotary_qk_kernel[(triton.cdiv(rows, ROTARY_ROWS),)](
        qkv, cos, sin, query, key, rows, qkv.stride(0), cos.stride(0),
        HEADS=heads, HEADS_P2=triton.next_power_of_2(heads), HALF=half, HALF_P2=triton.next_power_of_2(half),
        BLOCK_R=ROTARY_ROWS, num_warps=ROTARY_WARPS,
    )
    return query, key


def register_op() -> None:
    """Register :func:`tile_attention` and :func:`rotary_qk` as ``torch.ops.framewise.tile_attention``
    and ``torch.ops.framewise.rotary_qk`` (idempotent): operators ``torch.compile`` calls as they
    are rather than tracing into."""
    if hasattr(torch.ops.framewise, "tile_attention"):
        return

    @torch.library.custom_op("framewise::tile_attention", mutates_args=())
    def tile_attention_op(
        query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, cu_seqlens: torch.Tensor,
        schedule: torch.Tensor, scale: float,
    ) -> torch.Tensor:
        return tile_attention(query, key, value, cu_seqlens, schedule, scale)

    @tile_attention_op.register_fake
    def _(query, key, value, cu_seqlens, schedule, scale):
        return torch.empty_like(query, memory_format=torch.contiguous_format)

    @torch.library.custom_op("framewise::rotary_qk", mutates_args=())
    def rotary_qk_op(qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return rotary_qk(qkv, cos, sin)

    @rotary_qk_op.register_fake
    def _(qkv, cos, sin):
        rows, _, heads, head_dim = qkv.shape
        return qkv.new_empty(rows, heads, head_dim), qkv.new_empty(rows, heads, head_dim)
