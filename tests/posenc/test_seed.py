"""`posenc.seed` computes what the tutorial's code computes, written here as float64 formulas.

Each oracle restates one tutorial class in index notation (not by calling the same ops), so a
transcription slip in seed.py fails here.
"""

import math

import pytest
import torch
from torch.testing import assert_close

from posenc import seed
from tests.posenc import naive

# The tutorial's state_dict keys: a saved checkpoint of its classes must load into ours.
TUTORIAL_KEYS = {
    seed.SinusoidalPositionalEncoding: {"pe"},
    seed.LearnablePositionalEncoding: {"pos_embedding.weight"},
    seed.RelativePositionEncoding: {"relative_position_k.weight", "relative_position_v.weight"},
    seed.RoPEPositionalEncoding: {"inv_freq", "sin_cached", "cos_cached"},
}


@pytest.mark.parametrize("cls", list(TUTORIAL_KEYS), ids=lambda c: c.__name__)
def test_state_dict_keys_are_the_tutorials(cls):
    assert set(cls(8, 10).state_dict()) == TUTORIAL_KEYS[cls]


def test_attention_state_dict_keys():
    linear = {f"w_{n}.{p}" for n in "qkvo" for p in ("weight", "bias")}
    rel = {f"rel_pos_encoding.{k}" for k in TUTORIAL_KEYS[seed.RelativePositionEncoding]}
    rope = {f"rope.{k}" for k in TUTORIAL_KEYS[seed.RoPEPositionalEncoding]}
    assert set(seed.RelativeMultiHeadAttention(8, 2).state_dict()) == linear | rel
    assert set(seed.RoPEMultiHeadAttention(8, 2).state_dict()) == linear | rope


def test_sinusoidal_is_section_2_2_in_float32():
    enc = seed.SinusoidalPositionalEncoding(12, 100)
    assert enc.pe.shape == (1, 100, 12) and enc.pe.dtype == torch.float32
    want = torch.tensor([naive.sinusoid(p, 12) for p in range(100)], dtype=torch.float64)
    assert_close(enc.pe[0].double(), want, atol=5e-5, rtol=0)  # float32 angles
    x = torch.randn(2, 7, 12)
    assert torch.equal(enc(x), x + enc.pe[:, :7])


def test_learnable_adds_embedding_rows():
    enc = seed.LearnablePositionalEncoding(6, 10)
    x = torch.randn(3, 4, 6)
    assert torch.equal(enc(x), x + enc.pos_embedding.weight[:4].unsqueeze(0))


def test_relative_tables_are_gathered_by_clipped_distance():
    enc = seed.RelativePositionEncoding(4, 2)
    rel_k, rel_v = enc(torch.randn(1, 5, 4), None, None)
    assert rel_k.shape == rel_v.shape == (5, 5, 4)
    for i in range(5):
        for j in range(5):
            r = min(max(j - i, -2), 2) + 2
            assert torch.equal(rel_k[i, j], enc.relative_position_k.weight[r])
            assert torch.equal(rel_v[i, j], enc.relative_position_v.weight[r])


def test_relative_attention_is_section_3_6():
    """softmax(Q K^T / sqrt(d) + Q a^K (unscaled)) V, no a^V term, then w_o."""
    mha = seed.RelativeMultiHeadAttention(12, 3, 2).double()
    x = torch.randn(2, 5, 12, dtype=torch.float64)
    mask = torch.ones(5, 5).tril()
    q, k, v = (naive.project(mha, x, n) for n in "qkv")
    a_k = mha.rel_pos_encoding.relative_position_k.weight
    idx = torch.tensor([[min(max(j - i, -2), 2) + 2 for j in range(5)] for i in range(5)])
    scores = q @ k.transpose(-1, -2) / math.sqrt(4) + torch.einsum("bhid,ijd->bhij", q, a_k[idx])
    scores = scores.masked_fill(mask == 0, -1e9)
    w = torch.softmax(scores, -1)
    out, weights = mha(x, x, x, mask=mask)
    assert_close(weights, w)
    assert_close(out, naive.output(mha, w @ v))


def _tutorial_rope(x, positions, dim):
    """4.5 in index notation: dim j turns by p * theta_{j // 2}, partnered with j +- D/2."""
    h = dim // 2
    out = torch.empty_like(x, dtype=torch.float64)
    for p_idx, p in enumerate(positions):
        for j in range(dim):
            t = p * (1.0 / 10000 ** ((2 * (j // 2)) / dim))
            partner = -x[..., p_idx, j + h] if j < h else x[..., p_idx, j - h]
            out[..., p_idx, j] = x[..., p_idx, j] * math.cos(t) + partner * math.sin(t)
    return out


def test_rope_is_section_4_5():
    rope = seed.RoPEPositionalEncoding(8, 50)
    for shape in [(2, 6, 8), (2, 3, 6, 8)]:
        x = torch.randn(shape)
        assert_close(rope(x).double(), _tutorial_rope(x.double(), range(6), 8), atol=1e-5, rtol=0)


def test_rope_attention_is_section_4_8():
    mha = seed.RoPEMultiHeadAttention(16, 2, 32)
    x = torch.randn(2, 5, 16)
    q, k, v = (naive.project(mha, x, n) for n in "qkv")
    q, k = _tutorial_rope(q, range(5), 8), _tutorial_rope(k, range(5), 8)
    w = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(8), -1)
    out, weights = mha(x, x, x)
    assert_close(weights.double(), w, atol=1e-5, rtol=1e-4)
    assert_close(out.double(), naive.output(mha, w @ v.double()), atol=1e-5, rtol=1e-4)
