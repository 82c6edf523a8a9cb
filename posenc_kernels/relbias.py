"""Attention with a relative position bias computed inside the tile: ALiBi, T5 buckets, Shaw.

softmax(scale q k^T + bias(j - i)) v by online softmax over key blocks (flash-attention style),
forward and backward. The bias is computed from r = j - i per tile, so no (L x L) tensor is ever
in memory: O(B H L D), plus O(B H L K) for Shaw's key and value terms.
The op's files, in order: the kernels by pass (posenc_kernels/_relbias_fwd.py, _relbias_dkdv.py,
_relbias_dq.py, what they share in _relbias_common.py) -> the tiles (_relbias_tiles.py) -> the
families' arguments (_relbias_families.py) and the sequences (_relbias_seq.py) -> this file:
the launchers, the autograd Function, the public `relative_attention`.

Why this file is long: the launchers pass each kernel its some sixty arguments by position, one
a line, next to the autograd Function and the public function that checks its arguments.

The table gradients (slopes, T5 and Shaw tables) are reduced per program into per-bucket
partial sums, summed on the host: no atomics, so they are deterministic; and only computed when
the table requires grad.
"""

import functools
import math

import torch
import triton
from torch import Tensor

from posenc_kernels import _relbias_common as jit
from posenc_kernels._relbias_dkdv import _relbias_bwd_delta_kernel, _relbias_bwd_dkdv_kernel
from posenc_kernels._relbias_dq import _relbias_bwd_dq_kernel
from posenc_kernels._relbias_families import ALIBI, FAMILIES, SHAW_KV, TABLE, Options, Prepared
from posenc_kernels._relbias_fwd import _relbias_fwd_kernel
from posenc_kernels._relbias_grid import (
    FIRST_FIRST,
    LAST_FIRST,
    Grid,
    forward_grid,
    occupancy,
    order,
    packed_heads,
    sm_of,
)
from posenc_kernels._relbias_seq import (
    CACHE,
    PACKED,
    Sequences,
    check_num_splits,
    merge,
    paged,
    query_positions,
    sequences,
    wide,
)
from posenc_kernels._relbias_tiles import (
    Tiles,
    _block_d,
    _fit_rows,
    _interpreting,
    _run,
    check_tiles,
    transpose,
)
from posenc_kernels._runtime import compiling

_LOG2E = math.log2(math.e)  # the kernels' logits are base 2: scale * log2(e) in one multiply
# the dots' float32 modes (the kernels' F32 constexpr)
NATIVE, TF32X3, IEEE = jit.NATIVE.value, jit.TF32X3.value, jit.IEEE.value


def _upcast(q: Tensor) -> bool:
    """Upcast dot operands to float32? Only bfloat16 under the interpreter (its bfloat16 tl.dot
    is wrong); float16 stays native there too, so the CPU tests run the GPU's dot path."""
    return _interpreting() and q.dtype == torch.bfloat16


def _split(q: Tensor, ieee: bool) -> bool:
    """Split the key loop into before / after / band (posenc_kernels/_relbias_common.py)? Not for
    float32 IEEE dots on a GPU (the FMA units: one masked loop, as its registers allow); always
    under the interpreter, so that the CPU tests run the split code (tests cover both)."""
    return _interpreting() or not (ieee and q.dtype == torch.float32)


def _pointers(p: Prepared, q: Tensor) -> dict:
    """The pointers and strides a family's kernels read (p: its Prepared tensors); an unused
    one points at q (never read: its branch is compiled out). TABLE: the bias per relative
    index (H, 2K + 1), read as per_index[h, idx] through its strides. FoX: col, D (B, H, Lk),
    per key."""
    spec, relk, col = p.spec, p.relk, p.col
    is_table = spec.bias == TABLE
    return dict(
        slopes=p.table if spec.bias == ALIBI else q,
        table=p.per_index if is_table else q,
        table_strides=p.per_index.stride() if is_table else (0, 0),
        relk=relk if relk is not None else q,
        rel_strides=relk.stride() if relk is not None else (0, 0, 0, 0),
        col=(col if col is not None else q, *(col.stride() if col is not None else (0, 0, 0))),
    )


