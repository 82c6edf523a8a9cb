"""Attention with a relative position bias computed inside the tile: ALiBi, T5 buckets, Shaw.

softmax(scale q k^T + bias(j - i)) v by online softmax over key blocks (flash-attention style),
forward and backward. The bias is computed from r = j - i per tile, so no (L x L) tensor is ever
in memory: O(B H L D), plus O(B H L K) for Shaw's key and value terms.
File order: tile helpers -> forward kernel -> backward kernels -> launchers -> autograd Function
-> public `relative_attention`.

Layout: q (B, H, Lq, D), k and v (B, H, Lk, D), any strides; out like q. Scores, softmax
statistics and accumulators are float32. Dot operands: under Triton's interpreter q, k, v and p
are upcast to float32 (Triton 3.9's interpreter computes bfloat16 tl.dot wrongly); on a GPU they
stay in the input dtype (tensor cores) with float32 accumulation, and float32 inputs use IEEE
dots, not TF32.

Bucketed reductions (Shaw's value term in the forward; the T5 / Shaw table gradients and Shaw's
key-term gradient in the backward) add up a tile per relative bucket. A tile spans a contiguous
range of buckets, usually one (every tile beyond Shaw's clip distance, or far tiles in T5's last
log bucket), so the tile loop runs over that range only: a one-bucket tile costs one pass. The
table gradients are reduced per program into per-bucket partial sums, summed on the host: no
atomics, so they are deterministic.
"""

# No `from __future__ import annotations`: Triton reads the constexpr annotations.
import math
import os

import torch
import triton
import triton.language as tl
from torch import Tensor

ALIBI, T5, SHAW, SHAW_KV = 0, 1, 2, 3  # SHAW_KV: Shaw's key (and value) terms


@triton.jit
def _bucket(rel, BIAS: tl.constexpr, T5_BIDIRECTIONAL: tl.constexpr, T5_BUCKETS: tl.constexpr,
            T5_MAX_DISTANCE: tl.constexpr, SHAW_K: tl.constexpr):  # fmt: skip
    """The table index of relative positions rel = j - i: T5's bucket, or Shaw's clip + K."""
    if BIAS == 1:
        n = -rel
        if T5_BIDIRECTIONAL:
            half: tl.constexpr = T5_BUCKETS // 2
            bucket = tl.where(n < 0, half, 0)
            n = tl.abs(n)
        else:
            half: tl.constexpr = T5_BUCKETS
            bucket = tl.zeros_like(n)
            n = tl.maximum(n, 0)
        exact: tl.constexpr = half // 2
        nf = tl.maximum(n, 1).to(tl.float32)
        scaled = tl.log(nf / exact) / tl.log(T5_MAX_DISTANCE / exact) * (half - exact)
        large = tl.minimum(exact + scaled.to(tl.int32), half - 1)
        return bucket + tl.where(n < exact, n, large)
    else:
        return tl.minimum(tl.maximum(rel, -SHAW_K), SHAW_K) + SHAW_K


@triton.jit
def _dot(a, b, IEEE: tl.constexpr):
    if IEEE:
        return tl.dot(a, b, input_precision="ieee")
    else:
        return tl.dot(a, b)


@triton.jit
def _scores(q, k, scale, offs_m, offs_n, mask_m, mask_n, h, slopes_ptr, table_ptr, stride_tb,
            stride_th, relk_rows, stride_rr, BIAS: tl.constexpr, CAUSAL: tl.constexpr,
            T5_BIDIRECTIONAL: tl.constexpr, T5_BUCKETS: tl.constexpr,
            T5_MAX_DISTANCE: tl.constexpr, SHAW_K: tl.constexpr, IEEE: tl.constexpr):  # fmt: skip
    """Logits of a (BLOCK_M, BLOCK_N) tile: scale q k^T + bias, -inf where masked.

    table is T5's (num_buckets, H) or Shaw's (H, 2K + 1), addressed as
    table[idx * stride_tb + h * stride_th]; relk_rows point at this block's rows of
    scale * Q E_K^T. Returns the logits, r = j - i, the table index and the kept mask."""
    s = _dot(q, tl.trans(k), IEEE) * scale
    rel = offs_n[None, :] - offs_m[:, None]
    idx = _bucket(rel, BIAS, T5_BIDIRECTIONAL, T5_BUCKETS, T5_MAX_DISTANCE, SHAW_K)
    keep = mask_m[:, None] & mask_n[None, :]
    if CAUSAL:
        keep = keep & (rel <= 0)
    if BIAS == 0:  # ALiBi: -m_h |j - i|
        s += -tl.load(slopes_ptr + h) * tl.abs(rel).to(tl.float32)
    elif BIAS == 3:  # Shaw's key term, gathered from scale * Q E_K^T
        s += tl.load(relk_rows + idx * stride_rr, mask=keep, other=0.0)
    else:
        s += tl.load(table_ptr + idx * stride_tb + h * stride_th).to(tl.float32)
    return tl.where(keep, s, float("-inf")), rel, idx, keep


