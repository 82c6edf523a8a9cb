"""Sliding-window attention (window=W: the query at position p sees keys p - W < j <= p, as
transformers' sliding-window layers do): posenc's reference against a banded softmax written
out in float64; the fused kernel's forward and backward against the reference in float64 for
every bias family and none, with sinks, grouped-query heads, queries at the end of the keys,
caches of ragged lengths and packed documents; and the key blocks outside every window of a
query block never read (NaN there stays out of the result)."""

import math

import pytest
import torch
from torch.testing import assert_close

import posenc
from posenc import functional as F
from posenc_kernels import relbias

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
TOL = 2e-5  # float32


def _banded(q, k, v, bias, window, sinks=None):
    """The window written out: per query row its keys max(0, p - W + 1) .. p, a softmax over
    them (and the head's sink logit), float64. bias(h, r): the bias at r = j - p."""
    b, heads, lq, d = q.shape
    lk, group = k.shape[2], heads // k.shape[1]
    out = torch.zeros_like(q)
    for i in range(lq):
        p = lk - lq + i
        js = torch.arange(max(0, p - window + 1), p + 1)
        for h in range(heads):
            s = torch.einsum("bd,bnd->bn", q[:, h, i], k[:, h // group, js]) / math.sqrt(d)
            s = s + torch.stack([bias(h, int(j) - p) for j in js]).to(s)
            if sinks is not None:
                s = torch.cat([s, sinks[h].expand(b, 1).to(s)], -1)
            w = torch.softmax(s, -1)[:, : len(js)]
            out[:, h, i] = torch.einsum("bn,bnd->bd", w, v[:, h // group, js])
    return out


@pytest.mark.parametrize(("lq", "lk", "window"), [(13, 13, 4), (3, 20, 7), (20, 20, 40)])
def test_the_reference_is_the_banded_softmax(lq, lk, window):
    """ALiBi and sinks, four query heads over two kv heads; self-attention, queries at the end
    of the keys (a decode step), and a window wider than the sequence (plain causal)."""
    q = torch.randn(2, 4, lq, 8, dtype=torch.float64)
    k, v = (torch.randn(2, 2, lk, 8, dtype=torch.float64) for _ in "kv")
    alibi, sinks = posenc.ALiBi(4).double(), torch.randn(4, dtype=torch.float64)
    got = F.relative_attention(q, k, v, bias=alibi, causal=True, window=window, sinks=sinks)
    want = _banded(q, k, v, lambda h, r: -alibi.slopes[h] * abs(r), window, sinks)
    assert_close(got, want)
    plain = F.relative_attention(q, k, v, causal=True, window=window)  # no bias
    assert_close(plain, _banded(q, k, v, lambda h, r: torch.tensor(0.0), window))
    if window < lk:  # the window changes something
        assert not torch.allclose(plain, F.relative_attention(q, k, v, causal=True))


def _tables(family, heads):
    """(kernel kwargs with float32 leaves, reference bias with float64 leaves, the leaves)."""
    if family == "none":
        return {}, None, []
    if family == "alibi":
        slopes = (posenc.ALiBi(heads).slopes + 0.05 * torch.rand(heads)).requires_grad_()
        ref = posenc.ALiBi(heads).double()
        ref.slopes = torch.nn.Parameter(slopes.detach().double())
        return {"alibi_slopes": slopes}, ref, [(slopes, ref.slopes)]
    if family == "t5":
        ref = posenc.T5RelativeBias(heads, num_buckets=8, max_distance=16).double()
        table = ref.relative_attention_bias.weight.detach().float().requires_grad_()
        kw = {"t5_table": table, "t5_num_buckets": 8, "t5_max_distance": 16}
        return kw, ref, [(table, ref.relative_attention_bias.weight)]
    ref = posenc.ShawBias(heads, max_relative_position=3).double()
    table = ref.table.detach().float().requires_grad_()
    return {"shaw_bias": table}, ref, [(table, ref.table)]


def _leaf(t):
    return t.detach().requires_grad_()


def _on(*tensors):
    """The kernel's inputs on DEVICE: copies that autograd carries back to the CPU leaves."""
    return [t.to(DEVICE) if isinstance(t, torch.Tensor) else t for t in tensors]


@pytest.mark.parametrize("family", ["none", "alibi", "t5", "shaw_bias"])
@pytest.mark.parametrize(("lq", "lk", "window"), [(45, 45, 10), (6, 50, 17)])
def test_the_kernel_forward_and_backward_meet_the_reference(family, lq, lk, window):
    """Out and the gradients of q, k, v, the family's table and the sinks, float32 against
    float64; the window crosses key blocks (16 under the interpreter) on both sides."""
    heads, kv_heads, d = 4, 2, 16
    q = torch.randn(2, heads, lq, d)
    k, v = (torch.randn(2, kv_heads, lk, d) for _ in "kv")
    sinks = torch.randn(heads)
    kw, ref_bias, tables = _tables(family, heads)
    leaves = [_leaf(t) for t in (q, k, v, sinks)]
    refs = [_leaf(t.double()) for t in (q, k, v, sinks)]
    got = relbias.relative_attention(
        *_on(*leaves[:3]),
        causal=True,
        window=window,
        sinks=leaves[3].to(DEVICE),
        **dict(zip(kw, _on(*kw.values()), strict=True)),
    )
    want = F.relative_attention(*refs[:3], bias=ref_bias, causal=True, window=window, sinks=refs[3])
    assert_close(got.double().cpu(), want, atol=TOL, rtol=TOL)
    dout = torch.randn_like(want)
    got.backward(dout.float().to(DEVICE))
    want.backward(dout)
    for mine, theirs in [*zip(leaves, refs, strict=True), *tables]:
        assert_close(mine.grad.double().cpu(), theirs.grad, atol=1e-4, rtol=1e-4)


def test_shaws_key_and_value_terms_and_forgetting_gates_take_the_window():
    """Shaw's per-head-shared a^K, a^V (their gradients too) against posenc.shaw_attention with
    the band as its mask; FoX's gates against its bias D_p - D_j written out, window 9."""
    lq, lk, w, clip = 20, 30, 9, 3
    q, k, v = (torch.randn(1, 2, n, 16) for n in (lq, lk, lk))
    emb_k, emb_v = torch.randn(2, 2 * clip + 1, 16)
    off = lk - lq
    band = torch.ones(lq, lk, dtype=torch.bool).tril(off) & ~torch.ones(lq, lk).bool().tril(off - w)
    leaves = [_leaf(t) for t in (q, k, v, emb_k, emb_v)]
    refs = [_leaf(t.double()) for t in leaves]
    q_, k_, v_, ek, ev = _on(*leaves)
    got = relbias.relative_attention(q_, k_, v_, shaw_k=ek, shaw_v=ev, causal=True, window=w)
    want, _ = F.shaw_attention(*refs, clip, mask=band, offset=off)
    assert_close(got.double().cpu(), want, atol=TOL, rtol=TOL)
    got.sum().backward()
    want.sum().backward()
    for mine, theirs in zip(leaves, refs, strict=True):
        assert_close(mine.grad.double(), theirs.grad, atol=1e-4, rtol=1e-4)
    log_f = torch.nn.functional.logsigmoid(torch.randn(1, 2, lk))
    leaves = [_leaf(t) for t in (q, k, v, log_f)]
    refs = [_leaf(t.double()) for t in leaves]
    c = refs[3].cumsum(-1)
    bias = c[..., off:, None] - c[..., None, :]  # D_p - D_j, p = off + i
    want = F.relative_attention(*refs[:3], bias=bias, causal=True, window=w)
    q_, k_, v_, log_f_ = _on(*leaves)
    got = relbias.relative_attention(q_, k_, v_, fox_log_f=log_f_, causal=True, window=w)
    assert_close(got.double().cpu(), want, atol=TOL, rtol=TOL)
    got.sum().backward()
    want.sum().backward()
    for mine, theirs in zip(leaves, refs, strict=True):
        assert_close(mine.grad.double(), theirs.grad, atol=1e-4, rtol=1e-4)


def test_caches_of_ragged_lengths_and_packed_documents_take_the_window():
    """A decode step of 2 queries against caches of 9 and 37 keys, its keys split or not; three
    packed documents (the window restarts in each), forward and backward."""
    q = torch.randn(2, 2, 2, 16)
    k, v = (torch.randn(2, 1, 40, 16) for _ in "kv")
    lens = torch.tensor([9, 37])
    want = F.relative_attention(
        q.double(), k.double(), v.double(), causal=True, window=6, kv_lens=lens
    )
    for splits in (None, 1, 4):  # whole splits before the window read nothing; the merge too
        got = relbias.relative_attention(
            *_on(q, k, v), causal=True, window=6, kv_lens=lens.to(DEVICE), num_splits=splits
        )
        assert_close(got.double().cpu(), want, atol=TOL, rtol=TOL)
    cu = torch.tensor([0, 5, 30, 41])
    q, k, v = (_leaf(torch.randn(1, 2, 41, 16)) for _ in "qkv")
    alibi = posenc.ALiBi(2)
    slopes, cu_ = _on(alibi.slopes, cu)
    got = relbias.relative_attention(
        *_on(q, k, v), alibi_slopes=slopes, causal=True, window=7, cu_seqlens=cu_
    )
    refs = [_leaf(t.double()) for t in (q, k, v)]
    want = F.relative_attention(*refs, bias=alibi.double(), causal=True, window=7, cu_seqlens=cu)
    assert_close(got.double().cpu(), want, atol=TOL, rtol=TOL)
    got.sum().backward()
    want.sum().backward()
    for mine, theirs in zip((q, k, v), refs, strict=True):
        assert_close(mine.grad.double(), theirs.grad, atol=1e-4, rtol=1e-4)


def test_blocks_outside_the_window_are_never_read():
    """L 128, W 8: the last 32 queries see keys 89 and up, so with NaN in keys 0 .. 63 (values
    and keys) their rows stay finite only if those blocks are skipped (a masked read would give
    0 x NaN); in the backward, NaN queries past 64 must not reach dk, dv of keys 0 .. 31."""
    q, k, v = (torch.randn(1, 2, 128, 16, device=DEVICE) for _ in "qkv")
    k[:, :, :64], v[:, :, :64] = math.nan, math.nan
    out = relbias.relative_attention(q, k, v, causal=True, window=8)
    assert out[:, :, 96:].isfinite().all() and out[:, :, :64].isnan().any()
    q, k, v = (torch.randn(1, 2, 128, 16, device=DEVICE) for _ in "qkv")
    q[:, :, 64:] = math.nan
    q, k, v = (_leaf(t) for t in (q, k, v))
    relbias.relative_attention(q, k, v, causal=True, window=8).sum().backward()
    assert k.grad[:, :, :32].isfinite().all() and v.grad[:, :, :32].isfinite().all()
    assert k.grad[:, :, 64:].isnan().any()


@pytest.mark.parametrize(
    ("kwargs", "text"),
    [
        ({"window": 4}, "window needs causal=True"),
        ({"window": 0, "causal": True}, "window must be a positive int"),
        ({"window": True, "causal": True}, "window must be a positive int"),
    ],
)
def test_a_bad_window_is_named(kwargs, text):
    q = torch.randn(1, 1, 4, 16)
    with pytest.raises(ValueError, match=text):
        relbias.relative_attention(q, q, q, **kwargs)


def test_no_bias_is_plain_attention():
    q, k, v = (torch.randn(1, 2, 24, 16) for _ in "qkv")
    want = torch.nn.functional.scaled_dot_product_attention(
        q.double(), k.double(), v.double(), is_causal=True
    )
    got = relbias.relative_attention(*_on(q, k, v), causal=True)
    assert_close(got.double().cpu(), want, atol=TOL, rtol=TOL)
