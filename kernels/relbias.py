"""Attention with a relative position bias computed inside the tile: ALiBi, T5 buckets, Shaw scalar.

Forward only so far (issue 4 in progress): online softmax over key blocks (flash-attention style),
the bias computed from r = j - i per tile, so no (L x L) tensor is ever in memory: O(B H L D),
plus O(B H L K) for Shaw's key term and O(BLOCK_M K) per program for Shaw's value term.
File order: kernel -> launcher (checks, grid) -> public `relative_attention`.

Layout: q (B, H, Lq, D), k and v (B, H, Lk, D), any strides; out like q. Scores and the running
softmax are float32; q, k and p are upcast to float32 before each tl.dot (Triton 3.9's interpreter
computes bfloat16 dots wrongly; on a GPU this costs tensor-core speed: a later version keeps the
native dtype there).
"""

# No `from __future__ import annotations`: Triton reads the constexpr annotations.
import math
import os

import torch
import triton
import triton.language as tl
from torch import Tensor

ALIBI, T5, SHAW, SHAW_KV = 0, 1, 2, 3  # SHAW_KV: Shaw's key (and value) terms


@triton.jit
def _bias_tile(rel, h, slopes_ptr, t5_ptr, stride_t5b, stride_t5h, shaw_ptr, stride_sh, stride_sr,
               BIAS: tl.constexpr, T5_BIDIRECTIONAL: tl.constexpr, T5_BUCKETS: tl.constexpr,
               T5_MAX_DISTANCE: tl.constexpr, SHAW_K: tl.constexpr):  # fmt: skip
    """The bias for a (BLOCK_M, BLOCK_N) tile of relative positions rel = j - i."""
    if BIAS == 0:  # ALiBi: -m_h |j - i| (for causal rows j <= i this is -m_h (i - j))
        slope = tl.load(slopes_ptr + h)
        return -slope * tl.abs(rel).to(tl.float32)
    elif BIAS == 1:  # T5: bucket(j - i), table (num_buckets, H)
        n = -rel
        if T5_BIDIRECTIONAL:
            half: tl.constexpr = T5_BUCKETS // 2
            bucket = tl.where(n < 0, half, 0)
            n = tl.abs(n)
        else:
            half: tl.constexpr = T5_BUCKETS
            bucket = tl.zeros_like(n)
            n = tl.maximum(n, 0)
        exact: tl.constexpr = half // 2
        nf = tl.maximum(n, 1).to(tl.float32)
        scaled = tl.log(nf / exact) / tl.log(T5_MAX_DISTANCE / exact) * (half - exact)
        large = tl.minimum(exact + scaled.to(tl.int32), half - 1)
        bucket += tl.where(n < exact, n, large)
        return tl.load(t5_ptr + bucket * stride_t5b + h * stride_t5h).to(tl.float32)
    else:  # Shaw scalar: table (H, 2K + 1) at clip(j - i, -K, K) + K
        idx = tl.minimum(tl.maximum(rel, -SHAW_K), SHAW_K) + SHAW_K
        return tl.load(shaw_ptr + h * stride_sh + idx * stride_sr).to(tl.float32)


