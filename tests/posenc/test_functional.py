"""posenc.functional against the float64 oracles in naive.py."""

import math

import pytest
import torch
from torch.testing import assert_close

from posenc import _rotate, _shaw
from posenc import functional as F
from tests.posenc import naive

# (dtype, atol, rtol) for outputs of O(1) magnitude computed in that dtype from exact tables.
TOLS = {
    torch.float64: (1e-12, 1e-12),
    torch.float32: (2e-6, 2e-6),
    torch.float16: (4e-3, 2e-3),
    torch.bfloat16: (3e-2, 1.6e-2),
}


@pytest.mark.parametrize(("length", "d_model", "offset"), [(7, 16, 0), (5, 33, 3), (1, 1, 0)])
def test_sinusoidal_table_matches_formula(length, d_model, offset):
    got = F.sinusoidal_table(length, d_model, offset=offset, dtype=torch.float64)
    rows = [naive.sinusoid(p, d_model) for p in range(offset, offset + length)]
    want = torch.tensor(rows, dtype=torch.float64)
    assert_close(got, want, atol=1e-12, rtol=0)


def test_rope_tables_accurate_at_large_positions():
    pos = torch.tensor([0, 1, 4095, 2**20, 2**20 + 7])
    cos, sin = F.rope_cos_sin(pos, 128)
    assert cos.dtype == torch.float32 and cos.shape == (5, 64)
    for row, p in enumerate(pos.tolist()):
        angles = [p * 10000.0 ** (-2 * i / 128) for i in range(64)]
        assert_close(
            cos[row].double(),
            torch.tensor([math.cos(a) for a in angles], dtype=torch.float64),
            atol=1e-6,
            rtol=0,
        )
        assert_close(
            sin[row].double(),
            torch.tensor([math.sin(a) for a in angles], dtype=torch.float64),
            atol=1e-6,
            rtol=0,
        )
    # Why the float64 detour matters: the float32 product is off by ~1e-2 at 2**20.
    naive32 = torch.cos(pos[3].float() * (10000.0 ** (-torch.arange(0, 128, 2) / 128)).float())
    assert (naive32.double() - cos[3].double()).abs().max() > 1e-3


def test_rope_tables_any_shape_and_int():
    cos, sin = F.rope_cos_sin(torch.arange(6).view(2, 3), 8)
    assert cos.shape == (2, 3, 4)
    cos_n, _ = F.rope_cos_sin(3, 8)
    assert_close(cos[0], cos_n)


LAYOUTS = [  # (x shape, rotary dim, interleaved): 3D and 4D, full and partial, both pairings
    ((2, 5, 8), 8, False),
    ((2, 5, 8), 8, True),
    ((2, 3, 7, 12), 8, False),
    ((1, 2, 9, 10), 6, True),
    ((3, 1, 80), 80, False),
]


@pytest.mark.parametrize(("shape", "rotary", "interleaved"), LAYOUTS)
@pytest.mark.parametrize("dtype", list(TOLS))
@pytest.mark.parametrize("mode", ["alloc", "out", "inplace"])
def test_apply_rope_matches_rotation_matrices(shape, rotary, interleaved, dtype, mode):
    x64 = torch.randn(shape, dtype=torch.float64)
    length = shape[-2]
    want = naive.rope(x64, list(range(3, 3 + length)), rotary, interleaved)
    cos, sin = F.rope_cos_sin(torch.arange(3, 3 + length), rotary, dtype=torch.float64)
    if dtype != torch.float64:
        cos, sin = cos.float(), sin.float()
    x = x64.to(dtype)
    x_before = x.clone()
    if mode == "alloc":
        got = F.apply_rope(x, cos, sin, interleaved=interleaved)
        assert_close(x, x_before, atol=0, rtol=0)  # input untouched
    elif mode == "out":
        buf = torch.full_like(x, float("nan"))
        got = F.apply_rope(x, cos, sin, interleaved=interleaved, out=buf)
        assert got.data_ptr() == buf.data_ptr()
    else:
        got = F.apply_rope(x, cos, sin, interleaved=interleaved, out=x)
        assert got.data_ptr() == x.data_ptr()
    assert got.dtype == dtype
    atol, rtol = TOLS[dtype]
    # The input itself was rounded to dtype: compare against the rotation of the rounded input.
    want = naive.rope(x_before.double(), list(range(3, 3 + length)), rotary, interleaved)
    assert_close(got.double(), want, atol=atol, rtol=rtol)