def _grid(n_blocks: int, bsz: int, heads: int) -> tuple[int]:
    """A flat grid, a head's blocks adjacent (CUDA caps a grid's y at 65535, its x at 2**31 - 1:
    B * H beyond 65535 needs the flat form)."""
    size = n_blocks * bsz * heads
    if size >= 2**31:
        raise ValueError(f"B * H * blocks = {size} programs exceed CUDA's grid (2**31 - 1)")
    return (size,)


def _kv_strides(k: Tensor, v: Tensor, seq: Sequences) -> tuple[int, ...]:
    """The forward kernel's k and v strides (b, h, n, d each), then their cache blocks' and the
    block table's rows': paged caches (num_blocks, block_size, Hk, D) have no batch (stride 0)
    and step from block to block through the table."""
    if not seq.page_size:
        return (*k.stride(), *v.stride(), 0, 0, 0)
    (kp, kn, kh, kd), (vp, vn, vh, vd) = k.stride(), v.stride()
    return (0, kh, kn, kd, 0, vh, vn, vd, kp, vp, seq.block_table.stride(0))


def _forward(q, k, v, p: Prepared, sinks, seq: Sequences, splits=1):
    """-> out (like q), lse (B * H, Lq) float32 in base 2, pn (B * H, Lq, NR) or None.
    p: the family's Prepared tensors; sinks: (H,) float32 or None.
    splits: 1, the count to split the keys into, or None (posenc_kernels._relbias_grid.num_splits);
    a split forward returns lse and pn as None (it is never differentiated)."""
    bsz, heads, lq, d = q.shape
    spec = p.spec
    out = torch.empty_like(q)
    c = _pointers(p, q)
    ev_ = p.ev if p.ev is not None else q
    kept = {}
    lk, kv_heads = k.shape[2], k.shape[1]
    if seq.page_size:  # caches (num_blocks, block_size, Hk, D): the table's keys, Hk heads
        lk, kv_heads = seq.rows_k, k.shape[2]
    kv = _kv_strides(k, v, seq)

    def kernel_args(o, o_strides, lse, pn, grid: Grid) -> list:
        return [
            q,
            k,
            v,
            o,
            lse,
            c["slopes"],
            c["table"],
            c["relk"],
            ev_,
            pn if pn is not None else q,
            seq.lens if seq.lens is not None else q,
            *q.stride(),
            *kv[:8],
            *o_strides,
            *c["table_strides"],
            *c["rel_strides"],
            ev_.stride(0),
            ev_.stride(-1),
            heads,
            lq,
            lk,
            seq.rows_q,
            grid.splits,
            grid.chunk,
            d,
            spec.n_rel,
            spec.scale * _LOG2E,
            seq.block_table if seq.page_size else q,
            *kv[8:],
            *c["col"],
            sinks if sinks is not None else q,
        ]

    def constexprs(grid: Grid, t: Tiles) -> dict:
        return dict(
            **spec.constexprs,
            NB=spec.nb,
            MASK_N=lk % t.block_n != 0 or seq.mode >= CACHE,
            UPCAST=_upcast(q),
            WIDE=wide(q, k, v, out),
            # float32: 3xTF32; with Shaw's value term IEEE (its 3xTF32 spills at every tile)
            F32=(IEEE if spec.has_value else TF32X3) if q.dtype == torch.float32 else NATIVE,
            SPLIT=_split(q, ieee=spec.has_value),
            GROUP=heads // kv_heads,
            QPACK=grid.pack,
            SEQ=seq.mode,
            ORDER=order(spec.causal, seq, LAST_FIRST, grid.pack),
            SPLIT_K=grid.splits > 1,
            PAGE=seq.page_size,
            SINKS=sinks is not None,
            BLOCK_M=t.block_m,
            BLOCK_N=t.block_n,
            BLOCK_D=_block_d(d),
            num_warps=t.num_warps,
            num_stages=t.num_stages,
        )

    def partials(grid: Grid):
        """(o, its strides, lse, pn) of a grid: a split's float32 partials, or out itself."""
        if grid.splits > 1:
            o = torch.empty(seq.count, heads, grid.splits, lq, d, device=q.device)
            o_strides = (*o.stride()[:2], *o.stride()[3:], o.stride(2))
        else:
            o, o_strides = out, (*out.stride(), 0)
        lse = torch.empty(seq.count * heads * grid.splits, lq, device=q.device)
        pn = None  # Shaw's value term: the band's logits, then (one split) pn
        if spec.has_value:
            pn = torch.empty(bsz * heads * grid.splits, lq, spec.n_rel, device=q.device)
        return o, o_strides, lse, pn

    def launch(tiles: Tiles) -> None:
        t = tiles
        pack = packed_heads(seq, heads, kv_heads, t.block_m, spec.col)
        if spec.user_tiles[False] is None:
            t = _fit_rows(t, seq.rows_q * pack)
            if spec.col and seq.page_size:  # FoX over pages: 4 warps spill on sm_90a under
                t = t._replace(num_warps=8)  # Triton 3.6 (docs/kernels.md, the exceptions)

        def slots() -> int:  # SMs x the programs one holds, read from the split kernel
            sms, sm = sm_of(q.device)
            if sm is None or _interpreting() or compiling():  # (Dynamo traces no warmup)
                return sms
            trial = Grid(pack, 2, t.block_n, 1)  # a split kernel: its arguments made once
            args = lambda: kernel_args(*partials(trial), trial)  # noqa: E731
            return sms * occupancy(_relbias_fwd_kernel, args, constexprs(trial, t), sm)

        grid = forward_grid(seq, heads, pack, t.block_m, t.block_n, splits, slots)
        o, o_strides, lse, pn = partials(grid)
        args = kernel_args(o, o_strides, lse, pn, grid)
        _relbias_fwd_kernel[_grid(grid.programs, 1, 1)](*args, **constexprs(grid, t))
        if grid.splits > 1:
            merge(o, lse, out, _block_d(d), _interpreting())
            lse = pn = None
        kept.update(lse=lse, pn=pn)

    _run(launch, *spec.tiles(q, backward=False), "fwd_tiles")
    return out, kept["lse"], kept["pn"]


