"""Encodings proposed for length generalization (FIRE, KERPLE's log kernel, CoPE, randomized
positions) against the float64 oracles of tests/posenc/naive.py, written from the papers'
equations, and the properties each paper relies on."""

from __future__ import annotations

import math

import pytest
import torch

from posenc import FIRE, CoPEMultiHeadAttention, KerpleLog, LearnablePositionalEncoding
from posenc import functional as F
from tests.posenc import naive


def test_fire_bias_matches_the_definition_past_and_below_its_threshold():
    torch.manual_seed(0)
    fire = FIRE(num_heads=3, mlp_width=8, init_c=0.3, init_threshold=4.0).double()
    with torch.no_grad():
        fire.threshold_scale.fill_(1.5)  # L = 6: queries 0 .. 5 below it, 6 .. 9 past it
    got = fire.bias(10, 10)  # (H, Lq, Lk)
    assert got.shape == (3, 10, 10) and got.dtype == torch.float64
    want = torch.stack(
        [torch.stack([naive.fire(i, j, 0.3, 6.0, fire.mlp) for j in range(10)]) for i in range(10)]
    ).permute(2, 0, 1)
    torch.testing.assert_close(got, want)


def test_fire_is_relative_below_the_threshold_and_interpolates_past_it():
    """Queries below L see psi(i - j) / psi(L): a function of i - j. Past L the normaliser
    grows with i, so the same offset maps to a smaller input (progressive interpolation)."""
    fire = FIRE(num_heads=1, init_c=1.0, init_threshold=8.0).double()
    x = fire.distances(20, 20)  # (Lq, Lk)
    below = [x[i, i - 3] for i in range(3, 8)]
    assert max(below) - min(below) < 1e-12
    past = [x[i, i - 3] for i in range(9, 20)]
    assert all(a > b for a, b in zip(past, past[1:], strict=False))
    torch.testing.assert_close(x[19, 0], torch.tensor(1.0, dtype=torch.float64), atol=1e-5, rtol=0)
    torch.testing.assert_close(fire.distances(4, 20, offset=16), x[16:])


def test_fire_learns_c_and_the_threshold():
    fire = FIRE(num_heads=2, init_threshold=3.0)
    fire.bias(8, 8).square().sum().backward()
    assert fire.c.grad.abs() > 0 and fire.threshold_scale.grad.abs() > 0


def test_kerple_log_matches_the_kernel_and_clamps_its_parameters():
    torch.manual_seed(0)
    kerple = KerpleLog(num_heads=3).double()
    with torch.no_grad():
        kerple.p.copy_(torch.tensor([1.5, 0.2, -1.0]))  # the last clamps to eps
        kerple.a.copy_(torch.tensor([0.5, 3.0, 0.7]))
    got = kerple.bias(5, 7, offset=2)
    p, a = [1.5, 0.2, kerple.eps], [0.5, 3.0, 0.7]
    want = torch.tensor(
        [
            [[naive.kerple_log(i + 2, j, p[h], a[h]) for j in range(7)] for i in range(5)]
            for h in range(3)
        ],
        dtype=torch.float64,
    )
    torch.testing.assert_close(got, want)
    assert (got.diagonal(2, -2, -1) == 0).all()  # no penalty at distance 0


def test_cope_counts_gates_from_the_key_to_the_query():
    """With every gate open (large logits) the count from key j to query i is i - j + 1, as a
    relative position; a causal mask keeps later keys out of the count."""
    logits = torch.full((1, 1, 6, 6), 40.0, dtype=torch.float64)
    future = torch.ones(6, 6, dtype=torch.bool).triu(1)
    pos = F.cope_positions(logits.masked_fill(future, -math.inf))[0, 0]
    i, j = torch.arange(6).unsqueeze(1), torch.arange(6).unsqueeze(0)
    want = torch.where(j <= i, i - j + 1, 0).double()
    torch.testing.assert_close(pos, want)


def test_cope_attention_matches_the_definition_forward_and_backward():
    torch.manual_seed(1)
    q, k, v = (torch.randn(2, 2, 7, 4, dtype=torch.float64, requires_grad=True) for _ in range(3))
    pos_emb = torch.randn(4, 5, dtype=torch.float64, requires_grad=True)  # P = 5 < 7: clamps
    causal = torch.ones(7, 7, dtype=torch.bool).tril()
    got, weights = F.cope_attention(q, k, v, pos_emb, mask=causal)
    want = naive.cope_attention(q, k, v, pos_emb)
    torch.testing.assert_close(got, want)
    assert torch.allclose(weights.sum(-1), torch.ones(2, 2, 7, dtype=torch.float64))
    grads = torch.autograd.grad(got.square().sum(), (q, k, v, pos_emb))
    truth = torch.autograd.grad(want.square().sum(), (q, k, v, pos_emb))
    for g, t in zip(grads, truth, strict=True):
        torch.testing.assert_close(g, t)


def test_cope_module_attends_with_its_own_embeddings():
    torch.manual_seed(2)
    attn = CoPEMultiHeadAttention(16, 2, max_positions=8)
    assert attn.pos_emb.shape == (8, 8) and not attn.pos_emb.any()  # starts at zero
    x = torch.randn(2, 5, 16)
    causal = torch.ones(5, 5, dtype=torch.bool).tril()
    out, weights = attn(x, x, x, mask=causal)
    assert out.shape == (2, 5, 16) and weights.shape == (2, 2, 5, 5)
    assert (weights.triu(1) == 0).all()
    assert attn(x, x, x, mask=causal, need_weights=False)[1] is None
    with pytest.raises(ValueError, match="max_positions"):
        CoPEMultiHeadAttention(16, 2, max_positions=0)
    with pytest.raises(TypeError, match="mask"):
        attn(x, x, x, mask=causal.float())


def test_randomized_positions_are_sorted_distinct_and_uniform():
    gen = torch.Generator().manual_seed(0)
    pos = F.randomized_positions(20000, 4, 16, generator=gen)
    assert pos.shape == (20000, 4) and pos.dtype == torch.int64
    assert (pos.diff(dim=1) > 0).all() and pos.min() >= 0 and pos.max() < 16
    # every position is in a row with probability 4 / 16 (a window of 4 consecutive positions
    # at a uniform start would give the ends 1 / 13 and the middle 4 / 13)
    freq = torch.bincount(pos.flatten(), minlength=16) / 20000
    torch.testing.assert_close(freq, torch.full((16,), 0.25, dtype=freq.dtype), atol=0.02, rtol=0)
    again = F.randomized_positions(20000, 4, 16, generator=torch.Generator().manual_seed(0))
    assert torch.equal(pos, again)
    with pytest.raises(ValueError, match="length"):
        F.randomized_positions(2, 17, 16)


def test_learnable_table_takes_a_position_per_token():
    torch.manual_seed(3)
    table = LearnablePositionalEncoding(8, max_len=32)
    x = torch.randn(2, 3, 8)
    pos = torch.tensor([[0, 5, 31], [2, 3, 4]])
    torch.testing.assert_close(table(x, positions=pos), x + table.pos_embedding.weight[pos])
    with pytest.raises(ValueError, match="positions"):
        table(x, positions=torch.tensor([[0, 5, 32], [2, 3, 4]]))
    with pytest.raises(ValueError, match="positions"):
        table(x, positions=pos.float())
