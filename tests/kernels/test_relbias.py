"""kernels.relbias (forward and backward) against posenc.functional.relative_attention in float64.

bfloat16 runs on the CPU interpreter safely because the kernel upcasts dot operands to float32
(Triton 3.9's interpreter computes bfloat16 tl.dot wrongly).
"""

import copy

import pytest
import torch
from torch.testing import assert_close

import posenc
from kernels import relbias
from posenc import functional as F

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
TOL = {torch.float32: 2e-5, torch.float16: 4e-3, torch.bfloat16: 3e-2}


def _family(name, heads):
    if name == "alibi":
        module = posenc.ALiBi(heads)
        return module, {"alibi_slopes": module.slopes}
    if name == "t5":
        module = posenc.T5RelativeBias(heads, num_buckets=16, max_distance=32)
        kwargs = {"t5_table": module.relative_attention_bias.weight.detach(),
                  "t5_num_buckets": 16, "t5_max_distance": 32}  # fmt: skip
        return module, kwargs
    module = posenc.ShawBias(heads, max_relative_position=3)
    return module, {"shaw_bias": module.table.detach()}


CASES = [  # (family, B, H, Lq, Lk, D, causal): odd lengths, Lq != Lk, D = 80
    ("alibi", 1, 2, 21, 21, 32, False),
    ("alibi", 2, 1, 19, 19, 32, True),
    ("t5", 1, 2, 17, 40, 32, False),
    ("t5", 1, 2, 33, 33, 80, True),
    ("shaw", 2, 2, 9, 23, 32, False),
    ("shaw", 1, 3, 18, 18, 64, True),
]


@pytest.mark.parametrize("dtype", list(TOL), ids=str)
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-{'causal' if c[6] else 'full'}")
def test_forward_matches_reference(case, dtype):
    family, b, h, lq, lk, d, causal = case
    q = torch.randn(b, h, lq, d).to(dtype)
    k, v = (torch.randn(b, h, lk, d).to(dtype) for _ in range(2))
    module, kwargs = _family(family, h)
    with torch.no_grad():
        want = F.relative_attention(q.double(), k.double(), v.double(), bias=module, causal=causal)
    on = {n: (t.to(DEVICE) if isinstance(t, torch.Tensor) else t) for n, t in kwargs.items()}
    got = relbias.relative_attention(q.to(DEVICE), k.to(DEVICE), v.to(DEVICE), causal=causal, **on)
    assert got.dtype == dtype and got.shape == q.shape
    assert_close(got.cpu().double(), want.double(), atol=TOL[dtype], rtol=TOL[dtype])


SHAW_KV = [  # (B, H, Lq, Lk, D, K, causal, with value term)
    (1, 2, 21, 21, 32, 3, False, True),
    (2, 1, 9, 30, 32, 5, False, True),
    (1, 2, 19, 19, 64, 4, True, True),
    (1, 1, 17, 17, 32, 40, False, False),  # K beyond the lengths: every offset its own bucket
    (1, 1, 50, 50, 32, 2, False, True),  # most 16 x 16 tiles lie beyond the clip: one bucket
]


@pytest.mark.parametrize("dtype", list(TOL), ids=str)
@pytest.mark.parametrize(
    "case", SHAW_KV, ids=lambda c: f"K{c[5]}-{'causal' if c[6] else 'full'}-{'kv' if c[7] else 'k'}"
)
def test_shaw_key_and_value_terms(case, dtype):
    b, h, lq, lk, d, clip, causal, value = case
    q = torch.randn(b, h, lq, d).to(dtype)
    k, v = (torch.randn(b, h, lk, d).to(dtype) for _ in range(2))
    emb_k, emb_v = torch.randn(2, 2 * clip + 1, d)
    mask = torch.ones(lq, lk, dtype=torch.bool).tril() if causal else None
    want, _ = F.shaw_attention(q.double(), k.double(), v.double(), emb_k.double(),
                               emb_v.double() if value else None, clip, mask=mask)  # fmt: skip
    args = [t.to(DEVICE) for t in (q, k, v)]
    shaw_v = emb_v.to(DEVICE) if value else None
    got = relbias.relative_attention(*args, shaw_k=emb_k.to(DEVICE), shaw_v=shaw_v, causal=causal)
    assert_close(got.cpu().double(), want, atol=TOL[dtype] * 2, rtol=TOL[dtype])


def test_strided_inputs_are_read_in_place():
    x = torch.randn(1, 11, 3, 2, 32, device=DEVICE)  # (B, L, 3, H, D): a fused qkv projection
    q, k, v = (x[:, :, i].transpose(1, 2) for i in range(3))  # (B, H, L, D) strided views
    module, kwargs = _family("alibi", 2)
    want = F.relative_attention(*(t.double().cpu() for t in (q, k, v)), bias=module)
    got = relbias.relative_attention(q, k, v, alibi_slopes=kwargs["alibi_slopes"].to(DEVICE))
    assert_close(got.cpu().double(), want, atol=2e-5, rtol=2e-5)