@triton.jit
def _bucket_sums(acc, x, idx, keep, NB: tl.constexpr):
    """acc (BLOCK_M, NB) += the row sums of x (BLOCK_M, BLOCK_N) per bucket idx, looping over
    the tile's bucket range only (one pass for a one-bucket tile)."""
    lo = tl.min(tl.min(tl.where(keep, idx, NB), 1), 0)
    hi = tl.max(tl.max(tl.where(keep, idx, -1), 1), 0)
    cols = tl.arange(0, NB)[None, :]
    for r in range(lo, hi + 1):
        part = tl.sum(tl.where(keep & (idx == r), x, 0.0), 1)
        acc += tl.where(cols == r, part[:, None], 0.0)
    return acc


@triton.jit
def _load_block(ptr, offs, mask_rows, stride_row, offs_d, mask_d, stride_d, UPCAST: tl.constexpr):
    """A (rows, BLOCK_D) block of q, k, v or do, upcast to float32 under the interpreter."""
    x = tl.load(ptr + offs[:, None] * stride_row + offs_d[None, :] * stride_d,
                mask=mask_rows[:, None] & mask_d[None, :], other=0.0)  # fmt: skip
    if UPCAST:
        x = x.to(tl.float32)
    return x


@triton.jit
def _tile_grads(q, k, v, do, lse, delta, scale, offs_m, offs_n, mask_m, mask_n, h, slopes_ptr,
                table_ptr, stride_tb, stride_th, relk_rows, g_rows, stride_rr, BIAS: tl.constexpr,
                CAUSAL: tl.constexpr, T5_BIDIRECTIONAL: tl.constexpr, T5_BUCKETS: tl.constexpr,
                T5_MAX_DISTANCE: tl.constexpr, SHAW_K: tl.constexpr, HAS_VALUE: tl.constexpr,
                IEEE: tl.constexpr):  # fmt: skip
    """The backward of one tile: p = exp(s - lse) from the saved row log-sum-exp, dp = do v^T
    (plus, with Shaw's value term, g = do E_V^T gathered at the bucket), ds = p (dp - delta)
    with delta = rowsum(do * out). Returns p, ds, r = j - i, the table index, the kept mask."""
    s, rel, idx, keep = _scores(q, k, scale, offs_m, offs_n, mask_m, mask_n, h, slopes_ptr,
                                table_ptr, stride_tb, stride_th, relk_rows, stride_rr, BIAS,
                                CAUSAL, T5_BIDIRECTIONAL, T5_BUCKETS, T5_MAX_DISTANCE, SHAW_K,
                                IEEE)  # fmt: skip
    p = tl.exp(s - lse[:, None])  # 0 where masked (s = -inf)
    dp = _dot(do, tl.trans(v), IEEE)
    if HAS_VALUE:
        dp += tl.load(g_rows + idx * stride_rr, mask=keep, other=0.0)
    return p, p * (dp - delta[:, None]), rel, idx, keep


