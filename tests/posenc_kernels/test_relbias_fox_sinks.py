"""posenc_kernels.relative_attention's forget gates and sinks: forgetting attention
(fox_log_f, Lin et al. 2025) and attention sinks (sinks=, gpt-oss), forward and backward, against
float64 written from the definitions: FoX's bias as the sum of the log gates between key and
query, a sink as one more softmax column that carries no value."""

import math

import pytest
import torch
import torch.nn.functional as nnf
from torch.testing import assert_close

from posenc import ALiBi, ShawBias, T5RelativeBias
from posenc import functional as F
from posenc_kernels import relbias
from tests.posenc_kernels.test_relbias import DEVICE, TOL, _assert_grad_close


def _fox_bias(log_f, q_len):
    """(B, H, Lq, Lk): sum of log_f[l] for j < l <= p (query i at p = Lk - Lq + i), -inf for
    j > p; from the definition, as one masked sum (M[i, j, l] = [j < l <= p_i])."""
    lk = log_f.shape[-1]
    p = torch.arange(q_len)[:, None, None] + (lk - q_len)
    j = torch.arange(lk)[None, :, None]
    l = torch.arange(lk)[None, None, :]
    between = ((j < l) & (l <= p)).to(log_f.dtype)  # (Lq, Lk, Lk)
    bias = torch.einsum("ijl,bhl->bhij", between, log_f)
    return bias.masked_fill((j[..., 0] > p[..., 0])[None, None], -math.inf)


def _truth(q, k, v, bias, sinks, scale=None):
    """softmax over [scale q k^T + bias, sink] without the sink's column, times v (float64);
    a row whose keys are all masked and has no sink outputs 0."""
    k, v = F.grouped_kv(q, k, v)
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    logits = q @ k.transpose(-1, -2) * scale + bias
    if sinks is not None:
        column = sinks[None, :, None, None].expand(*logits.shape[:-1], 1)
        logits = torch.cat([logits, column], -1)
    empty = torch.isinf(logits).all(-1, keepdim=True)  # a row that sees nothing: 0
    w = torch.softmax(logits.masked_fill(empty, 0.0), -1) * ~empty
    return w[..., : k.shape[2]] @ v


def _gates(b, h, n, gen):
    """log forget gates: log sigmoid of N(2.5, 1) (gates around 0.9, as trained FoX's are)."""
    return nnf.logsigmoid(2.5 + torch.randn(b, h, n, generator=gen, dtype=torch.float64))


FOX = [  # (B, H, Hk, Lq, Lk, D, dtype, sinks)
    (2, 2, 2, 37, 37, 32, torch.float32, False),
    (1, 4, 2, 37, 37, 32, torch.float32, True),  # grouped-query heads
    (2, 2, 1, 5, 40, 32, torch.float32, False),  # queries at the end of the keys
    (2, 2, 2, 33, 33, 64, torch.bfloat16, True),
    (1, 2, 2, 29, 29, 32, torch.float16, False),
]


@pytest.mark.parametrize("case", FOX, ids=lambda c: f"{c[0]}x{c[1]}/{c[2]}-{c[3]}of{c[4]}-{c[6]}")
def test_forgetting_attention_forward_and_backward(case):
    """Outputs and the gradients of q, k, v, the gates (and the sinks): float32 within
    TOL, half precision no worse than twice the reference computed in that dtype."""
    b, h, hk, lq, lk, d, dtype, with_sinks = case
    gen = torch.Generator().manual_seed(3)
    q = torch.randn(b, h, lq, d, generator=gen, dtype=torch.float64)
    k, v = (torch.randn(b, hk, lk, d, generator=gen, dtype=torch.float64) for _ in range(2))
    log_f = _gates(b, h, lk, gen)
    sinks = torch.randn(h, generator=gen, dtype=torch.float64) if with_sinks else None
    leaves = [t.clone().requires_grad_() for t in (q, k, v, log_f, sinks) if t is not None]
    want = _truth(*leaves[:3], _fox_bias(leaves[3], lq), leaves[4] if with_sinks else None)
    got_leaves = [t.detach().to(DEVICE, dtype).requires_grad_() for t in leaves[:3]]
    got_leaves += [t.detach().float().to(DEVICE).requires_grad_() for t in leaves[3:]]
    got = relbias.relative_attention(
        *got_leaves[:3], fox_log_f=got_leaves[3], causal=True,
        sinks=got_leaves[4] if with_sinks else None,
    )  # fmt: skip
    up = torch.randn(want.shape, generator=gen, dtype=torch.float64)
    assert got.dtype == dtype
    assert_close(got.detach().cpu().double(), want.detach(), atol=TOL[dtype], rtol=TOL[dtype])
    wants = torch.autograd.grad(want, leaves, up)
    gots = torch.autograd.grad(got, got_leaves, up.to(DEVICE, dtype))
    for name, g, w in zip(("dq", "dk", "dv", "dlog_f", "dsinks"), gots, wants, strict=False):
        _assert_grad_close(g, w, dtype, name)