def _delta(do: Tensor, out: Tensor) -> Tensor:
    """rowsum(do * out) (B * H, Lq) float32, by one small kernel in the inputs' dtype."""
    bsz, heads, lq, d = out.shape
    delta = torch.empty(bsz * heads, lq, device=out.device, dtype=torch.float32)
    # 4096 elements of each operand per program, on 4 warps: a few registers a thread, no spill
    block_m = 16 if _interpreting() else max(16, 4096 // _block_d(d))
    _relbias_bwd_delta_kernel[_grid(triton.cdiv(lq, block_m), bsz, heads)](
        out,
        do,
        delta,
        *out.stride(),
        *do.stride(),
        heads,
        lq,
        d,
        WIDE=wide(out, do),
        BLOCK_M=block_m,
        BLOCK_D=_block_d(d),
    )
    return delta


def _backward(do, q, k, v, out, lse, p: Prepared, sinks, pn, seq):
    """-> dq, dk, dv (in q's dtype), the per-bucket table gradient (H, n_rel) or None, d relk,
    d E_V, d col (FoX's D_j) and d sinks (None where unused)."""
    bsz, heads, lq, d = q.shape
    spec, lk = p.spec, k.shape[2]
    delta = _delta(do, out)
    g = None
    if spec.has_value:  # dp_ij gains do_i . E_V[idx(i, j)]: gathered from do E_V^T
        g = torch.matmul(do.float(), p.ev.t()).contiguous()  # (B, H, Lq, NR)
        # the kernels read g with relk's strides (one offset a row for both gathers: the
        # 4-warp tiles' registers); a relk laid out otherwise is copied once
        p = p._replace(relk=p.relk.contiguous())
    dq = torch.empty_like(q)
    kv_heads = k.shape[1]
    group = heads // kv_heads  # grouped-query heads per kv head, summed by the dk/dv kernel
    dk = torch.empty_like(k)
    dv = torch.empty_like(dk)  # dk's strides: the dk/dv kernel writes both with one set
    c = _pointers(p, q)
    dcol = torch.zeros(bsz * heads, lk, device=q.device) if spec.col else None
    # dq's ds per (row, relative index): Shaw's key term's gradient, or the table's before its
    # sums per bucket (rows x (2K + 1) floats, written once, read once)
    per_index = spec.bias == SHAW_KV or (spec.bias == TABLE and spec.table_grad)
    n_idx = 2 * spec.clip + 1
    drel = None
    if per_index:  # packed with max_seqlen: rows past the last document are never written
        alloc = torch.zeros if seq.mode == jit.PACKED.value else torch.empty
        drel = alloc(bsz * heads, lq, n_idx, device=q.device)
    g_ = g if g is not None else q
    strides = (*q.stride(), *k.stride(), *v.stride(), *do.stride())
    # float32: IEEE dots (3xTF32 spills in these kernels)
    shared = dict(
        **spec.constexprs,
        UPCAST=_upcast(q),
        WIDE=wide(k, v, dk, dq) or wide(q, do, p.relk, group=group),
        F32=IEEE if q.dtype == torch.float32 else NATIVE,
        SPLIT=_split(q, ieee=True),
        GROUP=group,
        SEQ=seq.mode,
    )
    lens = seq.lens if seq.lens is not None else q
    alone = group == 1 and seq.mode != jit.PACKED.value and not shared["WIDE"]
    default, fallback = spec.tiles(q, backward=True, alone=alone)
    default_dq = spec.dq_tiles(q, default)  # looked up once; the fallback's dq: its transpose

    def launch(tiles: Tiles) -> Tensor | None:
        """Both kernels; -> the dq kernel's per-program table-gradient partials (or None)."""
        n_kblocks = triton.cdiv(seq.rows_k, tiles.block_n)
        _relbias_bwd_dkdv_kernel[_grid(n_kblocks, seq.count, kv_heads)](
            q,
            k,
            v,
            do,
            dk,
            dv,
            lse,
            delta,
            c["slopes"],
            c["table"],
            c["relk"],
            g_,
            lens,
            *strides,
            *dk.stride(),
            *c["table_strides"],
            *c["rel_strides"],
            kv_heads,
            lq,
            lk,
            seq.rows_k,
            d,
            spec.scale * _LOG2E,
            *c["col"],
            dcol if dcol is not None else q,
            **shared,
            # Shaw's value term keeps a head's blocks adjacent: its sm_80 tile spills with
            # the grouped order (docs/kernels.md)
            ORDER=order(spec.causal and not spec.has_value, seq, FIRST_FIRST),
            COLS=triton.next_power_of_2(group) if spec.col else 1,
            BLOCK_M=tiles.block_m,
            BLOCK_N=tiles.block_n,
            BLOCK_D=_block_d(d),
            num_warps=tiles.num_warps,
            num_stages=tiles.num_stages,
        )
        t = default_dq if tiles == default else transpose(tiles)
        n_mblocks = triton.cdiv(seq.rows_q, t.block_m)
        part = None
        if spec.table_grad and spec.bias == ALIBI:
            part = torch.empty(seq.count * heads, n_mblocks, spec.nb, device=q.device)
        _relbias_bwd_dq_kernel[_grid(n_mblocks, seq.count, heads)](
            q,
            k,
            v,
            do,
            dq,
            lse,
            delta,
            c["slopes"],
            c["table"],
            c["relk"],
            g_,
            drel if drel is not None else q,
            part if part is not None else q,
            lens,
            *strides,
            *dq.stride(),
            *c["table_strides"],
            *c["rel_strides"],
            heads,
            lq,
            lk,
            seq.rows_q,
            d,
            n_idx,
            spec.scale * _LOG2E,
            *c["col"],
            TABLE_GRAD=spec.table_grad,
            NB=max(16, triton.next_power_of_2(n_idx)) if per_index else spec.nb,
            MASK_N=lk % t.block_n != 0 or seq.mode >= CACHE,
            **shared,
            BLOCK_M=t.block_m,
            BLOCK_N=t.block_n,
            BLOCK_D=_block_d(d),
            num_warps=t.num_warps,
            num_stages=t.num_stages,
        )
        return part

    part = _run(launch, default, fallback, "bwd_tiles")
    dtable = spec.table_gradient(part, drel, heads)
    if spec.bias == TABLE:  # drel held the table's sums, not a key term's gradient
        drel = None
    dev = None
    if spec.has_value:  # out_i gains sum_r pn_ir E_V[r]
        dev = torch.einsum("nlr,nld->rd", pn, do.float().reshape(bsz * heads, lq, d))
    drel = drel.view(bsz, heads, lq, spec.n_rel) if drel is not None else None
    dcol = dcol.view(bsz, heads, lk) if dcol is not None else None
    dsinks = None
    if sinks is not None:  # d sink_h = -sum_i p(sink)_i delta_i, p(sink)_i = 2^(sink2 - lse_i)
        lse_b = lse.view(-1, heads, lq)[:bsz]  # packed: row 0's documents
        p_sink = torch.exp2(sinks[None, :, None] * _LOG2E - lse_b)
        dsinks = -(p_sink * delta.view(bsz, heads, lq)).sum((0, 2))
    return dq, dk, dv, dtable, drel, dev, dcol, dsinks


class RelativeBiasAttention(torch.autograd.Function):
    """Autograd around the kernels: (q, k, v, table, per_index, relk, ev, col, sinks, spec, seq)
    -> out, the family's tensors as `Prepared` describes them (posenc_kernels/_relbias_families.py),
    each an input so that autograd carries its gradient on (to q and E_K through relk, to the
    gates through FoX's relk and col); sinks (H,) float32 or None."""

    @staticmethod
    def forward(ctx, q, k, v, table, per_index, relk, ev, col, sinks, spec, seq):
        p = Prepared(spec, table, per_index, relk, ev, col)
        out, lse, pn = _forward(q, k, v, p, sinks, seq)
        ctx.save_for_backward(
            q, k, v, out, lse, table, per_index, relk, ev, col, sinks, pn, seq.lens
        )
        ctx.spec, ctx.seq = spec, seq._replace(lens=None)  # lens: saved above
        return out

    @staticmethod
    def backward(ctx, do):
        q, k, v, out, lse, table, per_index, relk, ev, col, sinks, pn, lens = ctx.saved_tensors
        spec, seq = ctx.spec, ctx.seq._replace(lens=lens)
        p = Prepared(spec, table, per_index, relk, ev, col)
        dq, dk, dv, dtable, drel, dev, dcol, dsinks = _backward(
            do, q, k, v, out, lse, p, sinks, pn, seq
        )
        if dtable is not None and spec.bias == ALIBI:  # (H, 1) -> the slopes' (H,)
            dtable = dtable[:, 0]
        return dq, dk, dv, dtable, None, drel, dev, dcol, dsinks, None, None


def _check_qkv(q: Tensor, k: Tensor, v: Tensor) -> None:
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, Tensor) or t.dim() != 4:
            raise ValueError(f"{name} must be a 4-D tensor (B, H, L, D)")
        if t.dtype not in (torch.float32, torch.float16, torch.bfloat16):
            raise TypeError(f"{name} must be float32, float16 or bfloat16, got {t.dtype}")
        if t.dtype != q.dtype or t.device != q.device:
            raise ValueError(f"{name} is {t.dtype} on {t.device}; q is {q.dtype} on {q.device}")
    bsz, heads, _, d = q.shape
    kv_heads = k.shape[1]
    if k.shape[0] != bsz or k.shape[3] != d or v.shape != k.shape:
        raise ValueError(
            f"k and v must be (B={bsz}, Hk, Lk, D={d}) and alike, "
            f"got {tuple(k.shape)} and {tuple(v.shape)}"
        )
    if kv_heads == 0 or heads % kv_heads:
        raise ValueError(f"k and v's heads (Hk={kv_heads}) must divide q's (H={heads})")


