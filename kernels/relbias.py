"""Attention with a relative position bias computed inside the tile: ALiBi, T5 buckets, Shaw.

softmax(scale q k^T + bias(j - i)) v by online softmax over key blocks (flash-attention style),
forward and backward. The bias is computed from r = j - i per tile, so no (L x L) tensor is ever
in memory: O(B H L D), plus O(B H L K) for Shaw's key and value terms.
File order: tile helpers -> forward kernel -> backward kernels -> launchers -> autograd Function
-> public `relative_attention`.

Layout: q (B, H, Lq, D), k and v (B, H, Lk, D), any strides; out like q. Scores, softmax
statistics and accumulators are float32. Dot operands stay in the input dtype (tensor cores on a
GPU) with float32 accumulation, and float32 inputs use IEEE dots, not TF32; only bfloat16 under
Triton's interpreter is upcast to float32 (Triton 3.9's interpreter computes bfloat16 tl.dot
wrongly).

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
from typing import NamedTuple

import torch
import triton
import triton.language as tl
from torch import Tensor
from triton.runtime.errors import OutOfResources

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
    """A (rows, BLOCK_D) block of q, k, v or do; UPCAST: to float32 (bfloat16, interpreter)."""
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


def _upcast(q: Tensor) -> bool:
    """Upcast dot operands to float32? Only bfloat16 under the interpreter (its bfloat16 tl.dot
    is wrong); float16 stays native there too, so the CPU tests run the GPU's dot path."""
    return _interpreting() and q.dtype == torch.bfloat16


class Tiles(NamedTuple):
    """Launch settings of one kernel: a (block_m, block_n) tile of (query rows, key columns),
    num_warps and num_stages (software-pipelining depth of the key/query stream)."""

    block_m: int
    block_n: int
    num_warps: int = 4
    num_stages: int = 2


# Defaults per GPU generation, (bytes per element, padded head dim) -> tiles: FlexAttention's
# defaults for the same loop (one query block streaming key blocks, bias added in the tile), from
# torch/_inductor/template_heuristics/triton.py (torch 2.13), not yet tuned for these kernels.
# Keyed by the head dim padded to 64 or 128 (our BLOCK_D), where FlexAttention keys by the exact
# head dim (and uses its generic 64 x 64 for D = 32, 80, 96).
# Backward tiles are the dk/dv kernel's (query block streamed, key block held); the dq kernel
# runs the transpose, as FlexAttention's backward pairs BLOCK_N1 = BLOCK_M2.
_FWD_TILES = {
    "sm90": {(2, 64): Tiles(128, 128, 4, 3), (2, 128): Tiles(128, 64, 8, 3),
             (4, 64): Tiles(128, 32, 4, 3), (4, 128): Tiles(32, 64, 4, 3)},
    "sm80": {(2, 64): Tiles(128, 64, 4, 3), (2, 128): Tiles(128, 64, 8, 3),
             (4, 64): Tiles(128, 32, 4, 3), (4, 128): Tiles(128, 32, 4, 3)},
}  # fmt: skip
_BWD_TILES = {"sm90": {(2, 64): Tiles(64, 128, 8, 3), (2, 128): Tiles(64, 128, 8, 3)},
              "sm80": {(2, 64): Tiles(64, 64, 4, 2), (2, 128): Tiles(64, 64, 4, 2)}}  # fmt: skip
_GENERIC = {False: Tiles(64, 64, 4, 3), True: Tiles(64, 64, 4, 2)}
_FLOAT32_BWD = Tiles(16, 16, 4, 1)  # FlexAttention's float32 backward on every GPU
_SAFE = Tiles(32, 32, 4, 1)  # when a GPU's shared memory cannot hold the default
_INTERPRETER = Tiles(16, 16)  # the interpreter runs fastest with small tiles


def _check_tiles(name: str, tiles) -> Tiles:
    """A user's tiles, validated: a clear error naming the argument and the field."""
    if not isinstance(tiles, tuple) or len(tiles) not in (2, 3, 4):
        raise TypeError(f"{name} must be kernels.relbias.Tiles(block_m, block_n, num_warps, "
                        f"num_stages), got {tiles!r}")  # fmt: skip
    tiles = Tiles(*tiles)
    for field in ("block_m", "block_n"):
        value = getattr(tiles, field)
        if not isinstance(value, int) or value < 16 or value > 256 or value & (value - 1):
            raise ValueError(f"{name}.{field} must be a power of two in [16, 256], got {value!r}")
    if not isinstance(tiles.num_warps, int) or tiles.num_warps not in (1, 2, 4, 8, 16):
        raise ValueError(f"{name}.num_warps must be 1, 2, 4, 8 or 16, got {tiles.num_warps!r}")
    if not isinstance(tiles.num_stages, int) or tiles.num_stages < 1:
        raise ValueError(f"{name}.num_stages must be an int >= 1, got {tiles.num_stages!r}")
    return tiles


