"""RoPE's frequency schedules for long contexts: what the long-context models change.

`rope_frequencies(dim, base, scaling, seq_len)` -> (inv_freq (dim/2,) float64, attention_factor).
`scaling` is None (the RoPE of Su et al.) or one dict for every variant:

    {"type": "linear" | "dynamic" | "yarn" | "llama3" | "longrope", "factor": float >= 1,
     "original_max_position_embeddings": int, "beta_fast": 32, "beta_slow": 1,
     "low_freq_factor": 1, "high_freq_factor": 4, "short_factor": [...], "long_factor": [...],
     "attention_factor": optional override, YaRN's "truncate": True, "mscale", "mscale_all_dim"}

Each variant follows the definition the released checkpoints were trained with, as the public
model code computes it (Hugging Face transformers' modeling_rope_utils; the papers named in each
function), in float64 where that code works in float32: equal to it within float32 rounding.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import torch
from torch import Tensor

from posenc._checks import check_pairs


def _checked(scaling: dict, dim: int) -> dict:
    """The scaling dict with its defaults filled in; a clear error naming the key otherwise."""
    if not isinstance(scaling, dict):
        raise TypeError(f"scaling must be None or a dict, got {type(scaling).__name__}")
    kind = scaling.get("type")
    if kind not in SCHEDULES:
        raise ValueError(f"scaling['type'] must be one of {', '.join(SCHEDULES)}, got {kind!r}")
    required, optional = SCHEDULES[kind].required, SCHEDULES[kind].optional
    unknown = set(scaling) - required - set(optional) - {"type"}
    if unknown:
        raise ValueError(
            f"scaling[{sorted(unknown)[0]!r}]: not a key of the {kind} variant; "
            f"keys: {', '.join(sorted(required | set(optional)))}"
        )
    for key in sorted(required):
        if scaling.get(key) is None:
            raise ValueError(f"scaling[{key!r}] is required by the {kind} variant")
    s = {**optional, **scaling}
    if s.get("factor") is not None and not s["factor"] >= 1:
        raise ValueError(f"scaling['factor'] must be >= 1, got {s['factor']!r}")
    original = s.get("original_max_position_embeddings", 1)
    if isinstance(original, bool) or not isinstance(original, int) or original <= 0:
        raise ValueError(
            f"scaling['original_max_position_embeddings'] must be a positive int, got {original!r}"
        )
    SCHEDULES[kind].check(s, dim)
    if s.get("attention_factor") is not None and not s["attention_factor"] > 0:
        raise ValueError(f"scaling['attention_factor'] must be > 0, got {s['attention_factor']!r}")
    return s


def _check_yarn(s: dict, dim: int) -> None:
    if not s["beta_fast"] > s["beta_slow"] > 0:
        raise ValueError(
            f"scaling['beta_fast'] must exceed scaling['beta_slow'] > 0, got "
            f"{s['beta_fast']!r} and {s['beta_slow']!r}"
        )


def _check_llama3(s: dict, dim: int) -> None:
    if not s["high_freq_factor"] >= s["low_freq_factor"] > 0:
        raise ValueError(
            f"scaling['low_freq_factor'] must be at most scaling['high_freq_factor'] "
            f"(both > 0), got {s['low_freq_factor']!r} and "
            f"{s['high_freq_factor']!r}"
        )


def _check_longrope(s: dict, dim: int) -> None:
    for key in ("short_factor", "long_factor"):
        if len(s[key]) != dim // 2:
            raise ValueError(
                f"scaling[{key!r}] must have dim/2 = {dim // 2} entries, got {len(s[key])}"
            )


def _no_check(s: dict, dim: int) -> None:
    pass


def _default(dim: int, base: float, device) -> Tensor:
    """theta_i = base^(-2i/dim), float64, (dim/2,)."""
    return base ** (-torch.arange(0, dim, 2, dtype=torch.float64, device=device) / dim)


def _linear(inv_freq: Tensor, s: dict) -> Tensor:
    """Position interpolation (Chen et al. 2023): positions / factor, i.e. inv_freq / factor."""
    return inv_freq / s["factor"]


def _dynamic(dim: int, base: float, s: dict, seq_len: int | None, device) -> Tensor:
    """Dynamic NTK-aware scaling (bloc97, emozilla; transformers' "dynamic"): past the original
    context the base grows to base * ((factor L / original) - (factor - 1))^(dim / (dim - 2));
    at or below it, the default frequencies."""
    original = s["original_max_position_embeddings"]
    length = seq_len if seq_len is not None and seq_len > original else original
    grown = base * ((s["factor"] * length / original) - (s["factor"] - 1)) ** (dim / (dim - 2))
    return _default(dim, grown, device)


def _yarn(inv_freq: Tensor, dim: int, base: float, s: dict) -> tuple[Tensor, float]:
    """YaRN (Peng et al. 2023): a per-dimension linear ramp between extrapolation (inv_freq,
    the high frequencies) and interpolation (inv_freq / factor, the low ones). The ramp runs
    between the dimensions that turn beta_fast and beta_slow times over the original context,
    floored and ceiled to whole dimensions as in the paper's code and the released YaRN
    checkpoints (truncate=True), or not (truncate=False: gpt-oss). Attention factor
    0.1 ln(factor) + 1, or DeepSeek-V3's ratio mscale(factor, mscale) / mscale(factor,
    mscale_all_dim) with mscale(s, m) = 0.1 m ln(s) + 1, when both are given."""
    original = s["original_max_position_embeddings"]

    def dim_of(rotations: float) -> float:  # the dimension that turns `rotations` times
        return dim * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low, high = dim_of(s["beta_fast"]), dim_of(s["beta_slow"])
    if s["truncate"]:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001  # as the reference code: no division by zero
    ramp = (
        (torch.arange(dim // 2, dtype=torch.float64, device=inv_freq.device) - low) / (high - low)
    ).clamp(0, 1)
    extrapolate = 1 - ramp  # 1: keep inv_freq (high frequencies); 0: inv_freq / factor
    scaled = inv_freq / s["factor"] * (1 - extrapolate) + inv_freq * extrapolate
    if s["attention_factor"] is not None:
        return scaled, s["attention_factor"]
    if s["mscale"] and s["mscale_all_dim"]:
        return scaled, _mscale(s["factor"], s["mscale"]) / _mscale(s["factor"], s["mscale_all_dim"])
    return scaled, _mscale(s["factor"], 1.0)


def _mscale(factor: float, mscale: float) -> float:
    """YaRN's magnitude scale 0.1 mscale ln(factor) + 1 (1 without an extension)."""
    return 0.1 * mscale * math.log(factor) + 1.0 if factor > 1 else 1.0


