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


def rope(x, positions, rotary=None, interleaved=False, base=10000.0, start=0, inverse=False):
    """x (..., L, D) float64; positions: list of L ints; dims start .. start + rotary - 1 turn
    (by minus the angles with inverse)."""
    dim = x.shape[-1]
    rotary = dim - start if rotary is None else rotary
    mats = torch.stack([torch.eye(dim, dtype=torch.float64) for _ in positions])
    for m, p in zip(mats, positions, strict=True):
        block = rotation_matrix(p, rotary, rotary, interleaved, base)
        m[start : start + rotary, start : start + rotary] = block.T if inverse else block
    return torch.einsum("lij,...lj->...li", mats, x.double())


def shaw_attention(q, k, v, emb_k, emb_v, clip, mask=None, scale=None, offset=0):
    """Shaw et al. 2018 eqs. 3-4 with explicit (Lq, Lk, D) relative tables, float64; query i
    at position offset + i."""
    q, k, v = q.double(), k.double(), v.double()
    lq, lk, d = q.shape[-2], k.shape[-2], q.shape[-1]
    scale = 1 / math.sqrt(d) if scale is None else scale
    idx = [[min(max(j - i - offset, -clip), clip) + clip for j in range(lk)] for i in range(lq)]
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


def mrope_angle(pos3, i: int, head_dim: int, section, interleaved: bool, base: float) -> float:
    """One frequency's angle for one token of M-RoPE: pos3 = (t, h, w) ints. Contiguous
    sections hand out frequencies t first, then h, then w; interleaved ones deal them round
    robin t, h, w while an axis has frequencies left (Qwen3-VL), t taking what remains."""
    if interleaved:
        left, owner = [section[0], section[1], section[2]], []
        for j in range(head_dim // 2):
            axis = j % 3
            if axis and left[axis] == 0:
                axis = 0
            left[axis] -= 1
            owner.append(axis)
        axis = owner[i]
    else:
        axis = 0 if i < section[0] else 1 if i < section[0] + section[1] else 2
    return pos3[axis] * base ** (-2 * i / head_dim)


def rope_2d_angle(row: int, col: int, i: int, head_dim: int, split: str, base: float) -> float:
    """One frequency's angle of 2D RoPE for the patch at (row, col)."""
    quarter = head_dim // 4
    first, j = i < quarter, i % quarter
    if split == "pixtral":  # frequencies of the whole head dim, even ones by row, odd by column
        return (row if first else col) * base ** (-2 * (2 * j + (0 if first else 1)) / head_dim)
    a, b = (col, row) if split == "axial_xy" else (row, col)
    return (a if first else b) * base ** (-4 * j / head_dim)


def fire(i: int, j: int, c: float, threshold: float, mlp, eps: float = 1e-6):
    """FIRE (Li et al. 2023, eq. 6) for one (query position i, key position j): the MLP at
    log(|c (i - j)| + 1) / (log(|c max(L, i)| + 1) + eps); returns (H,) float64."""
    psi_d = math.log(abs(c * (i - j)) + 1)
    psi_n = math.log(abs(c * max(threshold, i)) + 1) + eps
    x = torch.tensor([[psi_d / psi_n]], dtype=torch.float64)
    return mlp.double()(x)[0]


def kerple_log(i: int, j: int, p: float, a: float) -> float:
    """KERPLE's logarithmic kernel (Chi et al. 2022, eq. 10) for one pair and one head."""
    return -p * math.log(1 + a * abs(i - j))


def cope_attention(q, k, v, pos_emb, scale=None):
    """CoPE (Golovneva et al. 2024, eqs. 3-5), causal, one (b, h, i, j) at a time in float64:
    gates sigmoid(q_i . k_j scale) for j <= i, positions p_ij = sum_{t=j}^{i} gate_it, e(p)
    interpolated between its floor and ceiling rows (clamped at the last), logits
    q_i . k_j scale + q_i . e(p_ij). Differentiable (torch ops on the inputs)."""
    q, k, v, e = q.double(), k.double(), v.double(), pos_emb.double()
    b_, h_, lq, d = q.shape
    scale = 1 / math.sqrt(d) if scale is None else scale
    last = e.shape[1] - 1
    out = torch.zeros_like(q)
    for b in range(b_):
        for h in range(h_):
            for i in range(lq):
                raw = [q[b, h, i] @ k[b, h, j] * scale for j in range(i + 1)]
                gates = [torch.sigmoid(x) for x in raw]
                row = []
                for j in range(i + 1):
                    p = sum(gates[j : i + 1]).clamp(max=last)
                    lo, hi = math.floor(p.item()), math.ceil(p.item())
                    w = p - lo
                    emb = (1 - w) * e[:, lo] + w * e[:, hi]
                    row.append(raw[j] + q[b, h, i] @ emb)
                weights = torch.softmax(torch.stack(row), dim=0)
                out[b, h, i] = sum(weights[j] * v[b, h, j] for j in range(i + 1))
    return out
