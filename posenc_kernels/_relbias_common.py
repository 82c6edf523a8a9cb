"""What the relative-bias attention kernels share (posenc_kernels/_relbias_fwd.py, _relbias_dq.py,
_relbias_dkdv.py; launchers in posenc_kernels/relbias.py): the named constants, the tile helpers,
the bias of each family, the three-part key loop and the sequence layout.

Layout: q (B, H, Lq, D), k and v (B, Hk, Lk, D), any strides, or (the forward, PAGE > 0)
paged caches (num_blocks, PAGE, Hk, D) read through a block table (_load_kv); a flat grid
(CUDA caps a grid's second dimension at 65535, the first at 2**31 - 1), one program per
(query block, b * h) (forward, dq) or (key block, b * h) (dk/dv), blocks of one head adjacent
so that they share its k and v in L2. Row offsets within a head are 32-bit unless its rows
span 2**31 elements (WIDE: 64-bit, _wide_rows). Scores, softmax statistics and accumulators
are float32; dot operands stay in the input dtype (tensor cores) with float32 accumulation;
float32 inputs use 3xTF32 (about float32's accuracy on tensor cores, as SDPA does; the
interpreter computes exact float32).
UPCAST: bfloat16 operands to float32 under the interpreter, whose bfloat16 tl.dot is wrong.

Logits are kept in base 2: s2 = (scale q k^T + bias) * log2(e), so a probability is one exp2
and the softmax scale folds into one multiply; the saved row log-sum-exp is base 2 too.

Biases of r = j - i, with idx = clip(r, -K, K) + K the relative index:
  ALIBI    -slope_h |r|;
  TABLE    table[h, idx]: the bias per relative index (T5's table gathered at each index's
           exact bucket by the host, no logarithm in the kernel and one load a score; Shaw's
           scalar table as given); its gradient is summed per index, then per bucket (host);
  SHAW_KV  Shaw's key term gathered from relk = scale * Q E_K^T (B, H, Lq, 2K + 1), and with
           HAS_VALUE the value term: per-row sums of the probabilities per index;
  + COL    a per-key term subtracted (_key_col): FoX's D_i - D_j is SHAW_KV with K = 0 whose
           relk is each query's D_i (B, H, Lq, 1), and whose column term is D_j (B, H, Lk), the
           cumulative sums of the log forget gates (Lin et al. 2025).

The key loop runs in three parts (the query loop of dk/dv likewise), because Triton's software
pipeliner skips a loop that holds another loop: the blocks entirely at r <= -K ("before": every
offset clips to index 0), those entirely at r >= K ("after": index 2K), and the band between.
Before and after, the bias is one value per row (TABLE, SHAW_KV) or a difference of a column
and a row term (ALIBI), no mask but the last key block's bounds (MASK_N), and the per-index
sums are one vector per row: no inner loop, so those loops get multi-buffered async copies and
async wgmma. Only the band (at most (BLOCK_M + 2K) / BLOCK_N + 1 blocks) masks and gathers.
Inside the clip (0 < idx < 2K) a (row, index) is one key, so Shaw's key and value terms store
the band's values straight at (row, index) (the forward's logits, dq's ds: _band_written) and
sum only the two clipped indices: no loop over indices, the band pipelined too. The tables'
gradients (T5, Shaw's scalar bias) take the same path: dq's ds per (row, index), summed per
bucket by the host.

A sliding WINDOW W (a constexpr, 0 without): query i at position p sees keys j with
p - W < j <= p (causal, transformers' convention); the loops start at the window's first block
(_window_start; the dk/dv query loop ends at the last query that sees the key block), and every
part masks r <= -W (the window's edge may cross any block before the band: one `where` a tile,
no inner loop, so the parts stay pipelined).

Why this file is long: this docstring is the three passes' shared specification (layout,
logits, each family's bias, the three-part loop), written once here rather than in each pass.
"""

import triton
import triton.language as tl

