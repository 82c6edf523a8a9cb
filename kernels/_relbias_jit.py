"""The Triton kernels behind kernels.relbias: tile helpers, the forward kernel, the two backward
kernels and the backward's preprocessing. Launchers, tiles and autograd live in
kernels/relbias.py.

Why this file is long: the kernels of one op (forward, delta, dk/dv, dq) and the tile helpers
they share, which are read against each other (each backward recomputes the forward's scores);
split, the same score and bias code would be read in three places.

Layout: q (B, H, Lq, D), k and v (B, H, Lk, D), any strides; a flat grid (CUDA caps a grid's
second dimension at 65535, the first at 2**31 - 1), one program per (query block, b * h)
(forward, dq) or (key block, b * h) (dk/dv), blocks of one head adjacent so that they share
its k and v in L2. Scores, softmax statistics and accumulators are float32; dot operands stay
in the input dtype (tensor cores) with float32 accumulation; float32 inputs use 3xTF32 (about
float32's accuracy on tensor cores, as SDPA does; the interpreter computes exact float32).
UPCAST: bfloat16 operands to float32 under the interpreter, whose bfloat16 tl.dot is wrong.

Logits are kept in base 2: s2 = (scale q k^T + bias) * log2(e), so a probability is one exp2
and the softmax scale folds into one multiply; the saved row log-sum-exp is base 2 too.

Biases of r = j - i, with idx = clip(r, -K, K) + K the relative index:
  ALIBI    -slope_h |r|;
  TABLE    table[gidx[idx], h]: T5's bucket table read through each offset's bucket (exact
           buckets, no logarithm in the kernel), or Shaw's scalar table (gidx[idx] = idx); its
           gradient is summed per bucket gidx[idx];
  SHAW_KV  Shaw's key term gathered from relk = scale * Q E_K^T (B, H, Lq, 2K + 1), and with
           HAS_VALUE the value term: per-row sums of the probabilities per index.

The key loop runs in three parts (the query loop of dk/dv likewise), because Triton's software
pipeliner skips a loop that holds another loop: the blocks entirely at r <= -K ("before": every
offset clips to index 0), those entirely at r >= K ("after": index 2K), and the band between.
Before and after, the bias is one value per row (TABLE, SHAW_KV) or a difference of a column
and a row term (ALIBI), no mask but the last key block's bounds (MASK_N), and the per-index
sums are one vector per row: no inner loop, so those loops get multi-buffered async copies and
async wgmma. Only the band (at most (BLOCK_M + 2K) / BLOCK_N + 1 blocks) masks, gathers and
loops over its tile's indices [lo, hi], taken from the tile's corners.
"""

import triton
import triton.language as tl

ALIBI, TABLE, SHAW_KV = 0, 1, 2
# how the queries and keys of a program are found (_sequence)
SELF, AT_END, CACHE, PACKED = 0, 1, 2, 3
# the parts of a loop (masked band, r <= -K, r >= K) and log2(e); constexprs: a kernel may read
# a global only as one
BAND, BEFORE, AFTER = tl.constexpr(0), tl.constexpr(1), tl.constexpr(2)
LOG2E = tl.constexpr(1.4426950408889634)


@triton.jit
def _dot(a, b, F32: tl.constexpr):
    """F32 0: half-precision operands (tensor cores); 1: float32 as three TF32 products, about
    float32's accuracy on tensor cores (the forward); 2: float32 IEEE on the FMA units (the
    backward kernels, whose 3xTF32 splits spilled at every tile tools/tile_search.py tried)."""
    if F32 == 1:
        return tl.dot(a, b, input_precision="tf32x3")
    elif F32 == 2:
        return tl.dot(a, b, input_precision="ieee")
    else:
        return tl.dot(a, b)


@triton.jit
def _load_block(ptr, offs, mask_rows, stride_row, offs_d, mask_d, stride_d, UPCAST: tl.constexpr):
    """A (rows, BLOCK_D) block of q, k, v, out or do; UPCAST: to float32 (interpreter)."""
    x = tl.load(
        ptr + offs[:, None] * stride_row + offs_d[None, :] * stride_d,
        mask=mask_rows[:, None] & mask_d[None, :],
        other=0.0,
    )
    if UPCAST:
        x = x.to(tl.float32)
    return x