def _llama3(inv_freq: Tensor, s: dict) -> Tensor:
    """Llama 3.1: wavelengths longer than original / low_freq_factor divided by factor, shorter
    than original / high_freq_factor kept, a smooth interpolation in between."""
    original, factor = s["original_max_position_embeddings"], s["factor"]
    low, high = s["low_freq_factor"], s["high_freq_factor"]
    wavelen = 2 * math.pi / inv_freq
    # low == high (Llama 4 Scout): no band between the two, each frequency kept or divided
    smooth = (original / wavelen - low) / (high - low) if high > low else torch.zeros_like(wavelen)
    mixed = (1 - smooth) * inv_freq / factor + smooth * inv_freq
    out = torch.where(wavelen > original / low, inv_freq / factor, inv_freq)
    medium = (wavelen >= original / high) & (wavelen <= original / low)
    return torch.where(medium, mixed, out)


def _longrope(dim: int, base: float, s: dict, seq_len: int | None, device) -> tuple[Tensor, float]:
    """LongRoPE (Ding et al. 2024, as Phi-3 ships it): per-dimension factors, `long_factor`
    past the original context, else (and without a seq_len, as transformers at init)
    `short_factor`; attention factor sqrt(1 + ln(factor) / ln(original)), factor being the
    context's extension (1 if not given: no scaling of cos and sin)."""
    original = s["original_max_position_embeddings"]
    long = seq_len is not None and seq_len > original
    factors = torch.tensor(
        s["long_factor" if long else "short_factor"], dtype=torch.float64, device=device
    )
    inv_freq = _default(dim, base, device) / factors
    attention = s["attention_factor"]
    if attention is None:
        factor = s["factor"] if s["factor"] is not None else 1.0
        attention = math.sqrt(1 + math.log(factor) / math.log(original)) if factor > 1 else 1.0
    return inv_freq, attention


