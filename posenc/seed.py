"""The tutorial's six classes as published (sections 2.3, 2.6, 3.3, 3.6, 4.5, 4.8), defects kept.

These are baselines: the same constructor arguments, forward signatures, parameter and buffer
names, and the same sequence of tensor operations as the tutorial, so that the same weights and
inputs give exactly the tutorial's outputs. Use the corrected classes in `posenc` for real work.
Each defect is marked ERRATUM and demonstrated by a test in tests/posenc/test_errata.py.
"""

from __future__ import annotations

import math

import torch
from torch import nn


class SinusoidalPositionalEncoding(nn.Module):
    """Tutorial 2.3. ERRATUM: an odd d_model crashes (ceil(d/2) sines vs floor(d/2) columns);
    angles in float32; the (1, max_len, d_model) table is a persistent buffer."""

    def __init__(self, d_model, max_len=5000):
        super().__init__()
        self.d_model = d_model
        pe = torch.zeros(max_len, d_model)
        position = torch.arange(0, max_len).unsqueeze(1).float()
        div_term = torch.exp(torch.arange(0, d_model, 2).float() * -(math.log(10000.0) / d_model))
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)
        self.register_buffer("pe", pe.unsqueeze(0))

    def forward(self, x):
        seq_len = x.size(1)
        return x + self.pe[:, :seq_len]


class LearnablePositionalEncoding(nn.Module):
    """Tutorial 2.6. ERRATUM: builds and repeats a (B, L) index tensor per call; L > max_len
    fails inside nn.Embedding with an index error that does not name the argument."""

    def __init__(self, d_model, max_len=5000):
        super().__init__()
        self.pos_embedding = nn.Embedding(max_len, d_model)
        self.max_len = max_len

    def forward(self, x):
        batch_size, seq_len, _ = x.shape
        positions = torch.arange(seq_len, device=x.device).unsqueeze(0).repeat(batch_size, 1)
        pos_encodings = self.pos_embedding(positions)
        return x + pos_encodings


class RelativePositionEncoding(nn.Module):
    """Tutorial 3.3. ERRATUM: the index matrix is built on the CPU whatever the tables' device
    (fails on CUDA), and only for Lq == Lk."""

    def __init__(self, d_model, max_relative_position=50):
        super().__init__()
        self.d_model = d_model
        self.max_relative_position = max_relative_position
        vocab_size = 2 * max_relative_position + 1
        self.relative_position_k = nn.Embedding(vocab_size, d_model)
        self.relative_position_v = nn.Embedding(vocab_size, d_model)

    def get_relative_positions(self, seq_len):
        range_vec = torch.arange(seq_len)
        range_mat = range_vec.unsqueeze(0).repeat(seq_len, 1)
        distance_mat = range_mat - range_mat.transpose(0, 1)
        distance_mat_clipped = torch.clamp(
            distance_mat, -self.max_relative_position, self.max_relative_position
        )
        final_mat = distance_mat_clipped + self.max_relative_position
        return final_mat

    def forward(self, query, key, value):
        seq_len = query.size(1)
        relative_positions = self.get_relative_positions(seq_len)
        relative_position_k_emb = self.relative_position_k(relative_positions)
        relative_position_v_emb = self.relative_position_v(relative_positions)
        return relative_position_k_emb, relative_position_v_emb


