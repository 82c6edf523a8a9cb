"""Relative position encodings: Shaw et al. 2018 (the tutorial's 3.3 and 3.6, corrected), and the
scalar biases ALiBi (Press et al. 2021), T5 (Raffel et al. 2020), Shaw's scalar variant, and two
proposed for length extrapolation: KERPLE's log kernel (Chi et al. 2022) and FIRE (Li et al. 2023).

Relative position of key j seen from query i: r = j - i, clipped to [-K, K], stored as the
index r + K into learned tables a^K, a^V of shape (2K + 1, D).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from posenc._bias import (
    alibi_bias,
    alibi_slopes,
    fire_distances,
    kerple_log_bias,
    t5_relative_bucket,
)
from posenc._checks import check_positive, check_rank, check_t5_buckets
from posenc.attention import MultiHeadProjections
from posenc.functional import relative_positions, shaw_attention


class RelativePositionEncoding(nn.Module):
    """Learned tables a^K (relative_position_k), a^V (relative_position_v), (2K + 1, d_model).

    d_model is the width of one table row: the per-head dim D when used inside attention.
    forward(query, key, value) keeps the tutorial's API and returns the gathered tables
    (Lq, Lk, d_model) each, with Lq = query.shape[1] and Lk = key.shape[1]. The attention module
    never calls it: it uses the (2K + 1, D) tables directly.
    """

    def __init__(self, d_model: int, max_relative_position: int = 50):
        super().__init__()
        check_positive("d_model", d_model)
        check_positive("max_relative_position", max_relative_position, allow_zero=True)
        self.d_model, self.max_relative_position = d_model, max_relative_position
        vocab_size = 2 * max_relative_position + 1
        self.relative_position_k = nn.Embedding(vocab_size, d_model)
        self.relative_position_v = nn.Embedding(vocab_size, d_model)

    def relative_positions(self, q_len: int, k_len: int | None = None) -> Tensor:
        """(Lq, Lk) int64 indices clip(j - i, -K, K) + K on the tables' device."""
        k_len = q_len if k_len is None else k_len
        device = self.relative_position_k.weight.device
        return relative_positions(q_len, k_len, self.max_relative_position, device=device)

    get_relative_positions = relative_positions  # the tutorial's name

    def forward(self, query: Tensor, key: Tensor, value: Tensor | None = None):
        check_rank("query", query, (3, 4), "(B, L, d) or (B, H, L, D)")
        check_rank("key", key, (3, 4), "(B, L, d) or (B, H, L, D)")
        idx = self.relative_positions(query.shape[-2], key.shape[-2])  # (Lq, Lk)
        return self.relative_position_k(idx), self.relative_position_v(idx)  # (Lq, Lk, d) x 2


class RelativeMultiHeadAttention(MultiHeadProjections):
    """Shaw et al. relative multi-head attention with both the key and the value terms.

    forward(query, key, value, mask=None) with query (B, Lq, d_model), key/value (B, Lk, d_model)
    returns (out (B, Lq, d_model), weights (B, H, Lq, Lk)). mask: boolean (True = attend) or
    additive float, broadcastable to (B, H, Lq, Lk). Memory is O(B H Lq Lk) for the weights plus
    O(B H Lq (2K + 1)) for the relative terms: no (B, H, L, L, D) tensor (see
    `posenc.functional.shaw_attention`).
    """

    def __init__(self, d_model: int, num_heads: int, max_relative_position: int = 50):
        super().__init__(d_model, num_heads)
        self.rel_pos_encoding = RelativePositionEncoding(self.d_k, max_relative_position)

    def forward(self, query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None = None):
        q, k, v = self.project(query, key, value)  # (B, H, Lq, D), (B, H, Lk, D) x 2
        tables = self.rel_pos_encoding
        out, weights = shaw_attention(
            q,
            k,
            v,
            tables.relative_position_k.weight,
            tables.relative_position_v.weight,
            tables.max_relative_position,
            mask=mask,
        )
        return self.output(out), weights


class ALiBi(nn.Module):
    """Attention with linear biases (Press et al. 2021): bias -m_h |j - i|, no parameters.

    bias(q_len, k_len, causal=False, offset=0) -> (H, Lq, Lk) in float32 (slopes buffer's
    dtype); query row i at position offset + i.
    """

    def __init__(self, num_heads: int):
        super().__init__()
        self.num_heads = num_heads
        self.register_buffer("slopes", alibi_slopes(num_heads).float(), persistent=False)

    def bias(self, q_len: int, k_len: int, causal: bool = False, offset: int = 0) -> Tensor:
        return alibi_bias(self.slopes, q_len, k_len, causal=causal, offset=offset)