q4 = torch.randn(1, 2, 5, 8, device=DEVICE)
k6 = torch.randn(1, 2, 6, 8, device=DEVICE)
k4d = torch.randn(1, 2, 5, 4, device=DEVICE)


def ones(*shape):
    return torch.ones(*shape, device=DEVICE)


def _ra(q, k, v, **kwargs):
    return lambda: relbias.relative_attention(q, k, v, **kwargs)


BAD = [
    ("no bias", _ra(q4, q4, q4), ValueError, "exactly one"),
    ("two biases", _ra(q4, q4, q4, alibi_slopes=ones(2), shaw_bias=ones(2, 3)), ValueError,
     "exactly one"),
    ("slopes shape", _ra(q4, q4, q4, alibi_slopes=ones(3)), ValueError, "alibi_slopes"),
    ("t5 shape", _ra(q4, q4, q4, t5_table=ones(2, 32)), ValueError, "t5_table"),
    ("shaw shape", _ra(q4, q4, q4, shaw_bias=ones(2, 4)), ValueError, "shaw_bias"),
    ("head dim", _ra(q4, k4d, k4d, alibi_slopes=ones(2)), ValueError, "k and v"),
    ("dtype", _ra(q4, q4.half(), q4.half(), alibi_slopes=ones(2)), ValueError,
     "k is torch.float16"),
    ("int", _ra(q4.long(), q4, q4, alibi_slopes=ones(2)), TypeError, "q must be"),
    ("causal lengths", _ra(q4, k6, k6, alibi_slopes=ones(2), causal=True), ValueError, "causal"),
    ("device", _ra(q4, q4, q4, alibi_slopes=ones(2).to("meta")), ValueError,
     "alibi_slopes is on meta"),
    ("shaw_v alone", _ra(q4, q4, q4, shaw_v=ones(3, 8)), ValueError, "shaw_v needs shaw_k"),
    ("shaw_k shape", _ra(q4, q4, q4, shaw_k=ones(3, 4)), ValueError, "shaw_k must be"),
    ("shaw_v shape", _ra(q4, q4, q4, shaw_k=ones(3, 8), shaw_v=ones(5, 8)), ValueError,
     "shaw_v must be"),
]  # fmt: skip


@pytest.mark.parametrize(("call", "exc", "text"), [c[1:] for c in BAD], ids=[c[0] for c in BAD])
def test_bad_input_names_the_argument(call, exc, text):
    with pytest.raises(exc, match=text):
        call()


# Backward: gradients of q, k, v and of the bias table against float64 autograd through the
# posenc reference. Low-precision gradients are compared relative to their largest entry.
# Worst scaled errors measured under the interpreter: fp32 1.7e-6, fp16 5.3e-3, bf16 1.5e-2; the
# half-precision bounds leave room for the GPU's native-dtype dots, not yet run.
GRAD_TOL = {torch.float32: 2e-5, torch.float16: 1e-2, torch.bfloat16: 6e-2}


def _assert_grad_close(got, want, dtype, name):
    bound = GRAD_TOL[dtype] * max(1.0, want.abs().max().item())
    assert got is not None, f"no gradient for {name}"
    assert_close(got.cpu().double(), want, atol=bound, rtol=GRAD_TOL[dtype], msg=name)


def _leaf(t, dtype=None):
    return t.detach().to(dtype or t.dtype).requires_grad_()


@pytest.mark.parametrize("dtype", list(TOL), ids=str)
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-{'causal' if c[6] else 'full'}")
def test_backward_matches_reference(case, dtype):
    family, b, h, lq, lk, d, causal = case
    q, k, v = (torch.randn(b, h, n, d).to(dtype) for n in (lq, lk, lk))
    module, kwargs = _family(family, h)
    name = next(n for n in kwargs if n in ("alibi_slopes", "t5_table", "shaw_bias"))
    table = kwargs[name].detach().float() + 0.1 * torch.randn(kwargs[name].shape)
    ref = copy.deepcopy(module).double()
    ref_table = torch.nn.Parameter(table.double())  # the float64 reference's own leaf
    if family == "t5":
        ref.relative_attention_bias.weight = ref_table
    else:  # ALiBi's slopes buffer becomes a parameter; Shaw's table is one
        setattr(ref, "slopes" if family == "alibi" else "table", ref_table)
    want_leaves = [*(_leaf(t, torch.float64) for t in (q, k, v)), ref_table]
    out = F.relative_attention(*want_leaves[:3], bias=ref, causal=causal)
    grad_out = torch.randn(out.shape, dtype=torch.float64)
    want = torch.autograd.grad(out, want_leaves, grad_out)
    leaves = [_leaf(t.to(DEVICE)) for t in (q, k, v, table)]
    got_out = relbias.relative_attention(*leaves[:3], causal=causal,
                                         **{**kwargs, name: leaves[3]})  # fmt: skip
    got = torch.autograd.grad(got_out, leaves, grad_out.to(DEVICE, dtype))
    for label, g, w in zip(("dq", "dk", "dv", "d" + name), got, want, strict=True):
        assert g.dtype == (dtype if label != "d" + name else torch.float32)
        _assert_grad_close(g, w, dtype, label)


