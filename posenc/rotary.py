"""Rotary position embedding (RoPE) as a true rotation: the tutorial's 4.5 and 4.8, corrected.

Shapes: x is (B, L, D) or (B, H, L, D); positions is None (0 .. L-1), an int offset, or a
(B, L) tensor of position ids. Layouts: half-split pairs (i, i + D/2) (GPT-NeoX / Llama) or
interleaved pairs (2i, 2i + 1) (GPT-J).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from posenc._checks import (
    check_cache_dtype,
    check_pairs,
    check_positive,
    check_rank,
    check_same_device,
)
from posenc._compat import drop_derived_keys
from posenc.attention import MultiHeadProjections, attend
from posenc.functional import apply_rope, rope_cos_sin, xpos_scale


class RoPEPositionalEncoding(nn.Module):
    """Rotates x's last dim (D = dim) by position-dependent angles p * theta_i.

    cos_cached / sin_cached, (max_len, R/2) float32, are built once at construction from
    float64 angles. forward(x, seq_len=None, positions=None) returns a new tensor like x.
    scaling: a long-context variant of the frequencies (posenc.functional.rope_frequencies:
    linear, dynamic, yarn, llama3, longrope), cos and sin times its attention factor; the
    tables are those of max_len, the module's longest context (dynamic NTK and LongRoPE
    depend on the length: rope_cos_sin(..., seq_len=L) gives another's).
    rotary_dim: R, the leading dims rotated (GPT-NeoX rotates 25% of D); the rest pass through.
    rotate_fraction: p-RoPE's p: only the highest floor(p R / 2) frequencies turn, the other
    pairs pass through (posenc.functional.rope_cos_sin).
    xpos_scale_base: xPos (posenc.functional.xpos_scale): queries' tables times zeta^((p - c) /
    scale_base), keys' divided by it (forward(..., is_key=True)), c = max_len // 2 as flash-attn
    centres them; None for none.
    """

    def __init__(
        self,
        dim: int,
        max_len: int = 5000,
        base: float = 10000.0,
        interleaved: bool = False,
        scaling: dict | None = None,
        rotary_dim: int | None = None,
        rotate_fraction: float = 1.0,
        xpos_scale_base: float | None = None,
    ):
        super().__init__()
        check_pairs("dim", dim)
        check_positive("max_len", max_len)
        rotary_dim = dim if rotary_dim is None else rotary_dim
        check_pairs("rotary_dim", rotary_dim)
        if rotary_dim > dim:
            raise ValueError(f"rotary_dim must be <= dim={dim}, got {rotary_dim}")
        self.dim, self.max_len, self.base, self.interleaved = dim, max_len, base, interleaved
        self.scaling, self.rotary_dim = scaling, rotary_dim
        self.rotate_fraction, self.xpos_scale_base = rotate_fraction, xpos_scale_base
        cos, sin, scale = self._tables(torch.arange(max_len), torch.float32)
        self.register_buffer("cos_cached", cos, persistent=False)
        self.register_buffer("sin_cached", sin, persistent=False)
        self.register_buffer("xpos_cached", scale, persistent=False)
        self.register_load_state_dict_pre_hook(
            drop_derived_keys("inv_freq", "sin_cached", "cos_cached", "xpos_cached")
        )

    def _apply(self, fn, recurse=True):
        # .double() / .to(device): rebuild the tables from float64 angles in the new dtype
        # rather than casting already-rounded float32 values; .half() keeps float32 tables
        # (the math runs in float32 for low-precision inputs).
        super()._apply(fn, recurse)
        ref = self.cos_cached
        dtype = torch.promote_types(ref.dtype, torch.float32)
        positions = torch.arange(self.max_len, device=ref.device)
        self.cos_cached, self.sin_cached, self.xpos_cached = self._tables(positions, dtype)
        return self

    def _tables(self, positions: Tensor, dtype: torch.dtype):
        cos, sin = rope_cos_sin(
            positions,
            self.rotary_dim,
            self.base,
            scaling=self.scaling,
            seq_len=self.max_len,
            rotate_fraction=self.rotate_fraction,
            dtype=dtype,
        )
        if self.xpos_scale_base is None:
            return cos, sin, None
        scale = xpos_scale(
            positions, self.rotary_dim, self.xpos_scale_base, center=self.max_len // 2, dtype=dtype
        )
        return cos, sin, scale

    def cos_sin(
        self, x: Tensor, positions: Tensor | int | None = None, *, is_key: bool = False
    ) -> tuple[Tensor, Tensor]:
        """Tables for x's positions, broadcastable against x[..., :dim/2]; with xPos, the
        queries' (times the scale) or, is_key=True, the keys' (divided by it)."""
        rows = self._rows(x, positions)
        cos, sin = rows(self.cos_cached), rows(self.sin_cached)
        if self.xpos_cached is not None:
            scale = rows(self.xpos_cached)
            cos, sin = (cos / scale, sin / scale) if is_key else (cos * scale, sin * scale)
        return cos, sin

    def _rows(self, x: Tensor, positions: Tensor | int | None):
        """A function that picks a table's rows for x's positions (checked here, once)."""
        check_rank("x", x, (3, 4), "(B, L, D) or (B, H, L, D)")
        if x.shape[-1] != self.dim:
            raise ValueError(f"x's last dim must be dim={self.dim}, got {x.shape[-1]}")
        check_same_device("x", x, self.cos_cached, "the module's tables")
        check_cache_dtype("x", x, self.cos_cached)
        seq_len = x.shape[-2]
        if positions is None or isinstance(positions, int):
            offset = positions or 0
            check_positive("positions", offset, allow_zero=True)
            if offset + seq_len > self.max_len:
                raise ValueError(
                    f"positions {offset} .. {offset + seq_len - 1} exceed max_len={self.max_len}"
                )
            return lambda table: table[offset : offset + seq_len]
        if not isinstance(positions, Tensor) or positions.is_floating_point():
            raise TypeError("positions must be None, an int offset or an integer (B, L) tensor")
        if positions.shape != (x.shape[0], seq_len):
            raise ValueError(
                f"positions must be (B, L) = ({x.shape[0]}, {seq_len}), "
                f"got {tuple(positions.shape)}"
            )
        check_same_device("positions", positions, self.cos_cached, "the module's tables")
        lo, hi = int(positions.min()), int(positions.max())  # one sync: the reference checks
        if lo < 0 or hi >= self.max_len:
            raise ValueError(f"positions must lie in 0 .. {self.max_len - 1}, got {lo} .. {hi}")
        if x.dim() == 4:  # (B, 1, L, dim/2)
            return lambda table: table[positions].unsqueeze(1)
        return lambda table: table[positions]  # (B, L, dim/2)

    def forward(
        self,
        x: Tensor,
        seq_len: int | None = None,
        positions: Tensor | int | None = None,
        *,
        is_key: bool = False,
    ) -> Tensor:
        """is_key: x holds keys (xPos divides their tables by the scale; no effect otherwise)."""
        if seq_len is not None and seq_len != x.shape[-2]:
            raise ValueError(f"seq_len={seq_len} does not match x's length {x.shape[-2]}")
        cos, sin = self.cos_sin(x, positions, is_key=is_key)
        return apply_rope(x, cos, sin, interleaved=self.interleaved)


class RoPEMultiHeadAttention(MultiHeadProjections):
    """Multi-head attention with RoPE applied to each head's queries and keys.

    forward(query, key, value, mask=None, positions=None, need_weights=True) with
    query (B, Lq, d_model), key/value (B, Lk, d_model) returns (out (B, Lq, d_model),
    weights (B, H, Lq, Lk) or None). Queries and keys share `positions` when Lq == Lk;
    otherwise each counts from 0. mask: boolean (True = attend) or additive, broadcastable
    to (B, H, Lq, Lk). need_weights=False takes PyTorch's fused SDPA path.
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        max_len: int = 5000,
        base: float = 10000.0,
        interleaved: bool = False,
        scaling: dict | None = None,
        rotary_dim: int | None = None,
        rotate_fraction: float = 1.0,
        xpos_scale_base: float | None = None,
    ):
        super().__init__(d_model, num_heads)
        self.rope = RoPEPositionalEncoding(
            self.d_k,
            max_len,
            base,
            interleaved,
            scaling,
            rotary_dim,
            rotate_fraction=rotate_fraction,
            xpos_scale_base=xpos_scale_base,
        )

    def forward(self, query, key, value, mask=None, positions=None, need_weights=True):
        q, k, v = self.project(query, key, value)  # (B, H, Lq, D), (B, H, Lk, D) x 2
        if positions is not None and q.shape[-2] != k.shape[-2]:
            raise ValueError("positions needs Lq == Lk (self-attention)")
        q, k = self.rope(q, positions=positions), self.rope(k, positions=positions, is_key=True)
        out, weights = attend(q, k, v, mask, need_weights)
        return self.output(out), weights
