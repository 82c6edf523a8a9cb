"""The forward kernel of posenc_kernels.relbias (launched by posenc_kernels/relbias.py) and the
combine kernel of a forward split over the keys (launched by posenc_kernels/_relbias_seq.py): the
online softmax over key blocks in three parts (posenc_kernels/_relbias_common.py), with Shaw's
value term: the band's logits stored a (row, relative index) each, read back once the rows' max
is known.

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
    CACHE,
    LOG2E,
    NATIVE,
    _band_logits,
    _band_written,
    _dot,
    _far_logits,
    _head_bias,
    _key_col,
    _key_end,
    _load_block,
    _load_kv,
    _part_bias,
    _part_span,
    _parts,
    _program,
    _program_of,
    _wide_rows,
    _window_start,
)


@triton.jit
def _fwd_part(
    acc,
    l_i,
    m_i,
    side0,
    side1,
    band_base,
    band_off,
    q,
    k_base,
    v_base,
    stride_kn,
    stride_kd,
    stride_vn,
    stride_vd,
    bt_row,
    stride_kp,
    stride_vp,
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
    table_mn,
    stride_tb,
    relk_base,
    relk_off,
    stride_rr,
    col_base,
    stride_cn,
    PART: tl.constexpr,
    LOW: tl.constexpr,
    BIAS: tl.constexpr,
    CAUSAL: tl.constexpr,
    K: tl.constexpr,
    HAS_VALUE: tl.constexpr,
    MASK_N: tl.constexpr,
    UPCAST: tl.constexpr,
    WIDE: tl.constexpr,
    F32: tl.constexpr,
    PAGE: tl.constexpr,
    COL: tl.constexpr,
    WINDOW: tl.constexpr,
    PER_ROW: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    """The forward over the key blocks [lo, hi) of one part: the online softmax (base 2) into
    acc, l_i, m_i; with Shaw's value term the probability sums at the clipped indices 0 and 2K
    (side0, side1, rescaled like acc) and, in the band, each logit at an index inside the clip
    stored at band_base + band_off[row] + index (_value_term reads them back). table_row: the
    table's row per query (a pointer, or one a row); slope2, table_mn: ALiBi's slope and the
    table's row laid out to broadcast against a (BLOCK_M, BLOCK_N) tile (PER_ROW: a head a
    row)."""
    relk_rows = relk_base + relk_off  # the outer parts' one index a row
    bias = _part_bias(relk_rows, mask_m, table_row, stride_tb, stride_rr, PART, BIAS, K, BLOCK_M)[
        :, None
    ]
    a, z = _part_span(PART, LOW, start, lo, hi, end)
    # ALiBi beyond the band: -slope |j - i| is sign * slope * ((j - q_off - m0) - (i - m0)), a
    # column term minus a row term; the row term joins the running max once per row (one FMA
    # and one add a score instead of integer, conversion, multiply and add). Both counted from
    # the block's first query: from position 0 the two terms grow with the position and their
    # difference loses float32's digits (slope x position x 2^-24: 1e-4 at 4096 x 0.5),
    # from the block the row term stays under slope x BLOCK_M. One slope a program only.
    FOLD: tl.constexpr = BIAS == ALIBI and PART != BAND and not PER_ROW
    signed2 = slope2 * (1 - 2 * (PART == AFTER))
    row2 = (offs_m - m0).to(tl.float32) * signed2
    for n0 in range(a, z, BLOCK_N):
        offs_n = n0 + tl.arange(0, BLOCK_N)
        mask_n = offs_n < LK
        k, v = _load_kv(
            k_base,
            v_base,
            offs_n,
            mask_n,
            stride_kn,
            stride_vn,
            bt_row,
            stride_kp,
            stride_vp,
            offs_d,
            mask_d,
            stride_kd,
            stride_vd,
            UPCAST,
            WIDE,
            PAGE,
        )
        if FOLD:  # ALiBi beyond the band: s = qk + the column term, minus the row term
            col2 = (offs_n - (q_off + m0)).to(tl.float32) * signed2
            s = _dot(q, tl.trans(k), F32) * qk_scale + col2[None, :]
            if MASK_N:
                s = tl.where(mask_n[None, :], s, float("-inf"))
            if WINDOW > 0:
                rel = (offs_n - q_off)[None, :] - offs_m[:, None]
                s = tl.where(rel > -WINDOW, s, float("-inf"))
            shift = row2  # a per-row term of the logits left out of s, taken with the max
        else:  # (the other paths as ptxas allocates them without a spill: docs/kernels.md)
            qk = _dot(q, tl.trans(k), F32) * qk_scale
            rel = (offs_n - q_off)[None, :] - offs_m[:, None]  # j - (q_off + i): a scalar shift
            if PART == BAND:
                s, idx, keep = _band_logits(
                    qk,
                    rel,
                    mask_m[:, None] & mask_n[None, :],
                    slope2,
                    table_mn,
                    stride_tb,
                    relk_base,
                    relk_off[:, None],
                    stride_rr,
                    BIAS,
                    CAUSAL,
                    K,
                    WINDOW,
                )
            else:
                s = _far_logits(qk, bias, rel, mask_n[None, :], slope2, PART, BIAS, MASK_N, WINDOW)
        if COL:  # FoX: - D_j
            s -= _key_col(col_base, offs_n, mask_n, stride_cn, COL)[None, :]
        if FOLD:  # the row term with the max and the exponent: a per-row add, not per score
            m_new = tl.maximum(m_i, tl.max(s, 1) - shift)
            m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # rows with nothing yet
            p = tl.exp2(s - (m_safe + shift)[:, None])
        else:
            m_new = tl.maximum(m_i, tl.max(s, 1))
            m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # rows with nothing yet
            p = tl.exp2(s - m_safe[:, None])
        alpha = tl.exp2(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + _dot(p.to(v.dtype), v, F32)
        if HAS_VALUE:
            side0, side1 = side0 * alpha, side1 * alpha
            if PART == BAND:  # one key a (row, index) inside the clip: no loop over indices
                inner = mask_m[:, None] & mask_n[None, :] & (idx > 0) & (idx < 2 * K)
                tl.store(band_base + band_off[:, None] + idx, s, mask=inner)  # -inf where not kept
                side0 += tl.sum(tl.where(idx == 0, p, 0.0), 1)
                side1 += tl.sum(tl.where(idx == 2 * K, p, 0.0), 1)
            elif PART == BEFORE:
                side0 += tl.sum(p, 1)
            else:
                side1 += tl.sum(p, 1)
        m_i = m_new
    return acc, l_i, m_i, side0, side1


@triton.jit
def _value_term(
    acc,
    m_i,
    l_safe,
    side0,
    side1,
    band_base,
    band_off,
    pos,
    mask_m,
    lo,
    hi,
    lk,
    ev_ptr,
    stride_evr,
    stride_evd,
    offs_d,
    mask_d,
    NR,
    K: tl.constexpr,
    F32: tl.constexpr,
    STORE: tl.constexpr,
    DTYPE: tl.constexpr,
    NB: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    """acc + Shaw's value term, sum_r w_r E_V[r] (before the division by l), w_r the rows'
    probability mass at index r: inside the clip 2^(s - m) of the one logit the band stored
    at band_base + band_off[row] + r (where _band_written says, from pos, mask_m, lo, hi, lk),
    at 0 and 2K side0 and side1. STORE: pn = w / l there (the backward's, B * H, LQ, NR).
    COLS indices at a time."""
    # other threads of this program stored those logits: one CTA barrier makes their global
    # stores visible (CUDA's __syncthreads guarantee), once per program after its key loop
    tl.debug_barrier()
    m_safe = tl.where(m_i == float("-inf"), 0.0, m_i)[:, None]
    # indices a chunk: where ptxas allocates each default tile without a spill under Triton 3.9
    # and 3.6 (the compile audit): float32's IEEE dot 16, half precision 32, a decode's 16 rows 64
    COLS: tl.constexpr = 16 if F32 != NATIVE else (64 if BLOCK_M <= 16 else 32)
    for c in tl.static_range(0, NB, COLS):
        offs_r = c + tl.arange(0, COLS)
        seen = _band_written(pos, offs_r, mask_m, lo, hi, lk, K, BLOCK_N)
        ptrs = band_base + band_off[:, None] + offs_r[None, :]
        w = tl.exp2(tl.load(ptrs, mask=seen, other=float("-inf")) - m_safe)
        w += tl.where(offs_r[None, :] == 0, side0[:, None], 0.0)
        w += tl.where(offs_r[None, :] == 2 * K, side1[:, None], 0.0)
        ev = tl.load(
            ev_ptr + offs_r[:, None] * stride_evr + offs_d[None, :] * stride_evd,
            mask=(offs_r[:, None] < NR) & mask_d[None, :],
            other=0.0,
        )
        if F32 != NATIVE:  # IEEE (3xTF32 of a float32 (columns, D) tile would spill)
            acc += tl.dot(w, ev, input_precision="ieee")
        else:
            acc += _dot(w.to(DTYPE), ev.to(DTYPE), F32)  # as p @ v: tensor cores
        if STORE:
            tl.store(ptrs, w / l_safe[:, None], mask=mask_m[:, None] & (offs_r[None, :] < NR))
    return acc


@triton.jit
def _fold_sink(acc, l_i, m_i, sinks_ptr, h, use):
    """One more column of every row's softmax at the head's sink logit (base 2), where `use`:
    the running max and sum take it in, acc is rescaled like them and gains nothing (a sink
    has no value). -> acc, l_i, m_i, and the rescale factor (for other running sums)."""
    sink2 = tl.where(use, tl.load(sinks_ptr + h).to(tl.float32) * LOG2E, float("-inf"))
    m_new = tl.maximum(m_i, sink2)
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
    alpha = tl.exp2(m_i - m_safe)
    return acc * alpha[:, None], l_i * alpha + tl.exp2(sink2 - m_safe), m_new, alpha


@triton.jit
def _relbias_fwd_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    o_ptr,
    lse_ptr,
    slopes_ptr,
    table_ptr,
    relk_ptr,
    ev_ptr,
    pn_ptr,
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
    stride_ob,
    stride_oh,
    stride_om,
    stride_od,
    stride_os,
    stride_th,
    stride_tb,
    stride_rb,
    stride_rh,
    stride_rm,
    stride_rr,
    stride_evr,
    stride_evd,
    H,
    LQ,
    LK,
    LG,
    NUM_SPLITS,
    CHUNK,
    D,
    NR,
    qk_scale,
    # paged caches' arguments last: placed among the others above, they moved ptxas's register
    # allocation of the dense decode from 103 to 135 (Triton 3.9, sm_90a, the same TTGIR)
    bt_ptr,
    stride_kp,
    stride_vp,
    stride_btb,
    col_ptr,
    stride_cb,
    stride_ch,
    stride_cn,
    sinks_ptr,
    BIAS: tl.constexpr,
    CAUSAL: tl.constexpr,
    K: tl.constexpr,
    HAS_VALUE: tl.constexpr,
    NB: tl.constexpr,
    MASK_N: tl.constexpr,
    UPCAST: tl.constexpr,
    WIDE: tl.constexpr,
    F32: tl.constexpr,
    SPLIT: tl.constexpr,
    GROUP: tl.constexpr,
    QPACK: tl.constexpr,
    SEQ: tl.constexpr,
    ORDER: tl.constexpr,
    SPLIT_K: tl.constexpr,
    PAGE: tl.constexpr,
    COL: tl.constexpr,
    SINKS: tl.constexpr,
    WINDOW: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    """One program per (query block, b * h), or with QPACK > 1 per (b, kv head) holding its
    QPACK query heads' LQ rows (a decode step: the kv head's keys read once for the group):
    reads its q block once, streams k and v blocks (before, after, then the band). Writes out,
    the base-2 row log-sum-exp (B * H, LQ) for the backward, and with Shaw's value term the
    normalized per-index probability sums pn (B * H, LQ, NR), also for the backward, added to
    out as sums @ E_V. qk_scale: scale * log2(e); MASK_N: LK is not a multiple of BLOCK_N
    (the last key block has bounds). PAGE > 0: k and v are paged caches (num_blocks, PAGE,
    Hk, D), stride_kb 0, row b's cache blocks at bt_ptr + b * stride_btb (a decode step's
    kv_lens: SEQ == CACHE). COL: FoX's per-key term
    (col_ptr, (B, H, LK) strides stride_c*). SINKS: each head's sink logit (sinks_ptr, (H,))
    joins the softmax once (split 0 of a split forward) and adds no value."""
    pid_m, split, _, _, hp, row, first, lq, lk, q_off = _program_of(
        seq_ptr, H // QPACK, LQ, LK, LG, LQ, BLOCK_M, SEQ, NUM_SPLITS, ORDER
    )
    r = tl.arange(0, BLOCK_M)
    if QPACK > 1:  # kv head hp's query heads in one tile: row r is query r // QPACK of head
        # r % QPACK (a constexpr divisor: no integer division at run time)
        h = hp * QPACK + r % QPACK
        m0 = 0
        offs_m = r // QPACK
        mask_m = r < QPACK * lq
        kv_h = hp
    else:
        h = hp
        m0 = pid_m * BLOCK_M
        offs_m = m0 + r
        mask_m = offs_m < lq
        kv_h = hp // GROUP  # grouped-query: its group's kv
    offs_d = tl.arange(0, BLOCK_D)
    mask_d = offs_d < D
    if QPACK > 1:  # a head per row
        q_base, q_rows = (
            q_ptr + row * stride_qb,
            h * stride_qh + (first + _wide_rows(offs_m, WIDE)) * stride_qm,
        )
        q = _load_block(q_base, q_rows, mask_m, 1, offs_d, mask_d, stride_qd, UPCAST, WIDE)
    else:  # one head's rows, spelled as ptxas allocates them without a spill (docs/kernels.md)
        q_base = q_ptr + row * stride_qb + h * stride_qh + first * stride_qm
        q = _load_block(q_base, offs_m, mask_m, stride_qm, offs_d, mask_d, stride_qd, UPCAST, WIDE)
    k_base = k_ptr + row * stride_kb + kv_h * stride_kh + first * stride_kn
    v_base = v_ptr + row * stride_vb + kv_h * stride_vh + first * stride_vn
    bt_row = bt_ptr + row * stride_btb  # paged: this sequence's block table (stride_kb is 0)
    # Shaw's key term: a base and int32 offsets a row (rows clamped: the band's gathers take no
    # mask); packed decode rows each have a head of their own
    safe_m = tl.minimum(offs_m, tl.maximum(lq - 1, 0))
    relk_base = relk_ptr + row * stride_rb + first * stride_rm
    if QPACK > 1:
        relk_off = h * stride_rh + safe_m * stride_rm
    else:
        relk_base += h * stride_rh
        relk_off = safe_m * stride_rm
    col_base = col_ptr + row * stride_cb + h * stride_ch + first * stride_cn
    slope2, table_row = _head_bias(slopes_ptr, table_ptr, stride_th, h, BIAS)
    table_mn = table_row
    if QPACK > 1:  # one head a row: its slope and table row broadcast along the keys
        table_mn = table_row[:, None]
        if BIAS == ALIBI:
            slope2 = slope2[:, None]
    m_i = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    l_i = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, BLOCK_D), tl.float32)
    side0 = tl.zeros((BLOCK_M,), tl.float32)
    side1 = tl.zeros((BLOCK_M,), tl.float32)
    end = _key_end(lk, lq, m0, q_off, CAUSAL, SEQ, BLOCK_M)
    start = 0
    if SPLIT_K:  # this program's share of the keys: [split * CHUNK, + CHUNK)
        start = split * CHUNK
        end = tl.minimum(end, start + CHUNK)
    start = _window_start(start, m0 + q_off, WINDOW, BLOCK_N)
    lo, hi = _parts(m0 + q_off, start, end, K, True, not CAUSAL, BLOCK_M, BLOCK_N, SPLIT)
    rows = ((row * H + h) * NUM_SPLITS + split) * LQ + first + offs_m  # lse's, pn's rows
    # Shaw's value term: the band's logits, then pn, at band_base + band_off[row] + index (one
    # head: a scalar base and 32-bit offsets, fewer registers than a tile of 64-bit pointers)
    if QPACK > 1:
        band_base, band_off = pn_ptr, rows * NR
    else:
        band_base = pn_ptr + (((row * H + h) * NUM_SPLITS + split) * LQ + first + m0) * NR
        band_off = r * NR
    # before [0, lo), after [hi, end), then the band [lo, hi)
    for i in tl.static_range(3):
        acc, l_i, m_i, side0, side1 = _fwd_part(
            acc,
            l_i,
            m_i,
            side0,
            side1,
            band_base,
            band_off,
            q,
            k_base,
            v_base,
            stride_kn,
            stride_kd,
            stride_vn,
            stride_vd,
            bt_row,
            stride_kp,
            stride_vp,
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
            table_mn,
            stride_tb,
            relk_base,
            relk_off,
            stride_rr,
            col_base,
            stride_cn,
            (i + 1) % 3,
            BEFORE,
            BIAS,
            CAUSAL,
            K,
            HAS_VALUE,
            MASK_N,
            UPCAST,
            WIDE,
            F32,
            PAGE,
            COL,
            WINDOW,
            QPACK > 1,
            BLOCK_M,
            BLOCK_N,
        )
    if SINKS:  # the sink's column: mass, no value (once: in split 0 of a split forward)
        acc, l_i, m_i, alpha = _fold_sink(acc, l_i, m_i, sinks_ptr, h, split == 0)
        if HAS_VALUE:
            side0, side1 = side0 * alpha, side1 * alpha
    l_safe = tl.where(l_i == 0.0, 1.0, l_i)  # rows past LQ, or that see no key
    if HAS_VALUE:
        acc = _value_term(
            acc,
            m_i,
            l_safe,
            side0,
            side1,
            band_base,
            band_off,
            q_off + offs_m,
            mask_m,
            lo,
            hi,
            lk,
            ev_ptr,
            stride_evr,
            stride_evd,
            offs_d,
            mask_d,
            NR,
            K,
            F32,
            not SPLIT_K,
            q.dtype,
            NB,
            BLOCK_M,
            BLOCK_N,
        )
    out = acc / l_safe[:, None]
    if QPACK > 1:
        o_rows = (
            o_ptr
            + row * stride_ob
            + (h * stride_oh + (first + _wide_rows(offs_m, WIDE)) * stride_om)[:, None]
        )
    else:
        o_rows = (
            o_ptr
            + row * stride_ob
            + h * stride_oh
            + (first + _wide_rows(offs_m, WIDE)[:, None]) * stride_om
        )
    if SPLIT_K:  # float32 partials (B, H, splits, LQ, D), merged by _relbias_combine_kernel
        o_rows += split * stride_os
    tl.store(
        o_rows + offs_d[None, :] * stride_od,
        out.to(o_ptr.dtype.element_ty),
        mask=mask_m[:, None] & mask_d[None, :],
    )
    lse = m_i + tl.log2(l_safe)
    if SEQ == CACHE and not SPLIT_K:  # a row that sees no key: +inf, so the backward's p is 0
        lse = tl.where(l_i == 0.0, float("inf"), lse)
    tl.store(lse_ptr + rows, lse, mask=mask_m)


@triton.jit
def _relbias_combine_kernel(
    part_ptr,
    lse_ptr,
    o_ptr,
    stride_ob,
    stride_oh,
    stride_om,
    stride_od,
    H,
    LQ,
    D,
    NUM_SPLITS,
    WIDE: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    """out = the split forward's partial outputs (B, H, S, LQ, D) float32 weighted by their
    base-2 log-sum-exps (B * H * S, LQ): sum_s 2^(lse_s - lse) out_s, lse = log2 sum_s
    2^lse_s; a row no split saw (lse -inf everywhere) is 0. One program per (query block,
    b * h), streaming the splits."""
    pid_m, _, pid_bh, _ = _program(LQ, BLOCK_M)
    b, h = pid_bh // H, pid_bh % H
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    mask_m, mask_d = offs_m < LQ, offs_d < D
    mask = mask_m[:, None] & mask_d[None, :]
    m_i = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    l_i = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, BLOCK_D), tl.float32)
    for s in range(NUM_SPLITS):
        rows = (pid_bh * NUM_SPLITS + s) * LQ + offs_m
        lse = tl.load(lse_ptr + rows, mask=mask_m, other=float("-inf"))
        part = tl.load(part_ptr + rows[:, None] * D + offs_d[None, :], mask=mask, other=0.0)
        m_new = tl.maximum(m_i, lse)
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha, w = tl.exp2(m_i - m_safe), tl.exp2(lse - m_safe)
        l_i = l_i * alpha + w
        acc = acc * alpha[:, None] + part * w[:, None]
        m_i = m_new
    out = acc / tl.where(l_i == 0.0, 1.0, l_i)[:, None]
    o_rows = o_ptr + b * stride_ob + h * stride_oh + _wide_rows(offs_m, WIDE)[:, None] * stride_om
    tl.store(o_rows + offs_d[None, :] * stride_od, out.to(o_ptr.dtype.element_ty), mask=mask)