def _sequence_pair(lens, lq, gen):
    """q (B, 2, Lq, 32), k, v (B, 1, 48, 32), gates (B, 2, 48) float64 for ragged caches."""
    b = len(lens)
    q = torch.randn(b, 2, lq, 32, generator=gen, dtype=torch.float64)
    k, v = (torch.randn(b, 1, 48, 32, generator=gen, dtype=torch.float64) for _ in range(2))
    return q, k, v, _gates(b, 2, 48, gen)


def test_forgetting_attention_on_caches_of_their_own_lengths():
    """kv_lens: row b's queries at kv_lens[b] - Lq + i read D there; a row shorter than Lq
    has queries that see no key (output 0); forward and the gates' gradient."""
    gen = torch.Generator().manual_seed(4)
    lens = [48, 21, 2]
    q, k, v, log_f = _sequence_pair(lens, 3, gen)
    leaves = [t.clone().requires_grad_() for t in (q, k, v, log_f)]
    outs = []
    for bi, n in enumerate(lens):
        qs, ks, vs = (
            leaves[0][bi : bi + 1],
            leaves[1][bi : bi + 1, :, :n],
            leaves[2][bi : bi + 1, :, :n],
        )
        outs.append(_truth(qs, ks, vs, _fox_bias(leaves[3][bi : bi + 1, :, :n], 3), None))
    want = torch.cat(outs)
    got_leaves = [t.detach().float().to(DEVICE).requires_grad_() for t in leaves]
    got = relbias.relative_attention(
        *got_leaves[:3], fox_log_f=got_leaves[3], causal=True,
        kv_lens=torch.tensor(lens, device=DEVICE),
    )  # fmt: skip
    assert_close(got.detach().cpu().double(), want.detach(), atol=2e-5, rtol=2e-5)
    up = torch.randn(want.shape, generator=gen, dtype=torch.float64)
    for g, w in zip(torch.autograd.grad(got, got_leaves, up.float().to(DEVICE)),
                    torch.autograd.grad(want, leaves, up), strict=True):  # fmt: skip
        _assert_grad_close(g, w, torch.float32, "grad")