@triton.jit
def _relbias_fwd_kernel(
    q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, slopes_ptr, table_ptr, relk_ptr, ev_ptr, pn_ptr,
    stride_qb, stride_qh, stride_qm, stride_qd,
    stride_kb, stride_kh, stride_kn, stride_kd,
    stride_vb, stride_vh, stride_vn, stride_vd,
    stride_ob, stride_oh, stride_om, stride_od,
    stride_tb, stride_th, stride_rb, stride_rh, stride_rm, stride_rr, stride_evr, stride_evd,
    H, LQ, LK, D, NR, scale,
    BIAS: tl.constexpr, CAUSAL: tl.constexpr, T5_BIDIRECTIONAL: tl.constexpr,
    T5_BUCKETS: tl.constexpr, T5_MAX_DISTANCE: tl.constexpr, SHAW_K: tl.constexpr,
    HAS_VALUE: tl.constexpr, NB: tl.constexpr, UPCAST: tl.constexpr, IEEE: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
):  # fmt: skip
    """One program per (query block, b * h): reads its q block once, streams k and v blocks.
    Writes out, the row log-sum-exp (B * H, LQ) for the backward, and with Shaw's value term
    the normalized per-bucket probability sums pn (B * H, LQ, NR), also for the backward.

    SHAW_KV: the key term is gathered from relk = scale * Q E_K^T, (B, H, LQ, NR); the value
    term keeps per-row sums of the (unnormalized) probabilities per relative bucket,
    (BLOCK_M, NB), rescaled like the output, and adds sums @ E_V at the end.
    """
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1).to(tl.int64)
    b, h = pid_bh // H, pid_bh % H
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    mask_m, mask_d = offs_m < LQ, offs_d < D
    q = _load_block(q_ptr + b * stride_qb + h * stride_qh, offs_m, mask_m, stride_qm, offs_d,
                    mask_d, stride_qd, UPCAST)  # fmt: skip
    relk_rows = relk_ptr + b * stride_rb + h * stride_rh + offs_m[:, None] * stride_rm
    m_i = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    l_i = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, BLOCK_D), tl.float32)
    bucket_sums = tl.zeros((BLOCK_M, NB), tl.float32)
    end = LK
    if CAUSAL:  # key blocks entirely beyond the diagonal contribute nothing
        end = tl.minimum(LK, (pid_m + 1) * BLOCK_M)
    for start_n in range(0, end, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        mask_n = offs_n < LK
        k = _load_block(k_ptr + b * stride_kb + h * stride_kh, offs_n, mask_n, stride_kn,
                        offs_d, mask_d, stride_kd, UPCAST)  # fmt: skip
        v = _load_block(v_ptr + b * stride_vb + h * stride_vh, offs_n, mask_n, stride_vn,
                        offs_d, mask_d, stride_vd, UPCAST)  # fmt: skip
        s, rel, idx, keep = _scores(q, k, scale, offs_m, offs_n, mask_m, mask_n, h, slopes_ptr,
                                    table_ptr, stride_tb, stride_th, relk_rows, stride_rr, BIAS,
                                    CAUSAL, T5_BIDIRECTIONAL, T5_BUCKETS, T5_MAX_DISTANCE,
                                    SHAW_K, IEEE)  # fmt: skip
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # rows with nothing yet
        p = tl.exp(s - m_safe[:, None])
        alpha = tl.exp(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + _dot(p.to(v.dtype), v, IEEE)
        if HAS_VALUE:
            bucket_sums = _bucket_sums(bucket_sums * alpha[:, None], p, idx, keep, NB)
        m_i = m_new
    l_safe = tl.where(l_i == 0.0, 1.0, l_i)  # rows past LQ
    if HAS_VALUE:
        offs_r = tl.arange(0, NB)
        ev = tl.load(ev_ptr + offs_r[:, None] * stride_evr + offs_d[None, :] * stride_evd,
                     mask=(offs_r[:, None] < NR) & mask_d[None, :], other=0.0)  # fmt: skip
        pn = bucket_sums / l_safe[:, None]
        acc += _dot(bucket_sums, ev.to(tl.float32), True)
        tl.store(pn_ptr + (pid_bh * LQ + offs_m[:, None]) * NR + offs_r[None, :], pn,
                 mask=mask_m[:, None] & (offs_r[None, :] < NR))  # fmt: skip
    out = acc / l_safe[:, None]
    tl.store(o_ptr + b * stride_ob + h * stride_oh + offs_m[:, None] * stride_om
             + offs_d[None, :] * stride_od, out.to(o_ptr.dtype.element_ty),
             mask=mask_m[:, None] & mask_d[None, :])  # fmt: skip
    tl.store(lse_ptr + pid_bh * LQ + offs_m, m_i + tl.log(l_safe), mask=mask_m)


@triton.jit
def _relbias_bwd_dkdv_kernel(
    q_ptr, k_ptr, v_ptr, do_ptr, dk_ptr, dv_ptr, lse_ptr, delta_ptr, slopes_ptr, table_ptr,
    relk_ptr, g_ptr,
    stride_qb, stride_qh, stride_qm, stride_qd,
    stride_kb, stride_kh, stride_kn, stride_kd,
    stride_vb, stride_vh, stride_vn, stride_vd,
    stride_db, stride_dh, stride_dm, stride_dd,
    stride_xb, stride_xh, stride_xm, stride_xd,
    stride_tb, stride_th, stride_rb, stride_rh, stride_rm, stride_rr,
    H, LQ, LK, D, scale,
    BIAS: tl.constexpr, CAUSAL: tl.constexpr, T5_BIDIRECTIONAL: tl.constexpr,
    T5_BUCKETS: tl.constexpr, T5_MAX_DISTANCE: tl.constexpr, SHAW_K: tl.constexpr,
    HAS_VALUE: tl.constexpr, UPCAST: tl.constexpr, IEEE: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
):  # fmt: skip
    """One program per (key block, b * h): dk and dv of its keys, streaming the query blocks:
    dv = p^T do, dk = scale ds^T q (p and ds from _tile_grads). dk and dv are float32
    (B, H, LK, D) buffers with strides stride_x*. relk and g share one layout (B, H, LQ, NR),
    strides stride_r*.
    """
    pid_n = tl.program_id(0)
    pid_bh = tl.program_id(1).to(tl.int64)
    b, h = pid_bh // H, pid_bh % H
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    mask_n, mask_d = offs_n < LK, offs_d < D
    k = _load_block(k_ptr + b * stride_kb + h * stride_kh, offs_n, mask_n, stride_kn, offs_d,
                    mask_d, stride_kd, UPCAST)  # fmt: skip
    v = _load_block(v_ptr + b * stride_vb + h * stride_vh, offs_n, mask_n, stride_vn, offs_d,
                    mask_d, stride_vd, UPCAST)  # fmt: skip
    dk = tl.zeros((BLOCK_N, BLOCK_D), tl.float32)
    dv = tl.zeros((BLOCK_N, BLOCK_D), tl.float32)
    start = 0
    if CAUSAL:  # query rows i < j see none of these keys
        start = (pid_n * BLOCK_N) // BLOCK_M * BLOCK_M
    for start_m in range(start, LQ, BLOCK_M):
        offs_m = start_m + tl.arange(0, BLOCK_M)
        mask_m = offs_m < LQ
        q = _load_block(q_ptr + b * stride_qb + h * stride_qh, offs_m, mask_m, stride_qm, offs_d,
                        mask_d, stride_qd, UPCAST)  # fmt: skip
        do = _load_block(do_ptr + b * stride_db + h * stride_dh, offs_m, mask_m, stride_dm,
                         offs_d, mask_d, stride_dd, UPCAST)  # fmt: skip
        rows = b * stride_rb + h * stride_rh + offs_m[:, None] * stride_rm
        lse = tl.load(lse_ptr + pid_bh * LQ + offs_m, mask=mask_m, other=0.0)
        delta = tl.load(delta_ptr + pid_bh * LQ + offs_m, mask=mask_m, other=0.0)
        p, ds, rel, idx, keep = _tile_grads(q, k, v, do, lse, delta, scale, offs_m, offs_n,
                                            mask_m, mask_n, h, slopes_ptr, table_ptr, stride_tb,
                                            stride_th, relk_ptr + rows, g_ptr + rows, stride_rr,
                                            BIAS, CAUSAL, T5_BIDIRECTIONAL, T5_BUCKETS,
                                            T5_MAX_DISTANCE, SHAW_K, HAS_VALUE, IEEE)  # fmt: skip
        dv += _dot(tl.trans(p.to(do.dtype)), do, IEEE)
        dk += _dot(tl.trans(ds.to(q.dtype)), q, IEEE)
    out = b * stride_xb + h * stride_xh + offs_n[:, None] * stride_xm + offs_d[None, :] * stride_xd
    mask = mask_n[:, None] & mask_d[None, :]
    tl.store(dk_ptr + out, dk * scale, mask=mask)
    tl.store(dv_ptr + out, dv, mask=mask)


@triton.jit
def _relbias_bwd_dq_kernel(
    q_ptr, k_ptr, v_ptr, do_ptr, dq_ptr, lse_ptr, delta_ptr, slopes_ptr, table_ptr,
    relk_ptr, g_ptr, drel_ptr, part_ptr,
    stride_qb, stride_qh, stride_qm, stride_qd,
    stride_kb, stride_kh, stride_kn, stride_kd,
    stride_vb, stride_vh, stride_vn, stride_vd,
    stride_db, stride_dh, stride_dm, stride_dd,
    stride_xb, stride_xh, stride_xm, stride_xd,
    stride_tb, stride_th, stride_rb, stride_rh, stride_rm, stride_rr,
    H, LQ, LK, D, NR, scale,
    BIAS: tl.constexpr, CAUSAL: tl.constexpr, T5_BIDIRECTIONAL: tl.constexpr,
    T5_BUCKETS: tl.constexpr, T5_MAX_DISTANCE: tl.constexpr, SHAW_K: tl.constexpr,
    HAS_VALUE: tl.constexpr, NB: tl.constexpr, UPCAST: tl.constexpr, IEEE: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
):  # fmt: skip
    """One program per (query block, b * h): dq of its rows, streaming the key blocks, and the
    bias gradient: the sum of ds over the tiles
      - ALiBi: -sum ds |j - i| into part (B * H, n_blocks, NB) at column 0 (slope gradient);
      - T5 / Shaw scalar: sums of ds per table index into part (B * H, n_blocks, NB);
      - SHAW_KV: per-row sums of ds per bucket into drel (B * H, LQ, NR): the gradient of
        relk = scale * Q E_K^T (the host turns it into dq and dE_K).
    dq is a float32 (B, H, LQ, D) buffer with strides stride_x*.
    """
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1).to(tl.int64)
    b, h = pid_bh // H, pid_bh % H
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    mask_m, mask_d = offs_m < LQ, offs_d < D
    q = _load_block(q_ptr + b * stride_qb + h * stride_qh, offs_m, mask_m, stride_qm, offs_d,
                    mask_d, stride_qd, UPCAST)  # fmt: skip
    do = _load_block(do_ptr + b * stride_db + h * stride_dh, offs_m, mask_m, stride_dm, offs_d,
                     mask_d, stride_dd, UPCAST)  # fmt: skip
    rows = b * stride_rb + h * stride_rh + offs_m[:, None] * stride_rm
    lse = tl.load(lse_ptr + pid_bh * LQ + offs_m, mask=mask_m, other=0.0)
    delta = tl.load(delta_ptr + pid_bh * LQ + offs_m, mask=mask_m, other=0.0)
    dq = tl.zeros((BLOCK_M, BLOCK_D), tl.float32)
    sums = tl.zeros((BLOCK_M, NB), tl.float32)  # per row and bucket (column 0: ALiBi's sum)
    end = LK
    if CAUSAL:
        end = tl.minimum(LK, (pid_m + 1) * BLOCK_M)
    for start_n in range(0, end, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        mask_n = offs_n < LK
        k = _load_block(k_ptr + b * stride_kb + h * stride_kh, offs_n, mask_n, stride_kn,
                        offs_d, mask_d, stride_kd, UPCAST)  # fmt: skip
        v = _load_block(v_ptr + b * stride_vb + h * stride_vh, offs_n, mask_n, stride_vn,
                        offs_d, mask_d, stride_vd, UPCAST)  # fmt: skip
        p, ds, rel, idx, keep = _tile_grads(q, k, v, do, lse, delta, scale, offs_m, offs_n,
                                            mask_m, mask_n, h, slopes_ptr, table_ptr, stride_tb,
                                            stride_th, relk_ptr + rows, g_ptr + rows, stride_rr,
                                            BIAS, CAUSAL, T5_BIDIRECTIONAL, T5_BUCKETS,
                                            T5_MAX_DISTANCE, SHAW_K, HAS_VALUE, IEEE)  # fmt: skip
        dq += _dot(ds.to(k.dtype), k, IEEE)
        if BIAS == 0:
            alibi = tl.sum(ds * -tl.abs(rel).to(tl.float32), 1)
            sums += tl.where(tl.arange(0, NB)[None, :] == 0, alibi[:, None], 0.0)
        else:
            sums = _bucket_sums(sums, ds, idx, keep, NB)
    out = b * stride_xb + h * stride_xh + offs_m[:, None] * stride_xm + offs_d[None, :] * stride_xd
    tl.store(dq_ptr + out, dq * scale, mask=mask_m[:, None] & mask_d[None, :])
    offs_r = tl.arange(0, NB)
    if BIAS == 3:
        tl.store(drel_ptr + (pid_bh * LQ + offs_m[:, None]) * NR + offs_r[None, :], sums,
                 mask=mask_m[:, None] & (offs_r[None, :] < NR))  # fmt: skip
    else:
        tl.store(part_ptr + (pid_bh * tl.num_programs(0) + pid_m) * NB + offs_r, tl.sum(sums, 0))


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


class _Spec:
    """The compile-time settings of one call (the kernels' constexprs), plus its scale."""

    def __init__(self, bias, causal, scale, n_rel, has_value, t5_bidirectional=True,
                 t5_buckets=32, t5_max_distance=128):  # fmt: skip
        self.bias, self.causal, self.scale, self.n_rel = bias, causal, scale, n_rel
        self.has_value = has_value
        self.nb = max(16, triton.next_power_of_2(n_rel))
        self.constexprs = dict(
            BIAS=bias, CAUSAL=causal, T5_BIDIRECTIONAL=t5_bidirectional, T5_BUCKETS=t5_buckets,
            T5_MAX_DISTANCE=t5_max_distance, SHAW_K=(n_rel - 1) // 2, HAS_VALUE=has_value,
        )  # fmt: skip

    def blocks(self, d: int, backward: bool) -> tuple[int, int]:
        """(BLOCK_M, BLOCK_N). The interpreter runs fastest with small tiles. On a GPU (untuned
        yet): per-row bucket sums are (BLOCK_M, NB) registers, so a wide Shaw table shrinks
        BLOCK_M; the backward holds two (BLOCK, D) accumulators, so D > 64 halves the tiles."""
        if _interpreting():
            return 16, 16
        block = 32 if backward and d > 64 else 64
        if self.bias == SHAW_KV:
            return max(16, min(block, 4096 // self.nb)), block
        return block, block


def _table_strides(spec: _Spec, table: Tensor | None) -> tuple[int, int]:
    """(stride per table index, stride per head): T5's table is (num_buckets, H), Shaw's
    (H, 2K + 1); ALiBi's slopes and Shaw's key term read no table."""
    if spec.bias == T5:
        return table.stride(0), table.stride(1)
    if spec.bias == SHAW:
        return table.stride(1), table.stride(0)
    return 0, 0


def _common(spec: _Spec, q: Tensor, table: Tensor | None, relk: Tensor | None) -> dict:
    dummy = q  # the pointer of a family this call does not use: never read (constexpr branch)
    return dict(
        slopes=table if spec.bias == ALIBI else dummy,
        table=table if spec.bias in (T5, SHAW) else dummy,
        relk=relk if relk is not None else dummy,
        rel_strides=relk.stride() if relk is not None else (0, 0, 0, 0),
    )


def _forward(q, k, v, table, relk, ev, spec: _Spec):
    """-> out (like q), lse (B * H, Lq) float32, pn (B * H, Lq, NR) float32 or None."""
    bsz, heads, lq, d = q.shape
    out = torch.empty_like(q)
    lse = torch.empty(bsz * heads, lq, device=q.device, dtype=torch.float32)
    pn = torch.empty(bsz * heads, lq, spec.n_rel, device=q.device) if spec.has_value else None
    c = _common(spec, q, table, relk)
    block_m, block_n = spec.blocks(d, backward=False)
    ev_ = ev if ev is not None else q
    _relbias_fwd_kernel[(triton.cdiv(lq, block_m), bsz * heads)](
        q, k, v, out, lse, c["slopes"], c["table"], c["relk"], ev_,
        pn if pn is not None else q,
        *q.stride(), *k.stride(), *v.stride(), *out.stride(),
        *_table_strides(spec, table), *c["rel_strides"], ev_.stride(0), ev_.stride(-1),
        heads, lq, k.shape[2], d, spec.n_rel, spec.scale,
        **spec.constexprs, NB=spec.nb, UPCAST=_interpreting(), IEEE=q.dtype == torch.float32,
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_D=max(16, triton.next_power_of_2(d)),
    )  # fmt: skip
    return out, lse, pn


def _backward(do, q, k, v, out, lse, table, relk, ev, pn, spec: _Spec):
    """-> dq, dk, dv (float32), the table's gradient, d relk, d E_V (None where unused)."""
    bsz, heads, lq, d = q.shape
    lk = k.shape[2]
    delta = (do.float() * out.float()).sum(-1).reshape(bsz * heads, lq)
    g = None
    if spec.has_value:  # dp_ij gains do_i . E_V[bucket(i, j)]: gathered from do E_V^T
        g = torch.matmul(do.float(), ev.t()).contiguous()  # (B, H, Lq, NR), relk's layout
    dq = torch.empty(bsz, heads, lq, d, device=q.device)
    dk = torch.empty(bsz, heads, lk, d, device=q.device)
    dv = torch.empty_like(dk)
    c = _common(spec, q, table, relk)
    block_m, block_n = spec.blocks(d, backward=True)
    n_mblocks = triton.cdiv(lq, block_m)
    drel = (
        torch.empty(bsz * heads, lq, spec.n_rel, device=q.device) if spec.bias == SHAW_KV else None
    )
    part = None if spec.bias == SHAW_KV else torch.empty(bsz * heads, n_mblocks, spec.nb,
                                                          device=q.device)  # fmt: skip
    shared = dict(
        **spec.constexprs,
        UPCAST=_interpreting(),
        IEEE=q.dtype == torch.float32,
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        BLOCK_D=max(16, triton.next_power_of_2(d)),
    )
    strides = (*q.stride(), *k.stride(), *v.stride(), *do.stride())
    _relbias_bwd_dkdv_kernel[(triton.cdiv(lk, block_n), bsz * heads)](
        q, k, v, do, dk, dv, lse, delta, c["slopes"], c["table"], c["relk"],
        g if g is not None else q,
        *strides, *dk.stride(), *_table_strides(spec, table), *c["rel_strides"],
        heads, lq, lk, d, spec.scale, **shared,
    )  # fmt: skip
    _relbias_bwd_dq_kernel[(n_mblocks, bsz * heads)](
        q, k, v, do, dq, lse, delta, c["slopes"], c["table"], c["relk"],
        g if g is not None else q, drel if drel is not None else q,
        part if part is not None else q,
        *strides, *dq.stride(), *_table_strides(spec, table), *c["rel_strides"],
        heads, lq, lk, d, spec.n_rel, spec.scale, NB=spec.nb, **shared,
    )  # fmt: skip
    dtable = None
    if part is not None:
        per_head = part.view(bsz, heads, n_mblocks, spec.nb).sum((0, 2))  # (H, NB)
        dtable = {ALIBI: per_head[:, 0], T5: per_head[:, : spec.n_rel].t(),
                  SHAW: per_head[:, : spec.n_rel]}[spec.bias]  # fmt: skip
    dev = None
    if spec.has_value:  # out_i gains sum_r pn_ir E_V[r]
        dev = torch.einsum("nlr,nld->rd", pn, do.float().reshape(bsz * heads, lq, d))
    drel = drel.view(bsz, heads, lq, spec.n_rel) if drel is not None else None
    return dq, dk, dv, dtable, drel, dev


class RelativeBiasAttention(torch.autograd.Function):
    """Autograd around the kernels: (q, k, v, table, relk, ev, spec) -> out.

    table: float32 ALiBi slopes (H,), T5 table (num_buckets, H) or Shaw table (H, 2K + 1);
    relk: scale * Q E_K^T (B, H, Lq, 2K + 1) float32 for Shaw's key term, computed by the
    caller with torch so that autograd carries d relk on to q and E_K; ev: float32 E_V."""

    @staticmethod
    def forward(ctx, q, k, v, table, relk, ev, spec):
        out, lse, pn = _forward(q, k, v, table, relk, ev, spec)
        ctx.save_for_backward(q, k, v, out, lse, table, relk, ev, pn)
        ctx.spec = spec
        return out

    @staticmethod
    def backward(ctx, do):
        q, k, v, out, lse, table, relk, ev, pn = ctx.saved_tensors
        dq, dk, dv, dtable, drel, dev = _backward(do, q, k, v, out, lse, table, relk, ev, pn,
                                                  ctx.spec)  # fmt: skip
        return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), dtable, drel, dev, None


def relative_attention(
    q: Tensor, k: Tensor, v: Tensor, *, alibi_slopes: Tensor | None = None,
    t5_table: Tensor | None = None, t5_num_buckets: int = 32, t5_max_distance: int = 128,
    t5_bidirectional: bool = True, shaw_bias: Tensor | None = None,
    shaw_k: Tensor | None = None, shaw_v: Tensor | None = None, causal: bool = False,
    scale: float | None = None,
) -> Tensor:  # fmt: skip
    """softmax(scale q k^T + bias(j - i) [causal]) v with exactly one bias family.

    q: (B, H, Lq, D); k, v: (B, H, Lk, D); returns (B, H, Lq, D) in q's dtype.
    alibi_slopes (H,): bias -m_h |j - i|. t5_table (num_buckets, H): bias t5_table[bucket, h].
    shaw_bias (H, 2K + 1): bias shaw_bias[h, clip(j - i, -K, K) + K].
    shaw_k (2K + 1, D) and optional shaw_v (2K + 1, D), shared by all heads (Shaw et al.):
      logits scale q_i . (k_j + shaw_k[clip(j - i) + K]), output sum_j a_ij (v_j + shaw_v[...]).
    causal masks j > i (Lq == Lk).
    Differentiable in q, k, v and every table (slopes, T5 and Shaw tables, shaw_k, shaw_v).
    """
    families = (("alibi_slopes", alibi_slopes), ("t5_table", t5_table),
                ("shaw_bias", shaw_bias), ("shaw_k", shaw_k))  # fmt: skip
    given = [name for name, t in families if t is not None]
    if shaw_v is not None and shaw_k is None:
        raise ValueError("shaw_v needs shaw_k (Shaw's value term comes with the key term)")
    if len(given) != 1:
        raise ValueError(
            f"pass exactly one of alibi_slopes, t5_table, shaw_bias, shaw_k; got {given}"
        )
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, Tensor) or t.dim() != 4:
            raise ValueError(f"{name} must be a 4-D tensor (B, H, L, D)")
        if t.dtype not in (torch.float32, torch.float16, torch.bfloat16):
            raise TypeError(f"{name} must be float32, float16 or bfloat16, got {t.dtype}")
        if t.dtype != q.dtype or t.device != q.device:
            raise ValueError(f"{name} is {t.dtype} on {t.device}; q is {q.dtype} on {q.device}")
    bsz, heads, lq, d = q.shape
    if k.shape[:2] != (bsz, heads) or k.shape[3] != d or v.shape != k.shape:
        raise ValueError(f"k and v must be (B={bsz}, H={heads}, Lk, D={d}) and alike, "
                         f"got {tuple(k.shape)} and {tuple(v.shape)}")  # fmt: skip
    if causal and lq != k.shape[2]:
        raise ValueError("causal needs Lq == Lk")
    if q.device.type == "cpu" and not _interpreting():
        raise ValueError("q is a CPU tensor: run on a GPU, or set TRITON_INTERPRET=1 before "
                         "triton is imported to use Triton's interpreter")  # fmt: skip
    table = {"alibi_slopes": alibi_slopes, "t5_table": t5_table, "shaw_bias": shaw_bias,
             "shaw_k": shaw_k}[given[0]]  # fmt: skip
    if table.device != q.device:
        raise ValueError(f"{given[0]} is on {table.device} but q is on {q.device}")
    expected = {"alibi_slopes": (heads,), "t5_table": (t5_num_buckets, heads)}.get(given[0])
    if given[0] == "shaw_bias":
        if table.dim() != 2 or table.shape[0] != heads or table.shape[1] % 2 == 0:
            raise ValueError(f"shaw_bias must be (H={heads}, 2K+1), got {tuple(table.shape)}")
    elif given[0] == "shaw_k":
        for name, t in (("shaw_k", shaw_k), ("shaw_v", shaw_v)):
            if t is not None and (t.dim() != 2 or t.shape[1] != d or t.shape[0] % 2 == 0
                                  or t.shape != shaw_k.shape):  # fmt: skip
                raise ValueError(f"{name} must be (2K+1, D={d}), got {tuple(t.shape)}")
            if t is not None and t.device != q.device:
                raise ValueError(f"{name} is on {t.device} but q is on {q.device}")
    elif tuple(table.shape) != expected:
        raise ValueError(f"{given[0]} must be {expected}, got {tuple(table.shape)}")
    family = {"alibi_slopes": ALIBI, "t5_table": T5, "shaw_bias": SHAW, "shaw_k": SHAW_KV}
    n_rel = {ALIBI: 1, T5: t5_num_buckets, SHAW: table.shape[-1], SHAW_KV: table.shape[0]}
    bias = family[given[0]]
    spec = _Spec(
        bias=bias, causal=causal, scale=1.0 / math.sqrt(d) if scale is None else float(scale),
        n_rel=n_rel[bias], has_value=shaw_v is not None, t5_bidirectional=t5_bidirectional,
        t5_buckets=t5_num_buckets, t5_max_distance=t5_max_distance,
    )  # fmt: skip
    relk = ev = None
    if spec.bias == SHAW_KV:  # the key term's (B, H, Lq, 2K + 1) table: O(L K), not O(L^2)
        relk = torch.matmul(q.float() * spec.scale, shaw_k.float().t())
        ev = shaw_v.float() if shaw_v is not None else None
        table = None
    else:
        table = table.float()
    return RelativeBiasAttention.apply(q, k, v, table, relk, ev, spec)
