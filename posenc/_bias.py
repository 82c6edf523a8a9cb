"""Relative position biases added to attention logits, and the reference attention over them.

Relative position of key j seen from query i: r = j - i. Each bias is a (H, Lq, Lk) table
computed from r; `relative_attention` adds it to scale * q k^T (unscaled, as in the papers).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from posenc._checks import check_positive, check_t5_buckets
from posenc._logits import softmax_with_sinks


def alibi_slopes(num_heads: int) -> Tensor:
    """ALiBi head slopes m_h (Press et al. 2021, section 3), float64, shape (H,).

    For H a power of two: m_h = 2^(-8 (h + 1) / H), h = 0 .. H-1. Otherwise the slopes of the
    nearest smaller power of two P, then every other slope of 2P, until H slopes.
    """
    check_positive("num_heads", num_heads)

    def geometric(n: int) -> list[float]:
        return [2.0 ** (-8.0 * (h + 1) / n) for h in range(n)]

    p = 2 ** math.floor(math.log2(num_heads))
    slopes = geometric(p) + geometric(2 * p)[0::2][: num_heads - p]
    return torch.tensor(slopes, dtype=torch.float64)


def alibi_bias(
    slopes: Tensor, q_len: int, k_len: int, *, causal: bool = False, offset: int = 0
) -> Tensor:
    """-m_h |j - i| (or, causal, -m_h (i - j) for j <= i), shape (H, Lq, Lk), slopes' dtype;
    query row i at position offset + i."""
    i = torch.arange(q_len, device=slopes.device).unsqueeze(1) + offset
    j = torch.arange(k_len, device=slopes.device).unsqueeze(0)
    dist = (i - j) if causal else (j - i).abs()
    return -slopes[:, None, None] * dist.to(slopes.dtype)


def t5_relative_bucket(
    relative_position: Tensor,
    bidirectional: bool = True,
    num_buckets: int = 32,
    max_distance: int = 128,
) -> Tensor:
    """T5's bucket of each relative position r = j - i (Raffel et al. 2020, section 2.1).

    Bidirectional: half the buckets for r > 0, half for r <= 0. Within a half, distances below
    half of its buckets get one bucket each; larger ones share log-spaced buckets up to
    max_distance, beyond which everything falls into the last bucket.
    """
    check_t5_buckets(num_buckets, max_distance, bidirectional)
    n = -relative_position
    bucket = torch.zeros_like(relative_position)
    if bidirectional:
        num_buckets //= 2
        bucket = bucket + (n < 0).long() * num_buckets
        n = n.abs()
    else:
        n = n.clamp(min=0)
    max_exact = num_buckets // 2
    # log-spaced part; n is clamped to >= 1 inside the log only (small n take the exact branch).
    # Floored 1e-9 above, in float64: at a boundary whose exact value is an integer (|r| = 16,
    # 32, 64 at 32 buckets and 128) a logarithm one ulp low (CUDA's float64 log is, at some)
    # would drop the bucket by one, so the same relative position got two buckets on two
    # devices; no other value comes within 1e-9 of an integer.
    scaled = torch.log(n.clamp(min=1).double() / max_exact) / math.log(max_distance / max_exact)
    large = max_exact + torch.floor(scaled * (num_buckets - max_exact) + 1e-9).long()
    large = large.clamp(max=num_buckets - 1)
    return bucket + torch.where(n < max_exact, n, large)


def grouped_kv(q: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
    """Grouped-query attention: k and v (B, Hk, Lk, D) with Hk dividing q's H heads, repeated so
    that query head h reads kv head h // (H / Hk); (B, H, Lk, D) views when Hk == H."""
    heads, kv_heads = q.shape[1], k.shape[1]
    if v.shape[1] != kv_heads:
        raise ValueError(f"k has {kv_heads} heads but v has {v.shape[1]}")
    if kv_heads == 0 or heads % kv_heads:
        raise ValueError(f"k and v's heads ({kv_heads}) must divide q's ({heads})")
    if kv_heads == heads:
        return k, v
    group = heads // kv_heads
    return k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)


def apply_mask(logits: Tensor, mask: Tensor) -> Tensor:
    """Boolean (or integer) masks keep True/non-zero; float masks are added to the logits.
    Masked logits get the dtype's lowest finite value: a fully masked row gives uniform weights,
    not NaN (the tutorial's -1e9 does the same in float32, and overflows in float16)."""
    if mask.dtype == torch.bool or not mask.is_floating_point():
        return logits.masked_fill(mask == 0, torch.finfo(logits.dtype).min)
    return logits + mask