@pytest.mark.parametrize("dtype", list(TOL), ids=str)
@pytest.mark.parametrize(
    "case", SHAW_KV, ids=lambda c: f"K{c[5]}-{'causal' if c[6] else 'full'}-{'kv' if c[7] else 'k'}"
)
def test_shaw_key_and_value_backward(case, dtype):
    b, h, lq, lk, d, clip, causal, value = case
    q, k, v = (torch.randn(b, h, n, d).to(dtype) for n in (lq, lk, lk))
    emb_k, emb_v = torch.randn(2, 2 * clip + 1, d)
    mask = torch.ones(lq, lk, dtype=torch.bool).tril() if causal else None
    inputs = [q, k, v, emb_k] + ([emb_v] if value else [])
    want_leaves = [_leaf(t, torch.float64) for t in inputs]
    out, _ = F.shaw_attention(*want_leaves[:4], want_leaves[4] if value else None, clip, mask=mask)
    grad_out = torch.randn(out.shape, dtype=torch.float64)
    want = torch.autograd.grad(out, want_leaves, grad_out)
    leaves = [_leaf(t.to(DEVICE)) for t in inputs]
    got_out = relbias.relative_attention(*leaves[:3], shaw_k=leaves[3], causal=causal,
                                         shaw_v=leaves[4] if value else None)  # fmt: skip
    got = torch.autograd.grad(got_out, leaves, grad_out.to(DEVICE, dtype))
    labels = ("dq", "dk", "dv", "dshaw_k", "dshaw_v")[: len(inputs)]
    for label, g, w in zip(labels, got, want, strict=True):
        _assert_grad_close(g, w, dtype, label)


def test_table_gradient_is_deterministic():
    """Per-program partial sums reduced on the host, no atomics: the same bits every time."""
    q, k, v = (torch.randn(2, 2, 37, 32, device=DEVICE) for _ in range(3))
    table = torch.randn(16, 2, device=DEVICE, requires_grad=True)
    grads = []
    for _ in range(2):
        out = relbias.relative_attention(q, k, v, t5_table=table, t5_num_buckets=16,
                                         t5_max_distance=32)  # fmt: skip
        (grad,) = torch.autograd.grad(out.sum(), table)
        grads.append(grad)
    assert torch.equal(grads[0], grads[1]) and grads[0].abs().sum() > 0


@pytest.mark.parametrize("family", ["t5", "shaw_kv"])
def test_memory_grows_linearly_with_length(family):
    """Peak bytes of torch storage the call allocates (bench.memory.peak_bytes: the CUDA
    allocator on a GPU, a dispatch-mode tally on the CPU), forward and backward, at L and 2L:
    doubling L must about double it (an (L x L) tensor anywhere would quadruple its share)."""
    from bench.memory import peak_bytes

    def peak(n):
        q, k, v = (torch.randn(1, 2, n, 16, device=DEVICE, requires_grad=True) for _ in range(3))
        if family == "t5":
            kwargs = {"t5_table": torch.randn(16, 2, device=DEVICE, requires_grad=True),
                      "t5_num_buckets": 16, "t5_max_distance": 32}  # fmt: skip
        else:
            kwargs = {"shaw_k": torch.randn(9, 16, device=DEVICE, requires_grad=True),
                      "shaw_v": torch.randn(9, 16, device=DEVICE, requires_grad=True)}  # fmt: skip

        def call():
            relbias.relative_attention(q, k, v, **kwargs).sum().backward()

        return peak_bytes(call, DEVICE)

    small, large = peak(32), peak(64)
    assert small > 0 and large <= 2.2 * small, (small, large)


def test_cpu_tensor_outside_the_interpreter_says_how(monkeypatch):
    """(The launcher reads the variable per call; triton's own import-time switch is unaffected.)"""
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(ValueError, match="TRITON_INTERPRET=1"):
        q = torch.randn(1, 2, 5, 8)  # on the CPU, whatever the machine
        relbias.relative_attention(q, q, q, alibi_slopes=torch.ones(2))
