"""Multi-head attention with contextual position encoding (CoPE, Golovneva et al. 2024); the
math is posenc.functional.cope_attention (posenc/_contextual.py)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from posenc._checks import check_positive
from posenc._contextual import cope_attention
from posenc.attention import MultiHeadProjections


class CoPEMultiHeadAttention(MultiHeadProjections):
    """forward(query, key, value, mask=None, need_weights=True) with query (B, Lq, d_model),
    key/value (B, Lk, d_model) -> (out (B, Lq, d_model), weights (B, H, Lq, Lk) or None).

    max_positions: P, the rows of the position embeddings e (D, P), shared by the heads of the
    layer and starting at zero as in the paper's code; counts past P - 1 use e[P - 1]. Because
    positions count gated keys, P can be far below the context (the paper's point: a head that
    counts sentences needs few). mask: boolean (True = attend), a causal one for CoPE's counts.
    """

    def __init__(self, d_model: int, num_heads: int, max_positions: int = 64):
        super().__init__(d_model, num_heads)
        check_positive("max_positions", max_positions)
        self.max_positions = max_positions
        self.pos_emb = nn.Parameter(torch.zeros(self.d_k, max_positions))

    def forward(self, query, key, value, mask: Tensor | None = None, need_weights: bool = True):
        q, k, v = self.project(query, key, value)  # (B, H, Lq, D), (B, H, Lk, D) x 2
        out, weights = cope_attention(q, k, v, self.pos_emb, mask=mask)
        return self.output(out), weights if need_weights else None
