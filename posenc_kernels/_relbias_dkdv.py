"""The backward's key-side kernels of posenc_kernels.relbias (launched by
posenc_kernels/relbias.py): delta (rowsum(do * out), the softmax backward's row term) and dk/dv,
one program per key block streaming the query blocks in three parts
(posenc_kernels/_relbias_common.py), the tile computed keys by queries.

Why this file is long: its kernels take every pointer, stride and constexpr by name, one a
line as the formatter lays them out (about 130 of its lines are argument lists).
"""

import triton
import triton.language as tl

from posenc_kernels._relbias_common import (
    AFTER,
    ALIBI,
    BAND,
    CACHE,
    LOG2E,
    _band_logits,
    _dot,
    _dot_acc,
    _far_mask,
    _far_terms,
    _head_bias,
    _key_col,
    _load_block,
    _part_bias,
    _part_span,
    _parts,
    _program,
    _program_of,
    _wide_rows,
)

# Triton before 3.9 (audited: 3.6) holds the dk/dv loops' invariant lane offsets in registers
# across the loop and, at the 4-warp tiles, spills them inside it (Shaw's key + value terms,
# grouped and packed: 6 local loads an iteration); recomputed in each iteration, none. Under
# 3.9 the recomputation spills more than the hoisting (docs/kernels.md).
_RECOMPUTE = tl.constexpr(tuple(int(x) for x in triton.__version__.split(".")[:2]) < (3, 9))


