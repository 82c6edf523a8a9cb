"""The probe's tiny Transformer: pre-norm blocks whose position encoding is swapped, all taken
from posenc (no copies). Shapes: tokens (B, n) -> logits (B, n, vocab); d = d_model, H heads.

Encodings and where they act:
  nope        nothing (causal attention can still infer position, Kazemnejad et al. 2023)
  sinusoidal  x + PE[0:n] at the input (posenc.SinusoidalPositionalEncoding)
  learnable   x + E[0:n] at the input, E learned for positions < max_len only
  shaw        relative key and value terms in every layer (posenc.RelativeMultiHeadAttention)
  rope        queries and keys rotated in every layer (posenc.RoPEMultiHeadAttention); an
              evaluation may rebuild the tables under a long-context schedule (rope_scaling)
  alibi       -m_h (i - j) added to the logits (posenc.ALiBi)
  t5          a learned bucketed bias, one table shared by the layers as in T5
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

import posenc

ENCODINGS = ("nope", "sinusoidal", "learnable", "shaw", "rope", "alibi", "t5")


class Block(nn.Module):
    def __init__(self, attn: nn.Module, d_model: int):
        super().__init__()
        self.attn, self.norm1, self.norm2 = attn, nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(
            nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model)
        )

    def forward(self, x: Tensor, mask: Tensor | None) -> Tensor:
        h = self.norm1(x)
        if isinstance(self.attn, posenc.RelativeMultiHeadAttention):
            out, _ = self.attn(h, h, h, mask=mask)  # Shaw's terms need its own attention
        else:
            out, _ = self.attn(h, h, h, mask=mask, need_weights=False)
        x = x + out
        return x + self.mlp(self.norm2(x))


class ProbeModel(nn.Module):
    """forward(tokens (B, n)) -> logits (B, n, vocab).

    max_len: the longest sequence the tables are built for (evaluation's, not training's),
    except `learnable`, whose table has train_len rows: longer inputs raise ValueError.
    causal: mask j > i (the probe's default); bidirectional for the permutation sanity check.
    bos: put a beginning-of-sequence token before every input (its output is dropped), as
    language models do; it gives causal attention a fixed anchor to count positions from
    (NoPE's route to position, Kazemnejad et al. 2023). The tables then hold one more row.
    """

    def __init__(
        self,
        encoding: str,
        vocab: int,
        *,
        d_model: int = 64,
        num_heads: int = 4,
        layers: int = 3,
        train_len: int,
        max_len: int,
        causal: bool = True,
        shaw_max_relative: int = 32,
        rope_scaling: dict | None = None,
        bos: bool = True,
    ):
        super().__init__()
        if encoding not in ENCODINGS:
            raise ValueError(f"encodings: unknown {encoding!r}; encodings: {', '.join(ENCODINGS)}")
        self.encoding, self.causal, self.num_heads = encoding, causal, num_heads
        self.bos = vocab if bos else None  # the BOS token's id: one past the task's symbols
        if bos:
            vocab, train_len, max_len = vocab + 1, train_len + 1, max_len + 1
        self.embed = nn.Embedding(vocab, d_model)
        self.absolute = None
        if encoding == "sinusoidal":
            self.absolute = posenc.SinusoidalPositionalEncoding(d_model, max_len)
        elif encoding == "learnable":
            self.absolute = posenc.LearnablePositionalEncoding(d_model, train_len)
        self.bias = None
        if encoding == "alibi":
            self.bias = posenc.ALiBi(num_heads)
        elif encoding == "t5":
            self.bias = posenc.T5RelativeBias(num_heads, bidirectional=not causal)

        def attention() -> nn.Module:
            if encoding == "shaw":
                return posenc.RelativeMultiHeadAttention(d_model, num_heads, shaw_max_relative)
            if encoding == "rope":
                return posenc.RoPEMultiHeadAttention(
                    d_model, num_heads, max_len, scaling=rope_scaling
                )
            return posenc.MultiHeadAttention(d_model, num_heads)

        self.blocks = nn.ModuleList(Block(attention(), d_model) for _ in range(layers))
        self.norm, self.head = nn.LayerNorm(d_model), nn.Linear(d_model, vocab)
        self._init_positions()

    def _init_positions(self) -> None:
        """Learned position parameters (the learnable table, Shaw's a^K and a^V, T5's bias)
        start at N(0, 0.02) rather than nn.Embedding's N(0, 1): as noise as large as the token
        embeddings they kept recall at 0.17 (learnable) and 0.55 (Shaw) after 700 steps (mean
        of 3 seeds, the 2-layer default of commit 593cb0e), 0.87 and 0.71 with this start; the
        model starts close to NoPE and learns what positions it needs."""
        for name, p in self.named_parameters():
            if (
                "pos_embedding" in name
                or "relative_position_" in name
                or "relative_attention_bias" in name
            ):
                nn.init.normal_(p, std=0.02)

    def mask(self, n: int, device) -> Tensor | None:
        """None, a boolean (n, n) causal mask (True: attend), or an additive (H, n, n) bias."""
        future = torch.ones(n, n, dtype=torch.bool, device=device).triu(1)
        if self.bias is None:
            return ~future if self.causal else None
        bias = self.bias.bias(n, n, causal=self.causal).float()  # (H, n, n)
        return bias.masked_fill(future, float("-inf")) if self.causal else bias

    def forward(self, tokens: Tensor) -> Tensor:
        if self.bos is not None:
            tokens = torch.cat([tokens.new_full((tokens.shape[0], 1), self.bos), tokens], 1)
        x = self.embed(tokens)  # (B, n, d), or (B, n + 1, d) with BOS
        if self.absolute is not None:
            x = self.absolute(x)
        mask = self.mask(tokens.shape[1], tokens.device)
        for block in self.blocks:
            x = block(x, mask)
        logits = self.head(self.norm(x))
        if self.bos is not None:  # no prediction at BOS, and BOS is never a prediction
            logits = logits[:, 1:, : self.bos]
        return logits  # (B, n, vocab)