def relative_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    alibi_slopes: Tensor | None = None,
    t5_table: Tensor | None = None,
    t5_num_buckets: int = 32,
    t5_max_distance: int = 128,
    t5_bidirectional: bool = True,
    shaw_bias: Tensor | None = None,
    shaw_k: Tensor | None = None,
    shaw_v: Tensor | None = None,
    causal: bool = False,
    scale: float | None = None,
    kv_lens: Tensor | None = None,
    cu_seqlens: Tensor | None = None,
    max_seqlen: int | None = None,
    num_splits: int | None = None,
    block_table: Tensor | None = None,
    fox_log_f: Tensor | None = None,
    sinks: Tensor | None = None,
    window: int | None = None,
    fwd_tiles: Tiles | None = None,
    bwd_tiles: Tiles | None = None,
) -> Tensor:
    """softmax(scale q k^T + bias [causal]) v with at most one bias family (none: no bias).

    q: (B, H, Lq, D); k, v: (B, Hk, Lk, D) with Hk dividing H (grouped-query attention: query
    head h reads kv head h // (H / Hk); dk and dv summed over each group in the kernel);
    returns (B, H, Lq, D) in q's dtype.
    alibi_slopes (H,): bias -m_h |j - i|. t5_table (num_buckets, H): bias t5_table[bucket, h].
    shaw_bias (H, 2K + 1): bias shaw_bias[h, clip(j - i, -K, K) + K].
    shaw_k (2K + 1, D) and optional shaw_v (2K + 1, D), shared by all heads (Shaw et al.):
      logits scale q_i . (k_j + shaw_k[clip(j - i) + K]), output sum_j a_ij (v_j + shaw_v[...]).
    fox_log_f (B, H, Lk): the keys' log forget gates (FoX, Lin et al. 2025; log sigmoid of a
      per-head projection): bias D_p - D_j for key j <= p, p the query's position, D the
      cumulative sum over positions; causal only. Gradients reach the gates.
    sinks (H,), with any family: each head's sink logit joins every row's softmax and adds no
      value (gpt-oss); differentiable.
    window: a sliding window of W keys (causal only; transformers' convention): the query at
      position p sees keys p - W < j <= p; the key blocks wholly outside it are not read, so
      the cost grows with L x W.
    Query i sits at position Lk - Lq + i (Lq <= Lk: the last Lq tokens of a cache of Lk, as in
    decoding; Lq == Lk: self-attention): every bias takes its distance j - (Lk - Lq + i), and
    causal masks j > Lk - Lq + i.
    kv_lens (B,) int32/int64: row b's cache holds keys 0 .. kv_lens[b] - 1 (the rest of Lk is
      ignored), its queries at kv_lens[b] - Lq + i; never read on the host (values are
      clamped to [0, Lk]; a query that sees no key, kv_lens[b] < Lq with causal, outputs 0).
    cu_seqlens (N + 1,) int32/int64: N documents packed into one row (B = 1, Lq = Lk = T),
      document n at rows cu_seqlens[n] .. cu_seqlens[n + 1] - 1; attention, distances and the
      causal mask stay within a document (one host read of cu_seqlens, to check it and find the
      longest document; max_seqlen, at least the longest, skips both, as for CUDA graphs).
    num_splits: the forward splits the keys into this many parts, merged by their log-sum-exps
      (flash-decoding; not differentiable, not with cu_seqlens); None: split when the queries'
      programs would leave SMs idle and nothing needs a gradient (posenc_kernels._relbias_grid).
    block_table (B, max_blocks) int32: k and v are paged caches (num_blocks, block_size, Hk,
      D), contiguous (vLLM's layout; `posenc_kernels.apply_rope_with_cache` writes them), with
      kv_lens: row b's key j lies in cache block block_table[b, j // block_size] at slot
      j % block_size. Forward only (decoding), every family, grouped-query heads, the split.
      kv_lens past the blocks given, or a block used past num_blocks, fails on the device.
    Differentiable in q, k, v and every table (slopes, T5 and Shaw tables, shaw_k, shaw_v,
    FoX's gates, sinks).
    fwd_tiles, bwd_tiles: `Tiles` overriding the per-GPU defaults (for tuning); bwd_tiles are
      the dk/dv kernel's, the dq kernel runs their transpose (by default dq has tiles of its
      own where its GPU's table has them: docs/kernels.md). The interpreter ignores warps and
      stages.
    """
    tables = {
        "alibi_slopes": alibi_slopes,
        "t5_table": t5_table,
        "shaw_bias": shaw_bias,
        "shaw_k": shaw_k,
        "fox_log_f": fox_log_f,
    }
    given = [name for name, t in tables.items() if t is not None]
    if shaw_v is not None and shaw_k is None:
        raise ValueError("shaw_v needs shaw_k (Shaw's value term comes with the key term)")
    if len(given) > 1:
        raise ValueError(f"pass at most one of {', '.join(FAMILIES)}; got {given}")
    if not given:  # no bias: ALiBi's path with slopes of 0 (made once per head count and device)
        given, tables["alibi_slopes"] = ["alibi_slopes"], _no_slopes(q.shape[1], q.device)
    window = _check_window(window, causal)
    if block_table is None:
        _check_qkv(q, k, v)
        seq = sequences(q, k, causal, kv_lens, cu_seqlens, max_seqlen)
    else:
        seq = paged(q, k, v, block_table, kv_lens, cu_seqlens, max_seqlen)
    if q.device.type == "cpu" and not _interpreting():
        raise ValueError(
            "q is a CPU tensor: run on a GPU, or set TRITON_INTERPRET=1 before "
            "triton is imported to use Triton's interpreter"
        )
    table = tables[given[0]]
    keys = seq.rows_k if seq.page_size else k.shape[2]
    options = Options(
        causal=causal,
        scale=1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale),
        trains=isinstance(table, Tensor) and table.requires_grad and torch.is_grad_enabled(),
        tiles=dict(
            fwd_tiles=None if fwd_tiles is None else check_tiles("fwd_tiles", fwd_tiles),
            bwd_tiles=None if bwd_tiles is None else check_tiles("bwd_tiles", bwd_tiles),
        ),
        t5=(t5_bidirectional, t5_num_buckets, t5_max_distance),
        shaw_v=shaw_v,
        queries=query_positions(seq, q.shape[0], q.shape[2], keys, q.device)
        if fox_log_f is not None
        else None,
        keys=keys,
        window=window,
    )
    p = FAMILIES[given[0]](table, q, options)
    sinks = _check_sinks(sinks, q)
    tensors = (q, k, v, p.table, p.relk, p.ev, p.col, sinks)
    grad = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)
    if grad and seq.page_size:
        raise ValueError(
            "block_table: attention over paged caches is forward only (decoding); call it "
            "under torch.no_grad() or with tensors that do not require grad"
        )
    check_num_splits(num_splits, seq, grad)
    if not grad and (seq.page_size or seq.mode != PACKED and num_splits != 1):  # no autograd
        return _forward(q, k, v, p, sinks, seq, num_splits)[0]
    return RelativeBiasAttention.apply(q, k, v, *p[1:], sinks, p.spec, seq)


@functools.lru_cache(maxsize=16)
def _no_slopes(heads: int, device: torch.device) -> Tensor:
    return torch.zeros(heads, device=device)


def _check_window(window, causal: bool) -> int:
    """window: None or a positive int, with causal -> its width (0: none)."""
    if window is None:
        return 0
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise ValueError(f"window must be a positive int (keys a query sees), got {window!r}")
    if not causal:
        raise ValueError("window needs causal=True (a query sees the window's keys up to itself)")
    return window


def _check_sinks(sinks, q: Tensor) -> Tensor | None:
    """sinks (H,) floating point on q's device -> float32 (autograd keeps the caller's)."""
    if sinks is None:
        return None
    heads = q.shape[1]
    if not isinstance(sinks, Tensor) or tuple(sinks.shape) != (heads,):
        raise ValueError(f"sinks must be (H={heads},), got {getattr(sinks, 'shape', sinks)}")
    if not sinks.is_floating_point() or sinks.device != q.device:
        raise ValueError(f"sinks must be floating point on {q.device}, got {sinks.dtype}")
    return sinks.float()