@pytest.mark.parametrize("splits", [1, 3])
def test_paged_decode_with_forgetting_and_sinks(splits):
    """A decode step over paged caches with FoX and sinks, the keys split or not: the sink is
    counted once (in the first split) and D_i read at each row's own position."""
    gen = torch.Generator().manual_seed(5)
    lens, page = [48, 17], 8
    q, k, v, log_f = _sequence_pair(lens, 1, gen)
    sinks = torch.randn(2, generator=gen, dtype=torch.float64)
    want = torch.cat([
        _truth(q[bi:bi + 1], k[bi:bi + 1, :, :n], v[bi:bi + 1, :, :n],
               _fox_bias(log_f[bi:bi + 1, :, :n], 1), sinks)
        for bi, n in enumerate(lens)
    ])  # fmt: skip
    table = torch.tensor([[5, 0, 7, 2, 9, 11], [1, 3, 4, 6, 8, 10]], dtype=torch.int32)
    caches = [torch.zeros(12, page, 1, 32, dtype=torch.float64) for _ in range(2)]
    for bi in range(2):  # row b's key j in block table[b, j // 8] at slot j % 8
        for j in range(48):
            for cache, x in zip(caches, (k, v), strict=True):
                cache[table[bi, j // page], j % page] = x[bi, :, j]
    with torch.no_grad():
        got = relbias.relative_attention(
            q.float().to(DEVICE), *(c.float().to(DEVICE) for c in caches),
            fox_log_f=log_f.float().to(DEVICE), sinks=sinks.float().to(DEVICE), causal=True,
            kv_lens=torch.tensor(lens, device=DEVICE), block_table=table.to(DEVICE),
            num_splits=splits,
        )  # fmt: skip
    assert_close(got.cpu().double(), want, atol=2e-5, rtol=2e-5)


def _family(name, heads):
    """(kernel kwargs with a float32 table as a leaf, posenc module over its float64 copy,
    that copy) for the bias families."""
    if name == "alibi":
        m = ALiBi(heads).double()
        table = m.slopes.clone()
        return {"alibi_slopes": table}, m, table
    if name == "t5":
        m = T5RelativeBias(heads).double()
        return {"t5_table": m.relative_attention_bias.weight}, m, m.relative_attention_bias.weight
    m = ShawBias(heads, 3).double()
    return {"shaw_bias": m.table}, m, m.table


@pytest.mark.parametrize("family", ["alibi", "t5", "shaw_bias", "shaw_kv"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_sinks_with_every_family(family, causal):
    """A sink per head with each bias family: outputs and every gradient (the sinks' too)
    against posenc's attention with sinks= in float64."""
    gen = torch.Generator().manual_seed(6)
    q, k, v = (torch.randn(2, 3, 21, 16, generator=gen, dtype=torch.float64) for _ in range(3))
    sinks = torch.randn(3, generator=gen, dtype=torch.float64)
    leaves = [t.clone().requires_grad_() for t in (q, k, v, sinks)]
    if family == "shaw_kv":
        emb = 0.5 * torch.randn(2, 7, 16, generator=gen, dtype=torch.float64)
        leaves += [emb[0].clone().requires_grad_(), emb[1].clone().requires_grad_()]
        mask = torch.ones(21, 21, dtype=torch.bool).tril() if causal else None
        want = F.shaw_attention(*leaves[:3], leaves[4], leaves[5], 3, mask=mask, sinks=leaves[3])[0]
        kwargs_names = ("shaw_k", "shaw_v")
    else:
        kwargs, module, table = _family(family, 3)
        leaves.append(table.detach().clone().requires_grad_())
        name = next(iter(kwargs))
        if family == "alibi":
            module.slopes = leaves[4]
        elif family == "t5":
            module.relative_attention_bias.weight = torch.nn.Parameter(leaves[4])
            leaves[4] = module.relative_attention_bias.weight
        else:
            module.table = torch.nn.Parameter(leaves[4])
            leaves[4] = module.table
        want = F.relative_attention(*leaves[:3], bias=module, causal=causal, sinks=leaves[3])
        kwargs_names = (name,)
    got_leaves = [t.detach().float().to(DEVICE).requires_grad_() for t in leaves]
    tables = dict(zip(kwargs_names, got_leaves[4:], strict=True))
    got = relbias.relative_attention(*got_leaves[:3], causal=causal, sinks=got_leaves[3], **tables)
    assert_close(got.detach().cpu().double(), want.detach(), atol=2e-5, rtol=2e-5)
    up = torch.randn(want.shape, generator=gen, dtype=torch.float64)
    names = ("dq", "dk", "dv", "dsinks", "dtable", "dtable2")[: len(leaves)]
    for name, g, w in zip(names, torch.autograd.grad(got, got_leaves, up.float().to(DEVICE)),
                          torch.autograd.grad(want, leaves, up), strict=True):  # fmt: skip
        _assert_grad_close(g, w, torch.float32, name)


def test_bad_input_names_the_argument():
    q = torch.randn(1, 2, 8, 16, device=DEVICE)
    gates = torch.zeros(1, 2, 8, device=DEVICE)
    with pytest.raises(ValueError, match=r"fox_log_f must be \(B, H, Lk\) = \(1, 2, 8\)"):
        relbias.relative_attention(q, q, q, fox_log_f=gates[:, :1], causal=True)
    with pytest.raises(ValueError, match="fox_log_f: forgetting attention is causal"):
        relbias.relative_attention(q, q, q, fox_log_f=gates)
    with pytest.raises(ValueError, match=r"sinks must be \(H=2,\)"):
        relbias.relative_attention(q, q, q, fox_log_f=gates, causal=True, sinks=gates[0, 0, :3])
    with pytest.raises(ValueError, match="pass at most one of"):
        relbias.relative_attention(q, q, q, fox_log_f=gates, alibi_slopes=gates[0, :, 0])


@pytest.mark.parametrize("family", ["alibi", "t5", "shaw_bias"])
def test_packed_decode_with_sinks_and_a_group_of_three(family):
    """A decode step of 2 queries whose 6 heads share 2 kv heads (a group of 3, not a power of
    two: the kernel packs each group's 6 rows into one tile), each head its own sink and bias
    row, against posenc's attention over the kv heads repeated, in float64."""
    gen = torch.Generator().manual_seed(9)
    q = torch.randn(2, 6, 2, 16, generator=gen, dtype=torch.float64)
    k, v = (torch.randn(2, 2, 45, 16, generator=gen, dtype=torch.float64) for _ in range(2))
    sinks = torch.randn(6, generator=gen, dtype=torch.float64)
    kwargs, module, _ = _family(family, 6)
    wide = [t.repeat_interleave(3, dim=1) for t in (k, v)]
    want = F.relative_attention(q, *wide, bias=module, causal=True, sinks=sinks)
    tables = {n: t.detach().float().to(DEVICE) for n, t in kwargs.items()}
    with torch.no_grad():
        got = relbias.relative_attention(
            *(t.float().to(DEVICE) for t in (q, k, v)),
            causal=True,
            sinks=sinks.float().to(DEVICE),
            **tables,
        )
    assert_close(got.cpu().double(), want, atol=2e-5, rtol=2e-5)