def each_sequence(attend, q: Tensor, k: Tensor, v: Tensor, *, kv_lens=None, cu_seqlens=None):
    """attend(q_s, k_s, v_s, at) over the sequences of a batch of caches or of a packed row,
    the outputs put back in place: (B, H, Lq, D).

    kv_lens (B,): row b's keys 0 .. kv_lens[b] - 1 (each in 1 .. Lk), its queries all Lq.
    cu_seqlens (N + 1,): documents of one row (B = 1, Lq = Lk = T) at rows cu[n] .. cu[n + 1].
    at: (batch rows, query rows, key rows) slices of the sequence, to cut a tensor bias alike;
    attend places the queries at the end of the keys it is given (relative_attention does).
    """
    lq, lk = q.shape[-2], k.shape[-2]
    if kv_lens is not None and cu_seqlens is not None:
        raise ValueError("pass kv_lens (a batch of caches) or cu_seqlens (packed), not both")
    if cu_seqlens is not None:
        bounds = [int(x) for x in cu_seqlens]
        if q.shape[0] != 1 or lq != lk or bounds[0] != 0 or bounds[-1] != lq:
            raise ValueError(
                f"cu_seqlens must run from 0 to T over one row (B = 1, Lq = Lk = T), got "
                f"{bounds} for B={q.shape[0]}, Lq={lq}, Lk={lk}"
            )
        if any(b < a for a, b in zip(bounds, bounds[1:], strict=False)):
            raise ValueError(f"cu_seqlens must be non-decreasing, got {bounds}")
        spans = [slice(a, b) for a, b in zip(bounds, bounds[1:], strict=False) if b > a]
        outs = [attend(q[:, :, r], k[:, :, r], v[:, :, r], (slice(0, 1), r, r)) for r in spans]
        return torch.cat(outs, dim=2)
    if kv_lens is None:  # one sequence a batch row
        return attend(q, k, v, (slice(None), slice(None), slice(None)))
    lens = [int(x) for x in kv_lens]
    if len(lens) != q.shape[0] or not all(1 <= n <= lk for n in lens):
        raise ValueError(f"kv_lens must hold B={q.shape[0]} lengths in 1 .. Lk={lk}, got {lens}")
    outs = []
    for b, n in enumerate(lens):
        rows, cols = slice(b, b + 1), slice(0, n)
        outs.append(attend(q[rows], k[rows, :, cols], v[rows, :, cols], (rows, slice(None), cols)))
    return torch.cat(outs, dim=0)


def relative_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    bias=None,
    causal: bool = False,
    scale: float | None = None,
    kv_lens: Tensor | None = None,
    cu_seqlens: Tensor | None = None,
    sinks: Tensor | None = None,
    window: int | None = None,
) -> Tensor:
    """softmax(scale q k^T + bias [causal mask]) v, the reference every attention kernel meets.

    q: (B, H, Lq, D); k, v: (B, Hk, Lk, D), Hk dividing H (grouped-query attention: query head h
    reads kv head h // (H / Hk)); returns (B, H, Lq, D). Query i sits at position Lk - Lq + i
    (the last Lq tokens of Lk, as when decoding against a cache; Lq == Lk: self-attention).
    bias: a tensor broadcastable to (B, H, Lq, Lk), or a module with `bias(q_len, k_len,
      causal, offset)` returning (H, Lq, Lk): `posenc.ALiBi`, `posenc.T5RelativeBias`,
      `posenc.ShawBias`, at distances j - (Lk - Lq + i); None: no bias.
    causal: mask j > Lk - Lq + i (Lq <= Lk).
    window: with causal, a sliding window of W keys (transformers' convention): the query at
      position p = Lk - Lq + i sees keys p - W < j <= p.
    kv_lens (B,): row b's cache holds keys 0 .. kv_lens[b] - 1 (1 .. Lk; >= Lq if causal),
      its queries at kv_lens[b] - Lq + i. cu_seqlens (N + 1,): documents packed into one row,
      attention, distances and the causal mask within each (`each_sequence`).
    sinks (H,): each head's sink logit joins every row's softmax and adds no value (gpt-oss;
      posenc._logits.softmax_with_sinks).
    """
    if kv_lens is not None or cu_seqlens is not None:

        def attend(q_s, k_s, v_s, at):
            b = bias
            if isinstance(bias, Tensor):  # the sequence's block of a (B, H, Lq, Lk) bias
                full = bias.expand(q.shape[0], q.shape[1], q.shape[2], k.shape[2])
                b = full[at[0], :, at[1], at[2]]
            return relative_attention(
                q_s, k_s, v_s, bias=b, causal=causal, scale=scale, sinks=sinks, window=window
            )

        return each_sequence(attend, q, k, v, kv_lens=kv_lens, cu_seqlens=cu_seqlens)
    lq, lk = q.shape[-2], k.shape[-2]
    if causal and lq > lk:
        raise ValueError(f"causal needs Lq <= Lk (queries at the keys' end), got {lq} > {lk}")
    if window is not None and (not causal or isinstance(window, bool) or window < 1):
        raise ValueError(f"window needs causal=True and a positive int, got {window!r}")
    offset = lk - lq
    k, v = grouped_kv(q, k, v)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    if bias is None:
        bias = q.new_zeros(())
    if not isinstance(bias, Tensor):
        bias = bias.bias(lq, lk, causal=causal, offset=offset) if hasattr(bias, "bias") else None
        if bias is None:
            raise TypeError("bias must be a tensor or a module with a bias(q_len, k_len) method")
    logits = torch.matmul(q, k.transpose(-2, -1)) * scale + bias.to(q.dtype)
    if causal:
        future = torch.ones(lq, lk, dtype=torch.bool, device=q.device).triu(1 + offset)
        logits = logits.masked_fill(future, -math.inf)
    if window is not None:  # keys at j <= p - W
        past = torch.ones(lq, lk, dtype=torch.bool, device=q.device).tril(offset - window)
        logits = logits.masked_fill(past, -math.inf)
    return torch.matmul(softmax_with_sinks(logits, sinks), v)


