"""The probe's tiny Transformer: pre-norm blocks whose position encoding is swapped, every part
taken from posenc (no copies); which parts, per encoding, is declared in
bench/probe/encodings.py. Shapes: tokens (B, n) -> logits (B, n, vocab); d = d_model, H heads.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

import posenc
from bench.probe.encodings import ENCODINGS, SPECS, Encoding

# randomized positions are drawn from a range this many times the longest sequence evaluated
# (Ruoss et al. 2023 draw from 2048 positions for test lengths up to 500)
RANDOMIZED_RANGE = 4


def _attend(attn: nn.Module, h: Tensor, mask, positions, q_scale) -> Tensor:
    """One call for posenc's attention modules, whose signatures differ in what they take."""
    if isinstance(attn, posenc.RelativeMultiHeadAttention):
        return attn(h, h, h, mask=mask)[0]  # Shaw's terms need its own attention
    if isinstance(attn, posenc.RoPEMultiHeadAttention):
        return attn(h, h, h, mask=mask, positions=positions, need_weights=False)[0]
    if q_scale is not None:  # plain attention with iRoPE's temperature
        return attn(h, h, h, mask=mask, need_weights=False, q_scale=q_scale)[0]
    return attn(h, h, h, mask=mask, need_weights=False)[0]


class Block(nn.Module):
    """Pre-norm attention and MLP; gate: FoX's forget gate, whose bias (with the causal mask)
    replaces the block's mask; temperature: the queries scaled by q_scale."""

    def __init__(self, attn, d_model: int, bias, gate=None, temperature: bool = False):
        super().__init__()
        self.attn, self.bias, self.gate, self.temperature = attn, bias, gate, temperature
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(
            nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model)
        )

    def forward(self, x: Tensor, mask, positions, q_scale: Tensor | None = None) -> Tensor:
        h = self.norm1(x)
        if self.gate is not None:  # (B, H, n, n): D_i - D_j below the diagonal, -inf above
            mask = posenc.functional.forgetting_bias(self.gate(h))
        x = x + _attend(self.attn, h, mask, positions, q_scale if self.temperature else None)
        return x + self.mlp(self.norm2(x))