class _Spec:
    """The compile-time settings of one call (the kernels' constexprs), its scale and tiles."""

    def __init__(self, bias, causal, scale, n_rel, has_value, t5_bidirectional=True,
                 t5_buckets=32, t5_max_distance=128, fwd_tiles=None, bwd_tiles=None):  # fmt: skip
        self.bias, self.causal, self.scale, self.n_rel = bias, causal, scale, n_rel
        self.has_value = has_value
        self.nb = max(16, triton.next_power_of_2(n_rel))
        self.constexprs = dict(
            BIAS=bias, CAUSAL=causal, T5_BIDIRECTIONAL=t5_bidirectional, T5_BUCKETS=t5_buckets,
            T5_MAX_DISTANCE=t5_max_distance, SHAW_K=(n_rel - 1) // 2, HAS_VALUE=has_value,
        )  # fmt: skip
        self.user_tiles = {False: fwd_tiles, True: bwd_tiles}

    def tiles(self, q: Tensor, backward: bool) -> tuple[Tiles, Tiles | None]:
        """(tiles, fallback): the user's tiles (no fallback), or the default for q's GPU with
        _SAFE as the fallback (block_m capped per kernel by row_tiles)."""
        if self.user_tiles[backward] is not None:
            return self.user_tiles[backward], None
        if _interpreting():
            return _INTERPRETER, None
        major, minor = torch.cuda.get_device_capability(q.device)
        arch = "sm90" if (major, minor) == (9, 0) else "sm80" if major >= 8 else None
        key = (q.element_size(), 64 if q.shape[-1] <= 64 else 128)
        if backward and key[0] == 4:
            return _FLOAT32_BWD, _SAFE
        table = (_BWD_TILES if backward else _FWD_TILES).get(arch, {})
        return table.get(key, _GENERIC[backward]), _SAFE

    def row_tiles(self, tiles: Tiles) -> Tiles:
        """tiles for a kernel that keeps (block_m, NB) float32 per-row bucket sums in registers
        (the dq kernel always, the forward with Shaw's value term): block_m <= 4096 / NB, so a
        wide table (Shaw with a large K) shrinks the tile instead of spilling."""
        return tiles._replace(block_m=max(16, min(tiles.block_m, 4096 // self.nb)))


def _run(launch, tiles: Tiles, fallback: Tiles | None, name: str):
    """launch(tiles), or launch(fallback) on a GPU whose shared memory cannot hold the default
    tiles. A user's tiles that do not fit raise an error naming the argument."""
    try:
        return launch(tiles)
    except OutOfResources as err:
        if fallback is None:
            raise ValueError(f"{name}={tiles} does not fit this GPU: {err}") from err
        return launch(fallback)


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
    ev_ = ev if ev is not None else q

    def launch(tiles: Tiles) -> None:
        t = spec.row_tiles(tiles) if spec.has_value else tiles
        _relbias_fwd_kernel[(triton.cdiv(lq, t.block_m), bsz * heads)](
            q, k, v, out, lse, c["slopes"], c["table"], c["relk"], ev_,
            pn if pn is not None else q,
            *q.stride(), *k.stride(), *v.stride(), *out.stride(),
            *_table_strides(spec, table), *c["rel_strides"], ev_.stride(0), ev_.stride(-1),
            heads, lq, k.shape[2], d, spec.n_rel, spec.scale,
            **spec.constexprs, NB=spec.nb, UPCAST=_upcast(q), IEEE=q.dtype == torch.float32,
            BLOCK_M=t.block_m, BLOCK_N=t.block_n, BLOCK_D=max(16, triton.next_power_of_2(d)),
            num_warps=t.num_warps, num_stages=t.num_stages,
        )  # fmt: skip

    _run(launch, *spec.tiles(q, backward=False), "fwd_tiles")
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
    drel = (
        torch.empty(bsz * heads, lq, spec.n_rel, device=q.device) if spec.bias == SHAW_KV else None
    )
    strides = (*q.stride(), *k.stride(), *v.stride(), *do.stride())
    block_d = max(16, triton.next_power_of_2(d))
    shared = dict(**spec.constexprs, UPCAST=_upcast(q), IEEE=q.dtype == torch.float32)

    def launch(tiles: Tiles) -> Tensor | None:
        """Both kernels; -> the dq kernel's per-program table-gradient partials (or None)."""
        _relbias_bwd_dkdv_kernel[(triton.cdiv(lk, tiles.block_n), bsz * heads)](
            q, k, v, do, dk, dv, lse, delta, c["slopes"], c["table"], c["relk"],
            g if g is not None else q,
            *strides, *dk.stride(), *_table_strides(spec, table), *c["rel_strides"],
            heads, lq, lk, d, spec.scale, **shared, BLOCK_M=tiles.block_m,
            BLOCK_N=tiles.block_n, BLOCK_D=block_d, num_warps=tiles.num_warps,
            num_stages=tiles.num_stages,
        )  # fmt: skip
        t = spec.row_tiles(tiles._replace(block_m=tiles.block_n, block_n=tiles.block_m))
        n_mblocks = triton.cdiv(lq, t.block_m)
        part = None if spec.bias == SHAW_KV else torch.empty(bsz * heads, n_mblocks, spec.nb,
                                                              device=q.device)  # fmt: skip
        _relbias_bwd_dq_kernel[(n_mblocks, bsz * heads)](
            q, k, v, do, dq, lse, delta, c["slopes"], c["table"], c["relk"],
            g if g is not None else q, drel if drel is not None else q,
            part if part is not None else q,
            *strides, *dq.stride(), *_table_strides(spec, table), *c["rel_strides"],
            heads, lq, lk, d, spec.n_rel, spec.scale, NB=spec.nb, **shared, BLOCK_M=t.block_m,
            BLOCK_N=t.block_n, BLOCK_D=block_d, num_warps=t.num_warps, num_stages=t.num_stages,
        )  # fmt: skip
        return part

    part = _run(launch, *spec.tiles(q, backward=True), "bwd_tiles")
    dtable = None
    if part is not None:
        per_head = part.view(bsz, heads, -1, spec.nb).sum((0, 2))  # (H, NB)
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
    scale: float | None = None, fwd_tiles: Tiles | None = None, bwd_tiles: Tiles | None = None,
) -> Tensor:  # fmt: skip
    """softmax(scale q k^T + bias(j - i) [causal]) v with exactly one bias family.

    q: (B, H, Lq, D); k, v: (B, H, Lk, D); returns (B, H, Lq, D) in q's dtype.
    alibi_slopes (H,): bias -m_h |j - i|. t5_table (num_buckets, H): bias t5_table[bucket, h].
    shaw_bias (H, 2K + 1): bias shaw_bias[h, clip(j - i, -K, K) + K].
    shaw_k (2K + 1, D) and optional shaw_v (2K + 1, D), shared by all heads (Shaw et al.):
      logits scale q_i . (k_j + shaw_k[clip(j - i) + K]), output sum_j a_ij (v_j + shaw_v[...]).
    causal masks j > i (Lq == Lk).
    Differentiable in q, k, v and every table (slopes, T5 and Shaw tables, shaw_k, shaw_v).
    fwd_tiles, bwd_tiles: `Tiles` overriding the per-GPU defaults (for tuning); bwd_tiles are
      the dk/dv kernel's, the dq kernel runs their transpose; block_m of the dq kernel (and of
      the forward with shaw_v) is capped at 4096 / NB, NB the table's entries rounded up to a
      power of two (>= 16). The interpreter ignores warps and stages.
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
        fwd_tiles=None if fwd_tiles is None else _check_tiles("fwd_tiles", fwd_tiles),
        bwd_tiles=None if bwd_tiles is None else _check_tiles("bwd_tiles", bwd_tiles),
    )  # fmt: skip
    relk = ev = None
    if spec.bias == SHAW_KV:  # the key term's (B, H, Lq, 2K + 1) table: O(L K), not O(L^2)
        relk = torch.matmul(q.float() * spec.scale, shaw_k.float().t())
        ev = shaw_v.float() if shaw_v is not None else None
        table = None
    else:
        table = table.float()
    return RelativeBiasAttention.apply(q, k, v, table, relk, ev, spec)
