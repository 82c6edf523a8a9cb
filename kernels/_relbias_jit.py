"""The Triton kernels behind kernels.relbias: tile helpers, the forward kernel, the two backward
kernels. Launchers, tiles and autograd live in kernels/relbias.py.

Why this file is long: the three kernels of one op (forward, dk/dv, dq) and the tile helpers
they share, which are read against each other (each backward recomputes the forward's scores);
split, the same score and bias code would be read in three places.

Layout: q (B, H, Lq, D), k and v (B, H, Lk, D), any strides; one program per (query block,
b * h) (forward, dq) or (key block, b * h) (dk/dv). Scores, softmax statistics and accumulators
are float32; dot operands stay in the input dtype (tensor cores) with float32 accumulation,
IEEE dots for float32 inputs (UPCAST: bfloat16 under the interpreter, whose bfloat16 tl.dot is
wrong).

Biases of r = j - i, with idx = clip(r, -K, K) + K the relative index:
  ALIBI    -slope_h |r|;
  TABLE    table[h, idx], an (H, 2K + 1) float32 table built on the host: Shaw's scalar bias,
           or T5's bucket table gathered by each offset's bucket (exact buckets, no logarithm
           in the kernel); its gradient is summed per bucket `gidx[idx]` (T5: the bucket;
           Shaw: idx itself);
  SHAW_KV  Shaw's key term gathered from relk = scale * Q E_K^T (B, H, Lq, 2K + 1), and with
           HAS_VALUE the value term: per-row sums of the probabilities per index.
A tile's indices run from clip(n0 - m_last) to clip(n_last - m0) (idx grows with r), so loops
over a tile's indices or buckets take their range from the tile's corners, not from reductions;
a tile beyond the clip distance has one index and loops once.
"""

import triton
import triton.language as tl

ALIBI, TABLE, SHAW_KV = 0, 1, 2


@triton.jit
def _dot(a, b, IEEE: tl.constexpr):
    if IEEE:
        return tl.dot(a, b, input_precision="ieee")
    else:
        return tl.dot(a, b)


@triton.jit
def _load_block(ptr, offs, mask_rows, stride_row, offs_d, mask_d, stride_d, UPCAST: tl.constexpr):
    """A (rows, BLOCK_D) block of q, k, v or do; UPCAST: to float32 (bfloat16, interpreter)."""
    x = tl.load(
        ptr + offs[:, None] * stride_row + offs_d[None, :] * stride_d,
        mask=mask_rows[:, None] & mask_d[None, :],
        other=0.0,
    )
    if UPCAST:
        x = x.to(tl.float32)
    return x


@triton.jit
def _index_range(m0, n0, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, K: tl.constexpr):
    """The relative indices of the tile [m0, m0 + BLOCK_M) x [n0, n0 + BLOCK_N): lo, hi."""
    lo = tl.minimum(tl.maximum(n0 - (m0 + BLOCK_M - 1), -K), K) + K
    hi = tl.minimum(tl.maximum(n0 + BLOCK_N - 1 - m0, -K), K) + K
    return lo, hi


@triton.jit
def _bucket_range(gidx_ptr, lo, hi, K: tl.constexpr):
    """The buckets gidx[lo .. hi] span. gidx is monotone on each side of r = 0 (T5's bucket
    grows with |r| on each side; Shaw's is idx): its extremes lie at lo, hi, and, where the
    range holds r = 0 and r = 1, at idx K and K + 1."""
    a, b = tl.load(gidx_ptr + lo), tl.load(gidx_ptr + hi)
    c = tl.load(gidx_ptr + tl.minimum(tl.maximum(K, lo), hi))
    d = tl.load(gidx_ptr + tl.minimum(tl.maximum(K + 1, lo), hi))
    g_lo = tl.minimum(tl.minimum(a, b), tl.minimum(c, d))
    g_hi = tl.maximum(tl.maximum(a, b), tl.maximum(c, d))
    return g_lo, g_hi


