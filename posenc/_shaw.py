"""Shaw, Uszkoreit & Vaswani 2018 ("Self-Attention with Relative Position Representations"),
eqs. 3-4: relative indices and the key-and-value relative attention; the tutorial's 3.3 and 3.6,
corrected. Re-exported by posenc.functional."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from posenc._bias import apply_mask, grouped_kv
from posenc._checks import check_positive
from posenc._logits import softmax_with_sinks


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
    sinks: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Shaw et al. relative attention, without ever building a (B, H, Lq, Lk, D) tensor.

    q: (B, H, Lq, D); k, v: (B, Hk, Lk, D), Hk dividing H (grouped-query attention);
    emb_k, emb_v: (2K + 1, D) tables a^K, a^V.
    mask: broadcastable to (B, H, Lq, Lk); boolean (True = attend) or additive float.
    offset: query i sits at position offset + i (0: the tutorial's; Lk - Lq: at the keys' end,
    as posenc_kernels.relative_attention and relative_attention place them).
    sinks (H,): each head's sink logit joins every row's softmax (gpt-oss); the weights then
    sum to less than 1, and the value term uses them as they are.
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
        logits = apply_mask(logits, mask)
    weights = softmax_with_sinks(logits, sinks)
    out = torch.matmul(weights, v)  # (B, H, Lq, D)
    if emb_v is not None:
        lq, lk, clip = q.shape[-2], k.shape[-2], max_relative_position
        idx = relative_positions(lq, lk, clip, offset=offset, device=q.device)
        # The sums in float32 at least: the two clipped buckets each sum up to Lk weights, which
        # a half-precision sum stops growing (a bfloat16 sum near 0.5 drops addends below 2^-9:
        # at Lk 4096 the output was half wrong). Costs a float32 copy of the weights in half.
        acc = torch.promote_types(weights.dtype, torch.float32)
        per_bucket = weights.new_zeros(*weights.shape[:-1], n_rel, dtype=acc)  # (B, H, Lq, 2K+1)
        per_bucket.scatter_add_(-1, idx.expand_as(weights), weights.to(acc))
        out = out + torch.matmul(per_bucket, emb_v.to(acc)).to(out.dtype)
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
