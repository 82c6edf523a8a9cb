"""Pure tables and ops shared by the modules, the kernels' tests and the benchmarks.

Notation used across the repository:
    B batch, L sequence length (Lq queries, Lk keys), H heads, D head dim,
    R rotary dim (R <= D), K max relative position (Shaw clip distance), d_model = H * D.

Relative biases (ALiBi, T5 buckets, KERPLE, FIRE) and `relative_attention` live in
posenc/_bias.py, Shaw's attention in posenc/_shaw.py, CoPE in posenc/_contextual.py, randomized
positions in posenc/_positions.py, multi-axis RoPE in posenc/_multiaxis.py; all re-exported
here. Tables are computed in float64 and cast once at the end: a float32 angle
``pos * inv_freq`` is off by ~1e-2 rad at pos = 2**20, the float64 one by ~1e-10.
"""

from __future__ import annotations

import torch
from torch import Tensor

from posenc._bias import (
    alibi_bias,
    alibi_slopes,
    each_sequence,
    fire_distances,
    grouped_kv,
    kerple_log_bias,
    relative_attention,
    t5_relative_bucket,
)
from posenc._checks import broadcasts, check_float, check_positive, compiling
from posenc._contextual import cope_attention, cope_logits, cope_positions
from posenc._logits import (
    forgetting_bias,
    irope_rope_layers,
    irope_temperature,
    softmax_with_sinks,
)
from posenc._multiaxis import (
    SPLITS,
    mrope_axes,
    mrope_cos_sin,
    mrope_position_ids,
    rope_2d_cos_sin,
    rotating_frequencies,
    xpos_scale,
)
from posenc._positions import randomized_positions
from posenc._rotate import rotate_into
from posenc._scaling import rope_frequencies
from posenc._shaw import relative_positions, shaw_attention

# ---------------------------------------------------------------------------------------------
# Absolute (sinusoidal) table: Vaswani et al. 2017, section 3.5; the tutorial's 2.2.
# ---------------------------------------------------------------------------------------------


