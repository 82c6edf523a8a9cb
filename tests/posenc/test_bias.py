"""ALiBi, T5 and Shaw-scalar biases and relative_attention against independent float64 formulas."""

import math

import pytest
import torch
from torch.testing import assert_close

import posenc
from posenc import functional as F


def test_alibi_slopes_for_8_and_12_heads():
    """Press et al. 2021: 2^-1 .. 2^-8 for 8 heads; 12 heads add 2^-0.5, 2^-1.5, 2^-2.5, 2^-3.5."""
    eight = [2.0**-k for k in range(1, 9)]
    assert_close(F.alibi_slopes(8), torch.tensor(eight, dtype=torch.float64))
    twelve = eight + [2.0**-0.5, 2.0**-1.5, 2.0**-2.5, 2.0**-3.5]
    assert_close(F.alibi_slopes(12), torch.tensor(twelve, dtype=torch.float64))
    assert_close(F.alibi_slopes(1), torch.tensor([2.0**-8], dtype=torch.float64))


def _t5_bucket_one(r: int, bidirectional: bool, num_buckets: int, max_distance: int) -> int:
    """The T5 bucketing for one integer, written from the paper's description."""
    offset, n = 0, -r
    if bidirectional:
        num_buckets //= 2
        if n < 0:
            offset, n = num_buckets, -n
    else:
        n = max(n, 0)
    exact = num_buckets // 2
    if n < exact:
        return offset + n
    log_part = math.log(n / exact) / math.log(max_distance / exact) * (num_buckets - exact)
    return offset + min(exact + int(log_part), num_buckets - 1)


@pytest.mark.parametrize("bidirectional", [True, False])
def test_t5_buckets_match_the_definition(bidirectional):
    r = torch.arange(-300, 301)
    got = F.t5_relative_bucket(r, bidirectional, 32, 128)
    want = torch.tensor([_t5_bucket_one(int(v), bidirectional, 32, 128) for v in r])
    assert torch.equal(got, want)


def _t5_bucket_exact(n: int, num_buckets: int, max_distance: int) -> int:
    """One half's bucket of distance n >= 0 in integers: the log-spaced offset m is the largest
    with (n / e)^s >= (M / e)^m, i.e. n^s e^m >= M^m e^s (no logarithm, no rounding)."""
    e, s = num_buckets // 2, num_buckets - num_buckets // 2
    if n < e:
        return n
    m = 0
    while m + 1 < s and n**s * e ** (m + 1) >= max_distance ** (m + 1) * e**s:
        m += 1
    return e + m


@pytest.mark.parametrize("ulp_low", [False, True], ids=["log", "log one ulp low"])
def test_t5_buckets_are_exact_at_every_boundary(monkeypatch, ulp_low):
    """Against integer arithmetic over many configurations, also where the logarithm lands one
    ulp low (as CUDA's float64 log does at some arguments): a boundary whose exact value is an
    integer keeps its bucket on every device."""
    if ulp_low:
        log = torch.log
        monkeypatch.setattr(torch, "log", lambda x: torch.nextafter(log(x), log(x) - 1))
    for num_buckets, max_distance in [(8, 16), (16, 64), (32, 128), (32, 1024), (64, 256)]:
        n = torch.arange(0, 3 * max_distance)
        got = F.t5_relative_bucket(-n, False, num_buckets, max_distance)
        want = [_t5_bucket_exact(int(x), num_buckets, max_distance) for x in n]
        assert got.tolist() == [min(w, num_buckets - 1) for w in want], (num_buckets, max_distance)


def test_t5_bucket_boundaries_32_128():
    """Hand-checked anchors: exact region, first log buckets, saturation at max_distance."""
    r = torch.tensor([0, -1, 1, -7, -8, -16, -127, -128, -1000, 1000])
    assert F.t5_relative_bucket(r, True, 32, 128).tolist() == [0, 1, 17, 7, 8, 10, 15, 15, 15, 31]
    r = torch.tensor([5, 0, -5, -15, -16, -32, -128, -5000])
    assert F.t5_relative_bucket(r, False, 32, 128).tolist() == [0, 0, 5, 15, 16, 21, 31, 31]


def _naive_attention(q, k, v, bias_fn, causal):
    """Loops over (i, j) with the bias as a Python function of (h, i, j)."""
    b, h, lq, d = q.shape
    lk = k.shape[2]
    out = torch.zeros(b, h, lq, d, dtype=torch.float64)
    for bb in range(b):
        for hh in range(h):
            for i in range(lq):
                logits = []
                pos = lk - lq + i  # the query's position: the last Lq of Lk (decoding)
                for j in range(lk):
                    s = float(q[bb, hh, i] @ k[bb, hh, j]) / math.sqrt(d) + bias_fn(hh, pos, j)
                    logits.append(-math.inf if causal and j > pos else s)
                w = torch.softmax(torch.tensor(logits, dtype=torch.float64), 0)
                out[bb, hh, i] = w @ v[bb, hh].double()
    return out


