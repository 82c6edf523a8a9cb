"""Half precision over many tiles: forward and backward of both kernels at lengths that cross
several of a GPU's default tiles (128 x 64 forward, 64 x 128 backward on an H100/H200), checked
by the harness's rule: an error no worse than FACTOR times the eager reference's own error in
the same dtype (relative 2-norms against float64; bench/run/check.py). On the CPU, under the
interpreter (16 x 16 tiles), the same tests run at a length that crosses several of its tiles.
"""

import copy

import pytest
import torch

import posenc
import posenc_kernels
from bench.run.check import FACTOR, FLOOR
from posenc import functional as F
from posenc_kernels import relbias

GPU = torch.cuda.is_available()
DEVICE = "cuda" if GPU else "cpu"
LENGTHS = [384, 1100] if GPU else [40]
DTYPES = [torch.float16, torch.bfloat16]
FAMILIES = ["alibi", "t5", "shaw_bias", "shaw_kv"]


def _rel(got, want):
    return ((got.double().cpu() - want).norm() / want.norm()).item()


def _bound_holds(got, ref_lp, want, dtype, label):
    err, ref = _rel(got, want), _rel(ref_lp, want)
    assert err <= FACTOR * max(ref, FLOOR[dtype]), f"{label}: {err:.2e} vs reference {ref:.2e}"


def _bias(family, heads, dtype):
    """(a posenc bias module in `dtype` on the CPU, the kernel's keyword arguments on DEVICE)."""
    if family == "alibi":
        module = posenc.ALiBi(heads)
        return module, {"alibi_slopes": module.slopes.to(DEVICE)}
    if family == "t5":  # the public configuration: 32 buckets, max distance 128
        module = posenc.T5RelativeBias(heads, 32, 128)
        table = module.relative_attention_bias.weight.detach()
        return module, {"t5_table": table.to(DEVICE)}
    module = posenc.ShawBias(heads, 16)
    return module, {"shaw_bias": module.table.detach().to(DEVICE)}


def _reference(family, module, tables, causal):
    """The eager posenc attention as f(q, k, v), any dtype (the module cast alike)."""
    if family == "shaw_kv":

        def shaw(q, k, v):
            n = q.shape[2]
            mask = torch.ones(n, n, dtype=torch.bool).tril() if causal else None
            emb_k, emb_v = (t.to(q.dtype) for t in tables)
            return F.shaw_attention(q, k, v, emb_k, emb_v, 16, mask=mask)[0]

        return shaw

    def biased(q, k, v):
        return F.relative_attention(q, k, v, bias=copy.deepcopy(module).to(q.dtype), causal=causal)

    return biased


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("length", LENGTHS)
def test_attention_over_many_tiles(length, family, dtype, causal):
    heads, d = 2, 128 if GPU else 32
    q, k, v = (torch.randn(1, heads, length, d).to(dtype) for _ in range(3))
    if family == "shaw_kv":
        module, tables = None, [0.5 * torch.randn(33, d) for _ in range(2)]
        kwargs = {"shaw_k": tables[0].to(DEVICE), "shaw_v": tables[1].to(DEVICE)}
    else:
        (module, kwargs), tables = _bias(family, heads, dtype), []
    ref = _reference(family, module, tables, causal)
    grad_out = torch.randn(q.shape).to(dtype)
    leaves64 = [t.double().requires_grad_() for t in (q, k, v)]
    want = ref(*leaves64)
    want_grads = torch.autograd.grad(want, leaves64, grad_out.double())
    leaves_lp = [t.clone().requires_grad_() for t in (q, k, v)]
    ref_lp = ref(*leaves_lp)
    ref_grads = torch.autograd.grad(ref_lp, leaves_lp, grad_out)
    leaves = [t.to(DEVICE).requires_grad_() for t in (q, k, v)]
    got = posenc_kernels.relative_attention(*leaves, causal=causal, **kwargs)
    got_grads = torch.autograd.grad(got, leaves, grad_out.to(DEVICE))
    _bound_holds(got.detach(), ref_lp.detach(), want.detach(), dtype, "out")
    for label, g, r, w in zip("qkv", got_grads, ref_grads, want_grads, strict=True):
        _bound_holds(g, r, w, dtype, f"d{label}")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("length", LENGTHS)
