"""A Llama-style decoder layer whose positional encoding is a parameter: the reference the
harness measures an encoding's share of a whole layer with.

    h = x + W_o attend(rotate(W_q n(x), W_k n(x)), W_v n(x))        n: RMSNorm
    y = h + W_down(silu(W_gate n'(h)) * W_up n'(h))                 (SwiGLU)

Shapes: x (B, L, d_model); q (B, H, L, D) and k, v (B, Hk, L, D) as transposed views of the
projections' (B, L, H, D) memory, as a model's projections produce them (D = d_model / H unless
head_dim says otherwise, as in Gemma 3 or gpt-oss, whose H D differs from d_model; Hk divides H:
grouped-query attention). No biases in the linear layers (Llama's).

Where an encoding goes, the three ways the families act:
  embed   x -> x + PE: the absolute encodings, added to the input (once per model in a real
          network, at the embedding; here before the one layer);
  rotate  (q, k) -> (q, k): RoPE and its variants, after the projections;
  attend  (q, k, v) -> out: the attention itself, where a relative bias lives (ALiBi, T5,
          Shaw); default `causal_attention` (SDPA, no positions);
  gate    h -> per-token tables from the attention's normed input, passed to attend as its
          fourth argument: FoX's forget gates (posenc.ForgettingGate: log f (B, H, L));
  q_scale (Lq,) or (B, Lq): each query multiplied by a factor after rotate, Llama 4's
          temperature in its NoPE layers (posenc.functional.irope_temperature of the positions).
With none of them the layer has no positional information at all (NoPE).

A decode step passes `cache`: x holds the Lq new tokens of each sequence, their k and v are
written into the cache at positions lens[b] - Lq .. lens[b] - 1 (the cache's lengths count
them) and the queries attend to the cache; rotate and attend must know those positions (they
are closures the caller builds per step). The hooks run inside `torch.profiler` regions named
in REGIONS (a caller's attend in its own), so a profile attributes time to the encoding.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as nnf
from torch import Tensor, nn
from torch.profiler import record_function

from posenc._checks import check_heads, check_positive

Rotate = Callable[[Tensor, Tensor], tuple[Tensor, Tensor]]
Attend = Callable[[Tensor, Tensor, Tensor], Tensor]
# posenc::attention is the default attention (no positions); a caller's attend, where the
# encoding lives, runs in posenc::encoded_attention
REGIONS = {
    "position": "posenc::position",
    "attention": "posenc::attention",
    "encoded_attention": "posenc::encoded_attention",
}


@dataclass
class KVCache:
    """k, v (B, Hk, L_max, D), filled up to lens (B,) once the step's tokens are written;
    mask: `causal_mask(lens, Lq, L_max)`, made once per step and shared by a model's layers
    (None: the default attention makes it in each call)."""

    k: Tensor
    v: Tensor
    lens: Tensor
    mask: Tensor | None = None


def causal_mask(kv_lens: Tensor, q_len: int, k_len: int) -> Tensor:
    """(B, 1, Lq, Lk) bool: row b's queries, its last Lq tokens at kv_lens[b] - Lq + i, see
    keys 0 .. their position."""
    i = torch.arange(q_len, device=kv_lens.device)
    j = torch.arange(k_len, device=kv_lens.device)
    pos = (kv_lens[:, None] - q_len + i[None, :])[:, None, :, None]  # (B, 1, Lq, 1)
    return j <= pos


def causal_attention(
    q: Tensor, k: Tensor, v: Tensor, kv_lens: Tensor | None = None, mask: Tensor | None = None
) -> Tensor:
    """Causal softmax attention without positions (SDPA). q (B, H, Lq, D), k, v (B, Hk, Lk, D).
    Lq == Lk without kv_lens: self-attention; with kv_lens (B,) (or its causal_mask): queries
    at the end of each row's keys."""
    gqa = k.shape[1] != q.shape[1]
    if kv_lens is None and mask is None:
        return nnf.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
    if mask is None:
        mask = causal_mask(kv_lens, q.shape[2], k.shape[2])
    return nnf.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=gqa)