@pytest.mark.parametrize(("start", "interleaved"), [(6, True), (3, False), (10, False)])
@pytest.mark.parametrize("mode", ["grad", "out", "inplace"])
def test_a_rotated_slice_anywhere_in_the_head(start, interleaved, mode):
    """rotary_start: dims start .. start + R - 1 turn (DeepSeek-V4's heads: the last R), the
    others pass, in every mode."""
    x64, rotary = torch.randn(2, 3, 5, 16, dtype=torch.float64), 6
    want = naive.rope(x64, list(range(5)), rotary, interleaved, start=start)
    cos, sin = F.rope_cos_sin(5, rotary, dtype=torch.float64)
    if mode == "grad":
        x = x64.clone().requires_grad_()
        got = F.apply_rope(x, cos, sin, interleaved=interleaved, rotary_start=start)
        w = torch.randn_like(got)
        (got * w).sum().backward()
        back = naive.rope(w, list(range(5)), rotary, interleaved, start=start, inverse=True)
        assert_close(x.grad, back)
    else:
        x = x64.clone()
        out = x if mode == "inplace" else torch.full_like(x, float("nan"))
        got = F.apply_rope(x, cos, sin, interleaved=interleaved, rotary_start=start, out=out)
        assert got.data_ptr() == out.data_ptr()
    assert_close(got.detach(), want)


def test_apply_rope_strided_views_and_per_sequence_tables():
    base = torch.randn(2, 6, 3, 16, dtype=torch.float64)  # (B, L, H, D)
    x = base.transpose(1, 2)  # (B, H, L, D), not contiguous
    pos = torch.tensor([[0, 1, 2, 3, 4, 5], [9, 8, 7, 6, 5, 4]])
    cos, sin = F.rope_cos_sin(pos, 16, dtype=torch.float64)  # (B, L, 8)
    got = F.apply_rope(x, cos.unsqueeze(1), sin.unsqueeze(1))
    for b in range(2):
        assert_close(got[b], naive.rope(x[b], pos[b].tolist()), atol=1e-12, rtol=0)


def test_apply_rope_chunked_path_equals_single_pass(monkeypatch):
    x = torch.randn(9, 4, 10, 8)
    cos, sin = F.rope_cos_sin(10, 8)
    whole = F.apply_rope(x, cos, sin)
    monkeypatch.setattr(_rotate, "CHUNK_BYTES", 1)  # one slice of dim 0 per chunk
    assert_close(F.apply_rope(x, cos, sin), whole, atol=0, rtol=0)


def test_apply_rope_gradient():
    x = torch.randn(2, 3, 4, 8, dtype=torch.float64, requires_grad=True)
    cos, sin = F.rope_cos_sin(4, 6, dtype=torch.float64)
    for interleaved in (False, True):
        assert torch.autograd.gradcheck(
            lambda t, il=interleaved: F.apply_rope(t, cos, sin, interleaved=il), (x,)
        )
    with pytest.raises(ValueError, match="out"):
        F.apply_rope(x, cos, sin, out=torch.empty_like(x))


def test_relative_positions_matches_definition():
    got = F.relative_positions(4, 7, 2)
    want = torch.tensor([[min(max(j - i, -2), 2) + 2 for j in range(7)] for i in range(4)])
    assert torch.equal(got, want)


MASKS = [None, "bool", "additive", "int"]


