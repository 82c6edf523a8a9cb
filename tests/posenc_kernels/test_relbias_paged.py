"""posenc_kernels.relative_attention over paged KV caches (block_table, kv_lens) for every bias
family, and posenc.serving.paged_attention, against a float64 truth written query by query from the
definitions: row b's key j read from cache block block_table[b, j // block_size] at slot
j % block_size, its queries at kv_lens[b] - Lq + i, the family's bias of j minus that position.
"""

import math

import pytest
import torch
from torch.testing import assert_close

from posenc import ALiBi, ShawBias, T5RelativeBias, serving
from posenc import functional as F
from posenc_kernels import relbias
from tests.posenc_kernels._device import fails_on_the_device, on_device
from tests.posenc_kernels.test_relbias import DEVICE

K_SHAW = 3  # Shaw's clip: 2K + 1 = 7 relative positions
T5 = dict(num_buckets=32, max_distance=128, bidirectional=True)


def _tables(family: str, heads: int, d: int, gen: torch.Generator) -> dict:
    """The family's tables (float64): ALiBi's slopes, T5's (buckets, H), Shaw's (H, 2K + 1),
    Shaw's E_K and E_V (2K + 1, D)."""
    if family == "alibi":
        return {
            "alibi_slopes": F.alibi_slopes(heads) * (1 + 0.1 * torch.rand(heads, generator=gen))
        }
    if family == "t5":
        return {
            "t5_table": torch.randn(T5["num_buckets"], heads, generator=gen, dtype=torch.float64)
        }
    if family == "shaw_bias":
        return {"shaw_bias": torch.randn(heads, 2 * K_SHAW + 1, generator=gen, dtype=torch.float64)}
    e = 0.5 * torch.randn(2, 2 * K_SHAW + 1, d, generator=gen, dtype=torch.float64)
    return {"shaw_k": e[0], "shaw_v": e[1]}


def _bias(tables: dict, h: int, r: torch.Tensor, q_row: torch.Tensor, scale: float):
    """The logit term of relative positions r = j - position (n,) for head h."""
    if "alibi_slopes" in tables:
        return -tables["alibi_slopes"][h] * r.abs()
    if "t5_table" in tables:
        bucket = F.t5_relative_bucket(r, T5["bidirectional"], T5["num_buckets"], T5["max_distance"])
        return tables["t5_table"][bucket, h]
    idx = r.clamp(-K_SHAW, K_SHAW) + K_SHAW
    if "shaw_bias" in tables:
        return tables["shaw_bias"][h, idx]
    return scale * (tables["shaw_k"][idx] @ q_row)