def rope_frequencies(
    dim: int,
    base: float = 10000.0,
    scaling: dict | None = None,
    seq_len: int | None = None,
    *,
    device=None,
) -> tuple[Tensor, float]:
    """(inv_freq, attention_factor): RoPE's inverse frequencies theta_i for i < dim/2, float64
    (dim/2,), and the factor cos and sin are multiplied by (1.0 where the variant has none).
    seq_len: the current length (dynamic; longrope's choice of factors)."""
    check_pairs("dim", dim)
    if not base > 1.0:
        raise ValueError(f"base must be > 1, got {base}")
    if seq_len is not None and (
        isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len <= 0
    ):
        raise ValueError(f"seq_len must be a positive int or None, got {seq_len!r}")
    if scaling is None:
        return _default(dim, base, device), 1.0
    s = _checked(scaling, dim)
    return SCHEDULES[s["type"]].frequencies(dim, base, s, seq_len, device)


def _longrope_example(factor: float, original: int, dim: int) -> dict:
    """Per-dimension factors: 1 (short) and 1 to the extension's factor, rising with the
    wavelength (long), as LongRoPE's searched factors do."""
    pairs = dim // 2
    long = [1.0 + (factor - 1.0) * i / max(pairs - 1, 1) for i in range(pairs)]
    return dict(short_factor=[1.0] * pairs, long_factor=long, factor=factor)


class Schedule(NamedTuple):
    """One long-context schedule: its keys (required; optional with their defaults), a check of
    its values beyond their keys, its (dim, base, checked dict, seq_len, device) ->
    (inv_freq, attention_factor), and an extension by `factor` of an `original` context
    (factor, original, dim) -> its keys: the harness's point, a sweep's schedule."""

    required: frozenset
    optional: dict
    check: Callable[[dict, int], None]
    frequencies: Callable[..., tuple[Tensor, float]]
    example: Callable[[float, int, int], dict]


def _with_original(factor: float, original: int, dim: int) -> dict:
    return {"factor": factor, "original_max_position_embeddings": original}


_CONTEXT = frozenset({"factor", "original_max_position_embeddings"})
# The schedules, by their transformers rope_type: the one place a schedule is declared (its
# name reaches scaling["type"], the harness's rope_scaling knob and its sweeps from here).
SCHEDULES = {
    "linear": Schedule(
        frozenset({"factor"}),
        {},
        _no_check,
        lambda dim, base, s, seq_len, device: (_linear(_default(dim, base, device), s), 1.0),
        lambda factor, original, dim: {"factor": factor},
    ),
    "dynamic": Schedule(
        _CONTEXT,
        {},
        _no_check,
        lambda dim, base, s, seq_len, device: (_dynamic(dim, base, s, seq_len, device), 1.0),
        _with_original,
    ),
    "yarn": Schedule(
        _CONTEXT,
        {
            "beta_fast": 32.0,
            "beta_slow": 1.0,
            "attention_factor": None,
            "truncate": True,
            "mscale": None,
            "mscale_all_dim": None,
        },
        _check_yarn,
        lambda dim, base, s, seq_len, device: _yarn(_default(dim, base, device), dim, base, s),
        _with_original,
    ),
    "llama3": Schedule(
        _CONTEXT,
        {"low_freq_factor": 1.0, "high_freq_factor": 4.0},
        _check_llama3,
        lambda dim, base, s, seq_len, device: (_llama3(_default(dim, base, device), s), 1.0),
        _with_original,
    ),
    "longrope": Schedule(
        frozenset({"short_factor", "long_factor", "original_max_position_embeddings"}),
        {"factor": None, "attention_factor": None},
        _check_longrope,
        _longrope,
        lambda factor, original, dim: dict(
            _longrope_example(factor, original, dim), original_max_position_embeddings=original
        ),
    ),
}


def extension(kind: str, factor: float, original: int, dim: int) -> dict:
    """The scaling dict of schedule `kind` extending an `original` context by `factor`, for
    rotary dim `dim` (LongRoPE's per-dimension factors need it)."""
    return {"type": kind, **SCHEDULES[kind].example(factor, original, dim)}