@triton.jit
def _biased(
    s,
    rel,
    mask,
    slope,
    table_row,
    relk_rows,
    stride_rr,
    BIAS: tl.constexpr,
    CAUSAL: tl.constexpr,
    K: tl.constexpr,
):
    """s + bias(r) for a tile of logits in either orientation (rel = j - i laid out like s),
    -inf where masked (bounds, causal). relk_rows: Shaw's key-term rows of the tile's queries,
    broadcast like s. Returns the logits, the relative index and the kept mask."""
    idx = tl.minimum(tl.maximum(rel, -K), K) + K
    keep = mask
    if CAUSAL:
        keep = keep & (rel <= 0)
    if BIAS == 0:  # ALiBi: -m_h |j - i|
        s += -slope * tl.abs(rel).to(tl.float32)
    elif BIAS == 1:  # a table row of this head, unit stride: T5 (by bucket) or Shaw's scalar
        s += tl.load(table_row + idx)
    else:  # Shaw's key term, gathered from scale * Q E_K^T
        s += tl.load(relk_rows + idx * stride_rr, mask=keep, other=0.0)
    return tl.where(keep, s, float("-inf")), idx, keep


@triton.jit
def _scores(
    q,
    k,
    scale,
    offs_m,
    offs_n,
    mask_m,
    mask_n,
    slope,
    table_row,
    relk_rows,
    stride_rr,
    BIAS: tl.constexpr,
    CAUSAL: tl.constexpr,
    K: tl.constexpr,
    IEEE: tl.constexpr,
):
    """Logits of a (BLOCK_M, BLOCK_N) tile, queries by keys: scale q k^T + bias. Returns the
    logits, r = j - i, the relative index and the kept mask."""
    s = _dot(q, tl.trans(k), IEEE) * scale
    rel = offs_n[None, :] - offs_m[:, None]
    s, idx, keep = _biased(
        s,
        rel,
        mask_m[:, None] & mask_n[None, :],
        slope,
        table_row,
        relk_rows,
        stride_rr,
        BIAS,
        CAUSAL,
        K,
    )
    return s, rel, idx, keep


@triton.jit
def _row_sums(acc, x, idx, keep, lo, hi, NB: tl.constexpr):
    """acc (BLOCK_M, NB) += the row sums of x (BLOCK_M, BLOCK_N) per relative index, over the
    tile's index range [lo, hi] only (once for a tile beyond the clip)."""
    cols = tl.arange(0, NB)[None, :]
    for r in range(lo, hi + 1):
        part = tl.sum(tl.where(keep & (idx == r), x, 0.0), 1)
        acc += tl.where(cols == r, part[:, None], 0.0)
    return acc