@triton.jit
def _relbias_bwd_delta_kernel(
    o_ptr,
    do_ptr,
    delta_ptr,
    stride_ob,
    stride_oh,
    stride_om,
    stride_od,
    stride_db,
    stride_dh,
    stride_dm,
    stride_dd,
    H,
    LQ,
    D,
    WIDE: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    """delta = rowsum(do * out) (B * H, LQ) float32, the softmax backward's row term, read in
    the inputs' dtype and layout (no float32 copies of out and do)."""
    pid_m, _, pid_bh, _ = _program(LQ, BLOCK_M)
    b, h = pid_bh // H, pid_bh % H
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    mask_m, mask_d = offs_m < LQ, offs_d < D
    o = _load_block(
        o_ptr + b * stride_ob + h * stride_oh,
        offs_m,
        mask_m,
        stride_om,
        offs_d,
        mask_d,
        stride_od,
        True,
        WIDE,
    )
    do = _load_block(
        do_ptr + b * stride_db + h * stride_dh,
        offs_m,
        mask_m,
        stride_dm,
        offs_d,
        mask_d,
        stride_dd,
        True,
        WIDE,
    )
    tl.store(delta_ptr + pid_bh * LQ + offs_m, tl.sum(o * do, 1), mask=mask_m)


@triton.jit
def _dkdv_part(
    dk,
    dv,
    dcol,
    ck,
    k,
    v,
    q_base,
    do_base,
    stride_qh,
    stride_qm,
    stride_qd,
    stride_dh,
    stride_dm,
    stride_dd,
    offs_n,
    key_ref,
    mask_n,
    offs_d,
    mask_d,
    start,
    lo,
    hi,
    end,
    LQ,
    stride_lh,
    lse_rows,
    delta_rows,
    qk_scale,
    slopes_base,
    table_base,
    stride_th,
    stride_tb,
    relk_base,
    stride_rh,
    stride_rm,
    stride_rr,
    g_base,
    col_base,
    stride_ch,
    stride_cn,
    PART: tl.constexpr,
    LOW: tl.constexpr,
    BIAS: tl.constexpr,
    CAUSAL: tl.constexpr,
    K: tl.constexpr,
    HAS_VALUE: tl.constexpr,
    UPCAST: tl.constexpr,
    WIDE: tl.constexpr,
    F32: tl.constexpr,
    COL: tl.constexpr,
    WINDOW: tl.constexpr,
    GROUP: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    """dk, dv of the held keys over the query blocks [lo, hi) of one part, of each of the
    GROUP query heads that read them (the *_base pointers: the group's first head, stride_*h
    to the next): dv += p^T do, dk += ds^T q (scaled by the caller); with COL (FoX: the held
    keys' D_j subtracted) dcol[:, g] += the keys' sums of ds for head g. One flat loop over
    (query block, head), the heads innermost: a loop over the heads around the block loop
    spills inside the block loop at 4 warps (docs/kernels.md). The tile is computed
    transposed, keys by queries, so that every dot has this program's BLOCK_N keys as its M
    (wgmma's >= 64 whatever BLOCK_M) and p, ds need no transpose. Query rows past LQ read
    lse = +inf: p = 0, no mask needed. offs_n: the held keys' positions as the queries count
    them (j - q_off), key_ref the first of them (_far_terms' reference)."""
    a, z = _part_span(PART, LOW, start, lo, hi, end)
    for t in tl.range(0, tl.cdiv(tl.maximum(z - a, 0), BLOCK_M) * GROUP, disable_licm=_RECOMPUTE):
        m0 = a + t // GROUP * BLOCK_M  # GROUP is a constant: a shift or a multiply-high
        g = _wide_rows(t % GROUP, WIDE)  # the group's head g: g x a head stride
        offs_m = m0 + tl.arange(0, BLOCK_M)
        mask_m = offs_m < LQ
        q_g, do_g = q_base + g * stride_qh, do_base + g * stride_dh
        q = _load_block(q_g, offs_m, mask_m, stride_qm, offs_d, mask_d, stride_qd, UPCAST, WIDE)
        do = _load_block(do_g, offs_m, mask_m, stride_dm, offs_d, mask_d, stride_dd, UPCAST, WIDE)
        lse = tl.load(lse_rows + g * stride_lh + offs_m, mask=mask_m, other=float("inf"))
        delta = tl.load(delta_rows + g * stride_lh + offs_m, mask=mask_m, other=0.0)
        slope2, table_row = _head_bias(slopes_base, table_base, stride_th, g, BIAS)
        qk_t = _dot(k, tl.trans(q), F32) * qk_scale
        rel_t = offs_n[:, None] - offs_m[None, :]
        lrow = lse  # beyond the band with the queries' terms (_far_terms): p = exp2(s - lrow)
        # the gathers' rows, in bounds without a mask: a base and int32 offsets
        safe_m = tl.minimum(offs_m, LQ - 1)
        relk_off = g * stride_rh + safe_m * stride_rm  # g shares relk's layout
        if PART == BAND:
            s_t, idx_t, keep_t = _band_logits(
                qk_t,
                rel_t,
                True,  # no bounds: queries past LQ get p = 0 (lse = +inf); keys past LK: not stored
                slope2,
                table_row,
                stride_tb,
                relk_base,
                relk_off[None, :],
                stride_rr,
                BIAS,
                CAUSAL,
                K,
                WINDOW,
            )
        else:
            relk_rows = relk_base + relk_off  # the outer parts' one index a row
            bias = _part_bias(
                relk_rows, mask_m, table_row, stride_tb, stride_rr, PART, BIAS, K, BLOCK_M
            )
            s_t = qk_t
            if BIAS == ALIBI:  # positions from the held block's first key
                s_t += _far_terms(offs_n - key_ref, 0.0, slope2, PART, BIAS)[:, None]
            s_t = _far_mask(s_t, rel_t, mask_m, False, WINDOW)
            lrow = lse + _far_terms(offs_m - key_ref, bias, slope2, PART, BIAS)
        if COL:  # the held keys' D_j for head g (one head: read once, by the caller)
            ck_g = ck
            if GROUP > 1:
                ck_g = _key_col(col_base + g * stride_ch, offs_n, mask_n, stride_cn, COL)
            s_t -= ck_g[:, None]
        p_t = tl.exp2(s_t - lrow[None, :])  # 0 where masked
        # dv's product issued before dp is computed (FlexAttention's order): p's half-precision
        # operand dies before dp's tile is live. After dp, the packed layout's dk/dv kept 2 to 4
        # local loads inside a key loop under Triton 3.9 at 255 registers (docs/kernels.md)
        dv += _dot(p_t.to(do.dtype), do, F32)
        # dp - delta as the dot's accumulator: delta's vector dies before the product
        dp_t = _dot_acc(v, tl.trans(do), -delta[None, :] + tl.zeros_like(p_t), F32)
        if HAS_VALUE:
            if PART == BAND:
                dp_t += tl.load(g_base + (relk_off[None, :] + idx_t * stride_rr))
            else:
                at = (PART == AFTER) * 2 * K
                dp_t += tl.load(g_base + relk_off + at * stride_rr, mask=mask_m, other=0.0)[None, :]
        ds_t = p_t * dp_t
        dk += _dot(ds_t.to(q.dtype), q, F32)
        if COL:
            if GROUP > 1:
                heads = tl.arange(0, dcol.shape[1])[None, :]
                dcol = tl.where(heads == g, dcol + tl.sum(ds_t, 1)[:, None], dcol)
            else:
                dcol += tl.sum(ds_t, 1)[:, None]
    return dk, dv, dcol


@triton.jit
def _relbias_bwd_dkdv_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    do_ptr,
    dk_ptr,
    dv_ptr,
    lse_ptr,
    delta_ptr,
    slopes_ptr,
    table_ptr,
    relk_ptr,
    g_ptr,
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
    qk_scale,
    col_ptr,
    stride_cb,
    stride_ch,
    stride_cn,
    dcol_ptr,
    BIAS: tl.constexpr,
    CAUSAL: tl.constexpr,
    K: tl.constexpr,
    HAS_VALUE: tl.constexpr,
    UPCAST: tl.constexpr,
    WIDE: tl.constexpr,
    F32: tl.constexpr,
    SPLIT: tl.constexpr,
    GROUP: tl.constexpr,
    COLS: tl.constexpr,
    SEQ: tl.constexpr,
    ORDER: tl.constexpr,
    COL: tl.constexpr,
    WINDOW: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    """One program per (key block, b * kv head): dk and dv of its keys, streaming the query
    blocks (after, i.e. r >= K; before; the band) of the GROUP query heads that read them
    (grouped-query heads summed here, in float32 registers: no per-head partials), written in
    dk's dtype with dk and dv's strides (stride_x*, shared: both are allocated alike). H: the
    kv heads. COL (FoX): the gradient of the keys' D_j, minus their sums of ds, per query head
    into dcol (B * H * GROUP, LK) float32 (COLS: GROUP's power of two, 1 without COL)."""
    pid_n, _, _, _, h, row, first, lq, lk, q_off = _program_of(
        seq_ptr, H, LQ, LK, LG, LK, BLOCK_N, SEQ, 1, ORDER
    )
    n0 = pid_n * BLOCK_N
    offs_n = n0 + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    mask_n, mask_d = offs_n < lk, offs_d < D
    k = _load_block(
        k_ptr + row * stride_kb + h * stride_kh + first * stride_kn,
        offs_n,
        mask_n,
        stride_kn,
        offs_d,
        mask_d,
        stride_kd,
        UPCAST,
        WIDE,
    )
    v = _load_block(
        v_ptr + row * stride_vb + h * stride_vh + first * stride_vn,
        offs_n,
        mask_n,
        stride_vn,
        offs_d,
        mask_d,
        stride_vd,
        UPCAST,
        WIDE,
    )
    hq = h * GROUP  # the group's first query head
    q_base = q_ptr + row * stride_qb + hq * stride_qh + first * stride_qm
    do_base = do_ptr + row * stride_db + hq * stride_dh + first * stride_dm
    relk_base = relk_ptr + row * stride_rb + hq * stride_rh + first * stride_rm
    g_base = g_ptr + row * stride_rb + hq * stride_rh + first * stride_rm
    lse_rows = lse_ptr + (row * H * GROUP + hq) * LQ + first
    delta_rows = delta_ptr + (row * H * GROUP + hq) * LQ + first
    col_base = col_ptr + row * stride_cb + hq * stride_ch + first * stride_cn
    dk = tl.zeros((BLOCK_N, BLOCK_D), tl.float32)
    dv = tl.zeros((BLOCK_N, BLOCK_D), tl.float32)
    dcol = tl.zeros((BLOCK_N, COLS), tl.float32)
    ck = _key_col(col_base, offs_n, mask_n, stride_cn, COL)  # FoX: head hq's D_j of the keys
    end = lq
    if SEQ >= CACHE:  # a key block past its sequence's keys: no queries (dk, dv stored as 0)
        end = tl.where(n0 < lk, end, 0)
    start = 0
    if CAUSAL:  # query rows at positions below j see none of these keys
        start = tl.maximum(n0 - q_off, 0) // BLOCK_M * BLOCK_M
    if WINDOW > 0:  # nor those at WINDOW or more past the block's last key
        end = tl.minimum(end, tl.maximum(n0 + BLOCK_N - 1 + WINDOW - q_off, 0))
    # the keys seen from the queries' rows: position j - q_off
    lo, hi = _parts(n0 - q_off, start, end, K, not CAUSAL, True, BLOCK_N, BLOCK_M, SPLIT)
    # after [start, lo) (queries K or more before the keys), before [hi, end), the band
    for i in tl.static_range(3):
        dk, dv, dcol = _dkdv_part(
            dk,
            dv,
            dcol,
            ck,
            k,
            v,
            q_base,
            do_base,
            stride_qh,
            stride_qm,
            stride_qd,
            stride_dh,
            stride_dm,
            stride_dd,
            offs_n - q_off,  # the part reads offs_n for r = j - i only
            n0 - q_off,
            mask_n,
            offs_d,
            mask_d,
            start,
            lo,
            hi,
            end,
            lq,
            LQ,
            lse_rows,
            delta_rows,
            qk_scale,
            slopes_ptr + hq,
            table_ptr + hq * stride_th,
            stride_th,
            stride_tb,
            relk_base,
            stride_rh,
            stride_rm,
            stride_rr,
            g_base,
            col_base + q_off * stride_cn,  # the part's offs_n are shifted by q_off
            stride_ch,
            stride_cn,
            2 - i,
            AFTER,
            BIAS,
            CAUSAL,
            K,
            HAS_VALUE,
            UPCAST,
            WIDE,
            F32,
            COL,
            WINDOW,
            GROUP,
            BLOCK_M,
            BLOCK_N,
        )
    if COL:  # d D_j = - sum_i ds_ij (the key's sums; keys past its sequence: not stored)
        heads = tl.arange(0, COLS)[None, :]
        at = dcol_ptr + (row * H * GROUP + hq + heads) * LK + first + offs_n[:, None]
        tl.store(at, -dcol, mask=mask_n[:, None] & (heads < GROUP))
    rows = first + _wide_rows(offs_n, WIDE)[:, None]
    out = row * stride_xb + h * stride_xh + rows * stride_xm + offs_d[None, :] * stride_xd
    mask = mask_n[:, None] & mask_d[None, :]
    if SEQ == CACHE:  # the keys past kv_lens[b] get a zero gradient (the far parts do not mask
        # keys: those rows of the block that straddles kv_lens[b] hold garbage until here)
        dk, dv = tl.where(mask_n[:, None], dk, 0.0), tl.where(mask_n[:, None], dv, 0.0)
        mask = (offs_n < LK)[:, None] & mask_d[None, :]
    tl.store(dk_ptr + out, (dk * (qk_scale / LOG2E)).to(dk_ptr.dtype.element_ty), mask=mask)
    tl.store(dv_ptr + out, dv.to(dv_ptr.dtype.element_ty), mask=mask)