def sinusoidal_table(
    length: int,
    d_model: int,
    *,
    base: float = 10000.0,
    offset: int = 0,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> Tensor:
    """PE[p, 2i] = sin(p / base^(2i/d_model)), PE[p, 2i+1] = cos(p / base^(2i/d_model)).

    Returns a (length, d_model) table for positions offset .. offset + length - 1.
    An odd d_model is handled: the last column is the sine of the last frequency
    (the tutorial's code crashes there with a shape mismatch).
    """
    check_positive("length", length, allow_zero=True)
    check_positive("d_model", d_model)
    if offset < 0:
        raise ValueError(f"offset must be >= 0, got {offset}")
    pos = torch.arange(offset, offset + length, dtype=torch.float64, device=device)
    inv_freq = base ** (-torch.arange(0, d_model, 2, dtype=torch.float64, device=device) / d_model)
    angles = torch.outer(pos, inv_freq)  # (length, ceil(d_model / 2))
    table = torch.empty(length, d_model, dtype=torch.float64, device=device)
    table[:, 0::2] = angles.sin()
    table[:, 1::2] = angles[:, : d_model // 2].cos()
    return table.to(dtype)


# ---------------------------------------------------------------------------------------------
# Rotary tables and the rotation: Su et al. 2021 (RoFormer), eq. 34; the tutorial's 4.2.
# ---------------------------------------------------------------------------------------------


def rope_inv_freq(dim: int, base: float = 10000.0, *, device=None) -> Tensor:
    """theta_i = base^(-2i/dim) for i in 0 .. dim/2 - 1, float64, shape (dim/2,)."""
    return rope_frequencies(dim, base, device=device)[0]


def rope_cos_sin(
    positions: Tensor | int,
    dim: int,
    base: float = 10000.0,
    *,
    scaling: dict | None = None,
    seq_len: int | None = None,
    rotate_fraction: float = 1.0,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> tuple[Tensor, Tensor]:
    """a cos(p * theta_i) and a sin(p * theta_i), each of shape (*positions.shape, dim/2).

    positions: an integer tensor of any shape (N,), (B, L), ... or an int N meaning 0 .. N-1.
    scaling, seq_len: a long-context variant of the frequencies theta_i and its attention
    factor a (1 without one): `rope_frequencies` (posenc/_scaling.py).
    rotate_fraction: p-RoPE's p (Barbero et al. 2024; transformers' "proportional" RoPE of
    Gemma 4): only the first floor(p * dim / 2) frequencies, the highest, turn; the others get
    angle 0 (cos = a, sin = 0), so their pairs pass through. Unlike partial rotary (dim < D),
    the kept frequencies stay base^(-2i/dim) of the whole dim.
    The product and the trigonometry run in float64 and the result is cast to ``dtype`` (float32
    by default), so the tables stay within 1e-6 of the float64 truth even at p = 2**20.
    """
    if isinstance(positions, int):
        check_positive("positions", positions, allow_zero=True)
        positions = torch.arange(positions, device=device)
    if not isinstance(positions, Tensor):
        raise TypeError(f"positions must be an int or a tensor, got {type(positions).__name__}")
    if positions.is_floating_point() or positions.is_complex():
        raise TypeError(f"positions must be an integer tensor, got {positions.dtype}")
    inv_freq, factor = rope_frequencies(dim, base, scaling, seq_len, device=positions.device)
    inv_freq[rotating_frequencies(dim, rotate_fraction) :] = 0.0
    angles = positions.to(torch.float64).unsqueeze(-1) * inv_freq  # (..., dim/2)
    return (factor * angles.cos()).to(dtype), (factor * angles.sin()).to(dtype)


def apply_rope(
    x: Tensor,
    cos: Tensor,
    sin: Tensor,
    *,
    interleaved: bool = False,
    rotary_start: int = 0,
    out: Tensor | None = None,
) -> Tensor:
    """Rotate pairs of x's last dimension by the angles whose cos and sin are given.

    x:        (..., L, D), any strides; float16 / bfloat16 are rotated in float32.
    cos, sin: (..., L, R/2) broadcastable against x[..., :R/2], with R = 2 * cos.shape[-1] <= D.
              The other D - R dimensions pass through unchanged (partial rotary).
    interleaved: False pairs (i, i + R/2) (GPT-NeoX / Llama "half-split");
                 True pairs (2i, 2i + 1) (GPT-J).
    rotary_start: the first rotated dimension s: dims s .. s + R - 1 turn (pairs counted from
              s). 0: the head's first R dims (most models); D - R: its last R, as DeepSeek-V4
              lays a head out, [no position | rotary].
    out:      None (allocate), a preallocated tensor like x, or x itself (in place).
              Differentiable only with out=None.

    Per pair (a, b) and angle t: a' = a cos t - b sin t, b' = b cos t + a sin t.
    """
    check_float("x", x)
    check_float("cos", cos)
    half = cos.shape[-1]
    if sin.shape != cos.shape:
        raise ValueError(
            f"sin and cos must have the same shape, got {tuple(sin.shape)} and {tuple(cos.shape)}"
        )
    if x.dim() < 2:
        raise ValueError(f"x must have at least 2 dims (..., L, D), got shape {tuple(x.shape)}")
    if 2 * half > x.shape[-1]:
        raise ValueError(
            f"cos/sin cover a rotary dim of {2 * half} but x's last dim (D) is {x.shape[-1]}"
        )
    start = rotary_start
    if (
        isinstance(start, bool)
        or not isinstance(start, int)
        or not 0 <= start <= x.shape[-1] - 2 * half
    ):
        raise ValueError(
            f"rotary_start must be an int in 0 .. D - R = {x.shape[-1] - 2 * half}, got {start!r}"
        )
    if not broadcasts(tuple(cos.shape[:-1]), tuple(x.shape[:-1])):
        raise ValueError(
            f"cos/sin of shape {tuple(cos.shape)} do not broadcast against x {tuple(x.shape)}: "
            "slice the tables to x's positions, e.g. cos[:L]"
        )
    if cos.device != x.device or sin.device != x.device:
        raise ValueError(f"cos/sin are on {cos.device} but x is on {x.device}")
    if out is not None and (out.shape != x.shape or out.dtype != x.dtype or out.device != x.device):
        raise ValueError(
            f"out must match x: shape {tuple(x.shape)}, {x.dtype} on {x.device}; "
            f"got {tuple(out.shape)}, {out.dtype} on {out.device}"
        )
    math_dtype = torch.promote_types(x.dtype, torch.float32)
    cos, sin = cos.to(math_dtype), sin.to(math_dtype)
    if compiling() and out is None:
        # Traced: the functional formula, which the compiler fuses. The chunked engine's writes
        # into a transposed out past one chunk come back wrong through AOTAutograd (torch 2.13).
        return _rotate_differentiable(x, cos, sin, interleaved, start)
    if torch.is_grad_enabled() and (x.requires_grad or cos.requires_grad or sin.requires_grad):
        if out is not None:
            raise ValueError("out= is not differentiable: pass out=None when gradients are needed")
        return _rotate_differentiable(x, cos, sin, interleaved, start)
    if out is None:
        out = torch.empty_like(x)
    cos = cos.reshape((1,) * (x.dim() - cos.dim()) + tuple(cos.shape))  # rank of x
    if start and out.data_ptr() != x.data_ptr():
        out[..., :start].copy_(x[..., :start])  # the leading dims pass through
    rotate_into(x[..., start:], cos, sin.reshape(cos.shape), out[..., start:], interleaved)
    return out


def _rotate_differentiable(
    x: Tensor, cos: Tensor, sin: Tensor, interleaved: bool, start: int = 0
) -> Tensor:
    """Out-of-place and autograd-friendly; the same formula as posenc._rotate."""
    if start:
        turned = _rotate_differentiable(x[..., start:], cos, sin, interleaved)
        return torch.cat((x[..., :start], turned), dim=-1)
    half = cos.shape[-1]
    xf = x.to(cos.dtype)
    if interleaved:
        a, b = xf[..., 0 : 2 * half : 2], xf[..., 1 : 2 * half : 2]
    else:
        a, b = xf[..., :half], xf[..., half : 2 * half]
    a2, b2 = a * cos - b * sin, b * cos + a * sin
    rotated = torch.stack((a2, b2), dim=-1).flatten(-2) if interleaved else torch.cat((a2, b2), -1)
    return torch.cat((rotated, xf[..., 2 * half :]), dim=-1).to(x.dtype)


__all__ = [
    "SPLITS",
    "alibi_bias",
    "alibi_slopes",
    "apply_rope",
    "cope_attention",
    "cope_logits",
    "cope_positions",
    "each_sequence",
    "fire_distances",
    "forgetting_bias",
    "grouped_kv",
    "irope_rope_layers",
    "irope_temperature",
    "kerple_log_bias",
    "mrope_axes",
    "mrope_cos_sin",
    "mrope_position_ids",
    "rope_2d_cos_sin",
    "randomized_positions",
    "rotating_frequencies",
    "xpos_scale",
    "relative_attention",
    "relative_positions",
    "rope_cos_sin",
    "rope_frequencies",
    "rope_inv_freq",
    "shaw_attention",
    "sinusoidal_table",
    "softmax_with_sinks",
    "t5_relative_bucket",
]