def test_rope_gqa_over_long_sequences(length, dtype):
    """Llama-like q (B, L, 32, 128) and k (B, L, 8, 128) (8 and 2 heads, D=32 on the CPU)."""
    hq, hk, d = (32, 8, 128) if GPU else (8, 2, 32)
    q, k = torch.randn(2, length, hq, d).to(dtype), torch.randn(2, length, hk, d).to(dtype)
    cos64, sin64 = F.rope_cos_sin(length, d, dtype=torch.float64)
    cos, sin = F.rope_cos_sin(length, d)

    def ref(x, c, s):  # (B, L, H, D) through the posenc reference on a (B, H, L, D) view
        return F.apply_rope(x.transpose(1, 2), c, s).transpose(1, 2)

    grads = [torch.randn(t.shape).to(dtype) for t in (q, k)]
    leaves64 = [t.double().requires_grad_() for t in (q, k)]
    want = [ref(t, cos64, sin64) for t in leaves64]
    want_grads = torch.autograd.grad(want, leaves64, [g.double() for g in grads])
    leaves_lp = [t.clone().requires_grad_() for t in (q, k)]
    ref_lp = [ref(t, cos, sin) for t in leaves_lp]
    ref_grads = torch.autograd.grad(ref_lp, leaves_lp, grads)
    leaves = [t.to(DEVICE).requires_grad_() for t in (q, k)]
    got = posenc_kernels.apply_rope(*leaves, cos.to(DEVICE), sin.to(DEVICE))
    got_grads = torch.autograd.grad(got, leaves, [g.to(DEVICE) for g in grads])
    for i, name in enumerate("qk"):
        _bound_holds(got[i].detach(), ref_lp[i].detach(), want[i].detach(), dtype, name)
        _bound_holds(got_grads[i], ref_grads[i], want_grads[i], dtype, f"d{name}")


def test_alibi_far_from_position_zero_keeps_float32_accuracy():
    """ALiBi beyond the band is a key's term minus a query's, slope x position each: counted
    from position 0 their difference loses float32's digits as slope x position grows (at
    L=256 and slope 1, as at L=4096 and slope 1/16: 4 to 7 times the eager float32 error, out
    and gradients); counted from the held block, the eager reference's own error. No floor:
    the harness's float32 floor (1e-5) is above both. On a GPU the float32 dots are 3xTF32,
    up to 4 times float32's own error (test_3xtf32_dots_keep_float32_accuracy): the bound
    there is that much looser, and only the interpreter's exact float32 catches the defect."""
    length, slopes = 256, [1.0]
    factor = FACTOR * (4 if GPU else 1)
    q, k, v = (torch.randn(1, 1, length, 32) for _ in range(3))
    module = posenc.ALiBi(1)
    with torch.no_grad():
        module.slopes.copy_(torch.tensor(slopes))
    ref = _reference("alibi", module, [], False)
    grad_out = torch.randn(q.shape)
    leaves64 = [t.double().requires_grad_() for t in (q, k, v)]
    want = [ref(*leaves64)]
    want += torch.autograd.grad(want[0], leaves64, grad_out.double())
    leaves32 = [t.clone().requires_grad_() for t in (q, k, v)]
    eager = [ref(*leaves32)]
    eager += torch.autograd.grad(eager[0], leaves32, grad_out)
    leaves = [t.to(DEVICE).requires_grad_() for t in (q, k, v)]
    got = [posenc_kernels.relative_attention(*leaves, alibi_slopes=module.slopes.to(DEVICE))]
    got += torch.autograd.grad(got[0], leaves, grad_out.to(DEVICE))
    for label, g, e, w in zip(("out", "dq", "dk", "dv"), got, eager, want, strict=True):
        err, ref_err = _rel(g.detach(), w.detach()), _rel(e.detach(), w.detach())
        assert err <= factor * ref_err, f"{label}: {err:.2e} vs eager float32 {ref_err:.2e}"