@pytest.mark.parametrize(("lq", "lk", "clip"), [(5, 5, 2), (3, 7, 1), (6, 4, 0), (9, 9, 20)])
@pytest.mark.parametrize("mask_kind", MASKS)
@pytest.mark.parametrize("path", ["gather", "diagonals"])
def test_shaw_attention_matches_naive(lq, lk, clip, mask_kind, path, monkeypatch):
    if path == "diagonals":  # the large-tile path, forced at a small size
        monkeypatch.setattr(_shaw, "GATHER_MAX_CELLS", 0)
    b, h, d = 2, 3, 4
    q, k, v = (torch.randn(b, h, n, d, dtype=torch.float64) for n in (lq, lk, lk))
    emb_k, emb_v = torch.randn(2, 2 * clip + 1, d, dtype=torch.float64)
    keep = torch.rand(b, 1, lq, lk) > 0.3
    keep[..., 0] = True  # no fully masked row
    mask = {
        None: None,
        "bool": keep,
        "int": keep.long(),
        "additive": torch.where(keep, 0.5, -math.inf).double(),
    }[mask_kind]
    naive_mask = {None: None, "bool": keep, "int": keep}.get(mask_kind, mask)
    out, w = F.shaw_attention(q, k, v, emb_k, emb_v, clip, mask=mask)
    want_out, want_w = naive.shaw_attention(q, k, v, emb_k, emb_v, clip, mask=naive_mask)
    assert_close(w, want_w, atol=1e-12, rtol=1e-10)
    assert_close(out, want_out, atol=1e-12, rtol=1e-10)


@pytest.mark.parametrize("cells", [0, 256 * 256])  # both paths of the relative logits
def test_shaw_attention_gradcheck(cells, monkeypatch):
    monkeypatch.setattr(_shaw, "GATHER_MAX_CELLS", cells)
    q, k, v = (torch.randn(1, 2, 4, 3, dtype=torch.float64, requires_grad=True) for _ in range(3))
    emb_k, emb_v = (torch.randn(5, 3, dtype=torch.float64, requires_grad=True) for _ in range(2))
    fn = lambda *t: F.shaw_attention(*t, 2)[0]  # noqa: E731
    assert torch.autograd.gradcheck(fn, (q, k, v, emb_k, emb_v))


def test_shaws_value_term_sums_in_float32_in_half_precision():
    """Each clipped bucket of the value term sums up to Lk weights. CUDA's bfloat16 scatter_add
    sums in bfloat16 and stalls near 0.5 (an H200 at Lk 4096: half the output wrong) where the
    CPU's sums in float32, so the sums are float32 whatever the device: every scatter_add_ of
    a bfloat16 call runs on float32, and the output keeps the inputs' dtype and precision."""
    seen = []

    class Spy(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            if func is torch.Tensor.scatter_add_:
                seen.append(args[0].dtype)
            return func(*args, **(kwargs or {}))

    q, k, v = (torch.randn(1, 2, 8, 16) for _ in range(3))
    emb_k, emb_v = torch.randn(2, 5, 16)
    want, _ = F.shaw_attention(*(t.double() for t in (q, k, v, emb_k, emb_v)), 2)
    with Spy():
        got, _ = F.shaw_attention(*(t.bfloat16() for t in (q, k, v, emb_k, emb_v)), 2)
    assert seen == [torch.float32] and got.dtype == torch.bfloat16
    assert_close(got.double(), want, atol=3e-2, rtol=3e-2)


def test_apply_rope_under_torch_compile_past_one_chunk_of_a_transposed_view():
    """bshd memory seen as (B, H, L, D), more than one CPU chunk: traced, apply_rope equals
    eager (the chunked out= engine came back wrong through AOTAutograd in torch 2.13)."""
    import torch._dynamo

    x = torch.randn(1, 1024, 8, 128).transpose(1, 2)  # 4 MiB: two chunks of heads
    cos, sin = F.rope_cos_sin(1024, 128)
    want = F.apply_rope(x, cos, sin)
    torch._dynamo.reset()
    fn = torch.compile(lambda x, c, s: F.apply_rope(x, c, s), backend="aot_eager", dynamic=False)
    with torch.no_grad():
        got = fn(x, cos, sin)
    torch.testing.assert_close(got, want, rtol=2e-6, atol=2e-6)
