"""posenc_kernels.relative_attention over random combinations of its options (bias family,
causal, window, sinks, grouped heads, kv_lens, packed documents, paged caches, splits, layouts,
dtypes, tiles, scale, which tables train), each against a dense truth written here from the
definitions, outputs and every gradient.

The bound for a tensor in any dtype: FACTOR times what the same truth computed in that dtype
misses by, plus what the backward's row term moves, plus a floor of the dtype's relative error
at the logits' size. The kernels take delta = rowsum(dO * out) from their own output (in half
precision the probabilities are rounded to the dtype for the p v product, then the output), as
FlashAttention does, summed in float32; an error e_i in row i's delta moves each gradient by the
gradient of sum_i e_i lse_i, computed here from the truth. Where a row's softmax sits on one key
(or on a key and a sink) the eager reference's own error cancels and this term is the larger:
bfloat16 dk at 9 times the eager reference's error where a row's two logits gave 0.977 and
0.023, each rounded to 2**-9 of it."""

import math
import random
from dataclasses import dataclass, field

import pytest
import torch
import torch.nn.functional as nnf
from torch import Tensor

from posenc import functional as F
from posenc_kernels import relbias
from tests.posenc_kernels.test_relbias import DEVICE

CASES = 40
FACTOR = 4
FLOOR = {torch.float32: 1e-6, torch.float16: 1e-3, torch.bfloat16: 8e-3}
FAMILIES = ("none", "alibi", "t5", "shaw_bias", "shaw_k", "shaw_kv", "fox")


@dataclass
class Case:
    family: str
    causal: bool
    window: int  # 0: none
    seq: str  # plain | kv_lens | packed | paged
    dtype: torch.dtype
    heads: int
    kv_heads: int
    d: int
    batch: int
    lq: int
    lk: int
    docs: list = field(default_factory=list)  # packed: the documents' lengths
    sinks: bool = False
    trains: bool = False  # the tables require grad
    grad: bool = False
    q_scale: float = 1.0  # larger queries: a sharper softmax
    scale: float | None = None
    t5: tuple = (True, 32, 128)  # (bidirectional, num_buckets, max_distance)
    k: int = 3  # Shaw's clip
    layout: str = "bhsd"
    splits: int | None = None
    page: int = 8
    tiles: tuple | None = None  # (fwd_tiles, bwd_tiles)


