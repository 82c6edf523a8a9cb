"""Where the queries and keys of posenc_kernels.relative_attention's programs lie: one sequence per
batch row (queries at the keys' end when Lq < Lk), per-row cache lengths (kv_lens), paged
caches, or packed documents (cu_seqlens); and the merge of a forward split over the keys.

The kernels read a sequence's rows and offset through `_sequence`
(posenc_kernels/_relbias_common.py); this module checks the arguments and picks the mode;
posenc_kernels/_relbias_grid.py picks the split.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import triton
from torch import Tensor

from posenc_kernels import _relbias_common as jit
from posenc_kernels._relbias_fwd import _relbias_combine_kernel

# the kernels' sequence modes (their SEQ constexpr) as the ints the launchers pass
SELF, AT_END, CACHE, PACKED = (m.value for m in (jit.SELF, jit.AT_END, jit.CACHE, jit.PACKED))


class Sequences(NamedTuple):
    """mode: SELF, AT_END, CACHE or PACKED; lens: kv_lens (B,) or cu_seqlens (N + 1,) as the
    kernels read them (None otherwise); count: the sequences (B, or N documents), the grid's
    batch; rows_q, rows_k: the longest sequence's query and key rows (the grid's blocks);
    block_table (B, max_blocks) and page_size: paged caches (CACHE; rows_k = max_blocks *
    page_size), else None and 0."""

    mode: int
    lens: Tensor | None
    count: int
    rows_q: int
    rows_k: int
    block_table: Tensor | None = None
    page_size: int = 0


def _integer_vector(name: str, t, length: int | None, device) -> Tensor:
    if not isinstance(t, Tensor) or t.dim() != 1 or t.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"{name} must be a 1-D int32 or int64 tensor, got {_describe(t)}")
    if length is not None and t.shape[0] != length:
        raise ValueError(f"{name} must have {length} entries (B), got {t.shape[0]}")
    if t.device != device:
        raise ValueError(f"{name} is on {t.device} but q is on {device}")
    return t.contiguous()


def _describe(t) -> str:
    if isinstance(t, Tensor):
        return f"a {t.dim()}-D {t.dtype} tensor"
    return type(t).__name__


def sequences(
    q: Tensor, k: Tensor, causal: bool, kv_lens, cu_seqlens, max_seqlen=None
) -> Sequences:
    """The checked sequence layout of one call (shapes already checked: q (B, H, Lq, D), k and
    v (B, Hk, Lk, D)). cu_seqlens costs one host read of its N + 1 entries (their checks and
    the longest document, the grid's size) unless max_seqlen gives the longest; kv_lens is
    never read on the host (values outside [0, Lk] are clamped by the kernels: no
    synchronization in a decode step)."""
    bsz, _, lq, _ = q.shape
    lk = k.shape[2]
    if kv_lens is not None and cu_seqlens is not None:
        raise ValueError("pass kv_lens (a batch of caches) or cu_seqlens (packed), not both")
    if cu_seqlens is not None:
        cu = _integer_vector("cu_seqlens", cu_seqlens, None, q.device)
        if bsz != 1 or lq != lk:
            raise ValueError(
                f"cu_seqlens packs documents into one row: q, k, v must be (1, H, T, D) with "
                f"Lq == Lk, got B={bsz}, Lq={lq}, Lk={lk}"
            )
        if cu.shape[0] < 2:
            raise ValueError(f"cu_seqlens needs N + 1 >= 2 entries, got {cu.shape[0]}")
        if max_seqlen is not None:  # the caller's longest document: no host read
            if not isinstance(max_seqlen, int) or not 1 <= max_seqlen <= lq:
                raise ValueError(f"max_seqlen must be an int in 1 .. T={lq}, got {max_seqlen!r}")
            return Sequences(PACKED, cu, cu.shape[0] - 1, max_seqlen, max_seqlen)
        bounds = cu.tolist()
        if bounds[0] != 0 or bounds[-1] != lq:
            raise ValueError(f"cu_seqlens must run from 0 to T={lq}, got {bounds}")
        sizes = [b - a for a, b in zip(bounds, bounds[1:], strict=False)]
        if min(sizes) < 0:
            raise ValueError(f"cu_seqlens must be non-decreasing, got {bounds}")
        return Sequences(PACKED, cu, len(sizes), max(sizes), max(sizes))
    if max_seqlen is not None:
        raise ValueError("max_seqlen goes with cu_seqlens (the longest packed document)")
    if kv_lens is not None:
        lens = _integer_vector("kv_lens", kv_lens, bsz, q.device)
        return Sequences(CACHE, lens, bsz, lq, lk)
    if causal and lq > lk:
        raise ValueError(f"causal needs Lq <= Lk (queries at the keys' end), got {lq} > {lk}")
    return Sequences(SELF if lq == lk else AT_END, None, bsz, lq, lk)


def _check_caches(q: Tensor, k_cache, v_cache) -> None:
    """q (B, H, Lq, D) float; the caches (num_blocks, block_size, Hk, D), contiguous, alike."""
    if not isinstance(q, Tensor) or q.dim() != 4:
        raise ValueError(f"q must be a 4-D tensor (B, H, Lq, D), got {_describe(q)}")
    if q.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise TypeError(f"q must be float32, float16 or bfloat16, got {q.dtype}")
    heads, d = q.shape[1], q.shape[3]
    for name, c in (("k_cache", k_cache), ("v_cache", v_cache)):
        if not isinstance(c, Tensor) or c.dim() != 4:
            raise ValueError(
                f"{name} (k, v with block_table) must be (num_blocks, block_size, Hk, D), got "
                f"{_describe(c)}"
            )
        if c.dtype != q.dtype or c.device != q.device:
            raise ValueError(f"{name} is {c.dtype} on {c.device}; q is {q.dtype} on {q.device}")
        if c.shape[3] != d:
            raise ValueError(f"{name} has head dim {c.shape[3]} but q has D={d}")
        if not c.is_contiguous():
            raise ValueError(f"{name} must be contiguous (num_blocks, block_size, Hk, D)")
        if min(c.shape[:3]) < 1:
            raise ValueError(f"{name} is empty: shape {tuple(c.shape)}")
    if v_cache.shape != k_cache.shape:
        raise ValueError(f"v_cache is {tuple(v_cache.shape)} but k_cache {tuple(k_cache.shape)}")
    if heads % k_cache.shape[2]:
        raise ValueError(f"k_cache's heads (Hk={k_cache.shape[2]}) must divide q's (H={heads})")


def paged(q: Tensor, k_cache, v_cache, block_table, kv_lens, cu_seqlens, max_seqlen) -> Sequences:
    """The checked layout of a call on paged caches: row b's keys 0 .. kv_lens[b] - 1, key j
    in cache block block_table[b, j // block_size] at slot j % block_size, its queries at
    their end. Values are checked on the device without a host sync (kv_lens within the blocks
    given, the blocks it uses within num_blocks): a bad one fails there."""
    _check_caches(q, k_cache, v_cache)
    if cu_seqlens is not None or max_seqlen is not None:
        raise ValueError("block_table reads paged caches of a batch: cu_seqlens does not apply")
    bsz = q.shape[0]
    if kv_lens is None:
        raise ValueError("block_table needs kv_lens (B,): each row's keys in its blocks")
    lens = _integer_vector("kv_lens", kv_lens, bsz, q.device)
    if not isinstance(block_table, Tensor) or block_table.dim() != 2:
        raise TypeError(
            f"block_table must be a (B, max_blocks) int32 tensor, got {_describe(block_table)}"
        )
    if block_table.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"block_table must be int32 (or int64), got {block_table.dtype}")
    if block_table.shape[0] != bsz or block_table.shape[1] < 1:
        raise ValueError(
            f"block_table must be (B={bsz}, max_blocks >= 1), got {tuple(block_table.shape)}"
        )
    if block_table.device != q.device:
        raise ValueError(f"block_table is on {block_table.device} but q is on {q.device}")
    table = block_table.contiguous()
    num_blocks, page = k_cache.shape[:2]
    max_keys = table.shape[1] * page
    torch._assert_async(
        ((lens >= 0) & (lens <= max_keys)).all(),
        f"kv_lens must lie in 0 .. {max_keys} (block_table's {table.shape[1]} blocks of {page})",
    )
    used = torch.arange(table.shape[1], device=q.device)[None, :] * page < lens[:, None]
    torch._assert_async(
        (~used | ((table >= 0) & (table < num_blocks))).all(),
        f"block_table's entries for the keys of kv_lens must lie in 0 .. {num_blocks - 1} "
        "(num_blocks of k_cache)",
    )
    return Sequences(CACHE, lens, bsz, q.shape[2], max_keys, table, page)


def query_positions(seq: Sequences, bsz: int, lq: int, lk: int, device) -> Tensor:
    """(B, Lq) int64: each query's key position (where FoX reads its D_i): Lk - Lq + i; with
    kv_lens, kv_lens[b] - Lq + i (0 for a query that sees no key); packed, its own row."""
    i = torch.arange(lq, device=device)
    if seq.mode == CACHE:
        first = seq.lens.long().clamp(0, lk) - lq
        return (first[:, None] + i).clamp(min=0)
    if seq.mode == PACKED:
        return i[None]
    return (lk - lq + i).expand(bsz, lq)


def check_num_splits(num_splits, seq: Sequences, differentiable: bool) -> None:
    if num_splits is None:
        return
    if not isinstance(num_splits, int) or isinstance(num_splits, bool) or num_splits < 1:
        raise ValueError(f"num_splits must be an int >= 1 or None, got {num_splits!r}")
    if num_splits > 1 and differentiable:
        raise ValueError(
            f"num_splits={num_splits}: a split forward is not differentiable (it keeps no "
            "row statistics); call it under torch.no_grad() or with num_splits=None or 1"
        )
    if num_splits > 1 and seq.mode == PACKED:
        raise ValueError(f"num_splits={num_splits}: packed documents (cu_seqlens) are not split")


def wide(*tensors: Tensor | None, group: int = 1) -> bool:
    """Do a head's rows of any of these (B, H, L, D) tensors, or with `group` the rows of that
    many heads from one (the dk/dv kernel's query heads of a kv head), span 2**31 elements or
    more? A (B, L, H, D) layout does at L x H x D past it (131072 tokens of 128 heads of 128),
    a (B, H, L, D) one at group x L x D: the kernels then index rows (and the group's heads)
    with 64-bit integers (WIDE), where 32-bit products would wrap."""
    return any(
        t is not None
        and (group - 1) * t.stride(-3)
        + (t.shape[-2] - 1) * t.stride(-2)
        + (t.shape[-1] - 1) * t.stride(-1)
        >= 2**31
        for t in tensors
    )


def merge(part: Tensor, lse: Tensor, out: Tensor, block_d: int, interpreting: bool) -> None:
    """out (B, H, Lq, D) = the weighted sum of the float32 partials part (B, H, S, Lq, D) by
    their base-2 log-sum-exps lse (B * H * S, Lq)."""
    bsz, heads, splits, lq, d = part.shape
    block_m = 16 if interpreting else max(16, min(64, 4096 // block_d))
    grid = (triton.cdiv(lq, block_m) * bsz * heads,)
    _relbias_combine_kernel[grid](
        part,
        lse,
        out,
        *out.stride(),
        heads,
        lq,
        d,
        splits,
        WIDE=wide(out),
        BLOCK_M=block_m,
        BLOCK_D=block_d,
    )
