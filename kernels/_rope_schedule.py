"""RoPE's frequency schedules for `FusedRoPE`, written apart from posenc's (this package never
imports the reference; tests hold this one to posenc.functional.rope_frequencies): the default
base^(-2i/dim), and the long-context variants linear, dynamic (NTK), yarn, llama3, longrope,
each returning (inv_freq (dim/2,) float64, the factor cos and sin are multiplied by).

The keys are posenc's (docs/kernels.md); this side trusts them to have been checked there and
raises a KeyError naming a missing one.
"""

import math

import torch
from torch import Tensor


def _theta(dim: int, base: float) -> Tensor:
    exponents = torch.arange(dim // 2, dtype=torch.float64) * 2 / dim
    return torch.pow(torch.tensor(base, dtype=torch.float64), -exponents)


def frequencies(dim: int, base: float, scaling: dict | None, seq_len: int) -> tuple[Tensor, float]:
    if scaling is None:
        return _theta(dim, base), 1.0
    kind, factor = scaling["type"], scaling.get("factor")
    original = scaling.get("original_max_position_embeddings")
    if kind == "linear":
        return _theta(dim, base) / factor, 1.0
    if kind == "dynamic":  # the grown base past the original context
        length = max(seq_len, original)
        return _theta(
            dim, base * (factor * length / original - factor + 1) ** (dim / (dim - 2))
        ), 1.0
    if kind == "yarn":
        # turns over the original context per pair; the ramp between beta_slow and beta_fast
        def pair_of(turns):
            return dim * math.log(original / (2 * math.pi * turns)) / (2 * math.log(base))

        lo = max(math.floor(pair_of(scaling.get("beta_fast", 32.0))), 0)
        hi = min(math.ceil(pair_of(scaling.get("beta_slow", 1.0))), dim - 1)
        hi = hi if hi != lo else hi + 0.001
        keep = 1 - ((torch.arange(dim // 2, dtype=torch.float64) - lo) / (hi - lo)).clamp(0, 1)
        theta = _theta(dim, base)
        attention = scaling.get("attention_factor")
        return theta * (keep + (1 - keep) / factor), (
            attention if attention is not None else 1 + 0.1 * math.log(factor)
        )
    if kind == "llama3":
        theta = _theta(dim, base)
        ratio = original * theta / (2 * math.pi)  # original context over the wavelength
        low, high = scaling.get("low_freq_factor", 1.0), scaling.get("high_freq_factor", 4.0)
        blend = ((ratio - low) / (high - low)).clamp(0, 1)  # 0: divided by factor, 1: kept
        return theta * (blend + (1 - blend) / factor), 1.0
    if kind == "longrope":
        long = seq_len > original
        factors = torch.tensor(
            scaling["long_factor" if long else "short_factor"], dtype=torch.float64
        )
        attention = scaling.get("attention_factor")
        if attention is None:
            extent = factor if factor is not None else 1.0
            attention = math.sqrt(1 + math.log(extent) / math.log(original)) if extent > 1 else 1.0
        return _theta(dim, base) / factors, attention
    raise ValueError(f"scaling['type']: unknown {kind!r}")
