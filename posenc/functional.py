"""Pure tables and ops shared by the modules, the kernels' tests and the benchmarks.

Notation used across the repository:
    B batch, L sequence length (Lq queries, Lk keys), H heads, D head dim,
    R rotary dim (R <= D), K max relative position (Shaw clip distance), d_model = H * D.

Relative biases (ALiBi, T5 buckets) and `relative_attention` live in posenc/_bias.py and are
re-exported here. Tables are computed in float64 and cast once at the end: a float32 angle
``pos * inv_freq`` is off by ~1e-2 rad at pos = 2**20, the float64 one by ~1e-10.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from posenc._bias import (
    alibi_bias,
    alibi_slopes,
    each_sequence,
    grouped_kv,
    relative_attention,
    t5_relative_bucket,
)
from posenc._checks import check_float, check_positive
from posenc._multiaxis import (
    SPLITS,
    mrope_axes,
    mrope_cos_sin,
    mrope_position_ids,
    rope_2d_cos_sin,
    rotating_frequencies,
    xpos_scale,
)
from posenc._rotate import rotate_into
from posenc._scaling import rope_frequencies

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
    out: Tensor | None = None,
) -> Tensor:
    """Rotate pairs of x's last dimension by the angles whose cos and sin are given.

    x:        (..., L, D), any strides; float16 / bfloat16 are rotated in float32.
    cos, sin: (..., L, R/2) broadcastable against x[..., :R/2], with R = 2 * cos.shape[-1] <= D.
              Dimensions R .. D - 1 pass through unchanged (partial rotary).
    interleaved: False pairs (i, i + R/2) (GPT-NeoX / Llama "half-split");
                 True pairs (2i, 2i + 1) (GPT-J).
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
    try:
        torch.broadcast_shapes(cos.shape[:-1], x.shape[:-1])
    except RuntimeError:
        raise ValueError(
            f"cos/sin of shape {tuple(cos.shape)} do not broadcast against x {tuple(x.shape)}: "
            "slice the tables to x's positions, e.g. cos[:L]"
        ) from None
    if cos.device != x.device or sin.device != x.device:
        raise ValueError(f"cos/sin are on {cos.device} but x is on {x.device}")
    if out is not None and (out.shape != x.shape or out.dtype != x.dtype or out.device != x.device):
        raise ValueError(
            f"out must match x: shape {tuple(x.shape)}, {x.dtype} on {x.device}; "
            f"got {tuple(out.shape)}, {out.dtype} on {out.device}"
        )
    math_dtype = torch.promote_types(x.dtype, torch.float32)
    cos, sin = cos.to(math_dtype), sin.to(math_dtype)
    if torch.compiler.is_compiling() and out is None:
        # Traced: the functional formula, which the compiler fuses. The chunked engine's writes
        # into a transposed out past one chunk come back wrong through AOTAutograd (torch 2.13).
        return _rotate_differentiable(x, cos, sin, interleaved)
    if torch.is_grad_enabled() and (x.requires_grad or cos.requires_grad or sin.requires_grad):
        if out is not None:
            raise ValueError("out= is not differentiable: pass out=None when gradients are needed")
        return _rotate_differentiable(x, cos, sin, interleaved)
    if out is None:
        out = torch.empty_like(x)
    cos = cos.reshape((1,) * (x.dim() - cos.dim()) + tuple(cos.shape))  # rank of x
    rotate_into(x, cos, sin.reshape(cos.shape), out, interleaved)
    return out


def _rotate_differentiable(x: Tensor, cos: Tensor, sin: Tensor, interleaved: bool) -> Tensor:
    """Out-of-place and autograd-friendly; the same formula as posenc._rotate."""
    half = cos.shape[-1]
    xf = x.to(cos.dtype)
    if interleaved:
        a, b = xf[..., 0 : 2 * half : 2], xf[..., 1 : 2 * half : 2]
    else:
        a, b = xf[..., :half], xf[..., half : 2 * half]
    a2, b2 = a * cos - b * sin, b * cos + a * sin
    rotated = torch.stack((a2, b2), dim=-1).flatten(-2) if interleaved else torch.cat((a2, b2), -1)
    return torch.cat((rotated, xf[..., 2 * half :]), dim=-1).to(x.dtype)


# -- Relative positions: Shaw, Uszkoreit & Vaswani 2018, eqs. 3-4; the tutorial's 3.3 and 3.6.


def relative_positions(
    q_len: int, k_len: int, max_relative_position: int, *, offset: int = 0, device=None
) -> Tensor:
    """Clipped relative-index matrix idx[i, j] = clip(j - i, -K, K) + K, shape (Lq, Lk), int64.

    Query i and key j are at positions offset + i and j: offset 0 counts both from 0, as the
    tutorial does; Lk - Lq puts the queries at the keys' end (decoding; relative_attention's).
    Values lie in 0 .. 2K; bucket K is "same position".
    """
    check_positive("q_len", q_len)
    check_positive("k_len", k_len)
    check_positive("max_relative_position", max_relative_position, allow_zero=True)
    i = torch.arange(q_len, device=device).unsqueeze(1) + offset
    j = torch.arange(k_len, device=device).unsqueeze(0)
    k = max_relative_position
    return (j - i).clamp_(-k, k) + k


