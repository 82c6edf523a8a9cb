"""kernels.relbias (forward) against posenc.functional.relative_attention in float64.

bfloat16 runs on the CPU interpreter safely because the kernel upcasts dot operands to float32
(Triton 3.9's interpreter computes bfloat16 tl.dot wrongly).
"""

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
    x = torch.randn(1, 11, 3, 2, 32)  # (B, L, 3, H, D): a fused qkv projection
    q, k, v = (x[:, :, i].transpose(1, 2) for i in range(3))  # (B, H, L, D) strided views
    module, kwargs = _family("alibi", 2)
    want = F.relative_attention(q.double(), k.double(), v.double(), bias=module)
    got = relbias.relative_attention(q, k, v, **kwargs)
    assert_close(got.double(), want, atol=2e-5, rtol=2e-5)


q4 = torch.randn(1, 2, 5, 8)
k6 = torch.randn(1, 2, 6, 8)
k4d = torch.randn(1, 2, 5, 4)
ones = torch.ones


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


def test_no_silent_detach_when_gradients_are_needed():
    q = torch.randn(1, 2, 5, 8, requires_grad=True)
    with pytest.raises(NotImplementedError, match="no backward"):
        relbias.relative_attention(q, q.detach(), q.detach(), alibi_slopes=torch.ones(2))
    with torch.no_grad():
        relbias.relative_attention(q, q, q, alibi_slopes=torch.ones(2))  # fine without grad