# Constexprs (a kernel may read a global only as one); the launchers pass their `.value`.
# The bias paths (the BIAS argument):
ALIBI, TABLE, SHAW_KV = tl.constexpr(0), tl.constexpr(1), tl.constexpr(2)
# how the queries and keys of a program are found (SEQ, _sequence)
SELF, AT_END, CACHE, PACKED = tl.constexpr(0), tl.constexpr(1), tl.constexpr(2), tl.constexpr(3)
# the dots' float32 mode (F32, _dot): half-precision operands, 3xTF32, IEEE
NATIVE, TF32X3, IEEE = tl.constexpr(0), tl.constexpr(1), tl.constexpr(2)
# the parts of a loop (masked band, r <= -K, r >= K) and log2(e)
BAND, BEFORE, AFTER = tl.constexpr(0), tl.constexpr(1), tl.constexpr(2)
LOG2E = tl.constexpr(1.4426950408889634)
# the order the flat grid's programs take their blocks (ORDER, _program): a head's blocks
# adjacent; or, for a causal forward or dk/dv, the heaviest blocks first (the query blocks last
# in the sequence, LAST_FIRST; the key blocks first, FIRST_FIRST), HEAD_GROUP heads at a time
# so that the programs in flight read a few heads' k and v (they stay in L2): the last wave holds
# light programs, not the heaviest (docs/kernels.md: a list-scheduling model of the waves)
NATURAL, LAST_FIRST, FIRST_FIRST = tl.constexpr(0), tl.constexpr(1), tl.constexpr(2)
HEAD_GROUP = tl.constexpr(8)


@triton.jit
def _dot(a, b, F32: tl.constexpr):
    """F32 0: half-precision operands (tensor cores); 1: float32 as three TF32 products, about
    float32's accuracy on tensor cores (the forward); 2: float32 IEEE on the FMA units (the
    backward kernels, whose 3xTF32 splits spilled at every tile tools/tile_search.py tried)."""
    if F32 == TF32X3:
        return tl.dot(a, b, input_precision="tf32x3")
    elif F32 == IEEE:
        return tl.dot(a, b, input_precision="ieee")
    else:
        return tl.dot(a, b)


@triton.jit
def _dot_acc(a, b, acc, F32: tl.constexpr):
    """_dot's product added to acc."""
    if F32 == TF32X3:
        return tl.dot(a, b, acc, input_precision="tf32x3")
    elif F32 == IEEE:
        return tl.dot(a, b, acc, input_precision="ieee")
    else:
        return tl.dot(a, b, acc)


@triton.jit
def _wide_rows(rows, WIDE: tl.constexpr):
    """Row indices for an address: 64-bit with WIDE, where a head's rows span 2**31 elements
    or more (a (B, L, H, D) layout at L x H x D past it: 131072 tokens of 128 heads of 128;
    posenc_kernels/relbias.py sets it from the strides), whose 32-bit products wrap to another
    head's memory; 32-bit otherwise (fewer registers, the same code as without the flag)."""
    if WIDE:
        rows = tl.cast(rows, tl.int64)  # (the interpreter: a Python int)
    return rows


@triton.jit
def _load_block(
    ptr,
    offs,
    mask_rows,
    stride_row,
    offs_d,
    mask_d,
    stride_d,
    UPCAST: tl.constexpr,
    WIDE: tl.constexpr,
):
    """A (rows, BLOCK_D) block of q, k, v, out or do; UPCAST: to float32 (interpreter); WIDE:
    64-bit row offsets (_wide_rows)."""
    x = tl.load(
        ptr + _wide_rows(offs, WIDE)[:, None] * stride_row + offs_d[None, :] * stride_d,
        mask=mask_rows[:, None] & mask_d[None, :],
        other=0.0,
    )
    if UPCAST:
        x = x.to(tl.float32)
    return x


