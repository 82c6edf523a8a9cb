"""Independent float64 oracles written straight from the papers' equations, with loops and
explicit matrices: slow, obvious, and sharing no code with posenc."""

from __future__ import annotations

import math

import torch


def sinusoid(pos: int, d_model: int, base: float = 10000.0) -> list[float]:
    """Vaswani et al. 2017, section 3.5, one position at a time."""
    row = []
    for j in range(d_model):
        angle = pos / base ** (2 * (j // 2) / d_model)
        row.append(math.sin(angle) if j % 2 == 0 else math.cos(angle))
    return row


def rotation_matrix(pos: int, dim: int, rotary: int, interleaved: bool, base=10000.0):
    """The block rotation R(pos) of RoFormer eq. 13, as a (dim, dim) float64 matrix."""
    m = torch.eye(dim, dtype=torch.float64)
    half = rotary // 2
    for i in range(half):
        t = pos * base ** (-2 * i / rotary)
        a, b = (2 * i, 2 * i + 1) if interleaved else (i, i + half)
        m[a, a], m[a, b], m[b, a], m[b, b] = math.cos(t), -math.sin(t), math.sin(t), math.cos(t)
    return m


def rope(x, positions, rotary=None, interleaved=False, base=10000.0):
    """x (..., L, D) float64; positions: list of L ints."""
    dim = x.shape[-1]
    rotary = dim if rotary is None else rotary
    mats = torch.stack([rotation_matrix(p, dim, rotary, interleaved, base) for p in positions])
    return torch.einsum("lij,...lj->...li", mats, x.double())


def shaw_attention(q, k, v, emb_k, emb_v, clip, mask=None, scale=None):
    """Shaw et al. 2018 eqs. 3-4 with explicit (Lq, Lk, D) relative tables, float64."""
    q, k, v = q.double(), k.double(), v.double()
    lq, lk, d = q.shape[-2], k.shape[-2], q.shape[-1]
    scale = 1 / math.sqrt(d) if scale is None else scale
    idx = [[min(max(j - i, -clip), clip) + clip for j in range(lk)] for i in range(lq)]
    idx = torch.tensor(idx)
    a_k, a_v = emb_k.double()[idx], emb_v.double()[idx]  # (Lq, Lk, D)
    e = (torch.einsum("bhid,bhjd->bhij", q, k) + torch.einsum("bhid,ijd->bhij", q, a_k)) * scale
    if mask is not None:
        e = e.masked_fill(~mask, -math.inf) if mask.dtype == torch.bool else e + mask.double()
    alpha = torch.softmax(e, dim=-1)
    z = torch.einsum("bhij,bhjd->bhid", alpha, v) + torch.einsum("bhij,ijd->bhid", alpha, a_v)
    return z, alpha


def project(module, x, name):
    """(B, L, d_model) -> (B, H, L, D) through module.w_<name>, float64."""
    lin = getattr(module, f"w_{name}")
    y = x.double() @ lin.weight.double().T + lin.bias.double()
    b, seq_len, _ = y.shape
    return y.view(b, seq_len, module.num_heads, -1).transpose(1, 2)


def output(module, z):
    b, h, seq_len, d = z.shape
    z = z.transpose(1, 2).reshape(b, seq_len, h * d)
    return z @ module.w_o.weight.double().T + module.w_o.bias.double()
