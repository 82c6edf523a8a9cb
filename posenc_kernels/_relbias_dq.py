"""The backward's query-side kernel of posenc_kernels.relbias (launched by
posenc_kernels/relbias.py): dq, one program per query block streaming the key blocks in three parts
(posenc_kernels/_relbias_common.py), and the gradient of the bias: per row and relative index
(Shaw's key term, the tables of T5 and Shaw's scalar bias) or per program (ALiBi's slopes): no
atomics.

Why this file is long: its kernels take every pointer, stride and constexpr by name, one a
line as the formatter lays them out (about 130 of its lines are argument lists).
"""

import triton
import triton.language as tl

from posenc_kernels._relbias_common import (
    AFTER,
    ALIBI,
    BAND,
    BEFORE,
    LOG2E,
    SHAW_KV,
    TABLE,
    _band_logits,
    _band_written,
    _dot,
    _far_mask,
    _far_terms,
    _head_bias,
    _key_col,
    _key_end,
    _load_block,
    _part_bias,
    _part_span,
    _parts,
    _program_of,
    _wide_rows,
    _window_start,
)


@triton.jit
def _dq_part(
    dq,
    side0,
    side1,
    drel_base,
    drel_off,
    q,
    do,
    lse,
    delta,
    k_base,
    v_base,
    stride_kn,
    stride_kd,
    stride_vn,
    stride_vd,
    offs_m,
    mask_m,
    offs_d,
    mask_d,
    start,
    lo,
    hi,
    end,
    LK,
    m0,
    q_off,
    qk_scale,
    slope2,
    table_row,
    stride_tb,
    relk_base,
    relk_off,
    stride_rr,
    g_base,
    col_base,
    stride_cn,
    PART: tl.constexpr,
    LOW: tl.constexpr,
    BIAS: tl.constexpr,
    CAUSAL: tl.constexpr,
    K: tl.constexpr,
    HAS_VALUE: tl.constexpr,
    TABLE_GRAD: tl.constexpr,
    MASK_N: tl.constexpr,
    UPCAST: tl.constexpr,
    WIDE: tl.constexpr,
    F32: tl.constexpr,
    COL: tl.constexpr,
    WINDOW: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    """dq of the held queries over the key blocks [lo, hi) of one part, and the bias gradient
    (sums of ds): band tiles per index (SHAW_KV, TABLE: an index inside the clip is one key a
    row, its ds stored at drel_base + drel_off + idx; ALiBi: side0, weighted by -|r|); at the
    clipped indices and before and after, one vector per row (side0 at index 0, side1 at 2K).
    p = exp2(s2 - lse2)."""
    # Shaw's rows: a base and int32 offsets per row (a gather's addresses in one register each)
    relk_rows = relk_base + relk_off  # the outer parts' one index a row
    bias = _part_bias(relk_rows, mask_m, table_row, stride_tb, stride_rr, PART, BIAS, K, BLOCK_M)
    if HAS_VALUE and PART != BAND:
        at = (PART == AFTER) * 2 * K
        g_part = tl.load(g_base + relk_off + at * stride_rr, mask=mask_m, other=0.0)[:, None]
    # beyond the band the row's terms join lse once per row (_far_terms): p = exp2(s - lrow)
    key_ref = q_off + m0
    lrow = lse + _far_terms(offs_m - m0, bias, slope2, PART, BIAS)
    a, z = _part_span(PART, LOW, start, lo, hi, end)
    for n0 in range(a, z, BLOCK_N):
        offs_n = n0 + tl.arange(0, BLOCK_N)
        mask_n = offs_n < LK
        k = _load_block(k_base, offs_n, mask_n, stride_kn, offs_d, mask_d, stride_kd, UPCAST, WIDE)
        v = _load_block(v_base, offs_n, mask_n, stride_vn, offs_d, mask_d, stride_vd, UPCAST, WIDE)
        qk = _dot(q, tl.trans(k), F32) * qk_scale
        rel = (offs_n - q_off)[None, :] - offs_m[:, None]  # j - (q_off + i): a scalar shift
        if PART != BAND:
            s = qk
            if BIAS == ALIBI:
                s += _far_terms(offs_n - key_ref, 0.0, slope2, PART, BIAS)[None, :]
            s = _far_mask(s, rel, mask_n[None, :], MASK_N, WINDOW)
            lrow_t = lrow[:, None]
        else:
            # the band's mask: the keys' bounds where a block may be partial (MASK_N), else none
            # (a mask it does not need costs registers); rows past LQ: p = 0 (lse = +inf)
            key_mask = True
            if MASK_N:
                key_mask = mask_n[None, :]
            s, idx, keep = _band_logits(
                qk,
                rel,
                key_mask,
                slope2,
                table_row,
                stride_tb,
                relk_base,
                relk_off[:, None],
                stride_rr,
                BIAS,
                CAUSAL,
                K,
                WINDOW,
            )
            lrow_t = lse[:, None]
        if COL:  # FoX: - D_j
            s -= _key_col(col_base, offs_n, mask_n, stride_cn, COL)[None, :]
        p = tl.exp2(s - lrow_t)  # 0 where masked (s = -inf) and past LQ (lse = +inf)
        dp = _dot(do, tl.trans(v), F32)
        if HAS_VALUE:
            if PART == BAND:
                dp += tl.load(g_base + (relk_off[:, None] + idx * stride_rr))
            else:
                dp += g_part
        ds = p * (dp - delta[:, None])
        dq += _dot(ds.to(k.dtype), k, F32)
        if BIAS == SHAW_KV or TABLE_GRAD:
            w = ds
            if BIAS == ALIBI:  # d/d slope of -slope |r|
                w = ds * -tl.abs(rel).to(tl.float32)
            if PART == BEFORE or (BIAS == ALIBI and PART == BAND) or (COL and PART == BAND):
                side0 += tl.sum(w, 1)  # (FoX, K = 0: its one index, no loop over the band's)
            elif PART == AFTER:
                side1 += tl.sum(w, 1)
            else:  # SHAW_KV, TABLE: one key a (row, index) inside the clip; ds 0 where not kept
                inner = mask_m[:, None] & key_mask & (idx > 0) & (idx < 2 * K)
                tl.store(drel_base + (drel_off[:, None] + idx), ds, mask=inner)
                side0 += tl.sum(tl.where(idx == 0, ds, 0.0), 1)
                side1 += tl.sum(tl.where(idx == 2 * K, ds, 0.0), 1)
    return dq, side0, side1


@triton.jit
def _relbias_bwd_dq_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    do_ptr,
    dq_ptr,
    lse_ptr,
    delta_ptr,
    slopes_ptr,
    table_ptr,
    relk_ptr,
    g_ptr,
    drel_ptr,
    part_ptr,
    seq_ptr,
    stride_qb,
    stride_qh,
    stride_qm,
    stride_qd,
    stride_kb,
    stride_kh,
    stride_kn,
    stride_kd,
    stride_vb,
    stride_vh,
    stride_vn,
    stride_vd,
    stride_db,
    stride_dh,
    stride_dm,
    stride_dd,
    stride_xb,
    stride_xh,
    stride_xm,
    stride_xd,
    stride_th,
    stride_tb,
    stride_rb,
    stride_rh,
    stride_rm,
    stride_rr,
    H,
    LQ,
    LK,
    LG,
    D,
    NR,
    qk_scale,
    col_ptr,
    stride_cb,
    stride_ch,
    stride_cn,
    BIAS: tl.constexpr,
    CAUSAL: tl.constexpr,
    K: tl.constexpr,
    HAS_VALUE: tl.constexpr,
    TABLE_GRAD: tl.constexpr,
    NB: tl.constexpr,
    MASK_N: tl.constexpr,
    UPCAST: tl.constexpr,
    WIDE: tl.constexpr,
    F32: tl.constexpr,
    SPLIT: tl.constexpr,
    GROUP: tl.constexpr,
    SEQ: tl.constexpr,
    COL: tl.constexpr,
    WINDOW: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    """One program per (query block, b * h): dq of its rows (in q's dtype, dq's strides
    stride_x*), streaming the key blocks (before, after, the band), and the bias gradient, the
    sum of ds over the tiles:
      - ALiBi (TABLE_GRAD): -sum ds |j - i| into part (B * H, n_blocks, NB) at column 0;
      - SHAW_KV, and TABLE with TABLE_GRAD: per-row sums of ds per index into drel
        (B * H, LQ, NR = 2K + 1; NB: NR rounded up to a power of two): Shaw's, the gradient of
        relk = scale * Q E_K^T (the host turns it into dq and dE_K), with COL (FoX) that of
        each query's D_i (NR = 1), its keys' D_j being the dk/dv kernel's; the table's, summed
        over rows and then per bucket by the host (rows x NR floats: no loop over a
        tile's buckets in the band)."""
    pid_m, _, pid_bh, n_blocks, h, row, first, lq, lk, q_off = _program_of(
        seq_ptr, H, LQ, LK, LG, LQ, BLOCK_M, SEQ
    )
    m0 = pid_m * BLOCK_M
    offs_m = m0 + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    mask_m, mask_d = offs_m < lq, offs_d < D
    q = _load_block(
        q_ptr + row * stride_qb + h * stride_qh + first * stride_qm,
        offs_m,
        mask_m,
        stride_qm,
        offs_d,
        mask_d,
        stride_qd,
        UPCAST,
        WIDE,
    )
    do = _load_block(
        do_ptr + row * stride_db + h * stride_dh + first * stride_dm,
        offs_m,
        mask_m,
        stride_dm,
        offs_d,
        mask_d,
        stride_dd,
        UPCAST,
        WIDE,
    )
    safe_m = tl.minimum(offs_m, tl.maximum(lq - 1, 0))  # gathers in bounds, no mask
    relk_base = relk_ptr + row * stride_rb + h * stride_rh + first * stride_rm
    g_base = g_ptr + row * stride_rb + h * stride_rh + first * stride_rm  # relk's layout
    col_base = col_ptr + row * stride_cb + h * stride_ch + first * stride_cn
    rows = (row * H + h) * LQ + first + offs_m  # lse's, delta's and drel's rows
    lse = tl.load(lse_ptr + rows, mask=mask_m, other=float("inf"))
    delta = tl.load(delta_ptr + rows, mask=mask_m, other=0.0)
    slope2, table_row = _head_bias(slopes_ptr, table_ptr, stride_th, h, BIAS)
    k_base = k_ptr + row * stride_kb + (h // GROUP) * stride_kh + first * stride_kn
    v_base = v_ptr + row * stride_vb + (h // GROUP) * stride_vh + first * stride_vn
    dq = tl.zeros((BLOCK_M, BLOCK_D), tl.float32)
    side0 = tl.zeros((BLOCK_M,), tl.float32)
    side1 = tl.zeros((BLOCK_M,), tl.float32)
    end = _key_end(lk, lq, m0, q_off, CAUSAL, SEQ, BLOCK_M)
    start = _window_start(0, m0 + q_off, WINDOW, BLOCK_N)
    lo, hi = _parts(m0 + q_off, start, end, K, True, not CAUSAL, BLOCK_M, BLOCK_N, SPLIT)
    # before [0, lo), after [hi, end), then the band [lo, hi)
    for i in tl.static_range(3):
        dq, side0, side1 = _dq_part(
            dq,
            side0,
            side1,
            drel_ptr + ((row * H + h) * LQ + first) * NR,
            offs_m * NR,
            q,
            do,
            lse,
            delta,
            k_base,
            v_base,
            stride_kn,
            stride_kd,
            stride_vn,
            stride_vd,
            offs_m,
            mask_m,
            offs_d,
            mask_d,
            start,
            lo,
            hi,
            end,
            lk,
            m0,
            q_off,
            qk_scale,
            slope2,
            table_row,
            stride_tb,
            relk_base,
            safe_m * stride_rm,
            stride_rr,
            g_base,
            col_base,
            stride_cn,
            (i + 1) % 3,
            BEFORE,
            BIAS,
            CAUSAL,
            K,
            HAS_VALUE,
            TABLE_GRAD,
            MASK_N,
            UPCAST,
            WIDE,
            F32,
            COL,
            WINDOW,
            BLOCK_M,
            BLOCK_N,
        )
    out = row * stride_xb + h * stride_xh + (first + _wide_rows(offs_m, WIDE)[:, None]) * stride_xm
    out += offs_d[None, :] * stride_xd
    dq = dq * (qk_scale / LOG2E)
    tl.store(dq_ptr + out, dq.to(dq_ptr.dtype.element_ty), mask=mask_m[:, None] & mask_d[None, :])
    if BIAS == SHAW_KV or (BIAS == TABLE and TABLE_GRAD):
        # the band stored its entries; the rest: the clipped sums, or 0. 32 indices at a time
        # (NB if fewer): where ptxas allocates the default tiles without a spill under Triton
        # 3.9 and 3.6 (16 and 64 spill; the compile audit)
        COLS: tl.constexpr = 32 if NB >= 32 else NB
        for c in tl.static_range(0, NB, COLS):
            offs_r = c + tl.arange(0, COLS)
            seen = _band_written(q_off + offs_m, offs_r, mask_m, lo, hi, lk, K, BLOCK_N)
            ends = tl.where(offs_r[None, :] == 0, side0[:, None], 0.0)
            ends += tl.where(offs_r[None, :] == 2 * K, side1[:, None], 0.0)
            tl.store(
                drel_ptr + rows[:, None] * NR + offs_r[None, :],
                ends,
                mask=mask_m[:, None] & (offs_r[None, :] < NR) & ~seen,
            )
    elif TABLE_GRAD:  # ALiBi: this program's sum, at column 0 of its (NB,) partial
        cols = tl.arange(0, NB)
        total = tl.where(cols == 0, tl.sum(side0) + tl.sum(side1), 0.0)
        tl.store(part_ptr + (pid_bh * n_blocks + pid_m) * NB + cols, total)