@triton.jit
def _load_kv(
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
    UPCAST: tl.constexpr,
    WIDE: tl.constexpr,
    PAGE: tl.constexpr,
):
    """The (BLOCK_N, BLOCK_D) key and value blocks of keys offs_n: rows of k_base, v_base; or
    paged (PAGE > 0, the cache's block size): key j at slot j % PAGE of cache block
    bt_row[j // PAGE] (vLLM's layout). The block table is read once per key (BLOCK_N / PAGE
    distinct entries a block, from L1): the rows are gathered, not one strided span."""
    if PAGE == 0:
        k = _load_block(k_base, offs_n, mask_n, stride_kn, offs_d, mask_d, stride_kd, UPCAST, WIDE)
        v = _load_block(v_base, offs_n, mask_n, stride_vn, offs_d, mask_d, stride_vd, UPCAST, WIDE)
    else:
        block = tl.load(bt_row + offs_n // PAGE, mask=mask_n, other=0).to(tl.int64)
        slot = offs_n % PAGE
        rows_k, rows_v = block * stride_kp + slot * stride_kn, block * stride_vp + slot * stride_vn
        k = _load_block(k_base, rows_k, mask_n, 1, offs_d, mask_d, stride_kd, UPCAST, WIDE)
        v = _load_block(v_base, rows_v, mask_n, 1, offs_d, mask_d, stride_vd, UPCAST, WIDE)
    return k, v


@triton.jit
def _key_col(col_base, offs_n, mask_n, stride_cn, COL: tl.constexpr):
    """FoX's per-key bias term in base 2, c_j log2(e) (BLOCK_N,), which every query's logit
    subtracts: the bias is c_i - c_j, its per-query term c_i read as Shaw's key term at index
    0 (K = 0). 0.0 without COL."""
    col = 0.0
    if COL:
        col = tl.load(col_base + offs_n * stride_cn, mask=mask_n, other=0.0) * LOG2E
    return col


@triton.jit
def _program(L, BLOCK: tl.constexpr, SPLITS=1, ORDER: tl.constexpr = NATURAL):
    """(block index, key split, b * h) of this program in the flat grid (ORDER above; NATURAL:
    a head's blocks and their splits adjacent). L: the longest sequence's rows (the grid's
    blocks per head)."""
    n_blocks = tl.cdiv(L, BLOCK)
    pid = tl.program_id(0)
    if ORDER == NATURAL:
        rest = pid // n_blocks
        return pid % n_blocks, rest % SPLITS, (rest // SPLITS).to(tl.int64), n_blocks
    # a group of HEAD_GROUP heads (the last one may hold fewer), within it block by block
    # from the heaviest, each block's heads adjacent
    q = pid // SPLITS
    heads = tl.num_programs(0) // (n_blocks * SPLITS)
    g0 = q // (HEAD_GROUP * n_blocks) * HEAD_GROUP
    size = tl.minimum(heads - g0, HEAD_GROUP)
    within = q - g0 * n_blocks
    rank = within // size
    block = rank
    if ORDER == LAST_FIRST:
        block = n_blocks - 1 - rank
    return block, pid % SPLITS, (g0 + within % size).to(tl.int64), n_blocks


@triton.jit
def _sequence(seq_ptr, b, LQ, LK, SEQ: tl.constexpr):
    """Sequence b's (batch row, first row, query rows, key rows, query offset); query i sits at
    position offset + i, key j at j, both counted from the first row:
      SELF     one sequence a batch row, Lq == Lk (offset 0: the plain kernels' code);
      AT_END   queries at the keys' end, offset LK - LQ (a decode step, a prefill chunk);
      CACHE    row b's keys 0 .. kv_lens[b] (seq_ptr, clamped to [0, LK]), queries at their end;
      PACKED   document b of batch row 0: rows cu[b] .. cu[b + 1] (seq_ptr: cu_seqlens)."""
    row, first, lq, lk, off = b, 0, LQ, LK, 0
    if SEQ == AT_END:
        off = LK - LQ
    elif SEQ == CACHE:
        lk = tl.minimum(tl.maximum(tl.load(seq_ptr + b).to(tl.int32), 0), LK)  # int64 given
        off = lk - LQ
    elif SEQ == PACKED:
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
def _part_bias(
    rows,
    mask,
    table_row,
    stride_tb,
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
    if BIAS == TABLE:
        out += tl.load(table_row + at * stride_tb) * LOG2E
    elif BIAS == SHAW_KV:
        out += tl.load(rows + at * stride_rr, mask=mask, other=0.0) * LOG2E
    return out


@triton.jit
def _far_logits(
    qk,
    bias,
    rel,
    mask,
    slope2,
    PART: tl.constexpr,
    BIAS: tl.constexpr,
    MASK: tl.constexpr,
    WINDOW: tl.constexpr = 0,
):
    """Base-2 logits of a tile beyond the clip: qk (already scaled) + the part's bias (broadcast
    like qk), ALiBi's -slope |r| with the part's sign of r; masked as _far_mask."""
    s = qk + bias
    if BIAS == ALIBI:  # -slope |r| = slope r before (r <= 0), -slope r after (bias is 0)
        s += rel.to(tl.float32) * (slope2 * (1 - 2 * (PART == AFTER)))
    return _far_mask(s, rel, mask, MASK, WINDOW)


@triton.jit
def _far_mask(s, rel, mask, MASK: tl.constexpr, WINDOW: tl.constexpr):
    """Logits beyond the clip, -inf past the bounds if MASK, and with a WINDOW at r <= -WINDOW
    (its edge may cross any block before the band)."""
    if MASK:
        s = tl.where(mask, s, float("-inf"))
    if WINDOW > 0:
        s = tl.where(rel > -WINDOW, s, float("-inf"))
    return s


@triton.jit
def _far_terms(pos, bias, slope2, PART: tl.constexpr, BIAS: tl.constexpr):
    """Beyond the clip a logit is qk + t(j) - t(i), a key's term and a query's (base 2), so
    the backward adds one to each score and subtracts the other once a row, with lse (one
    FMA and one add a score where the per-score path takes integer, conversion, multiply and
    two adds): ALiBi's -slope |j - i| = sign slope ((j - ref) - (i - ref)), positions counted
    from a reference inside the held block (`pos`: int positions minus it; from position 0
    both terms grow with it and their difference loses float32's digits: slope x position x
    2^-24); the other families' bias is the query's (`bias`, the part's; 0.0 for a key).
    Returns t(pos) - bias. (The forward's ALiBi computes the same two terms in its own lines,
    as ptxas allocates them there: its running max takes the query's.)"""
    t = -bias
    if BIAS == ALIBI:
        t += pos.to(tl.float32) * (slope2 * (1 - 2 * (PART == AFTER)))
    return t


@triton.jit
def _band_logits(
    qk,
    rel,
    mask,
    slope2,
    table_row,
    stride_tb,
    relk_base,
    relk_off,
    stride_rr,
    BIAS: tl.constexpr,
    CAUSAL: tl.constexpr,
    K: tl.constexpr,
    WINDOW: tl.constexpr = 0,
):
    """Base-2 logits of a band tile in either orientation (rel = j - i laid out like qk): qk +
    bias(r), -inf where masked (bounds, causal, and with a WINDOW the keys at r <= -WINDOW).
    relk_base + relk_off: Shaw's key-term rows of the tile's queries, broadcast like qk, each a
    row of relk (rows past the queries clamped to the last: the gather takes no mask, whose
    predicates cost registers the backward's tiles lack); a scalar base and int32 offsets keep
    one register an address. Returns the logits, the relative index, the kept mask."""
    idx = tl.minimum(tl.maximum(rel, -K), K) + K
    keep = mask
    if CAUSAL:
        keep = keep & (rel <= 0)
    if WINDOW > 0:
        keep = keep & (rel > -WINDOW)
    if BIAS == ALIBI:  # -m_h |j - i|
        s = qk - slope2 * tl.abs(rel).to(tl.float32)
    elif BIAS == TABLE:  # this head's table at the index's bucket: T5, or Shaw's scalar
        s = qk + tl.load(table_row + idx * stride_tb) * LOG2E
    elif K == 0:  # FoX: one index, a value a row (broadcast, not gathered per score)
        s = qk + tl.load(relk_base + relk_off) * LOG2E
    else:  # Shaw's key term, gathered from scale * Q E_K^T
        s = qk + tl.load(relk_base + (relk_off + idx * stride_rr)) * LOG2E
    return tl.where(keep, s, float("-inf")), idx, keep


@triton.jit
def _band_written(pos, offs_r, mask_m, lo, hi, lk, K: tl.constexpr, BLOCK_N: tl.constexpr):
    """(rows, indices offs_r) mask of the per-index entries the band loop stored (Shaw's value
    term's logits, its key term's ds): an index strictly inside the clip is one key, j = pos +
    idx - K, stored by the band block that holds it if that block was streamed ([lo, hi) in
    whole blocks) and j is a key (< lk). pos: the rows' positions."""
    band_end = lo + tl.cdiv(hi - lo, BLOCK_N) * BLOCK_N
    j = pos[:, None] + (offs_r - K)[None, :]
    inner = ((offs_r > 0) & (offs_r < 2 * K))[None, :]
    return mask_m[:, None] & inner & (j >= lo) & (j < band_end) & (j < lk)


@triton.jit
def _part_span(PART: tl.constexpr, LOW: tl.constexpr, start, lo, hi, end):
    """The streamed blocks of one part of a loop: the band [lo, hi); LOW is the part in
    [start, lo), the other outer part is [hi, end)."""
    a, z = lo, hi
    if PART == LOW:
        a, z = start, lo
    elif PART != BAND:
        a, z = hi, end
    return a, z


@triton.jit
def _program_of(
    seq_ptr,
    H,
    LQ,
    LK,
    LG,
    L,
    BLOCK: tl.constexpr,
    SEQ: tl.constexpr,
    SPLITS=1,
    ORDER: tl.constexpr = NATURAL,
):
    """This program's (block, key split, b * h, blocks per head, head) and its sequence's
    (batch row, first row, query rows, key rows, query offset: _sequence). L: the rows its grid
    spans per head (LQ for query blocks, LK for key blocks); packed, the longest document's, LG
    (passed as L's stand-in, the compiler keeps L's facts otherwise)."""
    grid_rows = L
    if SEQ == PACKED:
        grid_rows = LG
    pid, split, pid_bh, n_blocks = _program(grid_rows, BLOCK, SPLITS, ORDER)
    h = pid_bh % H
    row, first, lq, lk, q_off = _sequence(seq_ptr, pid_bh // H, LQ, LK, SEQ)
    return pid, split, pid_bh, n_blocks, h, row, first, lq, lk, q_off


@triton.jit
def _window_start(start, x0, WINDOW: tl.constexpr, BLOCK: tl.constexpr):
    """The first streamed block a held block at position x0 reads with a WINDOW (keys j >
    x0 - WINDOW): the blocks before it are skipped, so the cost grows with L x WINDOW."""
    if WINDOW > 0:
        start = tl.maximum(start, tl.maximum(x0 - WINDOW + 1, 0) // BLOCK * BLOCK)
    return start


@triton.jit
def _head_bias(slopes_ptr, table_ptr, stride_th, h, BIAS: tl.constexpr):
    """Head h's bias terms: ALiBi's slope in base 2 (0.0 otherwise) and its table row."""
    slope2 = 0.0
    if BIAS == ALIBI:
        slope2 = tl.load(slopes_ptr + h) * LOG2E
    return slope2, table_ptr + h * stride_th


@triton.jit
def _key_end(lk, lq, m0, q_off, CAUSAL: tl.constexpr, SEQ: tl.constexpr, BLOCK_M: tl.constexpr):
    """The end of the keys a query block [m0, m0 + BLOCK_M) reads: lk, or with causal the block
    after its last query's position (key blocks entirely beyond the diagonal contribute
    nothing); packed, 0 for a block past its document's end (the grid spans the longest)."""
    end = lk
    if CAUSAL:
        end = tl.minimum(lk, m0 + q_off + BLOCK_M)
    if SEQ == PACKED:
        end = tl.where(m0 < lq, end, 0)
    return end