def _truth(q, k_cache, v_cache, table, lens, causal, tables, dtype=torch.float64):
    """(B, H, Lq, D) query by query, computed in dtype throughout (float64: the truth; a half
    precision: the reference's own error in it); a query that sees no key outputs 0."""
    q, kc, vc = q.to(dtype), k_cache.to(dtype), v_cache.to(dtype)
    tables = {n: t.to(dtype) for n, t in tables.items()}
    bsz, heads, lq, d = q.shape
    group, page, scale = heads // kc.shape[2], kc.shape[1], 1.0 / math.sqrt(d)
    out = torch.zeros_like(q)
    for b in range(bsz):
        n = int(lens[b])
        j = torch.arange(n)
        blocks = table[b, j // page].long()
        keys, vals = kc[blocks, j % page], vc[blocks, j % page]  # (n, Hk, D)
        for h in range(heads):
            for i in range(lq):
                pos = n - lq + i
                seen = j <= pos if causal else torch.ones(n, dtype=torch.bool)
                if not seen.any():
                    continue
                r = (j - pos)[seen]
                logits = scale * (keys[seen, h // group] @ q[b, h, i])
                bias = _bias(tables, h, r, q[b, h, i], scale).to(dtype)
                a = torch.softmax(logits + bias, 0)
                out[b, h, i] = a @ vals[seen, h // group]
                if "shaw_v" in tables:
                    out[b, h, i] += a @ tables["shaw_v"][r.clamp(-K_SHAW, K_SHAW) + K_SHAW]
    return out


def _paged(lens, page: int, hk: int, d: int, dtype, gen):
    """Caches holding every row's keys in shuffled blocks, and the (B, max_blocks) int32 table;
    entries past a row's blocks point past num_blocks (never read)."""
    need = [-(-n // page) for n in lens]
    width = max(need) + 1
    num_blocks = sum(need) + 2
    order = torch.randperm(num_blocks, generator=gen)
    table = torch.full((len(lens), width), num_blocks + 5, dtype=torch.int32)
    at = 0
    for b, m in enumerate(need):
        table[b, :m] = order[at : at + m]
        at += m
    caches = (torch.randn(num_blocks, page, hk, d, generator=gen).to(dtype) for _ in range(2))
    return *caches, table


CASES = [  # (family, Lq, kv_lens, causal, num_splits, dtype, block_size)
    ("alibi", 1, (37, 5, 1), True, None, torch.float32, 4),
    ("t5", 1, (300, 129, 17), False, None, torch.float32, 16),
    ("shaw_bias", 3, (20, 2, 11), True, 1, torch.bfloat16, 8),
    ("shaw_kv", 2, (40, 9, 25), True, 3, torch.float32, 4),
    ("shaw_kv", 1, (64, 33), False, None, torch.bfloat16, 16),
    ("t5", 4, (50, 7), True, 2, torch.float16, 8),
    ("alibi", 2, (70, 31), False, None, torch.float16, 32),
]


def _call(family, q, kc, vc, table, lens, causal, tables, **extra):
    args = {n: t.float().to(DEVICE) for n, t in tables.items()}
    with torch.no_grad():
        return relbias.relative_attention(
            q.to(DEVICE), kc.to(DEVICE), vc.to(DEVICE), causal=causal,
            block_table=table.to(DEVICE), kv_lens=lens.to(DEVICE), **args, **extra,
        )  # fmt: skip


def _setup(case, seed=0):
    family, lq, lens, causal, splits, dtype, page = case
    gen = torch.Generator().manual_seed(seed)
    heads, hk, d = 4, 2, 32
    kc, vc, table = _paged(lens, page, hk, d, dtype, gen)
    q = torch.randn(len(lens), heads, lq, d, generator=gen).to(dtype)
    return q, kc, vc, table, torch.tensor(lens), _tables(family, heads, d, gen)


@pytest.mark.parametrize(
    "case", CASES, ids=lambda c: f"{c[0]}-{c[1]}q-{'causal' if c[3] else 'full'}-{c[5]}-bs{c[6]}"
)
def test_paged_decode_matches_the_truth(case):
    """Every family over shuffled cache blocks, ragged kv_lens (a row shorter than Lq: queries
    that see no key give 0), grouped-query heads, the keys split or not; half precision no
    worse than twice the error of the reference run in that dtype."""
    family, _, _, causal, splits, dtype, _ = case
    q, kc, vc, table, lens, tables = _setup(case)
    want = _truth(q, kc, vc, table, lens, causal, tables)
    got = _call(family, q, kc, vc, table, lens, causal, tables, num_splits=splits)
    assert got.shape == q.shape and got.dtype == dtype
    got = got.cpu().double()
    if dtype == torch.float32:
        assert_close(got, want, atol=2e-5, rtol=2e-5)
        return
    ref_err = (_truth(q, kc, vc, table, lens, causal, tables, dtype).double() - want).abs().max()
    err = (got - want).abs().max()
    assert err <= 2 * ref_err, (err, ref_err)


def _module(family: str, tables: dict, heads: int):
    """posenc's bias module of the family holding the float64 tables."""
    if family == "alibi":
        module = ALiBi(heads).double()
        module.slopes = tables["alibi_slopes"]
        return module
    if family == "t5":
        module = T5RelativeBias(heads, **T5).double()
        module.relative_attention_bias.weight.data = tables["t5_table"]
        return module
    module = ShawBias(heads, K_SHAW).double()
    module.table.data = tables["shaw_bias"]
    return module


BIASED = [c for c in CASES if c[0] != "shaw_kv" and min(c[2]) >= c[1]]  # posenc: kv_lens >= Lq


@pytest.mark.parametrize("case", BIASED, ids=lambda c: f"{c[0]}-{c[1]}q-{c[5]}")
def test_posenc_paged_attention_gathers_the_blocks(case):
    """posenc.serving.paged_attention (the blocks gathered, then posenc's attention with
    kv_lens) in float64 equals the query-by-query truth."""
    family, _, _, causal, _, _, _ = case
    q, kc, vc, table, lens, tables = _setup(case)
    want = _truth(q, kc, vc, table, lens, causal, tables)
    bias = _module(family, tables, q.shape[1])
    with torch.no_grad():
        got = serving.paged_attention(
            q.double(), kc.double(), vc.double(), table, lens, bias=bias, causal=causal
        )
    assert_close(got, want, atol=1e-10, rtol=1e-10)


def _bad(**change):
    """A valid paged call (ALiBi, 2 rows, block size 4) with one argument changed."""
    q, kc, vc, table, lens, tables = _setup(CASES[0])
    args = dict(q=q, k=kc, v=vc, block_table=table, kv_lens=lens, causal=True)
    args.update(alibi_slopes=tables["alibi_slopes"].float(), **change)
    return lambda: relbias.relative_attention(**on_device(args))


_Q, _KC, _VC, _TABLE, _LENS, _ = _setup(CASES[0])
_PAST = _TABLE.clone().index_fill_(1, torch.tensor([0]), 99)  # first blocks past num_blocks
BAD = [  # (what, call, exception, text the message must hold)
    ("block past num_blocks", _bad(block_table=_PAST), RuntimeError, "block_table's entries"),
    ("kv_lens past the blocks", _bad(kv_lens=_LENS + 40), RuntimeError, "kv_lens must lie in"),
    ("kv heads do not divide", _bad(k=_KC[:, :, :1].repeat(1, 1, 3, 1).contiguous(),
                                    v=_VC[:, :, :1].repeat(1, 1, 3, 1).contiguous()),
     ValueError, "k_cache's heads"),
    ("k and v caches differ", _bad(v=_VC[:-1].contiguous()), ValueError, "v_cache is"),
    ("non-contiguous cache", _bad(k=_KC.transpose(0, 1).contiguous().transpose(0, 1)),
     ValueError, "k_cache must be contiguous"),
    ("no kv_lens", _bad(kv_lens=None), ValueError, "block_table needs kv_lens"),
    ("float table", _bad(block_table=_TABLE.float()), TypeError, "block_table must be int32"),
    ("table rows", _bad(block_table=_TABLE[:1]), ValueError, "block_table must be (B=3"),
    ("packed", _bad(cu_seqlens=torch.tensor([0, 1])), ValueError, "cu_seqlens does not apply"),
    ("head dim", _bad(k=_KC[..., :16].contiguous(), v=_VC[..., :16].contiguous()),
     ValueError, "k_cache has head dim 16"),
    ("gradient", _bad(q=_Q.clone().requires_grad_()), ValueError, "forward only"),
]  # fmt: skip


@pytest.mark.parametrize("what, call, exc, text", BAD, ids=[b[0] for b in BAD])
def test_bad_paged_input_names_the_argument(what, call, exc, text):
    """One line naming the argument; values (kv_lens, the blocks it uses) are checked on the
    device, without a host sync (on the CPU the assertion raises at once)."""
    if exc is RuntimeError and DEVICE == "cuda":
        fails_on_the_device("test_relbias_paged", what)
        return
    with pytest.raises(exc) as info:
        if what == "gradient":
            call()
        else:
            with torch.no_grad():
                call()
    assert text in str(info.value), str(info.value)