def draw(seed: int) -> Case:
    """A random case that relative_attention accepts."""
    r = random.Random(seed)
    family = r.choice(FAMILIES)
    causal = family == "fox" or r.random() < 0.5
    seq = r.choice(["plain", "plain", "kv_lens", "packed", "paged"])
    kv_heads = r.choice([1, 2])
    c = Case(
        family=family,
        causal=causal,
        window=r.choice([0, 0, 1, 3, 20]) if causal else 0,
        seq=seq,
        dtype=r.choice([torch.float32, torch.float32, torch.float16, torch.bfloat16]),
        heads=kv_heads * r.choice([1, 2, 3]),
        kv_heads=kv_heads,
        d=r.choice([16, 24, 32, 64, 80]),
        batch=1 if seq == "packed" else r.choice([1, 2, 3]),
        lq=0,
        lk=0,
        sinks=r.random() < 0.3,
        q_scale=r.choice([1.0, 1.0, 6.0]),
        scale=r.choice([None, None, 0.3]),
        k=r.choice([1, 3, 8, 20]),
        layout=r.choice(["bhsd", "bshd"]),
        page=r.choice([4, 8, 16]),
    )
    bidirectional, buckets = r.random() < 0.7, r.choice([8, 16, 32])
    exact = buckets // (4 if bidirectional else 2)
    c.t5 = (bidirectional, buckets, r.choice([d for d in (8, 20, 128) if d > exact]))
    if seq == "packed":
        c.docs = [r.choice([1, 2, 5, 17, 40]) for _ in range(r.choice([1, 2, 3]))]
        c.lq = c.lk = sum(c.docs)
    else:
        c.lk = r.choice([1, 5, 16, 33, 70, 150])
        c.lq = min(c.lk, r.choice([1, 2, 3, c.lk, max(1, c.lk // 2)]))
    c.splits = r.choice([None, None, 1, 2, 3]) if seq != "packed" else None
    c.grad = seq != "paged" and not c.splits and r.random() < 0.7
    c.trains = c.grad and r.random() < 0.6
    if r.random() < 0.5:
        c.tiles = tuple(relbias.Tiles(r.choice([16, 32]), r.choice([16, 32])) for _ in range(2))
    return c


def tables(c: Case, keys: int, gen: torch.Generator) -> dict:
    """The family's tables (float64, float32-representable) under relative_attention's names."""

    def randn(*shape):
        return torch.randn(*shape, generator=gen, dtype=torch.float64).float().double()

    out = {}
    if c.family == "alibi":
        out["alibi_slopes"] = F.alibi_slopes(c.heads).float().double() * (1 + 0.3 * randn(c.heads))
    elif c.family == "t5":
        out["t5_table"] = randn(c.t5[1], c.heads)
    elif c.family == "shaw_bias":
        out["shaw_bias"] = randn(c.heads, 2 * c.k + 1)
    elif c.family in ("shaw_k", "shaw_kv"):
        out["shaw_k"] = 0.5 * randn(2 * c.k + 1, c.d)
        if c.family == "shaw_kv":
            out["shaw_v"] = 0.5 * randn(2 * c.k + 1, c.d)
    elif c.family == "fox":
        out["fox_log_f"] = nnf.logsigmoid(2.5 + randn(c.batch, c.heads, keys)).float().double()
    if c.sinks:
        out["sinks"] = randn(c.heads)
    return out


def _bias(c: Case, tabs: dict, h: int, r: Tensor, qh: Tensor, pos, keys, b: int, scale):
    """The logit term of relative positions r (m, n) for head h."""
    if c.family == "alibi":
        return -tabs["alibi_slopes"][h] * r.abs()
    if c.family == "t5":
        bidirectional, buckets, distance = c.t5
        return tabs["t5_table"][F.t5_relative_bucket(r, bidirectional, buckets, distance), h]
    if c.family == "shaw_bias":
        return tabs["shaw_bias"][h, r.clamp(-c.k, c.k) + c.k]
    if c.family in ("shaw_k", "shaw_kv"):
        ek = tabs["shaw_k"][r.clamp(-c.k, c.k) + c.k]  # (m, n, D)
        return scale * torch.einsum("md,mnd->mn", qh, ek)
    if c.family == "fox":  # the log gates of the keys after j up to the query
        total = torch.cumsum(tabs["fox_log_f"][b, h, keys], 0)
        return total[pos.clamp(min=0)][:, None] - total[None, :]
    return torch.zeros_like(r, dtype=qh.dtype)


def truth(q, k, v, c: Case, tabs: dict, segments) -> tuple[Tensor, Tensor, float]:
    """(out (B, H, Lq, D), lse (B, H, Lq), the largest |logit|) in q's dtype, segment by
    segment: each is (batch row, its query rows, its key rows); query i of m sits at key
    position n - m + i. A row that sees no key (and no sink) outputs 0."""
    bsz, heads, lq, d = q.shape
    group = heads // k.shape[1]
    scale = 1 / math.sqrt(d) if c.scale is None else c.scale
    out = torch.zeros(bsz, heads, lq, d, dtype=q.dtype)
    lse = torch.zeros(bsz, heads, lq, dtype=q.dtype)
    largest = 0.0
    for b, rows, keys in segments:
        m, n = len(rows), len(keys)
        if n == 0:  # no key: the rows output 0 (a sink carries no value)
            continue
        pos = torch.arange(m) + (n - m)
        r = torch.arange(n)[None, :] - pos[:, None]
        seen = torch.ones(m, n, dtype=torch.bool)
        if c.causal:
            seen &= r <= 0
        if c.window:
            seen &= r > -c.window
        for h in range(heads):
            qh, kh, vh = q[b, h, rows], k[b, h // group, keys], v[b, h // group, keys]
            logits = scale * qh @ kh.T + _bias(c, tabs, h, r, qh, pos, keys, b, scale)
            logits = logits.masked_fill(~seen, -math.inf)
            largest = max(largest, logits.detach().nan_to_num(0, 0, 0).abs().max().item())
            if c.sinks:
                logits = torch.cat([logits, tabs["sinks"][h].expand(m, 1)], 1)
            empty = torch.isinf(logits).all(1, keepdim=True)
            logits = logits.masked_fill(empty, 0.0)
            w = torch.softmax(logits, 1) * ~empty
            o = w[:, :n] @ vh
            if c.family == "shaw_kv":
                o = o + torch.einsum(
                    "mn,mnd->md", w[:, :n], tabs["shaw_v"][r.clamp(-c.k, c.k) + c.k]
                )
            out = out.index_put((torch.tensor(b), torch.tensor(h), rows), o)
            row_lse = torch.logsumexp(logits, 1).masked_fill(empty[:, 0], 0.0)
            lse = lse.index_put((torch.tensor(b), torch.tensor(h), rows), row_lse)
    return out, lse, largest


def lengths(c: Case, gen: torch.Generator) -> Tensor | None:
    """Each row's cache length (kv_lens and paged: any of 0 .. Lk), None otherwise."""
    if c.seq not in ("kv_lens", "paged"):
        return None
    return torch.randint(0, c.lk + 1, (c.batch,), generator=gen)


def segments(c: Case, lens: Tensor | None) -> list:
    if c.seq == "packed":
        ends = torch.tensor(c.docs).cumsum(0).tolist()
        return [
            (0, torch.arange(e - n, e), torch.arange(e - n, e))
            for n, e in zip(c.docs, ends, strict=True)
        ]
    n = [c.lk] * c.batch if lens is None else lens.tolist()
    return [(b, torch.arange(c.lq), torch.arange(n[b])) for b in range(c.batch)]


def paged(k: Tensor, v: Tensor, lens: Tensor, page: int, gen: torch.Generator):
    """k and v's first lens[b] keys of each row in shuffled blocks of `page` slots: the caches
    (blocks, page, Hk, D) and the (B, width) int32 block table."""
    need = [-(-int(n) // page) for n in lens]
    width, blocks = max(need + [1]) + 1, sum(need) + 1
    order = torch.randperm(blocks, generator=gen)
    table = torch.zeros(len(need), width, dtype=torch.int32)
    caches = [torch.zeros(blocks, page, k.shape[1], k.shape[3], dtype=k.dtype) for _ in "kv"]
    at = 0
    for b, m in enumerate(need):
        table[b, :m] = order[at : at + m]
        at += m
        for j in range(int(lens[b])):
            for cache, x in zip(caches, (k, v), strict=True):
                cache[table[b, j // page], j % page] = x[b, :, j]
    return *caches, table


def _layout(t: Tensor, layout: str) -> Tensor:
    """(B, H, L, D) values in the case's memory layout ((B, L, H, D) storage for bshd)."""
    return t if layout == "bhsd" else t.transpose(1, 2).contiguous().transpose(1, 2)


def _error(got: Tensor | None, want: Tensor | None) -> float:
    """Largest error over max(1, largest entry of want); a missing gradient of 0 is exact."""
    want = torch.zeros(1, dtype=torch.float64) if want is None else want.detach()
    if got is None:
        return 0.0 if not want.abs().max() else math.inf
    return (got.detach().cpu().double() - want).abs().max().item() / max(
        1.0, want.abs().max().item()
    )


@pytest.mark.parametrize("seed", range(CASES))
def test_random_options_meet_the_truth(seed):
    c = draw(seed)
    gen = torch.Generator().manual_seed(seed)
    dt = c.dtype
    q, k, v = (
        torch.randn(c.batch, h, n, c.d, generator=gen, dtype=torch.float64).to(dt).double()
        for h, n in ((c.heads, c.lq), (c.kv_heads, c.lk), (c.kv_heads, c.lk))
    )
    q = (q * c.q_scale).to(dt).double()
    lens = lengths(c, gen)
    extra = {}
    kk, kv = _layout(k.to(dt), c.layout), _layout(v.to(dt), c.layout)
    keys = c.lk
    if c.seq == "paged":
        kk, kv, extra["block_table"] = paged(k.to(dt), v.to(dt), lens, c.page, gen)
        keys = extra["block_table"].shape[1] * c.page
    tabs = tables(c, keys, gen)
    if lens is not None:
        extra["kv_lens"] = lens.int()
    if c.seq == "packed":
        extra["cu_seqlens"] = torch.tensor([0, *torch.tensor(c.docs).cumsum(0).tolist()]).int()
    if c.family == "t5":
        extra.update(t5_bidirectional=c.t5[0], t5_num_buckets=c.t5[1], t5_max_distance=c.t5[2])
    for name, value in (("window", c.window or None), ("num_splits", c.splits), ("scale", c.scale)):
        if value is not None:
            extra[name] = value
    if c.tiles:
        extra["fwd_tiles"], extra["bwd_tiles"] = c.tiles
    # the kernel's inputs
    inputs = [_layout(q.to(dt), c.layout), kk, kv]
    ktabs = {n: t.float() for n, t in tabs.items()}
    leaves = list(inputs) if c.grad else []
    if c.grad:
        leaves += [ktabs[n] for n in ktabs] if c.trains else []
        for t in leaves:
            t.requires_grad_()
    on = {n: t.to(DEVICE) if isinstance(t, Tensor) else t for n, t in {**ktabs, **extra}.items()}
    with torch.set_grad_enabled(c.grad):
        got = relbias.relative_attention(*(t.to(DEVICE) for t in inputs), causal=c.causal, **on)
    assert got.shape == q.shape and got.dtype == dt
    # the truth in float64 and in the case's dtype, over the same leaves
    segs = segments(c, lens)

    def run(dtype):
        ls = [t.to(dtype).requires_grad_(c.grad) for t in (q, k, v)]
        ts = {n: t.to(dtype).requires_grad_(c.grad and c.trains) for n, t in tabs.items()}
        return *truth(*ls, c, ts, segs), ls + ([ts[n] for n in ts] if c.trains else [])

    want, lse, largest, want_leaves = run(torch.float64)
    ref, _, _, ref_leaves = run(dt)
    # the kernels recompute each probability from a logit and its row's log-sum-exp, both of
    # the logits' size: the dtype's relative error at that size moves every probability
    # a GPU's float32 dots are 3xTF32: up to 4 times float32's own error
    # (test_relbias.py::test_3xtf32_dots_keep_float32_accuracy)
    tf32 = 4 if DEVICE == "cuda" and dt == torch.float32 else 1
    floor, factor = tf32 * FLOOR[dt] * max(1.0, largest), tf32 * FACTOR
    errors = {"out": (_error(got, want), _error(ref, want))}
    if c.grad and want.requires_grad:
        up = torch.randn(want.shape, generator=gen, dtype=torch.float64).to(dt).double()
        # the row term's error: the kernel's output's (probabilities rounded to the dtype for
        # the p v product, the output rounded), and float32's sum of D products (its typical
        # error: 2**-24 sqrt(D) times their 2-norm)
        e = (up * (got.detach().cpu().double() - want.detach())).sum(-1)
        e = e + 2**-24 * c.d**0.5 * (up * want.detach()).norm(dim=-1)
        grads = torch.autograd.grad(got, leaves, up.to(DEVICE, dt), allow_unused=True)
        exact = torch.autograd.grad(want, want_leaves, up, retain_graph=True, allow_unused=True)
        shift = torch.autograd.grad((e * lse).sum(), want_leaves, allow_unused=True)
        eager = torch.autograd.grad(ref, ref_leaves, up.to(dt), allow_unused=True)
        names = ["dq", "dk", "dv", *(f"d{n}" for n in tabs)][: len(leaves)]
        for name, g, w, s, r in zip(names, grads, exact, shift, eager, strict=True):
            size = 1.0 if w is None else max(1.0, w.abs().max().item())
            moved = 0.0 if s is None else s.abs().max().item() / size
            errors[name] = (_error(g, w), _error(r, w) + moved)
    bad = {
        name: f"{err:.2e} > {factor} x {ref:.2e} + {floor:.1e}"
        for name, (err, ref) in errors.items()
        if not err <= factor * ref + floor
    }
    assert not bad, f"{c}: {bad}"
