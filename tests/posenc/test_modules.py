"""The corrected modules against the float64 oracles; state_dict compatibility; gradcheck."""

import pytest
import torch
from torch.testing import assert_close

import posenc
from posenc import functional as F
from posenc import seed
from tests.posenc import naive


def test_sinusoidal_adds_table_with_offset_and_keeps_dtype():
    enc = posenc.SinusoidalPositionalEncoding(10, max_len=20)
    x = torch.randn(2, 4, 10)
    want = x.double() + torch.tensor(
        [naive.sinusoid(p, 10) for p in range(5, 9)], dtype=torch.float64
    )
    assert_close(enc(x, offset=5).double(), want, atol=1e-6, rtol=0)
    assert enc(x.to(torch.bfloat16)).dtype == torch.bfloat16


def test_learnable_broadcasts_rows_with_offset():
    enc = posenc.LearnablePositionalEncoding(6, max_len=10)
    x = torch.randn(3, 4, 6)
    assert_close(enc(x, offset=2), x + enc.pos_embedding.weight[2:6])


@pytest.mark.parametrize("interleaved", [False, True])
def test_rope_module_positions(interleaved):
    rope = posenc.RoPEPositionalEncoding(8, max_len=64, interleaved=interleaved).double()
    x = torch.randn(2, 3, 5, 8, dtype=torch.float64)  # (B, H, L, D)
    assert_close(rope(x), naive.rope(x, range(5), interleaved=interleaved))
    assert_close(rope(x, positions=7), naive.rope(x, range(7, 12), interleaved=interleaved))
    pos = torch.tensor([[0, 2, 4, 6, 8], [63, 1, 1, 0, 5]])
    got = rope(x, positions=pos)
    for b in range(2):
        assert_close(got[b], naive.rope(x[b], pos[b].tolist(), interleaved=interleaved))
    x3 = x[:, 0]  # (B, L, D)
    assert_close(
        rope(x3, positions=pos)[1], naive.rope(x3[1], pos[1].tolist(), interleaved=interleaved)
    )


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_rope_module_low_precision_uses_float32_math(dtype):
    rope = posenc.RoPEPositionalEncoding(16, max_len=32)
    x = torch.randn(2, 7, 16).to(dtype)
    got = rope(x)
    assert got.dtype == dtype
    want = naive.rope(x.double(), range(7))
    err = (got.double() - want).abs().max()
    # One rounding of the float32 result to dtype: half an ulp of values of magnitude <= ~4.
    assert err <= 4 * torch.finfo(dtype).eps


def test_rope_attention_matches_naive_and_sdpa_path():
    mha = posenc.RoPEMultiHeadAttention(16, 2, max_len=32).double()
    xq, xk = torch.randn(2, 5, 16, dtype=torch.float64), torch.randn(2, 6, 16, dtype=torch.float64)
    q, k, v = naive.project(mha, xq, "q"), naive.project(mha, xk, "k"), naive.project(mha, xk, "v")
    q, k = naive.rope(q, range(5)), naive.rope(k, range(6))
    w = torch.softmax(q @ k.transpose(-1, -2) / 8**0.5, dim=-1)
    out, weights = mha(xq, xk, xk)
    assert_close(weights, w)
    assert_close(out, naive.output(mha, w @ v))
    out_sdpa, none = mha(xq, xk, xk, need_weights=False)
    assert none is None
    assert_close(out_sdpa, out)


def test_relative_attention_matches_shaw_equations():
    mha = posenc.RelativeMultiHeadAttention(12, 3, max_relative_position=2).double()
    xq, xk = torch.randn(2, 4, 12, dtype=torch.float64), torch.randn(2, 7, 12, dtype=torch.float64)
    tables = mha.rel_pos_encoding
    mask = torch.ones(4, 7, dtype=torch.bool).tril(diagonal=3)
    want_z, want_w = naive.shaw_attention(
        naive.project(mha, xq, "q"),
        naive.project(mha, xk, "k"),
        naive.project(mha, xk, "v"),
        tables.relative_position_k.weight,
        tables.relative_position_v.weight,
        2,
        mask=mask,
    )
    out, weights = mha(xq, xk, xk, mask=mask)
    assert_close(weights, want_w)
    assert_close(out, naive.output(mha, want_z))


def test_relative_position_encoding_tables_for_unequal_lengths():
    enc = posenc.RelativePositionEncoding(4, max_relative_position=1)
    rel_k, rel_v = enc(torch.randn(1, 3, 4), torch.randn(1, 5, 4), torch.randn(1, 5, 4))
    assert rel_k.shape == rel_v.shape == (3, 5, 4)
    idx = enc.relative_positions(3, 5)
    assert torch.equal(rel_k, enc.relative_position_k.weight[idx])
    assert torch.equal(idx, F.relative_positions(3, 5, 1))


PAIRS = [  # (tutorial class, corrected class, constructor args)
    (seed.SinusoidalPositionalEncoding, posenc.SinusoidalPositionalEncoding, (16, 50)),
    (seed.LearnablePositionalEncoding, posenc.LearnablePositionalEncoding, (16, 50)),
    (seed.RelativePositionEncoding, posenc.RelativePositionEncoding, (16, 5)),
    (seed.RelativeMultiHeadAttention, posenc.RelativeMultiHeadAttention, (16, 4, 5)),
    (seed.RoPEPositionalEncoding, posenc.RoPEPositionalEncoding, (16, 50)),
    (seed.RoPEMultiHeadAttention, posenc.RoPEMultiHeadAttention, (16, 4, 50)),
]


@pytest.mark.parametrize(("old", "new", "args"), PAIRS, ids=lambda p: getattr(p, "__name__", ""))
def test_tutorial_state_dict_loads_strict(old, new, args):
    saved = old(*args).state_dict()
    module = new(*args)
    module.load_state_dict(saved, strict=True)
    for name, param in module.named_parameters():
        assert torch.equal(param, saved[name])
    assert set(module.state_dict()) == {n for n, _ in module.named_parameters()}


def _gradcheck_module(module, *inputs):
    module = module.double()
    params = [p for p in module.parameters()]
    names = [n for n, _ in module.named_parameters()]

    def fn(*flat):
        xs, ps = flat[: len(inputs)], flat[len(inputs) :]
        out = torch.func.functional_call(module, dict(zip(names, ps, strict=True)), xs)
        return out[0] if isinstance(out, tuple) else out

    flat = [x.double().requires_grad_() for x in inputs] + [
        p.detach().requires_grad_() for p in params
    ]
    assert torch.autograd.gradcheck(fn, flat)


def test_gradcheck_every_module_with_parameters():
    x = torch.randn(1, 3, 4)
    _gradcheck_module(posenc.LearnablePositionalEncoding(4, 5), x)
    _gradcheck_module(
        posenc.RelativeMultiHeadAttention(4, 2, 1), x, torch.randn(1, 4, 4), torch.randn(1, 4, 4)
    )
    _gradcheck_module(posenc.RoPEMultiHeadAttention(4, 2, 8), x, x, x)
    enc = posenc.RelativePositionEncoding(2, 1).double()
    w = enc.relative_position_k.weight
    assert torch.autograd.gradcheck(
        lambda t: torch.func.functional_call(enc, {"relative_position_k.weight": t}, (x, x))[0],
        (w.detach().requires_grad_(),),
    )


def test_gradcheck_parameter_free_encoders_wrt_input():
    x = torch.randn(1, 3, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(posenc.SinusoidalPositionalEncoding(4, 5).double(), (x,))
    assert torch.autograd.gradcheck(posenc.RoPEPositionalEncoding(4, 5).double(), (x,))