@pytest.mark.parametrize(
    ("lq", "lk", "causal"),
    [(5, 5, False), (5, 5, True), (3, 7, False), (3, 7, True), (1, 9, True), (1, 9, False)],
)
def test_relative_attention_against_loops(lq, lk, causal):
    q, k, v = (torch.randn(2, 3, n, 4, dtype=torch.float64) for n in (lq, lk, lk))
    alibi = posenc.ALiBi(3).double()
    t5 = posenc.T5RelativeBias(3, num_buckets=8, max_distance=16).double()
    shaw = posenc.ShawBias(3, max_relative_position=2).double()
    m = F.alibi_slopes(3)
    biases = {
        "alibi": (alibi, lambda h, i, j: -m[h].item() * ((i - j) if causal else abs(j - i))),
        "t5": (
            t5,
            lambda h, i, j: t5.relative_attention_bias.weight[
                _t5_bucket_one(j - i, True, 8, 16), h
            ].item(),
        ),
        "shaw_bias": (shaw, lambda h, i, j: shaw.table[h, min(max(j - i, -2), 2) + 2].item()),
    }
    for module, fn in biases.values():
        got = F.relative_attention(q, k, v, bias=module, causal=causal)
        assert_close(got, _naive_attention(q, k, v, fn, causal), atol=1e-12, rtol=1e-10)


def test_bias_tables_get_gradients():
    q, k, v = (torch.randn(1, 2, 4, 3, dtype=torch.float64) for _ in range(3))
    for module in (posenc.T5RelativeBias(2, 8, 16).double(), posenc.ShawBias(2, 1).double()):
        ((name, param),) = module.named_parameters()

        def attention(table, module=module, name=name):
            with torch.nn.utils.stateless._reparametrize_module(module, {name: table}):
                return F.relative_attention(q, k, v, bias=module)

        table = param.detach().clone().requires_grad_()
        assert torch.autograd.gradcheck(attention, (table,))
        attention(table).mul(torch.randn(1, 2, 4, 3, dtype=torch.float64)).sum().backward()
        assert table.grad.abs().sum() > 0  # the bias really depends on the table