def fire_distances(
    q_len: int,
    k_len: int,
    c: Tensor,
    threshold: Tensor,
    *,
    offset: int = 0,
    eps: float = 1e-6,
) -> Tensor:
    """FIRE's input (Li et al. 2023, "Functional Interpolation for Relative Positions Improves
    Long Context Transformers", eq. 6): psi(i - j) / psi(max(L, i)) with psi(x) = log(|c x| + 1),
    query row i at position offset + i, key j at j; (Lq, Lk) in c's dtype.

    The denominator grows with the query's position once it passes the threshold L, so a model
    trained on short sequences sees longer ones as the same range of inputs, in [0, 1] for keys
    j <= i ("progressive interpolation"). Future keys (j > i) get psi(|i - j|) as in the
    authors' reference code; causal attention masks them. c and threshold are scalars
    (learned in posenc.FIRE); eps keeps the division finite for c = 0.
    """
    check_positive("q_len", q_len)
    check_positive("k_len", k_len)
    check_positive("offset", offset, allow_zero=True)
    i = torch.arange(q_len, device=c.device, dtype=c.dtype).unsqueeze(1) + offset  # (Lq, 1)
    j = torch.arange(k_len, device=c.device, dtype=c.dtype).unsqueeze(0)  # (1, Lk)
    distance = torch.log1p((c * (i - j)).abs())  # psi(i - j), (Lq, Lk)
    normalizer = torch.log1p((c * torch.maximum(i, threshold.abs())).abs()) + eps  # (Lq, 1)
    return distance / normalizer


def kerple_log_bias(p: Tensor, a: Tensor, q_len: int, k_len: int, *, offset: int = 0) -> Tensor:
    """KERPLE's logarithmic kernel (Chi et al. 2022, "KERPLE: Kernelized Relative Positional
    Embedding for Length Extrapolation", eq. 10): -p_h log(1 + a_h |i - j|) with p_h, a_h > 0
    per head, query row i at position offset + i; (H, Lq, Lk) in p's dtype.

    ALiBi's -m_h |i - j| grows linearly with distance; the log kernel flattens, so distant
    tokens are penalised less than ALiBi would (a_h sets where it bends, p_h how strongly).
    """
    check_positive("q_len", q_len)
    check_positive("k_len", k_len)
    check_positive("offset", offset, allow_zero=True)
    if p.shape != a.shape or p.dim() != 1:
        raise ValueError(f"p and a must be (H,) alike, got {tuple(p.shape)} and {tuple(a.shape)}")
    i = torch.arange(q_len, device=p.device).unsqueeze(1) + offset
    j = torch.arange(k_len, device=p.device).unsqueeze(0)
    dist = (i - j).abs().to(p.dtype)  # (Lq, Lk)
    return -p[:, None, None] * torch.log1p(a[:, None, None] * dist)  # (H, Lq, Lk)