class DecoderLayer(nn.Module):
    """The layer of the module docstring; d_ff defaults to Llama 3's 3.5 x d_model, head_dim to
    d_model / num_heads."""

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        num_kv_heads: int | None = None,
        d_ff: int | None = None,
        eps: float = 1e-5,
        head_dim: int | None = None,
    ):
        super().__init__()
        if head_dim is None:
            head_dim = check_heads(d_model, num_heads)
        for name, value in (("d_model", d_model), ("num_heads", num_heads), ("head_dim", head_dim)):
            check_positive(name, value)
        kv = num_heads if num_kv_heads is None else num_kv_heads
        check_positive("num_kv_heads", kv)
        if num_heads % kv:
            raise ValueError(f"num_kv_heads={kv} must divide num_heads={num_heads}")
        d_ff = int(3.5 * d_model) if d_ff is None else d_ff
        check_positive("d_ff", d_ff)
        self.num_heads, self.num_kv_heads, self.head_dim = num_heads, kv, head_dim
        self.attn_norm = nn.RMSNorm(d_model, eps=eps)
        self.w_q = nn.Linear(d_model, num_heads * head_dim, bias=False)
        self.w_k = nn.Linear(d_model, kv * head_dim, bias=False)
        self.w_v = nn.Linear(d_model, kv * head_dim, bias=False)
        self.w_o = nn.Linear(num_heads * head_dim, d_model, bias=False)
        self.mlp_norm = nn.RMSNorm(d_model, eps=eps)
        self.w_gate = nn.Linear(d_model, d_ff, bias=False)
        self.w_up = nn.Linear(d_model, d_ff, bias=False)
        self.w_down = nn.Linear(d_ff, d_model, bias=False)

    def _heads(self, t: Tensor, heads: int) -> Tensor:
        b, n, _ = t.shape
        return t.view(b, n, heads, self.head_dim).transpose(1, 2)  # (B, heads, L, D) view

    def forward(
        self,
        x: Tensor,
        *,
        embed: Callable[[Tensor], Tensor] | None = None,
        rotate: Rotate | None = None,
        attend: Attend | None = None,
        cache: KVCache | None = None,
        gate: Callable[[Tensor], Tensor] | None = None,
        q_scale: Tensor | None = None,
    ) -> Tensor:
        if x.dim() != 3:
            raise ValueError(f"x must be (B, L, d_model), got shape {tuple(x.shape)}")
        if embed is not None:
            with record_function(REGIONS["position"]):
                x = embed(x)
        h = self.attn_norm(x)
        q = self._heads(self.w_q(h), self.num_heads)
        k = self._heads(self.w_k(h), self.num_kv_heads)
        v = self._heads(self.w_v(h), self.num_kv_heads)
        tables = None
        if rotate is not None or gate is not None or q_scale is not None:
            with record_function(REGIONS["position"]):
                if rotate is not None:
                    q, k = rotate(q, k)
                if q_scale is not None:  # (Lq,) or (B, Lq) over (B, H, Lq, D)
                    q = q * q_scale.to(q.dtype).view(-1, 1, q.shape[2], 1)
                if gate is not None:
                    tables = gate(h)
        if cache is not None:
            k, v = _write(cache, k, v)
        region = REGIONS["attention" if attend is None else "encoded_attention"]
        if attend is None:
            lens, mask = (None, None) if cache is None else (cache.lens, cache.mask)
            attend = lambda q, k, v: causal_attention(q, k, v, lens, mask)  # noqa: E731
        with record_function(region):
            o = attend(q, k, v) if tables is None else attend(q, k, v, tables)  # (B, H, Lq, D)
        x = x + self.w_o(o.transpose(1, 2).reshape(*x.shape[:2], -1))
        h = self.mlp_norm(x)
        return x + self.w_down(nnf.silu(self.w_gate(h)) * self.w_up(h))


def _write(cache: KVCache, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
    """k, v (B, Hk, Lq, D) into the cache at lens[b] - Lq + i (in place) -> the cache's k, v."""
    b, lq = k.shape[0], k.shape[2]
    if cache.k.shape[0] != b or cache.lens.shape != (b,):
        raise ValueError(
            f"cache: k {tuple(cache.k.shape)} and lens {tuple(cache.lens.shape)} must have "
            f"the batch of x ({b})"
        )
    rows = torch.arange(b, device=k.device)[:, None]
    slots = cache.lens[:, None] - lq + torch.arange(lq, device=k.device)[None, :]  # (B, Lq)
    cache.k[rows, :, slots] = k.transpose(1, 2)  # (B, Lq, Hk, D) at [b, :, slot]
    cache.v[rows, :, slots] = v.transpose(1, 2)
    return cache.k, cache.v
