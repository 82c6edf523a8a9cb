"""The tutorial's defects, each demonstrated on `posenc.seed` and shown fixed in `posenc`."""

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import posenc
from posenc import seed


def _offset_scores(rope, q, k, pairs, length=404):
    """RoPE(q, m) . RoPE(k, n) for each (m, n), with q and k placed at every position."""
    rq = rope(q.expand(1, length, -1))[0]
    rk = rope(k.expand(1, length, -1))[0]
    return torch.stack([rq[m] @ rk[n] for m, n in pairs])


def test_seed_rope_is_not_a_rotation():
    """4.5: rotate_half pairs (i, i + D/2) but repeat_interleave's frequencies suit (2i, 2i + 1)."""
    old = seed.RoPEPositionalEncoding(16, 5000).double()
    new = posenc.RoPEPositionalEncoding(16, 5000).double()
    x = torch.randn(3, 50, 16, dtype=torch.float64)
    assert (old(x).norm(dim=-1) - x.norm(dim=-1)).abs().max() > 1e-2
    torch.testing.assert_close(new(x).norm(dim=-1), x.norm(dim=-1))
    q, k = torch.randn(2, 16, dtype=torch.float64)
    pairs = [(0, 3), (10, 13), (400, 403)]  # the same offset m - n = -3
    s_old, s_new = _offset_scores(old, q, k, pairs), _offset_scores(new, q, k, pairs)
    assert (s_old - s_old[0]).abs().max() > 1e-2
    torch.testing.assert_close(s_new, s_new[0].expand(3))


def test_seed_relative_attention_drops_the_value_term():
    """3.6: rel_v is computed and never used; the corrected module's output depends on it."""
    x = torch.randn(1, 6, 8)
    old = seed.RelativeMultiHeadAttention(8, 2, 2)
    new = posenc.RelativeMultiHeadAttention(8, 2, 2)
    new.load_state_dict(old.state_dict())
    before_old, before_new = old(x, x, x)[0], new(x, x, x)[0]
    with torch.no_grad():
        old.rel_pos_encoding.relative_position_v.weight.add_(1.0)
        new.rel_pos_encoding.relative_position_v.weight.add_(1.0)
    assert torch.equal(old(x, x, x)[0], before_old)
    assert (new(x, x, x)[0] - before_new).abs().max() > 1e-2


def test_seed_relative_logits_are_not_scaled():
    """3.6 adds Q.a^K without the 1/sqrt(d_k) that Shaw et al. (eq. 4) apply to both terms."""
    old = seed.RelativeMultiHeadAttention(8, 1, 1).double()
    new = posenc.RelativeMultiHeadAttention(8, 1, 1).double()
    new.load_state_dict(old.state_dict())
    with torch.no_grad():
        for mod in (old, new):
            mod.rel_pos_encoding.relative_position_v.weight.zero_()
            mod.w_k.weight.zero_()  # logits = relative term only
            mod.w_k.bias.zero_()
    x = torch.randn(1, 4, 8, dtype=torch.float64)
    w_old, w_new = old(x, x, x)[1], new(x, x, x)[1]
    log_old, log_new = w_old.log(), w_new.log()
    centered = lambda t: t - t.mean(-1, keepdim=True)  # noqa: E731
    torch.testing.assert_close(centered(log_old), centered(log_new) * 8**0.5)


class _LargestTensor(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor):
                self.largest = max(self.largest, t.numel())
        return out


def test_seed_relative_attention_builds_a_5d_tensor_and_ours_does_not():
    b, h, length, d = 2, 4, 32, 16
    x = torch.randn(b, length, h * d)
    old = seed.RelativeMultiHeadAttention(h * d, h, 8)
    new = posenc.RelativeMultiHeadAttention(h * d, h, 8)
    with torch.no_grad():
        with _LargestTensor() as probe_old:
            old(x, x, x)
        with _LargestTensor() as probe_new:
            new(x, x, x)
    assert probe_old.largest >= b * h * length * length * d
    assert probe_new.largest <= b * h * length * length  # the weights themselves


def test_seed_relative_attention_needs_equal_lengths():
    old = seed.RelativeMultiHeadAttention(8, 2, 2)
    q, kv = torch.randn(1, 3, 8), torch.randn(1, 5, 8)
    with pytest.raises(RuntimeError):
        old(q, kv, kv)
    new = posenc.RelativeMultiHeadAttention(8, 2, 2)
    assert new(q, kv, kv)[1].shape == (1, 2, 3, 5)


def test_seed_sinusoidal_fails_on_odd_d_model():
    with pytest.raises(RuntimeError):
        seed.SinusoidalPositionalEncoding(7, 10)
    table = posenc.SinusoidalPositionalEncoding(7, 10).pe
    assert table.shape == (10, 7) and torch.isfinite(table).all()


def test_seed_attention_mask_overflows_in_float16():
    x = torch.randn(1, 4, 8).half()
    mask = torch.ones(4, 4).tril()
    old = seed.RoPEMultiHeadAttention(8, 2, 16).half()
    with pytest.raises(RuntimeError, match="overflow"):
        old(x, x, x, mask=mask)
    new = posenc.RoPEMultiHeadAttention(8, 2, 16).half()
    out, w = new(x, x, x, mask=mask.bool())
    assert torch.isfinite(out).all() and (w[..., 0, 1:] == 0).all()


def test_seed_learnable_error_does_not_name_the_argument():
    x = torch.randn(1, 12, 4)
    with pytest.raises(IndexError):
        seed.LearnablePositionalEncoding(4, 10)(x)
    with pytest.raises(ValueError, match="max_len=10"):
        posenc.LearnablePositionalEncoding(4, 10)(x)