def test_rows_that_span_2_31_elements_in_a_head_are_addressed_right():
    """A (B, L, H, D) layout spans L x H x D elements in a head's rows (131072 tokens of 128
    heads of 128 reach 2**31), where 32-bit row offsets wrap into other memory (a crash under
    the interpreter, another head's or no memory on a GPU). Here q, k and v are views whose
    rows lie 2**26 elements apart in one allocation of which only the written pages are
    backed: the kernels' output and gradients equal those of dense copies, bit for bit."""
    length, d, step = 33, 16, 2**26  # (33 - 1) x 2**26 = 2**31
    base = torch.empty(length * step + 3 * d, dtype=torch.float16, device=DEVICE)
    views = [base.as_strided((1, 1, length, d), (0, 0, step, 1), i * d) for i in range(3)]
    dense = [torch.randn(1, 1, length, d).to(torch.float16) for _ in range(3)]
    for view, x in zip(views, dense, strict=True):
        view.copy_(x)
    assert relbias.wide(*views) and not relbias.wide(*dense)
    slopes = posenc.ALiBi(1).slopes.to(DEVICE)
    grad_out = torch.randn(1, 1, length, d).to(torch.float16).to(DEVICE)
    results = []
    for tensors in (views, [x.to(DEVICE) for x in dense]):
        leaves = [t.detach().requires_grad_() for t in tensors]
        out = posenc_kernels.relative_attention(*leaves, alibi_slopes=slopes, causal=True)
        results.append([out, *torch.autograd.grad(out, leaves, grad_out)])
    for label, got, want in zip(("out", "dq", "dk", "dv"), *results, strict=True):
        assert torch.equal(got, want), label


def test_a_kv_heads_query_heads_2_31_elements_apart_are_addressed_right():
    """The dk/dv kernel steps from a kv head's first query head to the others of its group by
    a head stride: 3 query heads 2**30 elements apart (a (B, H, L, D) layout's 2**30 = L x D)
    reach 2**31 at the third. Output and gradients equal those of a dense copy, bit for bit."""
    length, d, step = 16, 16, 2**30
    base = torch.empty(2 * step + length * d, dtype=torch.float16, device=DEVICE)
    q = base.as_strided((1, 3, length, d), (0, step, d, 1))
    q.copy_(torch.randn(1, 3, length, d).to(torch.float16))
    k, v = (torch.randn(1, 1, length, d).to(torch.float16).to(DEVICE) for _ in range(2))
    assert relbias.wide(q, group=3) and not relbias.wide(q) and not relbias.wide(q.clone())
    slopes = posenc.ALiBi(3).slopes.to(DEVICE)
    grad_out = torch.randn(1, 3, length, d).to(torch.float16).to(DEVICE)
    results = []
    for query in (q, q.clone()):
        leaves = [t.detach().requires_grad_() for t in (query, k, v)]
        out = posenc_kernels.relative_attention(*leaves, alibi_slopes=slopes)
        results.append([out, *torch.autograd.grad(out, leaves, grad_out)])
    for label, got, want in zip(("out", "dq", "dk", "dv"), *results, strict=True):
        assert torch.equal(got, want), label


def test_the_wide_rule_reads_shapes_and_strides():
    """wide: a head's last row and element at or past 2**31 elements from its first."""

    def rows(n, stride):  # (1, 2, n, 128) with n rows `stride` apart, no storage
        return torch.empty_strided((1, 2, n, 128), (0, 128, stride, 1), device="meta")

    assert not relbias.wide(rows(131072, 128 * 128))  # Llama 3.1 405B's heads at 128k, bshd
    assert relbias.wide(rows(131073, 128 * 128))
    assert not relbias.wide(rows(2**24, 128))  # (B, H, L, D) contiguous: L x D
    assert not relbias.wide(None)
    bhsd = [torch.empty((1, 32, n, 128), device="meta") for n in (2**21, 2**22)]
    assert not relbias.wide(bhsd[0], group=8)  # 7 heads of 2**28 elements past the first
    assert relbias.wide(bhsd[1], group=8) and not relbias.wide(bhsd[1])