class RelativeMultiHeadAttention(nn.Module):
    """Tutorial 3.6. ERRATA: builds a (B, H, L, L, D) tensor (tens of GB at L = 4096); the
    relative logits are not divided by sqrt(D); the value term a^V is computed and dropped;
    query's length is used for key and value; the -1e9 fill overflows float16."""

    def __init__(self, d_model, num_heads, max_relative_position=50):
        super().__init__()
        self.d_model = d_model
        self.num_heads = num_heads
        self.d_k = d_model // num_heads
        self.w_q = nn.Linear(d_model, d_model)
        self.w_k = nn.Linear(d_model, d_model)
        self.w_v = nn.Linear(d_model, d_model)
        self.w_o = nn.Linear(d_model, d_model)
        self.rel_pos_encoding = RelativePositionEncoding(self.d_k, max_relative_position)

    def forward(self, query, key, value, mask=None):
        batch_size, seq_len, _ = query.shape
        Q = self.w_q(query).view(batch_size, seq_len, self.num_heads, self.d_k).transpose(1, 2)
        K = self.w_k(key).view(batch_size, seq_len, self.num_heads, self.d_k).transpose(1, 2)
        V = self.w_v(value).view(batch_size, seq_len, self.num_heads, self.d_k).transpose(1, 2)
        attention_scores = torch.matmul(Q, K.transpose(-2, -1)) / math.sqrt(self.d_k)
        rel_k, rel_v = self.rel_pos_encoding(query, key, value)
        rel_k = rel_k.unsqueeze(0).unsqueeze(0).repeat(batch_size, self.num_heads, 1, 1, 1)
        rel_attention = torch.matmul(Q.unsqueeze(-2), rel_k.transpose(-2, -1)).squeeze(-2)
        attention_scores = attention_scores + rel_attention
        if mask is not None:
            attention_scores.masked_fill_(mask == 0, -1e9)
        attention_weights = torch.softmax(attention_scores, dim=-1)
        context = torch.matmul(attention_weights, V)
        context = context.transpose(1, 2).contiguous().view(batch_size, seq_len, self.d_model)
        output = self.w_o(context)
        return output, attention_weights


class RoPEPositionalEncoding(nn.Module):
    """Tutorial 4.5. ERRATUM: rotate_half pairs dimension i with i + D/2, but repeat_interleave
    gives dimensions 2i and 2i + 1 the same frequency, so a pair's two members turn by different
    angles: not a rotation (norms change) and scores depend on absolute positions."""

    def __init__(self, d_model, max_len=5000, base=10000):
        super().__init__()
        self.d_model = d_model
        self.max_len = max_len
        self.base = base
        inv_freq = 1.0 / (base ** (torch.arange(0, d_model, 2).float() / d_model))
        self.register_buffer("inv_freq", inv_freq)
        self._build_cache(max_len)

    def _build_cache(self, max_len):
        positions = torch.arange(max_len).float()
        angles = torch.outer(positions, self.inv_freq)
        sin_angles = torch.sin(angles)
        cos_angles = torch.cos(angles)
        self.register_buffer("sin_cached", sin_angles)
        self.register_buffer("cos_cached", cos_angles)

    def rotate_half(self, x):
        x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
        return torch.cat([-x2, x1], dim=-1)

    def forward(self, x, seq_len=None):
        if seq_len is None:
            seq_len = x.shape[-2]
        sin = self.sin_cached[:seq_len, :].unsqueeze(0)
        cos = self.cos_cached[:seq_len, :].unsqueeze(0)
        if x.dim() == 4:
            sin = sin.unsqueeze(1)
            cos = cos.unsqueeze(1)
        sin = sin.repeat_interleave(2, dim=-1)
        cos = cos.repeat_interleave(2, dim=-1)
        return x * cos + self.rotate_half(x) * sin


class RoPEMultiHeadAttention(nn.Module):
    """Tutorial 4.8. Inherits the RoPE erratum above; the -1e9 fill overflows float16."""

    def __init__(self, d_model, num_heads, max_len=5000):
        super().__init__()
        self.d_model = d_model
        self.num_heads = num_heads
        self.d_k = d_model // num_heads
        self.w_q = nn.Linear(d_model, d_model)
        self.w_k = nn.Linear(d_model, d_model)
        self.w_v = nn.Linear(d_model, d_model)
        self.w_o = nn.Linear(d_model, d_model)
        self.rope = RoPEPositionalEncoding(self.d_k, max_len)

    def forward(self, query, key, value, mask=None):
        batch_size, seq_len, _ = query.shape
        Q = self.w_q(query).view(batch_size, seq_len, self.num_heads, self.d_k).transpose(1, 2)
        K = self.w_k(key).view(batch_size, seq_len, self.num_heads, self.d_k).transpose(1, 2)
        V = self.w_v(value).view(batch_size, seq_len, self.num_heads, self.d_k).transpose(1, 2)
        Q = self.rope(Q)
        K = self.rope(K)
        attention_scores = torch.matmul(Q, K.transpose(-2, -1)) / math.sqrt(self.d_k)
        if mask is not None:
            attention_scores.masked_fill_(mask == 0, -1e9)
        attention_weights = torch.softmax(attention_scores, dim=-1)
        context = torch.matmul(attention_weights, V)
        context = context.transpose(1, 2).contiguous().view(batch_size, seq_len, self.d_model)
        output = self.w_o(context)
        return output, attention_weights