def shaw_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    emb_k: Tensor,
    emb_v: Tensor | None,
    max_relative_position: int,
    *,
    mask: Tensor | None = None,
    scale: float | None = None,
    offset: int = 0,
) -> tuple[Tensor, Tensor]:
    """Shaw et al. relative attention, without ever building a (B, H, Lq, Lk, D) tensor.

    q: (B, H, Lq, D); k, v: (B, Hk, Lk, D), Hk dividing H (grouped-query attention);
    emb_k, emb_v: (2K + 1, D) tables a^K, a^V.
    mask: broadcastable to (B, H, Lq, Lk); boolean (True = attend) or additive float.
    offset: query i sits at position offset + i (0: the tutorial's; Lk - Lq: at the keys' end,
    as kernels.relative_attention and relative_attention place them).
    Returns (out (B, H, Lq, D), weights (B, H, Lq, Lk)) with
        e_ij  = scale * (q_i . k_j + q_i . a^K[idx_ij])          (eq. 4, scale = 1/sqrt(D))
        out_i = sum_j alpha_ij (v_j + a^V[idx_ij])               (eq. 3)
    The key term is Q @ a^K^T, (B, H, Lq, 2K+1), added to the logits diagonal by diagonal; the
    value term sums the weights per relative bucket, (B, H, Lq, 2K+1), and multiplies by a^V:
    O(B H Lq (Lk + K)) memory.
    """
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError(f"q, k, v must be (B, H, L, D); got ranks {q.dim()}, {k.dim()}, {v.dim()}")
    k, v = grouped_kv(q, k, v)
    n_rel = 2 * max_relative_position + 1
    if emb_k.shape != (n_rel, q.shape[-1]):
        raise ValueError(
            f"emb_k must be (2K+1, D) = ({n_rel}, {q.shape[-1]}), got {tuple(emb_k.shape)}"
        )
    if emb_v is not None and emb_v.shape != emb_k.shape:
        raise ValueError(f"emb_v must be {tuple(emb_k.shape)}, got {tuple(emb_v.shape)}")
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    q = q * scale  # scales both terms; cheaper than a pass over the (Lq, Lk) logits
    logits = torch.matmul(q, k.transpose(-2, -1))  # (B, H, Lq, Lk)
    rel = torch.matmul(q, emb_k.transpose(0, 1))  # (B, H, Lq, 2K+1)
    _add_relative_logits_(logits, rel, max_relative_position, offset)
    if mask is not None:
        logits = _apply_mask(logits, mask)
    weights = torch.softmax(logits, dim=-1)
    out = torch.matmul(weights, v)  # (B, H, Lq, D)
    if emb_v is not None:
        lq, lk, clip = q.shape[-2], k.shape[-2], max_relative_position
        idx = relative_positions(lq, lk, clip, offset=offset, device=q.device)
        per_bucket = weights.new_zeros(*weights.shape[:-1], n_rel)  # (B, H, Lq, 2K+1)
        per_bucket.scatter_add_(-1, idx.expand_as(weights), weights)
        out = out + torch.matmul(per_bucket, emb_v)
    return out, weights


# Up to this many (Lq, Lk) cells one gather beats 2K + 1 diagonal adds (their per-op overhead
# dominates small tiles: 2.3x slower for a training step at L=32, K=32); beyond, the gather's
# single thread loses (about 40% of the module's time at L=4096).
GATHER_MAX_CELLS = 256 * 256


def _add_relative_logits_(logits: Tensor, rel: Tensor, k: int, offset: int = 0) -> None:
    """logits[..., i, j] += rel[..., i, clip(j - i - offset, -K, K) + K], in place.

    Small tiles: one gather of rel by the (Lq, Lk) index matrix. Large tiles: no index tensor,
    one strided add per diagonal |j - i| <= K (2K + 1 small ops) and one multithreaded addcmul
    per clipped region (j - i < -K uses bucket 0, j - i > K bucket 2K).
    """
    lq, lk = logits.shape[-2:]
    if lq * lk <= GATHER_MAX_CELLS:
        idx = relative_positions(lq, lk, k, offset=offset, device=logits.device)  # (Lq, Lk)
        logits.add_(rel.gather(-1, idx.expand(*rel.shape[:-1], lk)))
        return
    for d in range(max(offset - k, 1 - lq), min(offset + k, lk - 1) + 1):  # diagonals that exist
        rows = slice(max(0, -d), min(lq, lk - d))
        logits.diagonal(d, -2, -1).add_(rel[..., rows, d - offset + k])
    i = torch.arange(lq, device=logits.device).unsqueeze(1) + offset
    j = torch.arange(lk, device=logits.device)
    if lk - 1 - offset > k:  # some j - i - offset > K: bucket 2K
        logits.addcmul_(rel[..., 2 * k :], (j - i > k).to(logits.dtype))
    if 1 - lq - offset < -k:  # some below -K: bucket 0
        logits.addcmul_(rel[..., :1], (j - i < -k).to(logits.dtype))


def _apply_mask(logits: Tensor, mask: Tensor) -> Tensor:
    """Boolean (or integer) masks keep True/non-zero; float masks are added to the logits.
    Masked logits get the dtype's lowest finite value: a fully masked row gives uniform weights,
    not NaN (the tutorial's -1e9 does the same in float32, and overflows in float16)."""
    if mask.dtype == torch.bool or not mask.is_floating_point():
        return logits.masked_fill(mask == 0, torch.finfo(logits.dtype).min)
    return logits + mask


__all__ = [
    "SPLITS",
    "alibi_bias",
    "alibi_slopes",
    "apply_rope",
    "each_sequence",
    "grouped_kv",
    "mrope_axes",
    "mrope_cos_sin",
    "mrope_position_ids",
    "rope_2d_cos_sin",
    "rotating_frequencies",
    "xpos_scale",
    "relative_attention",
    "relative_positions",
    "rope_cos_sin",
    "rope_frequencies",
    "rope_inv_freq",
    "shaw_attention",
    "sinusoidal_table",
    "t5_relative_bucket",
]
