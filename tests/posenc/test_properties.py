"""The tutorial's claims (sections 1.1, 2.5, 4.3, 4.7) as properties of the corrected code."""

import math

import pytest
import torch
from torch.testing import assert_close

import posenc
from posenc import functional as F
from posenc.attention import attend


def _plain_attention(x, wq, wk, wv):
    q, k, v = ((x @ w).unsqueeze(1) for w in (wq, wk, wv))  # (B, 1, L, D)
    return attend(q, k, v, None, need_weights=True)[0].squeeze(1)


def test_1_1_attention_without_positions_is_permutation_equivariant():
    x = torch.randn(2, 6, 8, dtype=torch.float64)
    wq, wk, wv = torch.randn(3, 8, 8, dtype=torch.float64)
    perm = torch.tensor([3, 0, 5, 1, 4, 2])
    out = _plain_attention(x, wq, wk, wv)
    assert_close(_plain_attention(x[:, perm], wq, wk, wv), out[:, perm])
    # With positions added, permuting the tokens changes more than the order of the outputs.
    pe = posenc.SinusoidalPositionalEncoding(8, 16).double()
    with_pe = _plain_attention(pe(x), wq, wk, wv)
    permuted = _plain_attention(pe(x[:, perm]), wq, wk, wv)
    assert (permuted - with_pe[:, perm]).abs().max() > 1e-3
    mha = posenc.RoPEMultiHeadAttention(8, 2, 16).double()
    rope_out = mha(x, x, x)[0]
    assert (mha(x[:, perm], x[:, perm], x[:, perm])[0] - rope_out[:, perm]).abs().max() > 1e-3


@pytest.mark.parametrize("d_model", [8, 64])
@pytest.mark.parametrize("shift", [1, 5, 37])
def test_2_5_fixed_linear_map_per_shift(d_model, shift):
    """PE(pos + k) = M_k PE(pos), M_k block-diagonal with a 2x2 rotation by k * w_i per pair."""
    table = F.sinusoidal_table(5000 + shift, d_model, dtype=torch.float64)  # every pos
    m = torch.zeros(d_model, d_model, dtype=torch.float64)
    for i in range(d_model // 2):
        t = shift / 10000.0 ** (2 * i / d_model)
        # (sin(a + t), cos(a + t)) = [[cos t, sin t], [-sin t, cos t]] (sin a, cos a)
        m[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = torch.tensor(
            [[math.cos(t), math.sin(t)], [-math.sin(t), math.cos(t)]], dtype=torch.float64
        )
    assert_close(table[:-shift] @ m.T, table[shift:], atol=1e-9, rtol=0)


def _scores(rope, q, k, m, n):
    """RoPE(q, m) . RoPE(k, n) for q, k of shape (N, D)."""
    rq = rope(q.unsqueeze(0), positions=m) if m is not None else rope(q.unsqueeze(0))
    rk = rope(k.unsqueeze(0), positions=n) if n is not None else rope(k.unsqueeze(0))
    return (rq * rk).sum(-1)


@pytest.mark.parametrize("interleaved", [False, True])
def test_4_3_rope_scores_depend_only_on_offset_and_keep_norms(interleaved):
    rope = posenc.RoPEPositionalEncoding(16, 5000, interleaved=interleaved).double()
    q, k = torch.randn(2, 1, 16, dtype=torch.float64)
    base = [_scores(rope, q, k, m, n) for m, n in [(0, 3), (10, 13), (4000, 4003)]]
    assert_close(base[1], base[0], atol=1e-10, rtol=0)
    assert_close(base[2], base[0], atol=1e-10, rtol=0)
    x = torch.randn(3, 50, 16, dtype=torch.float64)
    assert_close(rope(x).norm(dim=-1), x.norm(dim=-1), atol=1e-12, rtol=0)


def test_4_7_shift_invariance_of_the_dot_product():
    """RoPE(x, m) . RoPE(y, m + k) = RoPE(x, 0) . RoPE(y, k) for every m."""
    rope = posenc.RoPEPositionalEncoding(32, 3000).double()
    x, y = torch.randn(2, 32, dtype=torch.float64)
    pos = torch.arange(0, 2900, 97)
    k = 11
    xs = rope(x.expand(1, len(pos), 32), positions=pos.unsqueeze(0))
    ys = rope(y.expand(1, len(pos), 32), positions=(pos + k).unsqueeze(0))
    lhs = (xs * ys).sum(-1)
    rhs = _scores(rope, x.unsqueeze(0), y.unsqueeze(0), 0, k)
    assert_close(lhs, rhs.expand_as(lhs), atol=1e-10, rtol=0)