@pytest.mark.parametrize("kind", ["alibi", "t5"])
def test_flex_attention_agrees_on_the_cpu(kind):
    """A second opinion: FlexAttention's score_mod with the same bias (forward, float32)."""
    from torch.nn.attention.flex_attention import flex_attention

    q, k, v = (torch.randn(1, 4, 16, 8) for _ in range(3))
    if kind == "alibi":
        module = posenc.ALiBi(4)
        slopes = module.slopes

        def score_mod(score, b, h, i, j):
            return score - slopes[h] * (j - i).abs()
    else:
        module = posenc.T5RelativeBias(4, num_buckets=8, max_distance=16)
        table = module.bias(16, 16).detach()

        def score_mod(score, b, h, i, j):
            return score + table[h, i, j]

    want = F.relative_attention(q, k, v, bias=module).detach()
    assert_close(flex_attention(q, k, v, score_mod=score_mod), want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("family", ["alibi", "t5", "shaw_bias"])
def test_grouped_query_heads_read_their_groups_kv_head(family):
    """k and v with Hk = H / 3 heads: query head h attends with kv head h // 3, as if each
    kv head were repeated for its group (checked head by head against an MHA call)."""
    from posenc import ALiBi, ShawBias, T5RelativeBias

    torch.manual_seed(0)
    b, h, hk, lq, lk, d = 2, 6, 2, 5, 7, 8
    q = torch.randn(b, h, lq, d, dtype=torch.float64)
    k, v = (torch.randn(b, hk, lk, d, dtype=torch.float64) for _ in range(2))
    modules = {"alibi": ALiBi(h), "t5": T5RelativeBias(h), "shaw_bias": ShawBias(h, 3)}
    bias = modules[family].double()
    got = F.relative_attention(q, k, v, bias=bias)
    full = F.relative_attention(q, k.repeat_interleave(3, 1), v.repeat_interleave(3, 1), bias=bias)
    torch.testing.assert_close(got, full, rtol=0, atol=0)
    one = bias.bias(lq, lk, offset=lk - lq)  # (H, Lq, Lk): queries at the keys' end
    for head in (0, 4):
        want = F.relative_attention(
            q[:, head : head + 1],
            k[:, head // 3 : head // 3 + 1],
            v[:, head // 3 : head // 3 + 1],
            bias=one[head : head + 1],
        )
        torch.testing.assert_close(got[:, head : head + 1], want)


def test_grouped_shaw_attention_and_bad_head_counts():
    torch.manual_seed(1)
    q = torch.randn(1, 4, 5, 8, dtype=torch.float64)
    k, v = (torch.randn(1, 2, 5, 8, dtype=torch.float64) for _ in range(2))
    emb_k, emb_v = (torch.randn(5, 8, dtype=torch.float64) for _ in range(2))
    got, _ = F.shaw_attention(q, k, v, emb_k, emb_v, 2)
    want, _ = F.shaw_attention(
        q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1), emb_k, emb_v, 2
    )
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    with pytest.raises(ValueError, match="must divide"):
        F.relative_attention(
            q, k[:, :1].expand(1, 3, 5, 8), v[:, :1].expand(1, 3, 5, 8), bias=torch.zeros(4, 5, 5)
        )
    with pytest.raises(ValueError, match="v has"):
        F.relative_attention(q, k, v[:, :1], bias=torch.zeros(4, 5, 5))


@pytest.mark.parametrize(("lq", "lk"), [(6, 11), (200, 400)], ids=["gather", "diagonals"])
def test_shaw_attention_with_queries_at_the_keys_end(lq, lk):
    """offset = Lk - Lq (decoding's positions) in both of shaw_attention's paths (a gather for
    small tiles, one add per diagonal for large ones) against the loop oracle."""
    from tests.posenc import naive

    torch.manual_seed(2)
    q = torch.randn(1, 1, lq, 4, dtype=torch.float64)
    k, v = (torch.randn(1, 1, lk, 4, dtype=torch.float64) for _ in range(2))
    emb_k, emb_v = (torch.randn(7, 4, dtype=torch.float64) for _ in range(2))
    got, _ = F.shaw_attention(q, k, v, emb_k, emb_v, 3, offset=lk - lq)
    want, _ = naive.shaw_attention(q, k, v, emb_k, emb_v, 3, offset=lk - lq)
    torch.testing.assert_close(got, want)
    top_left, _ = F.shaw_attention(q, k, v, emb_k, emb_v, 3)
    assert not torch.allclose(top_left, got)  # the offset matters


def _alibi_masked(slopes, pos_q, pos_k, allowed):
    """An explicit (H, Lq, Lk) ALiBi bias at the given positions, -inf where not allowed."""
    dist = (pos_k[None, :] - pos_q[:, None]).abs().double()
    bias = -slopes[:, None, None] * dist
    return bias.masked_fill(~allowed, -math.inf)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_batch_of_caches_equals_a_masked_bias(causal):
    """kv_lens: row b's queries at kv_lens[b] - Lq + i see keys j < kv_lens[b] (and j <= their
    position if causal): the same as one attention with that mask written into an explicit
    bias, row by row; a tensor bias is cut per row alike."""
    torch.manual_seed(0)
    lq, lk, lens = 3, 9, [9, 4, 6]
    q, k, v = (torch.randn(3, 2, n, 4, dtype=torch.float64) for n in (lq, lk, lk))
    alibi = posenc.ALiBi(2).double()
    got = F.relative_attention(q, k, v, bias=alibi, causal=causal, kv_lens=torch.tensor(lens))
    j = torch.arange(lk)
    biases = []
    for n in lens:
        pos = torch.arange(lq) + n - lq
        allowed = (j[None, :] < n) & ((j[None, :] <= pos[:, None]) if causal else True)
        biases.append(_alibi_masked(alibi.slopes.double(), pos, j, allowed))
    bias = torch.stack(biases)  # (B, H, Lq, Lk)
    assert_close(got, F.relative_attention(q, k, v, bias=bias), atol=1e-12, rtol=1e-10)
    if not causal:  # the same bias handed over as a tensor, cut to each row's keys
        again = F.relative_attention(q, k, v, bias=bias, kv_lens=torch.tensor(lens))
        assert_close(again, got, atol=1e-12, rtol=1e-10)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_packed_documents_equal_a_block_diagonal_bias(causal):
    """cu_seqlens: a token attends within its document only, at distances counted from the
    document's start: one attention over the whole row with a block-diagonal bias."""
    torch.manual_seed(1)
    sizes = [4, 1, 7, 3]
    t = sum(sizes)
    cu = torch.tensor([0, 4, 5, 12, 15])
    q, k, v = (torch.randn(1, 2, t, 4, dtype=torch.float64) for _ in range(3))
    alibi = posenc.ALiBi(2).double()
    got = F.relative_attention(q, k, v, bias=alibi, causal=causal, cu_seqlens=cu)
    doc = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes))
    pos = torch.arange(t) - cu[doc]  # positions within the document
    allowed = doc[:, None] == doc[None, :]
    if causal:
        allowed &= pos[None, :] <= pos[:, None]
    bias = _alibi_masked(alibi.slopes.double(), pos, pos, allowed)[None]
    assert_close(got, F.relative_attention(q, k, v, bias=bias), atol=1e-12, rtol=1e-10)


@pytest.mark.parametrize(
    ("kwargs", "text"),
    [
        ({"kv_lens": torch.tensor([3, 0])}, "kv_lens must hold B=2 lengths in 1 .. Lk=5"),
        ({"kv_lens": torch.tensor([3])}, "kv_lens must hold B=2"),
        ({"cu_seqlens": torch.tensor([0, 5])}, "over one row"),
        ({"kv_lens": torch.tensor([1, 1]), "cu_seqlens": torch.tensor([0, 5])}, "not both"),
    ],
)
def test_bad_sequences_are_named(kwargs, text):
    q = torch.zeros(2, 2, 5, 4, dtype=torch.float64)
    with pytest.raises(ValueError, match=text):
        F.relative_attention(q, q, q, bias=posenc.ALiBi(2).double(), **kwargs)
