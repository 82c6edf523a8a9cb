"""Contextual position encoding (CoPE): Golovneva, Wang, Weston & Sukhbaatar 2024, "Contextual
Position Encoding: Learning to Count What's Important", section 3.

Positions are counted, not indexed: a gate g_ij = sigmoid(q_i . k_j) in [0, 1] decides whether
key j counts as a step, and key j sits at the fractional position p_ij = sum_{t=j}^{i} g_it
from query i (the gates of the keys between them, j and i included). Position embeddings
e[0 .. P - 1] are interpolated at p_ij, and q_i . e[p_ij] is added to the logit. With every
gate 1 this is a relative position j -> i - j + 1; with gates that fire on, say, separators,
it counts sentences. Shapes: q (B, H, Lq, D), k and v (B, H, Lk, D); pos_emb (D, P).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


def cope_positions(logits: Tensor) -> Tensor:
    """p_ij = sum over keys t >= j of sigmoid(logits_it): (..., Lq, Lk) from the scaled, masked
    logits (masked keys carry -inf, so their gate is 0 and a causal mask makes the sum stop at
    t = i). A reversed cumulative sum: a forward one would count from the sequence's start."""
    gates = torch.sigmoid(logits)
    return gates.flip(-1).cumsum(-1).flip(-1)


def cope_logits(q: Tensor, positions: Tensor, pos_emb: Tensor) -> Tensor:
    """q_i . e[p_ij], with e interpolated linearly between its integer rows: (B, H, Lq, Lk).
    positions (B, H, Lq, Lk) are clamped to 0 .. P - 1 (P = pos_emb.shape[1]); q . e is taken
    once per integer position (B, H, Lq, P) and gathered, never e per pair (B, H, Lq, Lk, D)."""
    p = positions.clamp(max=pos_emb.shape[1] - 1)
    lower = p.floor()
    weight = p - lower  # of the upper row
    per_position = q @ pos_emb.to(q.dtype)  # (B, H, Lq, P)
    lo = per_position.gather(-1, lower.long())
    hi = per_position.gather(-1, p.ceil().long())
    return lo + weight * (hi - lo)


def cope_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    pos_emb: Tensor,
    *,
    mask: Tensor | None = None,
    scale: float | None = None,
) -> tuple[Tensor, Tensor]:
    """softmax(scale q k^T + q . e[p]) v with CoPE's positions p; returns (out (B, H, Lq, D),
    weights (B, H, Lq, Lk)). mask: boolean, True = attend, broadcastable to (B, H, Lq, Lk);
    CoPE counts the keys a query can see, so it is meant for causal masks (keys after the
    query would count towards every earlier key's position). The gates read the same scaled
    logits as the attention, as the paper's code does; the position term is added unscaled."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    logits = (q @ k.transpose(-2, -1)) * scale  # (B, H, Lq, Lk)
    if mask is not None:
        if mask.dtype != torch.bool:
            raise TypeError(f"mask must be boolean (True = attend), got {mask.dtype}")
        logits = logits.masked_fill(~mask, -math.inf)
    logits = logits + cope_logits(q, cope_positions(logits), pos_emb)
    weights = torch.softmax(logits, dim=-1)
    return weights @ v, weights
