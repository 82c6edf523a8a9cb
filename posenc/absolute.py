"""Absolute position encodings added to the token embeddings: the tutorial's 2.3 and 2.6, corrected.

Shapes: x is (B, L, d_model); the encoding of positions offset .. offset + L - 1 is added.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from posenc._checks import check_positive, check_rank, check_same_device
from posenc._compat import drop_derived_keys
from posenc.functional import sinusoidal_table


def _check_span(x: Tensor, offset: int, max_len: int, d_model: int) -> int:
    check_rank("x", x, (3,), "(B, L, d_model)")
    if x.shape[-1] != d_model:
        raise ValueError(f"x's last dim must be d_model={d_model}, got {x.shape[-1]}")
    check_positive("offset", offset, allow_zero=True)
    seq_len = x.shape[1]
    if offset + seq_len > max_len:
        raise ValueError(
            f"offset + L = {offset} + {seq_len} exceeds max_len={max_len}; build the module with a "
            "larger max_len"
        )
    return seq_len


class SinusoidalPositionalEncoding(nn.Module):
    """x + PE[offset : offset + L], PE from `posenc.functional.sinusoidal_table` (float64 math).

    The table (max_len, d_model) is built once at construction in the module's float32 and is
    cast to x's dtype on use, so float16/bfloat16 inputs stay in their dtype (the tutorial's
    module promotes them to float32).
    """

    def __init__(self, d_model: int, max_len: int = 5000, base: float = 10000.0):
        super().__init__()
        check_positive("max_len", max_len)
        self.d_model, self.max_len, self.base = d_model, max_len, base
        self.register_buffer("pe", sinusoidal_table(max_len, d_model, base=base), persistent=False)
        self.register_load_state_dict_pre_hook(drop_derived_keys("pe"))

    def _apply(self, fn, recurse=True):
        # .double() / .to(device): rebuild from float64 in the new dtype, not a cast of float32;
        # .half() keeps a float32 table (cast to x's dtype on use).
        super()._apply(fn, recurse)
        dtype = torch.promote_types(self.pe.dtype, torch.float32)
        self.pe = sinusoidal_table(
            self.max_len, self.d_model, base=self.base, dtype=dtype, device=self.pe.device
        )
        return self

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        seq_len = _check_span(x, offset, self.max_len, self.d_model)
        check_same_device("x", x, self.pe, "the module's table")
        return x + self.pe[offset : offset + seq_len].to(x.dtype)  # (B, L, d_model)


class LearnablePositionalEncoding(nn.Module):
    """x + E[offset : offset + L] with a learned table E = pos_embedding.weight, (max_len, d_model).

    The table rows broadcast over the batch: no per-batch index tensor and no `repeat`.
    """

    def __init__(self, d_model: int, max_len: int = 5000):
        super().__init__()
        check_positive("d_model", d_model)
        check_positive("max_len", max_len)
        self.d_model, self.max_len = d_model, max_len
        self.pos_embedding = nn.Embedding(max_len, d_model)

    def forward(self, x: Tensor, offset: int = 0, positions: Tensor | None = None) -> Tensor:
        """positions: None (offset .. offset + L - 1) or a (B, L) integer tensor of rows of the
        table, one per token (randomized positions, packed sequences)."""
        table = self.pos_embedding.weight
        if positions is None:
            seq_len = _check_span(x, offset, self.max_len, self.d_model)
            check_same_device("x", x, table, "pos_embedding")
            return x + table[offset : offset + seq_len]  # (B, L, d_model)
        _check_span(x, 0, self.max_len, self.d_model)
        check_same_device("positions", positions, table, "pos_embedding")
        if positions.is_floating_point() or positions.shape != x.shape[:2]:
            raise ValueError(
                f"positions must be an integer (B, L) = {tuple(x.shape[:2])} tensor, got "
                f"{positions.dtype} {tuple(positions.shape)}"
            )
        lo, hi = int(positions.min()), int(positions.max())  # one sync: the reference checks
        if lo < 0 or hi >= self.max_len:
            raise ValueError(f"positions must lie in 0 .. {self.max_len - 1}, got {lo} .. {hi}")
        return x + table[positions]  # (B, L, d_model)