@triton.jit
def _tile_grads(
    q,
    k,
    v,
    do,
    lse,
    delta,
    scale,
    offs_m,
    offs_n,
    mask_m,
    mask_n,
    slope,
    table_row,
    relk_rows,
    g_rows,
    stride_rr,
    BIAS: tl.constexpr,
    CAUSAL: tl.constexpr,
    K: tl.constexpr,
    HAS_VALUE: tl.constexpr,
    IEEE: tl.constexpr,
):
    """The dq kernel's backward of one tile: p = exp(s - lse) from the saved row log-sum-exp,
    dp = do v^T (plus, with Shaw's value term, g = do E_V^T gathered at the index),
    ds = p (dp - delta) with delta = rowsum(do * out). Returns ds, r = j - i, the index, the
    kept mask."""
    s, rel, idx, keep = _scores(
        q,
        k,
        scale,
        offs_m,
        offs_n,
        mask_m,
        mask_n,
        slope,
        table_row,
        relk_rows,
        stride_rr,
        BIAS,
        CAUSAL,
        K,
        IEEE,
    )
    p = tl.exp(s - lse[:, None])  # 0 where masked (s = -inf)
    dp = _dot(do, tl.trans(v), IEEE)
    if HAS_VALUE:
        dp += tl.load(g_rows + idx * stride_rr, mask=keep, other=0.0)
    return p * (dp - delta[:, None]), rel, idx, keep


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
    stride_th,
    stride_rb,
    stride_rh,
    stride_rm,
    stride_rr,
    stride_evr,
    stride_evd,
    H,
    LQ,
    LK,
    D,
    NR,
    scale,
    BIAS: tl.constexpr,
    CAUSAL: tl.constexpr,
    K: tl.constexpr,
    HAS_VALUE: tl.constexpr,
    NB: tl.constexpr,
    UPCAST: tl.constexpr,
    IEEE: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    """One program per (query block, b * h): reads its q block once, streams k and v blocks.
    Writes out, the row log-sum-exp (B * H, LQ) for the backward, and with Shaw's value term
    the normalized per-index probability sums pn (B * H, LQ, NR), also for the backward: the
    per-row sums (BLOCK_M, NB) are kept, rescaled like the output, and added as sums @ E_V."""
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1).to(tl.int64)
    b, h = pid_bh // H, pid_bh % H
    m0 = pid_m * BLOCK_M
    offs_m = m0 + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    mask_m, mask_d = offs_m < LQ, offs_d < D
    q = _load_block(
        q_ptr + b * stride_qb + h * stride_qh,
        offs_m,
        mask_m,
        stride_qm,
        offs_d,
        mask_d,
        stride_qd,
        UPCAST,
    )
    relk_rows = relk_ptr + b * stride_rb + h * stride_rh + offs_m[:, None] * stride_rm
    slope = 0.0
    if BIAS == 0:
        slope = tl.load(slopes_ptr + h)
    table_row = table_ptr + h * stride_th
    m_i = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    l_i = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, BLOCK_D), tl.float32)
    sums = tl.zeros((BLOCK_M, NB), tl.float32)
    end = LK
    if CAUSAL:  # key blocks entirely beyond the diagonal contribute nothing
        end = tl.minimum(LK, m0 + BLOCK_M)
    for n0 in range(0, end, BLOCK_N):
        offs_n = n0 + tl.arange(0, BLOCK_N)
        mask_n = offs_n < LK
        k = _load_block(
            k_ptr + b * stride_kb + h * stride_kh,
            offs_n,
            mask_n,
            stride_kn,
            offs_d,
            mask_d,
            stride_kd,
            UPCAST,
        )
        v = _load_block(
            v_ptr + b * stride_vb + h * stride_vh,
            offs_n,
            mask_n,
            stride_vn,
            offs_d,
            mask_d,
            stride_vd,
            UPCAST,
        )
        s, rel, idx, keep = _scores(
            q,
            k,
            scale,
            offs_m,
            offs_n,
            mask_m,
            mask_n,
            slope,
            table_row,
            relk_rows,
            stride_rr,
            BIAS,
            CAUSAL,
            K,
            IEEE,
        )
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # rows with nothing yet
        p = tl.exp(s - m_safe[:, None])
        alpha = tl.exp(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + _dot(p.to(v.dtype), v, IEEE)
        if HAS_VALUE:
            lo, hi = _index_range(m0, n0, BLOCK_M, BLOCK_N, K)
            sums = _row_sums(sums * alpha[:, None], p, idx, keep, lo, hi, NB)
        m_i = m_new
    l_safe = tl.where(l_i == 0.0, 1.0, l_i)  # rows past LQ
    if HAS_VALUE:
        offs_r = tl.arange(0, NB)
        ev = tl.load(
            ev_ptr + offs_r[:, None] * stride_evr + offs_d[None, :] * stride_evd,
            mask=(offs_r[:, None] < NR) & mask_d[None, :],
            other=0.0,
        )
        acc += _dot(sums.to(q.dtype), ev.to(q.dtype), IEEE)  # as p @ v: wgmma in half types
        tl.store(
            pn_ptr + (pid_bh * LQ + offs_m[:, None]) * NR + offs_r[None, :],
            sums / l_safe[:, None],
            mask=mask_m[:, None] & (offs_r[None, :] < NR),
        )
    out = acc / l_safe[:, None]
    tl.store(
        o_ptr
        + b * stride_ob
        + h * stride_oh
        + offs_m[:, None] * stride_om
        + offs_d[None, :] * stride_od,
        out.to(o_ptr.dtype.element_ty),
        mask=mask_m[:, None] & mask_d[None, :],
    )
    tl.store(lse_ptr + pid_bh * LQ + offs_m, m_i + tl.log(l_safe), mask=mask_m)


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
    stride_rb,
    stride_rh,
    stride_rm,
    stride_rr,
    H,
    LQ,
    LK,
    D,
    scale,
    BIAS: tl.constexpr,
    CAUSAL: tl.constexpr,
    K: tl.constexpr,
    HAS_VALUE: tl.constexpr,
    UPCAST: tl.constexpr,
    IEEE: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    """One program per (key block, b * h): dk and dv of its keys, streaming the query blocks:
    dv = p^T do, dk = scale ds^T q. dk and dv are float32 (B, H, LK, D) buffers with strides
    stride_x*. relk and g share one layout (B, H, LQ, NR), strides stride_r*."""
    pid_n = tl.program_id(0)
    pid_bh = tl.program_id(1).to(tl.int64)
    b, h = pid_bh // H, pid_bh % H
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    mask_n, mask_d = offs_n < LK, offs_d < D
    k = _load_block(
        k_ptr + b * stride_kb + h * stride_kh,
        offs_n,
        mask_n,
        stride_kn,
        offs_d,
        mask_d,
        stride_kd,
        UPCAST,
    )
    v = _load_block(
        v_ptr + b * stride_vb + h * stride_vh,
        offs_n,
        mask_n,
        stride_vn,
        offs_d,
        mask_d,
        stride_vd,
        UPCAST,
    )
    slope = 0.0
    if BIAS == 0:
        slope = tl.load(slopes_ptr + h)
    table_row = table_ptr + h * stride_th
    dk = tl.zeros((BLOCK_N, BLOCK_D), tl.float32)
    dv = tl.zeros((BLOCK_N, BLOCK_D), tl.float32)
    start = 0
    if CAUSAL:  # query rows i < j see none of these keys
        start = (pid_n * BLOCK_N) // BLOCK_M * BLOCK_M
    for m0 in range(start, LQ, BLOCK_M):
        offs_m = m0 + tl.arange(0, BLOCK_M)
        mask_m = offs_m < LQ
        q = _load_block(
            q_ptr + b * stride_qb + h * stride_qh,
            offs_m,
            mask_m,
            stride_qm,
            offs_d,
            mask_d,
            stride_qd,
            UPCAST,
        )
        do = _load_block(
            do_ptr + b * stride_db + h * stride_dh,
            offs_m,
            mask_m,
            stride_dm,
            offs_d,
            mask_d,
            stride_dd,
            UPCAST,
        )
        lse = tl.load(lse_ptr + pid_bh * LQ + offs_m, mask=mask_m, other=0.0)
        delta = tl.load(delta_ptr + pid_bh * LQ + offs_m, mask=mask_m, other=0.0)
        # The tile transposed, keys by queries, so that every dot has this program's BLOCK_N
        # keys as its M (wgmma's >= 64 whatever BLOCK_M) and p, ds need no transpose.
        rows_t = (b * stride_rb + h * stride_rh + offs_m * stride_rm)[None, :]
        s_t = _dot(k, tl.trans(q), IEEE) * scale
        rel_t = offs_n[:, None] - offs_m[None, :]
        s_t, idx_t, keep_t = _biased(
            s_t,
            rel_t,
            mask_n[:, None] & mask_m[None, :],
            slope,
            table_row,
            relk_ptr + rows_t,
            stride_rr,
            BIAS,
            CAUSAL,
            K,
        )
        p_t = tl.exp(s_t - lse[None, :])  # 0 where masked
        dp_t = _dot(v, tl.trans(do), IEEE)
        if HAS_VALUE:
            dp_t += tl.load(g_ptr + rows_t + idx_t * stride_rr, mask=keep_t, other=0.0)
        ds_t = p_t * (dp_t - delta[None, :])
        dv += _dot(p_t.to(do.dtype), do, IEEE)
        dk += _dot(ds_t.to(q.dtype), q, IEEE)
    out = b * stride_xb + h * stride_xh + offs_n[:, None] * stride_xm + offs_d[None, :] * stride_xd
    mask = mask_n[:, None] & mask_d[None, :]
    tl.store(dk_ptr + out, dk * scale, mask=mask)
    tl.store(dv_ptr + out, dv, mask=mask)


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
    gidx_ptr,
    relk_ptr,
    g_ptr,
    drel_ptr,
    part_ptr,
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
    stride_rb,
    stride_rh,
    stride_rm,
    stride_rr,
    H,
    LQ,
    LK,
    D,
    NR,
    scale,
    BIAS: tl.constexpr,
    CAUSAL: tl.constexpr,
    K: tl.constexpr,
    HAS_VALUE: tl.constexpr,
    TABLE_GRAD: tl.constexpr,
    NB: tl.constexpr,
    UPCAST: tl.constexpr,
    IEEE: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    """One program per (query block, b * h): dq of its rows, streaming the key blocks, and the
    bias gradient, the sum of ds over the tiles:
      - ALiBi (TABLE_GRAD): -sum ds |j - i| into part (B * H, n_blocks, NB) at column 0;
      - TABLE (TABLE_GRAD): sums of ds per bucket gidx[idx] into part, one (NB,) vector per
        program (no per-row sums);
      - SHAW_KV: per-row sums of ds per index into drel (B * H, LQ, NR): the gradient of
        relk = scale * Q E_K^T (the host turns it into dq and dE_K).
    dq is a float32 (B, H, LQ, D) buffer with strides stride_x*."""
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1).to(tl.int64)
    b, h = pid_bh // H, pid_bh % H
    m0 = pid_m * BLOCK_M
    offs_m = m0 + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    mask_m, mask_d = offs_m < LQ, offs_d < D
    q = _load_block(
        q_ptr + b * stride_qb + h * stride_qh,
        offs_m,
        mask_m,
        stride_qm,
        offs_d,
        mask_d,
        stride_qd,
        UPCAST,
    )
    do = _load_block(
        do_ptr + b * stride_db + h * stride_dh,
        offs_m,
        mask_m,
        stride_dm,
        offs_d,
        mask_d,
        stride_dd,
        UPCAST,
    )
    rows = b * stride_rb + h * stride_rh + offs_m[:, None] * stride_rm
    lse = tl.load(lse_ptr + pid_bh * LQ + offs_m, mask=mask_m, other=0.0)
    delta = tl.load(delta_ptr + pid_bh * LQ + offs_m, mask=mask_m, other=0.0)
    slope = 0.0
    if BIAS == 0:
        slope = tl.load(slopes_ptr + h)
    table_row = table_ptr + h * stride_th
    dq = tl.zeros((BLOCK_M, BLOCK_D), tl.float32)
    cols = tl.arange(0, NB)
    totals = tl.zeros((NB,), tl.float32)  # per bucket, this program (ALiBi: column 0)
    rel_sums = tl.zeros((BLOCK_M, NB), tl.float32)  # SHAW_KV: per row (else unused: removed)
    end = LK
    if CAUSAL:
        end = tl.minimum(LK, m0 + BLOCK_M)
    for n0 in range(0, end, BLOCK_N):
        offs_n = n0 + tl.arange(0, BLOCK_N)
        mask_n = offs_n < LK
        k = _load_block(
            k_ptr + b * stride_kb + h * stride_kh,
            offs_n,
            mask_n,
            stride_kn,
            offs_d,
            mask_d,
            stride_kd,
            UPCAST,
        )
        v = _load_block(
            v_ptr + b * stride_vb + h * stride_vh,
            offs_n,
            mask_n,
            stride_vn,
            offs_d,
            mask_d,
            stride_vd,
            UPCAST,
        )
        ds, rel, idx, keep = _tile_grads(
            q,
            k,
            v,
            do,
            lse,
            delta,
            scale,
            offs_m,
            offs_n,
            mask_m,
            mask_n,
            slope,
            table_row,
            relk_ptr + rows,
            g_ptr + rows,
            stride_rr,
            BIAS,
            CAUSAL,
            K,
            HAS_VALUE,
            IEEE,
        )
        dq += _dot(ds.to(k.dtype), k, IEEE)
        if BIAS == 2:
            lo, hi = _index_range(m0, n0, BLOCK_M, BLOCK_N, K)
            rel_sums = _row_sums(rel_sums, ds, idx, keep, lo, hi, NB)
        elif TABLE_GRAD:
            if BIAS == 0:
                totals += tl.where(cols == 0, tl.sum(ds * -tl.abs(rel).to(tl.float32)), 0.0)
            else:
                lo, hi = _index_range(m0, n0, BLOCK_M, BLOCK_N, K)
                g_lo, g_hi = _bucket_range(gidx_ptr, lo, hi, K)
                bucket = tl.load(gidx_ptr + idx)
                for g in range(g_lo, g_hi + 1):
                    totals += tl.where(
                        cols == g, tl.sum(tl.where(keep & (bucket == g), ds, 0.0)), 0.0
                    )
    out = b * stride_xb + h * stride_xh + offs_m[:, None] * stride_xm + offs_d[None, :] * stride_xd
    tl.store(dq_ptr + out, dq * scale, mask=mask_m[:, None] & mask_d[None, :])
    if BIAS == 2:
        tl.store(
            drel_ptr + (pid_bh * LQ + offs_m[:, None]) * NR + cols[None, :],
            rel_sums,
            mask=mask_m[:, None] & (cols[None, :] < NR),
        )
    elif TABLE_GRAD:
        tl.store(part_ptr + (pid_bh * tl.num_programs(0) + pid_m) * NB + cols, totals)