class T5RelativeBias(nn.Module):
    """T5's learned relative bias: a (num_buckets, H) table indexed by t5_relative_bucket(j - i).

    The table is `relative_attention_bias.weight`, T5's layout; the bias is added unscaled.
    bias(q_len, k_len, causal=False, offset=0) -> (H, Lq, Lk), query row i at offset + i.
    """

    def __init__(
        self,
        num_heads: int,
        num_buckets: int = 32,
        max_distance: int = 128,
        bidirectional: bool = True,
    ):
        super().__init__()
        check_positive("num_heads", num_heads)
        check_t5_buckets(num_buckets, max_distance, bidirectional)
        self.num_heads, self.num_buckets = num_heads, num_buckets
        self.max_distance, self.bidirectional = max_distance, bidirectional
        self.relative_attention_bias = nn.Embedding(num_buckets, num_heads)

    def buckets(self, q_len: int, k_len: int, offset: int = 0) -> Tensor:
        device = self.relative_attention_bias.weight.device
        i = torch.arange(q_len, device=device).unsqueeze(1) + offset
        j = torch.arange(k_len, device=device).unsqueeze(0)
        return t5_relative_bucket(j - i, self.bidirectional, self.num_buckets, self.max_distance)

    def bias(self, q_len: int, k_len: int, causal: bool = False, offset: int = 0) -> Tensor:
        table = self.relative_attention_bias.weight  # (num_buckets, H)
        return table[self.buckets(q_len, k_len, offset)].permute(2, 0, 1)  # (H, Lq, Lk)


class ShawBias(nn.Module):
    """Shaw's relative encoding as a scalar bias per head: a learned (H, 2K + 1) table.

    bias(q_len, k_len, causal=False, offset=0) -> (H, Lq, Lk) =
    table[h, clip(j - (offset + i), -K, K) + K].
    """

    def __init__(self, num_heads: int, max_relative_position: int = 50):
        super().__init__()
        check_positive("num_heads", num_heads)
        check_positive("max_relative_position", max_relative_position, allow_zero=True)
        self.num_heads, self.max_relative_position = num_heads, max_relative_position
        self.table = nn.Parameter(torch.randn(num_heads, 2 * max_relative_position + 1) * 0.1)

    def bias(self, q_len: int, k_len: int, causal: bool = False, offset: int = 0) -> Tensor:
        k, device = self.max_relative_position, self.table.device
        idx = relative_positions(q_len, k_len, k, offset=offset, device=device)
        return self.table[:, idx]  # (H, Lq, Lk)


class KerpleLog(nn.Module):
    """KERPLE's logarithmic bias -p_h log(1 + a_h |i - j|) (posenc.functional.kerple_log_bias).

    p (H,) and a (H,) are learned, drawn from U(0, 2) and U(0, 1) as in the authors' code, and
    used clamped to >= eps (their code clamps the parameters in place; clamping on use gives
    the same bias without mutating them). bias(q_len, k_len, causal=False, offset=0) ->
    (H, Lq, Lk) in the parameters' dtype.
    """

    def __init__(self, num_heads: int, eps: float = 1e-2):
        super().__init__()
        check_positive("num_heads", num_heads)
        self.num_heads, self.eps = num_heads, eps
        self.p = nn.Parameter(torch.rand(num_heads) * 2)
        self.a = nn.Parameter(torch.rand(num_heads))

    def bias(self, q_len: int, k_len: int, causal: bool = False, offset: int = 0) -> Tensor:
        p, a = self.p.clamp(min=self.eps), self.a.clamp(min=self.eps)
        return kerple_log_bias(p, a, q_len, k_len, offset=offset)


class FIRE(nn.Module):
    """FIRE (Li et al. 2023): bias_h(i, j) = f(psi(i - j) / psi(max(L, i)))_h, f a small MLP
    (1 -> mlp_width -> H, ReLU) shared by the heads, psi(x) = log(|c x| + 1)
    (posenc.functional.fire_distances).

    Learned: f, c (starts at init_c) and the threshold L = |threshold_scale| * init_threshold
    (the scale starts at 1; the authors learn a multiplier of a fixed initial L, 512 in their
    reference code). Built for causal attention; future keys get the mirrored distance.
    bias(q_len, k_len, causal=False, offset=0) -> (H, Lq, Lk) in the parameters' dtype.
    """

    def __init__(
        self,
        num_heads: int,
        mlp_width: int = 32,
        init_c: float = 0.1,
        init_threshold: float = 512.0,
        eps: float = 1e-6,
    ):
        super().__init__()
        check_positive("num_heads", num_heads)
        check_positive("mlp_width", mlp_width)
        if not init_threshold > 0:
            raise ValueError(f"init_threshold must be > 0, got {init_threshold}")
        self.num_heads, self.eps = num_heads, eps
        self.mlp = nn.Sequential(
            nn.Linear(1, mlp_width), nn.ReLU(), nn.Linear(mlp_width, num_heads)
        )
        self.c = nn.Parameter(torch.tensor(float(init_c)))
        self.register_buffer("init_threshold", torch.tensor(float(init_threshold)))
        self.threshold_scale = nn.Parameter(torch.tensor(1.0))

    def distances(self, q_len: int, k_len: int, offset: int = 0) -> Tensor:
        """The MLP's inputs, (Lq, Lk)."""
        threshold = self.threshold_scale * self.init_threshold
        return fire_distances(q_len, k_len, self.c, threshold, offset=offset, eps=self.eps)

    def bias(self, q_len: int, k_len: int, causal: bool = False, offset: int = 0) -> Tensor:
        x = self.distances(q_len, k_len, offset).unsqueeze(-1)  # (Lq, Lk, 1)
        return self.mlp(x).permute(2, 0, 1)  # (H, Lq, Lk)
