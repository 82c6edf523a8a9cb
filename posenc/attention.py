"""Multi-head plumbing shared by the attention modules: projections, head split/merge, attention."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from posenc._bias import apply_mask
from posenc._checks import check_heads, check_rank, check_same_device


def check_qkv(query: Tensor, key: Tensor, value: Tensor, d_model: int) -> None:
    """query (B, Lq, d_model), key and value (B, Lk, d_model), one device and dtype."""
    for name, t in (("query", query), ("key", key), ("value", value)):
        check_rank(name, t, (3,), "(B, L, d_model)")
        if t.shape[-1] != d_model:
            raise ValueError(f"{name}'s last dim must be d_model={d_model}, got {t.shape[-1]}")
        if t.shape[0] != query.shape[0]:
            raise ValueError(f"{name} has batch {t.shape[0]} but query has {query.shape[0]}")
        check_same_device(name, t, query, "query")
        if t.dtype != query.dtype:
            raise TypeError(f"{name} is {t.dtype} but query is {query.dtype}")
    if key.shape[1] != value.shape[1]:
        raise ValueError(f"key and value lengths differ: {key.shape[1]} vs {value.shape[1]}")


def split_heads(x: Tensor, num_heads: int) -> Tensor:
    """(B, L, d_model) -> (B, H, L, D), a view."""
    b, seq_len, d_model = x.shape
    return x.view(b, seq_len, num_heads, d_model // num_heads).transpose(1, 2)


def merge_heads(x: Tensor) -> Tensor:
    """(B, H, L, D) -> (B, L, H * D)."""
    b, h, seq_len, d = x.shape
    return x.transpose(1, 2).reshape(b, seq_len, h * d)


def attend(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, need_weights: bool
) -> tuple[Tensor, Tensor | None]:
    """softmax(q k^T / sqrt(D) [+ mask]) v for q (B, H, Lq, D), k/v (B, H, Lk, D)."""
    if not need_weights:
        if mask is not None and mask.dtype != torch.bool and not mask.is_floating_point():
            mask = mask != 0
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask), None
    logits = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
    if mask is not None:
        logits = apply_mask(logits, mask)
    weights = torch.softmax(logits, dim=-1)
    return torch.matmul(weights, v), weights


class MultiHeadProjections(nn.Module):
    """The tutorial's four projections w_q, w_k, w_v, w_o (d_model -> d_model, with bias).

    Subclasses add a position encoding and call `project` then `output` around their attention.
    """

    def __init__(self, d_model: int, num_heads: int):
        super().__init__()
        self.d_k = check_heads(d_model, num_heads)
        self.d_model, self.num_heads = d_model, num_heads
        self.w_q = nn.Linear(d_model, d_model)
        self.w_k = nn.Linear(d_model, d_model)
        self.w_v = nn.Linear(d_model, d_model)
        self.w_o = nn.Linear(d_model, d_model)

    def project(self, query: Tensor, key: Tensor, value: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """(B, Lq, d_model), (B, Lk, d_model) x 2 -> q (B, H, Lq, D), k and v (B, H, Lk, D)."""
        check_qkv(query, key, value, self.d_model)
        return (
            split_heads(self.w_q(query), self.num_heads),
            split_heads(self.w_k(key), self.num_heads),
            split_heads(self.w_v(value), self.num_heads),
        )

    def output(self, out: Tensor) -> Tensor:
        """(B, H, Lq, D) -> (B, Lq, d_model) through w_o."""
        return self.w_o(merge_heads(out))


class MultiHeadAttention(MultiHeadProjections):
    """Plain multi-head attention (no position encoding): the baseline the others add to.

    forward(query, key, value, mask=None, need_weights=True, q_scale=None) -> (out, weights
    or None). q_scale (Lq,) or (B, Lq): each query multiplied by a factor after its projection
    (Llama 4's temperature in its NoPE layers: posenc.functional.irope_temperature).
    """

    def forward(self, query, key, value, mask=None, need_weights=True, q_scale=None):
        q, k, v = self.project(query, key, value)
        if q_scale is not None:
            q = q * q_scale.to(q.dtype).view(-1, 1, q.shape[2], 1)  # (B | 1, 1, Lq, 1)
        out, weights = attend(q, k, v, mask, need_weights)
        return self.output(out), weights