@triton.jit
def _relbias_fwd_kernel(
    q_ptr, k_ptr, v_ptr, o_ptr, slopes_ptr, t5_ptr, shaw_ptr, relk_ptr, ev_ptr,
    stride_qb, stride_qh, stride_qm, stride_qd,
    stride_kb, stride_kh, stride_kn, stride_kd,
    stride_vb, stride_vh, stride_vn, stride_vd,
    stride_ob, stride_oh, stride_om, stride_od,
    stride_t5b, stride_t5h, stride_sh, stride_sr,
    stride_rb, stride_rh, stride_rm, stride_rr, stride_evr, stride_evd,
    H, LQ, LK, D, scale,
    BIAS: tl.constexpr, CAUSAL: tl.constexpr, T5_BIDIRECTIONAL: tl.constexpr,
    T5_BUCKETS: tl.constexpr, T5_MAX_DISTANCE: tl.constexpr, SHAW_K: tl.constexpr,
    HAS_VALUE: tl.constexpr, NB: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
):  # fmt: skip
    """One program per (query block, b * h): reads its q block once, streams k and v blocks.

    SHAW_KV: the key term is gathered from relk = scale * Q E_K^T, (B, H, Lq, 2K + 1), at
    clip(j - i) + K; the value term keeps per-row sums of the (unnormalized) probabilities per
    relative bucket, (BLOCK_M, NB), rescaled like the output, and adds sums @ E_V at the end.
    """
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1).to(tl.int64)
    b, h = pid_bh // H, pid_bh % H
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    mask_m, mask_d = offs_m < LQ, offs_d < D
    q = tl.load(
        q_ptr
        + b * stride_qb
        + h * stride_qh
        + offs_m[:, None] * stride_qm
        + offs_d[None, :] * stride_qd,
        mask=mask_m[:, None] & mask_d[None, :],
        other=0.0,
    )
    q = q.to(tl.float32) * scale
    m_i = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    l_i = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, BLOCK_D), tl.float32)
    if HAS_VALUE:
        bucket_sums = tl.zeros((BLOCK_M, NB), tl.float32)
    end = LK
    if CAUSAL:  # key blocks entirely beyond the diagonal contribute nothing
        end = tl.minimum(LK, (pid_m + 1) * BLOCK_M)
    for start_n in range(0, end, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        mask_n = offs_n < LK
        kv_mask = mask_n[:, None] & mask_d[None, :]
        k = tl.load(
            k_ptr
            + b * stride_kb
            + h * stride_kh
            + offs_n[:, None] * stride_kn
            + offs_d[None, :] * stride_kd,
            mask=kv_mask,
            other=0.0,
        ).to(tl.float32)
        s = tl.dot(q, tl.trans(k))  # (BLOCK_M, BLOCK_N), already scaled
        rel = offs_n[None, :] - offs_m[:, None]
        idx = tl.minimum(tl.maximum(rel, -SHAW_K), SHAW_K) + SHAW_K  # Shaw bucket (0 if unused)
        if BIAS == 3:
            relk_rows = relk_ptr + b * stride_rb + h * stride_rh + offs_m[:, None] * stride_rm
            s += tl.load(relk_rows + idx * stride_rr, mask=mask_m[:, None] & mask_n[None, :],
                         other=0.0)  # fmt: skip
        else:
            s += _bias_tile(rel, h, slopes_ptr, t5_ptr, stride_t5b, stride_t5h, shaw_ptr,
                            stride_sh, stride_sr, BIAS, T5_BIDIRECTIONAL, T5_BUCKETS,
                            T5_MAX_DISTANCE, SHAW_K)  # fmt: skip
        keep = mask_n[None, :]
        if CAUSAL:
            keep = keep & (rel <= 0)
        s = tl.where(keep, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # rows with nothing yet
        p = tl.exp(s - m_safe[:, None])
        alpha = tl.exp(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(
            v_ptr
            + b * stride_vb
            + h * stride_vh
            + offs_n[:, None] * stride_vn
            + offs_d[None, :] * stride_vd,
            mask=kv_mask,
            other=0.0,
        ).to(tl.float32)
        acc = acc * alpha[:, None] + tl.dot(p, v)
        if HAS_VALUE:  # p summed per bucket: a one-hot over the NB buckets, reduced over keys
            onehot = idx[:, :, None] == tl.arange(0, NB)[None, None, :]
            bucket_sums = bucket_sums * alpha[:, None] + tl.sum(
                tl.where(onehot, p[:, :, None], 0.0), 1
            )
        m_i = m_new
    if HAS_VALUE:
        offs_r = tl.arange(0, NB)
        ev = tl.load(
            ev_ptr + offs_r[:, None] * stride_evr + offs_d[None, :] * stride_evd,
            mask=(offs_r[:, None] < 2 * SHAW_K + 1) & mask_d[None, :],
            other=0.0,
        )
        acc += tl.dot(bucket_sums, ev.to(tl.float32))
    out = acc / l_i[:, None]
    tl.store(o_ptr + b * stride_ob + h * stride_oh + offs_m[:, None] * stride_om
             + offs_d[None, :] * stride_od, out.to(o_ptr.dtype.element_ty),
             mask=mask_m[:, None] & mask_d[None, :])  # fmt: skip


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def relative_attention(
    q: Tensor, k: Tensor, v: Tensor, *, alibi_slopes: Tensor | None = None,
    t5_table: Tensor | None = None, t5_num_buckets: int = 32, t5_max_distance: int = 128,
    t5_bidirectional: bool = True, shaw_bias: Tensor | None = None,
    shaw_k: Tensor | None = None, shaw_v: Tensor | None = None, causal: bool = False,
    scale: float | None = None,
) -> Tensor:  # fmt: skip
    """softmax(scale q k^T + bias(j - i) [causal]) v with exactly one bias family (forward only).

    q: (B, H, Lq, D); k, v: (B, H, Lk, D); returns (B, H, Lq, D) in q's dtype.
    alibi_slopes (H,): bias -m_h |j - i|. t5_table (num_buckets, H): bias t5_table[bucket, h].
    shaw_bias (H, 2K + 1): bias shaw_bias[h, clip(j - i, -K, K) + K].
    shaw_k (2K + 1, D) and optional shaw_v (2K + 1, D), shared by all heads (Shaw et al.):
      logits scale q_i . (k_j + shaw_k[clip(j - i) + K]), output sum_j a_ij (v_j + shaw_v[...]).
    causal masks j > i.
    Forward only: inputs that require grad raise NotImplementedError (no silent detach).
    """
    families = (("alibi_slopes", alibi_slopes), ("t5_table", t5_table),
                ("shaw_bias", shaw_bias), ("shaw_k", shaw_k))  # fmt: skip
    given = [name for name, t in families if t is not None]
    if shaw_v is not None and shaw_k is None:
        raise ValueError("shaw_v needs shaw_k (Shaw's value term comes with the key term)")
    if torch.is_grad_enabled() and any(
        isinstance(t, Tensor) and t.requires_grad
        for t in (q, k, v, alibi_slopes, t5_table, shaw_bias, shaw_k, shaw_v)
    ):
        raise NotImplementedError(
            "kernels.relative_attention has no backward yet (issue 4): call it under "
            "torch.no_grad(), or use posenc.functional.relative_attention for training"
        )
    if len(given) != 1:
        raise ValueError(
            f"pass exactly one of alibi_slopes, t5_table, shaw_bias, shaw_k; got {given}"
        )
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, Tensor) or t.dim() != 4:
            raise ValueError(f"{name} must be a 4-D tensor (B, H, L, D)")
        if t.dtype not in (torch.float32, torch.float16, torch.bfloat16):
            raise TypeError(f"{name} must be float32, float16 or bfloat16, got {t.dtype}")
        if t.dtype != q.dtype or t.device != q.device:
            raise ValueError(f"{name} is {t.dtype} on {t.device}; q is {q.dtype} on {q.device}")
    bsz, heads, lq, d = q.shape
    if k.shape[:2] != (bsz, heads) or k.shape[3] != d or v.shape != k.shape:
        raise ValueError(f"k and v must be (B={bsz}, H={heads}, Lk, D={d}) and alike, "
                         f"got {tuple(k.shape)} and {tuple(v.shape)}")  # fmt: skip
    if causal and lq != k.shape[2]:
        raise ValueError("causal needs Lq == Lk")
    if q.device.type == "cpu" and not _interpreting():
        raise ValueError("q is a CPU tensor: run on a GPU, or set TRITON_INTERPRET=1 before "
                         "triton is imported to use Triton's interpreter")  # fmt: skip
    table = {"alibi_slopes": alibi_slopes, "t5_table": t5_table, "shaw_bias": shaw_bias,
             "shaw_k": shaw_k}[given[0]]  # fmt: skip
    if table.device != q.device:
        raise ValueError(f"{given[0]} is on {table.device} but q is on {q.device}")
    expected = {"alibi_slopes": (heads,), "t5_table": (t5_num_buckets, heads)}.get(given[0])
    if given[0] == "shaw_bias":
        if table.dim() != 2 or table.shape[0] != heads or table.shape[1] % 2 == 0:
            raise ValueError(f"shaw_bias must be (H={heads}, 2K+1), got {tuple(table.shape)}")
    elif given[0] == "shaw_k":
        for name, t in (("shaw_k", shaw_k), ("shaw_v", shaw_v)):
            if t is not None and (t.dim() != 2 or t.shape[1] != d or t.shape[0] % 2 == 0
                                  or t.shape != shaw_k.shape):  # fmt: skip
                raise ValueError(f"{name} must be (2K+1, D={d}), got {tuple(t.shape)}")
            if t is not None and t.device != q.device:
                raise ValueError(f"{name} is on {t.device} but q is on {q.device}")
    elif tuple(table.shape) != expected:
        raise ValueError(f"{given[0]} must be {expected}, got {tuple(table.shape)}")
    table = table.float()
    out = torch.empty_like(q)
    bias = {"alibi_slopes": ALIBI, "t5_table": T5, "shaw_bias": SHAW, "shaw_k": SHAW_KV}[given[0]]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    relk = ev = table  # unused pointers unless SHAW_KV
    n_rel = table.shape[1] if bias == SHAW else table.shape[0] if bias == SHAW_KV else 1
    if bias == SHAW_KV:  # the key term's (B, H, Lq, 2K + 1) table: O(L K), not O(L^2)
        relk = torch.matmul(q.float() * scale, table.t()).contiguous()
        ev = shaw_v.float() if shaw_v is not None else table
    has_value = bias == SHAW_KV and shaw_v is not None
    # The value term's one-hot is (BLOCK_M, BLOCK_N, NB) per tile: small tiles keep it in
    # registers. The interpreter runs fastest with small tiles too.
    block_m = block_n = 16 if _interpreting() or has_value else 64
    dummy = table  # pointers of the unused families: never read (constexpr branches)
    t5 = table if bias == T5 else dummy
    shaw = table if bias == SHAW else dummy
    grid = (triton.cdiv(lq, block_m), bsz * heads)
    rs = relk.stride() if relk.dim() == 4 else (0, 0, 0, 0)
    _relbias_fwd_kernel[grid](
        q, k, v, out, table, t5, shaw, relk, ev,
        *q.stride(), *k.stride(), *v.stride(), *out.stride(),
        t5.stride(0), t5.stride(1) if t5.dim() > 1 else 0,
        shaw.stride(0), shaw.stride(1) if shaw.dim() > 1 else 0,
        *rs, ev.stride(0), ev.stride(1) if ev.dim() > 1 else 0,
        heads, lq, k.shape[2], d, scale,
        BIAS=bias, CAUSAL=causal, T5_BIDIRECTIONAL=t5_bidirectional, T5_BUCKETS=t5_num_buckets,
        T5_MAX_DISTANCE=t5_max_distance, SHAW_K=(n_rel - 1) // 2,
        HAS_VALUE=has_value,
        NB=max(16, triton.next_power_of_2(n_rel)),
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_D=max(16, triton.next_power_of_2(d)),
    )  # fmt: skip
    return out