@triton.jit
def _program(L, BLOCK: tl.constexpr, SPLITS=1):
    """(block index, key split, b * h) of this program in the flat grid: a head's blocks (and
    their splits) adjacent. L: the longest sequence's rows (the grid's blocks per head)."""
    n_blocks = tl.cdiv(L, BLOCK)
    pid = tl.program_id(0)
    rest = pid // n_blocks
    return pid % n_blocks, rest % SPLITS, (rest // SPLITS).to(tl.int64), n_blocks


@triton.jit
def _sequence(seq_ptr, b, LQ, LK, SEQ: tl.constexpr):
    """Sequence b's (batch row, first row, query rows, key rows, query offset); query i sits at
    position offset + i, key j at j, both counted from the first row:
      SELF     one sequence a batch row, Lq == Lk (offset 0: the plain kernels' code);
      AT_END   queries at the keys' end, offset LK - LQ (a decode step, a prefill chunk);
      CACHE    row b's keys 0 .. kv_lens[b] (seq_ptr, clamped to [0, LK]), queries at their end;
      PACKED   document b of batch row 0: rows cu[b] .. cu[b + 1] (seq_ptr: cu_seqlens)."""
    row, first, lq, lk, off = b, 0, LQ, LK, 0
    if SEQ == 1:
        off = LK - LQ
    elif SEQ == 2:
        lk = tl.minimum(tl.maximum(tl.load(seq_ptr + b).to(tl.int32), 0), LK)  # int64 given
        off = lk - LQ
    elif SEQ == 3:
        first = tl.load(seq_ptr + b).to(tl.int64)
        lq = (tl.load(seq_ptr + b + 1) - first).to(tl.int32)
        lk = lq
        row = b * 0
    return row, first, lq, lk, off


@triton.jit
def _parts(
    x0,
    start,
    end,
    K: tl.constexpr,
    LOW: tl.constexpr,
    HIGH: tl.constexpr,
    BLOCK_X: tl.constexpr,
    BLOCK_Y: tl.constexpr,
    SPLIT: tl.constexpr,
):
    """The streamed blocks [start, end) (multiples of BLOCK_Y) against the held block
    [x0, x0 + BLOCK_X): [start, lo) lie K or more below it, [hi, end) K or more above, [lo, hi)
    is the band. LOW / HIGH: whether those outer parts can hold anything (causal removes one).
    SPLIT False: everything is band (one masked loop: float32 IEEE on the FMA units, where the
    three loops' code spills and there is no tensor-core pipeline to feed)."""
    if not SPLIT:
        return start, end
    lo = start
    if LOW:
        lo = tl.maximum(lo, tl.maximum(x0 - K + 1, 0) // BLOCK_Y * BLOCK_Y)
    lo = tl.minimum(lo, end)
    hi = end
    if HIGH:
        hi = tl.minimum(tl.maximum(tl.cdiv(x0 + BLOCK_X - 1 + K, BLOCK_Y) * BLOCK_Y, lo), end)
    return lo, hi


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
def _part_bias(
    rows,
    mask,
    table_row,
    stride_tb,
    gidx_ptr,
    stride_rr,
    PART: tl.constexpr,
    BIAS: tl.constexpr,
    K: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """The base-2 bias of a part beyond the clip, per query (BLOCK,): TABLE its value at the
    part's index (0 before, 2K after), SHAW_KV relk there (rows: relk's row pointers); ALiBi 0
    (its bias varies along a row: added per element by _far_logits)."""
    at = (PART == AFTER) * 2 * K
    out = tl.zeros((BLOCK,), tl.float32)
    if BIAS == 1:
        out += tl.load(table_row + tl.load(gidx_ptr + at) * stride_tb) * LOG2E
    elif BIAS == 2:
        out += tl.load(rows + at * stride_rr, mask=mask, other=0.0) * LOG2E
    return out


@triton.jit
def _far_logits(
    qk, bias, rel, mask, slope2, PART: tl.constexpr, BIAS: tl.constexpr, MASK: tl.constexpr
):
    """Base-2 logits of a tile beyond the clip: qk (already scaled) + the part's bias (broadcast
    like qk), ALiBi's -slope |r| with the part's sign of r; -inf past the bounds if MASK."""
    s = qk + bias
    if BIAS == 0:  # -slope |r| = slope r before (r <= 0), -slope r after (bias is 0)
        s += rel.to(tl.float32) * (slope2 * (1 - 2 * (PART == AFTER)))
    if MASK:
        s = tl.where(mask, s, float("-inf"))
    return s


@triton.jit
def _band_logits(
    qk,
    rel,
    mask,
    slope2,
    table_row,
    stride_tb,
    gidx_ptr,
    relk_rows,
    stride_rr,
    BIAS: tl.constexpr,
    CAUSAL: tl.constexpr,
    K: tl.constexpr,
):
    """Base-2 logits of a band tile in either orientation (rel = j - i laid out like qk): qk +
    bias(r), -inf where masked (bounds, causal). relk_rows: Shaw's key-term row pointers of the
    tile's queries, broadcast like qk. Returns the logits, the relative index, the kept mask."""
    idx = tl.minimum(tl.maximum(rel, -K), K) + K
    keep = mask
    if CAUSAL:
        keep = keep & (rel <= 0)
    if BIAS == 0:  # ALiBi: -m_h |j - i|
        s = qk - slope2 * tl.abs(rel).to(tl.float32)
    elif BIAS == 1:  # this head's table at the index's bucket: T5, or Shaw's scalar
        s = qk + tl.load(table_row + tl.load(gidx_ptr + idx) * stride_tb) * LOG2E
    else:  # Shaw's key term, gathered from scale * Q E_K^T
        s = qk + tl.load(relk_rows + idx * stride_rr, mask=keep, other=0.0) * LOG2E
    return tl.where(keep, s, float("-inf")), idx, keep


@triton.jit
def _row_sums(acc, x, idx, keep, lo, hi, NB: tl.constexpr):
    """acc (BLOCK_M, NB) += the row sums of x (BLOCK_M, BLOCK_N) per relative index, over the
    tile's index range [lo, hi] only (the band's inner loop)."""
    cols = tl.arange(0, NB)[None, :]
    for r in range(lo, hi + 1):
        part = tl.sum(tl.where(keep & (idx == r), x, 0.0), 1)
        acc += tl.where(cols == r, part[:, None], 0.0)
    return acc


@triton.jit
def _fwd_part(
    acc,
    l_i,
    m_i,
    sums,
    side0,
    side1,
    q,
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
    gidx_ptr,
    relk_rows,
    stride_rr,
    PART: tl.constexpr,
    LOW: tl.constexpr,
    BIAS: tl.constexpr,
    CAUSAL: tl.constexpr,
    K: tl.constexpr,
    HAS_VALUE: tl.constexpr,
    MASK_N: tl.constexpr,
    NB: tl.constexpr,
    UPCAST: tl.constexpr,
    F32: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    """The forward over the key blocks [lo, hi) of one part: the online softmax (base 2) into
    acc, l_i, m_i; with Shaw's value term the probability sums per index (band: sums; before
    and after: side0, side1 at indices 0 and 2K), rescaled like acc."""
    bias = _part_bias(
        relk_rows, mask_m, table_row, stride_tb, gidx_ptr, stride_rr, PART, BIAS, K, BLOCK_M
    )[:, None]
    a, z = lo, hi  # the band; LOW is the part in [start, lo), the other is [hi, end)
    if PART == LOW:
        a, z = start, lo
    elif PART != BAND:
        a, z = hi, end
    for n0 in range(a, z, BLOCK_N):
        offs_n = n0 + tl.arange(0, BLOCK_N)
        mask_n = offs_n < LK
        k = _load_block(k_base, offs_n, mask_n, stride_kn, offs_d, mask_d, stride_kd, UPCAST)
        v = _load_block(v_base, offs_n, mask_n, stride_vn, offs_d, mask_d, stride_vd, UPCAST)
        qk = _dot(q, tl.trans(k), F32) * qk_scale
        rel = (offs_n - q_off)[None, :] - offs_m[:, None]  # j - (q_off + i): a scalar shift
        if PART == BAND:
            s, idx, keep = _band_logits(
                qk,
                rel,
                mask_m[:, None] & mask_n[None, :],
                slope2,
                table_row,
                stride_tb,
                gidx_ptr,
                relk_rows[:, None],
                stride_rr,
                BIAS,
                CAUSAL,
                K,
            )
        else:
            s = _far_logits(qk, bias, rel, mask_n[None, :], slope2, PART, BIAS, MASK_N)
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # rows with nothing yet
        p = tl.exp2(s - m_safe[:, None])
        alpha = tl.exp2(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + _dot(p.to(v.dtype), v, F32)
        if HAS_VALUE:
            side0, side1 = side0 * alpha, side1 * alpha
            if PART == BAND:  # the last part: sums is zero before it
                i_lo, i_hi = _index_range(m0 + q_off, n0, BLOCK_M, BLOCK_N, K)
                sums = _row_sums(sums * alpha[:, None], p, idx, keep, i_lo, i_hi, NB)
            elif PART == BEFORE:
                side0 += tl.sum(p, 1)
            else:
                side1 += tl.sum(p, 1)
        m_i = m_new
    return acc, l_i, m_i, sums, side0, side1


@triton.jit
def _relbias_fwd_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    o_ptr,
    lse_ptr,
    slopes_ptr,
    table_ptr,
    gidx_ptr,
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
    BIAS: tl.constexpr,
    CAUSAL: tl.constexpr,
    K: tl.constexpr,
    HAS_VALUE: tl.constexpr,
    NB: tl.constexpr,
    MASK_N: tl.constexpr,
    UPCAST: tl.constexpr,
    F32: tl.constexpr,
    SPLIT: tl.constexpr,
    GROUP: tl.constexpr,
    SEQ: tl.constexpr,
    SPLIT_K: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    """One program per (query block, b * h): reads its q block once, streams k and v blocks
    (before, after, then the band). Writes out, the base-2 row log-sum-exp (B * H, LQ) for the
    backward, and with Shaw's value term the normalized per-index probability sums pn
    (B * H, LQ, NR), also for the backward, added to out as sums @ E_V. qk_scale: scale *
    log2(e); MASK_N: LK is not a multiple of BLOCK_N (the last key block has bounds)."""
    grid_rows = LQ  # packed: the longest document's (the compiler keeps LQ's facts)
    if SEQ == 3:
        grid_rows = LG
    pid_m, split, pid_bh, _ = _program(grid_rows, BLOCK_M, NUM_SPLITS)
    b, h = pid_bh // H, pid_bh % H
    row, first, lq, lk, q_off = _sequence(seq_ptr, b, LQ, LK, SEQ)
    m0 = pid_m * BLOCK_M
    offs_m = m0 + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    mask_m, mask_d = offs_m < lq, offs_d < D
    q_base = q_ptr + row * stride_qb + h * stride_qh + first * stride_qm
    q = _load_block(q_base, offs_m, mask_m, stride_qm, offs_d, mask_d, stride_qd, UPCAST)
    # grouped-query: its group's kv
    k_base = k_ptr + row * stride_kb + (h // GROUP) * stride_kh + first * stride_kn
    v_base = v_ptr + row * stride_vb + (h // GROUP) * stride_vh + first * stride_vn
    relk_rows = relk_ptr + row * stride_rb + h * stride_rh + (first + offs_m) * stride_rm
    slope2 = 0.0
    if BIAS == 0:
        slope2 = tl.load(slopes_ptr + h) * LOG2E
    table_row = table_ptr + h * stride_th
    m_i = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    l_i = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, BLOCK_D), tl.float32)
    sums = tl.zeros((BLOCK_M, NB), tl.float32)
    side0 = tl.zeros((BLOCK_M,), tl.float32)
    side1 = tl.zeros((BLOCK_M,), tl.float32)
    end = lk
    if CAUSAL:  # key blocks entirely beyond the diagonal contribute nothing
        end = tl.minimum(lk, m0 + q_off + BLOCK_M)
    if SEQ == 3:  # a block past its document's end (the grid spans the longest): no keys
        end = tl.where(m0 < lq, end, 0)
    start = 0
    if SPLIT_K:  # this program's share of the keys: [split * CHUNK, + CHUNK)
        start = split * CHUNK
        end = tl.minimum(end, start + CHUNK)
    lo, hi = _parts(m0 + q_off, start, end, K, True, not CAUSAL, BLOCK_M, BLOCK_N, SPLIT)
    # before [0, lo), after [hi, end), then the band [lo, hi) (its sums are zero until then)
    for i in tl.static_range(3):
        acc, l_i, m_i, sums, side0, side1 = _fwd_part(
            acc,
            l_i,
            m_i,
            sums,
            side0,
            side1,
            q,
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
            gidx_ptr,
            relk_rows,
            stride_rr,
            (i + 1) % 3,
            BEFORE,
            BIAS,
            CAUSAL,
            K,
            HAS_VALUE,
            MASK_N,
            NB,
            UPCAST,
            F32,
            BLOCK_M,
            BLOCK_N,
        )
    l_safe = tl.where(l_i == 0.0, 1.0, l_i)  # rows past LQ, or that see no key
    rows = ((row * H + h) * NUM_SPLITS + split) * LQ + first + offs_m  # lse's, pn's rows
    if HAS_VALUE:
        offs_r = tl.arange(0, NB)
        sums += tl.where(offs_r[None, :] == 0, side0[:, None], 0.0)
        sums += tl.where(offs_r[None, :] == 2 * K, side1[:, None], 0.0)
        ev = tl.load(
            ev_ptr + offs_r[:, None] * stride_evr + offs_d[None, :] * stride_evd,
            mask=(offs_r[:, None] < NR) & mask_d[None, :],
            other=0.0,
        )
        if F32 != 0:  # once per program: IEEE (3xTF32 of a (NB, D) float32 tile would spill)
            acc += tl.dot(sums, ev, input_precision="ieee")
        else:
            acc += _dot(sums.to(q.dtype), ev.to(q.dtype), F32)  # as p @ v: tensor cores
        if not SPLIT_K:  # (a split forward is never differentiated)
            tl.store(
                pn_ptr + rows[:, None] * NR + offs_r[None, :],
                sums / l_safe[:, None],
                mask=mask_m[:, None] & (offs_r[None, :] < NR),
            )
    out = acc / l_safe[:, None]
    o_rows = o_ptr + row * stride_ob + h * stride_oh + (first + offs_m[:, None]) * stride_om
    if SPLIT_K:  # float32 partials (B, H, splits, LQ, D), merged by _relbias_combine_kernel
        o_rows += split * stride_os
    tl.store(
        o_rows + offs_d[None, :] * stride_od,
        out.to(o_ptr.dtype.element_ty),
        mask=mask_m[:, None] & mask_d[None, :],
    )
    lse = m_i + tl.log2(l_safe)
    if SEQ == 2 and not SPLIT_K:  # a row that sees no key: +inf, so the backward's p is 0
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
    o_rows = o_ptr + b * stride_ob + h * stride_oh + offs_m[:, None] * stride_om
    tl.store(o_rows + offs_d[None, :] * stride_od, out.to(o_ptr.dtype.element_ty), mask=mask)


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
    )
    tl.store(delta_ptr + pid_bh * LQ + offs_m, tl.sum(o * do, 1), mask=mask_m)


@triton.jit
def _dkdv_part(
    dk,
    dv,
    k,
    v,
    q_base,
    do_base,
    stride_qm,
    stride_qd,
    stride_dm,
    stride_dd,
    offs_n,
    mask_n,
    offs_d,
    mask_d,
    start,
    lo,
    hi,
    end,
    LQ,
    lse_rows,
    delta_rows,
    qk_scale,
    slope2,
    table_row,
    stride_tb,
    gidx_ptr,
    relk_base,
    stride_rm,
    stride_rr,
    g_base,
    stride_gm,
    stride_gr,
    PART: tl.constexpr,
    LOW: tl.constexpr,
    BIAS: tl.constexpr,
    CAUSAL: tl.constexpr,
    K: tl.constexpr,
    HAS_VALUE: tl.constexpr,
    UPCAST: tl.constexpr,
    F32: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    """dk, dv of the held keys over the query blocks [lo, hi) of one part: dv += p^T do,
    dk += ds^T q (scaled by the caller). The tile is computed transposed, keys by queries, so
    that every dot has this program's BLOCK_N keys as its M (wgmma's >= 64 whatever BLOCK_M)
    and p, ds need no transpose. Query rows past LQ read lse = +inf: p = 0, no mask needed."""
    a, z = lo, hi  # the band; LOW is the part in [start, lo), the other is [hi, end)
    if PART == LOW:
        a, z = start, lo
    elif PART != BAND:
        a, z = hi, end
    for m0 in range(a, z, BLOCK_M):
        offs_m = m0 + tl.arange(0, BLOCK_M)
        mask_m = offs_m < LQ
        q = _load_block(q_base, offs_m, mask_m, stride_qm, offs_d, mask_d, stride_qd, UPCAST)
        do = _load_block(do_base, offs_m, mask_m, stride_dm, offs_d, mask_d, stride_dd, UPCAST)
        lse = tl.load(lse_rows + offs_m, mask=mask_m, other=float("inf"))
        delta = tl.load(delta_rows + offs_m, mask=mask_m, other=0.0)
        qk_t = _dot(k, tl.trans(q), F32) * qk_scale
        rel_t = offs_n[:, None] - offs_m[None, :]
        relk_rows = relk_base + offs_m * stride_rm
        g_rows = g_base + offs_m * stride_gm
        if PART == BAND:
            s_t, idx_t, keep_t = _band_logits(
                qk_t,
                rel_t,
                mask_n[:, None] & mask_m[None, :],
                slope2,
                table_row,
                stride_tb,
                gidx_ptr,
                relk_rows[None, :],
                stride_rr,
                BIAS,
                CAUSAL,
                K,
            )
        else:
            bias = _part_bias(
                relk_rows, mask_m, table_row, stride_tb, gidx_ptr, stride_rr, PART, BIAS, K, BLOCK_M
            )
            s_t = _far_logits(qk_t, bias[None, :], rel_t, mask_m, slope2, PART, BIAS, False)
        p_t = tl.exp2(s_t - lse[None, :])  # 0 where masked
        dp_t = _dot(v, tl.trans(do), F32)
        if HAS_VALUE:
            if PART == BAND:
                dp_t += tl.load(g_rows[None, :] + idx_t * stride_gr, mask=keep_t, other=0.0)
            else:
                at = (PART == AFTER) * 2 * K
                dp_t += tl.load(g_rows + at * stride_gr, mask=mask_m, other=0.0)[None, :]
        ds_t = p_t * (dp_t - delta[None, :])
        dv += _dot(p_t.to(do.dtype), do, F32)
        dk += _dot(ds_t.to(q.dtype), q, F32)
    return dk, dv


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
    gidx_ptr,
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
    stride_gb,
    stride_gh,
    stride_gm,
    stride_gr,
    H,
    LQ,
    LK,
    LG,
    D,
    qk_scale,
    BIAS: tl.constexpr,
    CAUSAL: tl.constexpr,
    K: tl.constexpr,
    HAS_VALUE: tl.constexpr,
    UPCAST: tl.constexpr,
    F32: tl.constexpr,
    SPLIT: tl.constexpr,
    GROUP: tl.constexpr,
    SEQ: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    """One program per (key block, b * h): dk and dv of its keys, streaming the query blocks
    (after, i.e. r >= K; before; the band), written in dk's dtype with dk and dv's strides
    (stride_x*, shared: both are allocated alike). Grouped-query heads (GROUP > 1): k and v
    are read from kv head h // GROUP and dk, dv written per query head into float32 buffers
    (B, H, Lk, D) that the host sums over each group (as FlashAttention 2 does: an outer loop
    over the group in this kernel spills at every tile tried, 255 registers)."""
    grid_rows = LK  # packed: the longest document's (the compiler keeps LK's facts)
    if SEQ == 3:
        grid_rows = LG
    pid_n, _, pid_bh, _ = _program(grid_rows, BLOCK_N)
    b, h = pid_bh // H, pid_bh % H
    row, first, lq, lk, q_off = _sequence(seq_ptr, b, LQ, LK, SEQ)
    n0 = pid_n * BLOCK_N
    offs_n = n0 + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    mask_n, mask_d = offs_n < lk, offs_d < D
    k = _load_block(
        k_ptr + row * stride_kb + (h // GROUP) * stride_kh + first * stride_kn,
        offs_n,
        mask_n,
        stride_kn,
        offs_d,
        mask_d,
        stride_kd,
        UPCAST,
    )
    v = _load_block(
        v_ptr + row * stride_vb + (h // GROUP) * stride_vh + first * stride_vn,
        offs_n,
        mask_n,
        stride_vn,
        offs_d,
        mask_d,
        stride_vd,
        UPCAST,
    )
    slope2 = 0.0
    if BIAS == 0:
        slope2 = tl.load(slopes_ptr + h) * LOG2E
    table_row = table_ptr + h * stride_th
    q_base = q_ptr + row * stride_qb + h * stride_qh + first * stride_qm
    do_base = do_ptr + row * stride_db + h * stride_dh + first * stride_dm
    relk_base = relk_ptr + row * stride_rb + h * stride_rh + first * stride_rm
    g_base = g_ptr + row * stride_gb + h * stride_gh + first * stride_gm
    lse_rows = lse_ptr + (row * H + h) * LQ + first
    delta_rows = delta_ptr + (row * H + h) * LQ + first
    dk = tl.zeros((BLOCK_N, BLOCK_D), tl.float32)
    dv = tl.zeros((BLOCK_N, BLOCK_D), tl.float32)
    end = lq
    if SEQ >= 2:  # a key block past its sequence's keys: no queries (dk, dv stored as 0)
        end = tl.where(n0 < lk, end, 0)
    start = 0
    if CAUSAL:  # query rows at positions below j see none of these keys
        start = tl.maximum(n0 - q_off, 0) // BLOCK_M * BLOCK_M
    # the keys seen from the queries' rows: position j - q_off
    lo, hi = _parts(n0 - q_off, start, end, K, not CAUSAL, True, BLOCK_N, BLOCK_M, SPLIT)
    # after [start, lo) (queries K or more before the keys), before [hi, end), the band
    for i in tl.static_range(3):
        dk, dv = _dkdv_part(
            dk,
            dv,
            k,
            v,
            q_base,
            do_base,
            stride_qm,
            stride_qd,
            stride_dm,
            stride_dd,
            offs_n - q_off,  # the part reads offs_n for r = j - i only
            mask_n,
            offs_d,
            mask_d,
            start,
            lo,
            hi,
            end,
            lq,
            lse_rows,
            delta_rows,
            qk_scale,
            slope2,
            table_row,
            stride_tb,
            gidx_ptr,
            relk_base,
            stride_rm,
            stride_rr,
            g_base,
            stride_gm,
            stride_gr,
            2 - i,
            AFTER,
            BIAS,
            CAUSAL,
            K,
            HAS_VALUE,
            UPCAST,
            F32,
            BLOCK_M,
            BLOCK_N,
        )
    rows = first + offs_n[:, None]
    out = row * stride_xb + h * stride_xh + rows * stride_xm + offs_d[None, :] * stride_xd
    mask = mask_n[:, None] & mask_d[None, :]
    if SEQ == 2:  # the keys past kv_lens[b] get a zero gradient (the far parts do not mask
        # keys: those rows of the block that straddles kv_lens[b] hold garbage until here)
        dk, dv = tl.where(mask_n[:, None], dk, 0.0), tl.where(mask_n[:, None], dv, 0.0)
        mask = (offs_n < LK)[:, None] & mask_d[None, :]
    tl.store(dk_ptr + out, (dk * (qk_scale / LOG2E)).to(dk_ptr.dtype.element_ty), mask=mask)
    tl.store(dv_ptr + out, dv.to(dv_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _dq_part(
    dq,
    totals,
    rel_sums,
    side0,
    side1,
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
    gidx_ptr,
    relk_rows,
    stride_rr,
    g_rows,
    stride_gr,
    PART: tl.constexpr,
    LOW: tl.constexpr,
    BIAS: tl.constexpr,
    CAUSAL: tl.constexpr,
    K: tl.constexpr,
    HAS_VALUE: tl.constexpr,
    TABLE_GRAD: tl.constexpr,
    MASK_N: tl.constexpr,
    NB: tl.constexpr,
    UPCAST: tl.constexpr,
    F32: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    """dq of the held queries over the key blocks [lo, hi) of one part, and the bias gradient
    (sums of ds): band tiles per index (SHAW_KV: rel_sums per row; TABLE: totals per bucket,
    looping over the tile's buckets; ALiBi: side0, weighted by -|r|); before and after, one
    vector per row (side0 at index 0, side1 at 2K), no inner loop. p = exp2(s2 - lse2)."""
    bias = _part_bias(
        relk_rows, mask_m, table_row, stride_tb, gidx_ptr, stride_rr, PART, BIAS, K, BLOCK_M
    )[:, None]
    if HAS_VALUE and PART != BAND:
        at = (PART == AFTER) * 2 * K
        g_part = tl.load(g_rows + at * stride_gr, mask=mask_m, other=0.0)[:, None]
    cols = tl.arange(0, NB)
    a, z = lo, hi  # the band; LOW is the part in [start, lo), the other is [hi, end)
    if PART == LOW:
        a, z = start, lo
    elif PART != BAND:
        a, z = hi, end
    for n0 in range(a, z, BLOCK_N):
        offs_n = n0 + tl.arange(0, BLOCK_N)
        mask_n = offs_n < LK
        k = _load_block(k_base, offs_n, mask_n, stride_kn, offs_d, mask_d, stride_kd, UPCAST)
        v = _load_block(v_base, offs_n, mask_n, stride_vn, offs_d, mask_d, stride_vd, UPCAST)
        qk = _dot(q, tl.trans(k), F32) * qk_scale
        rel = (offs_n - q_off)[None, :] - offs_m[:, None]  # j - (q_off + i): a scalar shift
        if PART == BAND:
            s, idx, keep = _band_logits(
                qk,
                rel,
                mask_m[:, None] & mask_n[None, :],
                slope2,
                table_row,
                stride_tb,
                gidx_ptr,
                relk_rows[:, None],
                stride_rr,
                BIAS,
                CAUSAL,
                K,
            )
        else:
            s = _far_logits(qk, bias, rel, mask_n[None, :], slope2, PART, BIAS, MASK_N)
        p = tl.exp2(s - lse[:, None])  # 0 where masked (s = -inf) and past LQ (lse = +inf)
        dp = _dot(do, tl.trans(v), F32)
        if HAS_VALUE:
            if PART == BAND:
                dp += tl.load(g_rows[:, None] + idx * stride_gr, mask=keep, other=0.0)
            else:
                dp += g_part
        ds = p * (dp - delta[:, None])
        dq += _dot(ds.to(k.dtype), k, F32)
        if BIAS == 2 or TABLE_GRAD:
            w = ds
            if BIAS == 0:  # d/d slope of -slope |r|
                w = ds * -tl.abs(rel).to(tl.float32)
            if PART == BEFORE or (BIAS == 0 and PART == BAND):
                side0 += tl.sum(w, 1)
            elif PART == AFTER:
                side1 += tl.sum(w, 1)
            elif BIAS == 2:
                i_lo, i_hi = _index_range(m0 + q_off, n0, BLOCK_M, BLOCK_N, K)
                rel_sums = _row_sums(rel_sums, ds, idx, keep, i_lo, i_hi, NB)
            else:
                i_lo, i_hi = _index_range(m0 + q_off, n0, BLOCK_M, BLOCK_N, K)
                g_lo, g_hi = _bucket_range(gidx_ptr, i_lo, i_hi, K)
                bucket = tl.load(gidx_ptr + idx)
                for g in range(g_lo, g_hi + 1):
                    in_g = tl.sum(tl.where(keep & (bucket == g), ds, 0.0))
                    totals += tl.where(cols == g, in_g, 0.0)
    return dq, totals, rel_sums, side0, side1


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
    stride_gb,
    stride_gh,
    stride_gm,
    stride_gr,
    H,
    LQ,
    LK,
    LG,
    D,
    NR,
    qk_scale,
    BIAS: tl.constexpr,
    CAUSAL: tl.constexpr,
    K: tl.constexpr,
    HAS_VALUE: tl.constexpr,
    TABLE_GRAD: tl.constexpr,
    NB: tl.constexpr,
    MASK_N: tl.constexpr,
    UPCAST: tl.constexpr,
    F32: tl.constexpr,
    SPLIT: tl.constexpr,
    GROUP: tl.constexpr,
    SEQ: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    """One program per (query block, b * h): dq of its rows (in q's dtype, dq's strides
    stride_x*), streaming the key blocks (before, after, the band), and the bias gradient, the
    sum of ds over the tiles:
      - ALiBi (TABLE_GRAD): -sum ds |j - i| into part (B * H, n_blocks, NB) at column 0;
      - TABLE (TABLE_GRAD): sums of ds per bucket gidx[idx] into part, one (NB,) vector per
        program (no per-row sums);
      - SHAW_KV: per-row sums of ds per index into drel (B * H, LQ, NR): the gradient of
        relk = scale * Q E_K^T (the host turns it into dq and dE_K)."""
    grid_rows = LQ  # packed: the longest document's (the compiler keeps LQ's facts)
    if SEQ == 3:
        grid_rows = LG
    pid_m, _, pid_bh, n_blocks = _program(grid_rows, BLOCK_M)
    b, h = pid_bh // H, pid_bh % H
    row, first, lq, lk, q_off = _sequence(seq_ptr, b, LQ, LK, SEQ)
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
    )
    relk_rows = relk_ptr + row * stride_rb + h * stride_rh + (first + offs_m) * stride_rm
    g_rows = g_ptr + row * stride_gb + h * stride_gh + (first + offs_m) * stride_gm
    rows = (row * H + h) * LQ + first + offs_m  # lse's, delta's and drel's rows
    lse = tl.load(lse_ptr + rows, mask=mask_m, other=float("inf"))
    delta = tl.load(delta_ptr + rows, mask=mask_m, other=0.0)
    slope2 = 0.0
    if BIAS == 0:
        slope2 = tl.load(slopes_ptr + h) * LOG2E
    table_row = table_ptr + h * stride_th
    k_base = k_ptr + row * stride_kb + (h // GROUP) * stride_kh + first * stride_kn
    v_base = v_ptr + row * stride_vb + (h // GROUP) * stride_vh + first * stride_vn
    dq = tl.zeros((BLOCK_M, BLOCK_D), tl.float32)
    cols = tl.arange(0, NB)
    totals = tl.zeros((NB,), tl.float32)  # TABLE: per bucket, this program's band tiles
    rel_sums = tl.zeros((BLOCK_M, NB), tl.float32)  # SHAW_KV: per row (else unused: removed)
    side0 = tl.zeros((BLOCK_M,), tl.float32)
    side1 = tl.zeros((BLOCK_M,), tl.float32)
    end = lk
    if CAUSAL:
        end = tl.minimum(lk, m0 + q_off + BLOCK_M)
    if SEQ == 3:  # a block past its document's end: no keys
        end = tl.where(m0 < lq, end, 0)
    lo, hi = _parts(m0 + q_off, 0, end, K, True, not CAUSAL, BLOCK_M, BLOCK_N, SPLIT)
    # before [0, lo), after [hi, end), then the band [lo, hi)
    for i in tl.static_range(3):
        dq, totals, rel_sums, side0, side1 = _dq_part(
            dq,
            totals,
            rel_sums,
            side0,
            side1,
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
            0,
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
            gidx_ptr,
            relk_rows,
            stride_rr,
            g_rows,
            stride_gr,
            (i + 1) % 3,
            BEFORE,
            BIAS,
            CAUSAL,
            K,
            HAS_VALUE,
            TABLE_GRAD,
            MASK_N,
            NB,
            UPCAST,
            F32,
            BLOCK_M,
            BLOCK_N,
        )
    out = row * stride_xb + h * stride_xh + (first + offs_m[:, None]) * stride_xm
    out += offs_d[None, :] * stride_xd
    dq = dq * (qk_scale / LOG2E)
    tl.store(dq_ptr + out, dq.to(dq_ptr.dtype.element_ty), mask=mask_m[:, None] & mask_d[None, :])
    if BIAS == 2:
        rel_sums += tl.where(cols[None, :] == 0, side0[:, None], 0.0)
        rel_sums += tl.where(cols[None, :] == 2 * K, side1[:, None], 0.0)
        tl.store(
            drel_ptr + rows[:, None] * NR + cols[None, :],
            rel_sums,
            mask=mask_m[:, None] & (cols[None, :] < NR),
        )
    elif TABLE_GRAD:
        if BIAS == 0:
            totals += tl.where(cols == 0, tl.sum(side0) + tl.sum(side1), 0.0)
        else:
            totals += tl.where(cols == tl.load(gidx_ptr), tl.sum(side0), 0.0)
            totals += tl.where(cols == tl.load(gidx_ptr + 2 * K), tl.sum(side1), 0.0)
        tl.store(part_ptr + (pid_bh * n_blocks + pid_m) * NB + cols, totals)