class ProbeModel(nn.Module):
    """forward(tokens (B, n)) -> logits (B, n, vocab).

    max_len: the longest sequence the tables are built for (evaluation's, not training's),
    except `learnable`, whose table has train_len rows: longer inputs raise ValueError.
    causal: mask j > i (the probe's default); bidirectional for the permutation sanity check.
    bos: put a beginning-of-sequence token before every input (its output is dropped), as
    language models do; it gives causal attention a fixed anchor to count positions from
    (NoPE's route to position, Kazemnejad et al. 2023). The tables then hold one more row.
    Randomized encodings draw each sequence's positions in forward, from torch's global
    generator (as dropout does), so a seeded run repeats them.
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
        if encoding not in SPECS:
            raise ValueError(f"encodings: unknown {encoding!r}; encodings: {', '.join(ENCODINGS)}")
        spec = self.spec = SPECS[encoding]
        if spec.needs_causal and not causal:
            raise ValueError(f"encodings: {encoding} needs causal attention (causal=true)")
        self.encoding, self.causal, self.num_heads = encoding, causal, num_heads
        self.train_len = train_len + (1 if bos else 0)  # iRoPE's floor_scale: trained tokens
        self.bos = vocab if bos else None  # the BOS token's id: one past the task's symbols
        if bos:
            vocab, train_len, max_len = vocab + 1, train_len + 1, max_len + 1
        # the rows a position table needs: the drawn range if randomized
        self.max_position = RANDOMIZED_RANGE * max_len if spec.randomized else max_len
        self.shaw_max_relative = shaw_max_relative
        self.embed = nn.Embedding(vocab, d_model)
        self.absolute = self._absolute(spec, d_model, train_len)
        share = self._bias(spec, num_heads, train_len) if spec.bias in ("alibi", "t5") else None

        def block(last: bool) -> Block:
            bias = share if share is not None else self._bias(spec, num_heads, train_len)
            plain = last and spec.plain_last
            kind = "plain" if plain else spec.attention
            attn = self._attention(kind, spec, d_model, num_heads, train_len, rope_scaling)
            gate = None
            if spec.gate:
                gate = posenc.ForgettingGate(d_model, num_heads, bias_range=spec.gate_bias)
            return Block(attn, d_model, bias, gate, temperature=plain and spec.temperature)

        self.blocks = nn.ModuleList(block(i == layers - 1) for i in range(layers))
        self.norm, self.head = nn.LayerNorm(d_model), nn.Linear(d_model, vocab)
        self._init_positions()

    def _absolute(self, spec: Encoding, d_model: int, train_len: int) -> nn.Module | None:
        if spec.absolute == "sinusoidal":
            return posenc.SinusoidalPositionalEncoding(d_model, self.max_position)
        if spec.absolute == "learnable":
            rows = self.max_position if spec.randomized else train_len
            return posenc.LearnablePositionalEncoding(d_model, rows)
        return None

    def _bias(self, spec: Encoding, num_heads: int, train_len: int) -> nn.Module | None:
        if spec.bias == "alibi":
            return posenc.ALiBi(num_heads)
        if spec.bias == "t5":
            return posenc.T5RelativeBias(num_heads, bidirectional=not self.causal)
        if spec.bias == "kerple":
            return posenc.KerpleLog(num_heads)
        if spec.bias == "fire":
            # the threshold starts at a quarter of the trained positions, so most training
            # queries are past it and the MLP learns on normalised distances (the reference
            # code's default, 512, is for language models trained on far longer sequences)
            return posenc.FIRE(num_heads, init_threshold=max(1.0, train_len / 4))
        return None

    def _attention(self, kind, spec, d_model, num_heads, train_len, rope_scaling) -> nn.Module:
        if kind == "shaw":
            return posenc.RelativeMultiHeadAttention(d_model, num_heads, self.shaw_max_relative)
        if kind == "rope":
            return posenc.RoPEMultiHeadAttention(
                d_model, num_heads, self.max_position, scaling=rope_scaling, **spec.rope
            )
        if kind == "cope":
            # counts up to the trained length; longer counts share its last embedding
            return posenc.CoPEMultiHeadAttention(d_model, num_heads, max_positions=train_len)
        return posenc.MultiHeadAttention(d_model, num_heads)

    def _init_positions(self) -> None:
        """Learned position parameters (the learnable table, Shaw's a^K and a^V, T5's bias)
        start at N(0, 0.02) rather than nn.Embedding's N(0, 1): as noise as large as the token
        embeddings they kept recall at 0.17 (learnable) and 0.55 (Shaw) after 700 steps (mean
        of 3 seeds, the 2-layer default of commit 593cb0e), 0.87 and 0.71 with this start; the
        model starts close to NoPE and learns what positions it needs. FIRE, KERPLE and CoPE
        keep their papers' initialisations (posenc's defaults)."""
        for name, p in self.named_parameters():
            if (
                "pos_embedding" in name
                or "relative_position_" in name
                or "relative_attention_bias" in name
            ):
                nn.init.normal_(p, std=0.02)

    def mask(self, bias: nn.Module | None, n: int, device) -> Tensor | None:
        """None, a boolean (n, n) causal mask (True: attend), or an additive (H, n, n) bias."""
        future = torch.ones(n, n, dtype=torch.bool, device=device).triu(1)
        if bias is None:
            return ~future if self.causal else None
        table = bias.bias(n, n, causal=self.causal).float()  # (H, n, n)
        return table.masked_fill(future, float("-inf")) if self.causal else table

    def forward(self, tokens: Tensor) -> Tensor:
        if self.bos is not None:
            tokens = torch.cat([tokens.new_full((tokens.shape[0], 1), self.bos), tokens], 1)
        b, n = tokens.shape
        positions = None
        if self.spec.randomized:  # (B, n) sorted draws from 0 .. max_position - 1
            positions = posenc.functional.randomized_positions(
                b, n, self.max_position, device=tokens.device
            )
        x = self.embed(tokens)  # (B, n, d)
        if self.absolute is not None:
            x = self.absolute(x) if positions is None else self.absolute(x, positions=positions)
        masks = {}  # one per bias module: shared ones are computed once
        q_scale = None
        if self.spec.temperature:  # Llama 4's formula, floor_scale at the trained length
            scale = posenc.functional.irope_temperature(n, floor_scale=float(self.train_len))
            q_scale = scale.to(tokens.device, x.dtype)
        for block in self.blocks:
            key = id(block.bias)
            if key not in masks:
                masks[key] = self.mask(block.bias, n, tokens.device)
            x = block(x, masks[key], positions, q_scale)
        logits = self.head(self.norm(x))
        if self.bos is not None:  # no prediction at BOS, and BOS is never a prediction
            logits = logits[:, 1:, : self.bos]
        return logits  # (B, n, vocab)
