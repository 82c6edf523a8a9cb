"""The `window` knob: a sliding window of W keys, as transformers' sliding-window layers (Mistral,
Gemma 2 and 3, gpt-oss) attend: the query at position p sees keys p - W < j <= p. The bias
attention cases take it (bench/cases/bias.py): posenc's reference and the fused kernel with
window=, FlexAttention with a sliding-window block mask, SDPA with the band in its mask."""

from __future__ import annotations

import torch

from bench.checks import positive_ints
from bench.registry import Knob, Point

WINDOW = Knob(
    "window",
    None,
    "a sliding window of W keys (causal): query i sees keys i - W < j <= i (null: all)",
    lambda value, key: positive_ints(value, key, allow_none=True),
)


def hidden(inputs: dict, n: int, device) -> torch.Tensor | None:
    """(L, L) bool, True where a query may not look: above the diagonal if causal, and past a
    sliding window (j <= i - W); None if nothing is."""
    if not inputs["causal"]:
        return None
    upper = torch.ones(n, n, dtype=torch.bool, device=device).triu(1)
    window = inputs.get("window")
    return upper if not window else upper | torch.ones_like(upper).tril(-window)


def windowed(point: Point) -> str | None:
    """A case's constraint: a sliding window is a causal model's."""
    return "window needs causal=true" if point.window and not point.causal else None


def no_window(point: Point) -> str | None:
    """supports() of implementations without a window (transformers' T5 and BLOOM)."""
    return "window: this implementation has no sliding window" if point.window else None


def flex_mask(window: int | None):
    """FlexAttention's mask_mod: causal, and within the window if there is one."""
    if window:
        return lambda b, h, i, j: (j <= i) & (i - j < window)
    return lambda b, h, i, j: j <= i


def pairs(point: Point) -> int:
    """The (query, key) pairs a query row of L sees, summed: L^2, L^2 / 2 when causal (the
    cost models' convention), and within a window W: W (W + 1) / 2 + (L - W) W."""
    n, w = point.seq_len, point.window
    if w and point.causal and w < n:
        return w * (w + 1) // 2 + (n - w) * w
    return n * n // (2 if point.causal else 1)
