"""The serving path's references: RoPE with the KV-cache write, and attention over a paged cache,
in eager PyTorch (`posenc.serving`).

A paged cache is vLLM's layout: (num_blocks, block_size, Hk, D), token slot s at
cache[s // block_size, s % block_size]. A step writes its T tokens' k and v at their slots
(slot_mapping, -1 for a padding token that writes nothing); sequence b's keys 0 .. n_b - 1 then
lie in the cache blocks its block-table row lists, key j in block block_table[b, j // block_size]
at slot j % block_size. The references gather those blocks back into one (B, Hk, L, D) tensor
and call the ordinary attention: what a model without a paged kernel pays.
"""

from __future__ import annotations

import torch
from torch import Tensor

from posenc.functional import apply_rope, relative_attention


def _flat(cache: Tensor) -> Tensor:
    """(num_blocks, block_size, Hk, D) -> (num_blocks * block_size, Hk, D), a view."""
    if cache.dim() != 4:
        raise ValueError(
            f"a cache must be (num_blocks, block_size, Hk, D), got {tuple(cache.shape)}"
        )
    return cache.view(-1, *cache.shape[2:])


def write_kv_cache(
    k_cache: Tensor, v_cache: Tensor, k: Tensor, v: Tensor, slot_mapping: Tensor
) -> None:
    """k_cache[slot] = k[t] and v_cache[slot] = v[t] for each token t with slot_mapping[t] =
    slot >= 0, in place (tokens with -1 are skipped: one host read to find them).
    k, v: (T, Hk, D); caches (num_blocks, block_size, Hk, D); slot_mapping (T,) int."""
    keep = slot_mapping >= 0
    slots = slot_mapping[keep].long()
    for cache, x in ((k_cache, k), (v_cache, v)):
        _flat(cache).index_copy_(0, slots, x[keep].to(cache.dtype))


def _tables(cos: Tensor, sin: Tensor, positions: Tensor | None, rotary_dim: int | None):
    """The tokens' (T, 1, R/2) rows, broadcast over heads; columns past the tables' F up to
    R/2 get angle 0 (cos 1, sin 0: pairs that stand still, p-RoPE)."""
    if positions is not None:
        cos, sin = cos[positions], sin[positions]
    pad = 0 if rotary_dim is None else rotary_dim // 2 - cos.shape[-1]
    if pad < 0:
        raise ValueError(
            f"rotary_dim={rotary_dim} is narrower than the tables' 2F = {2 * cos.shape[-1]}"
        )
    if pad:
        cos = torch.cat((cos, cos.new_ones(cos.shape[0], pad)), -1)
        sin = torch.cat((sin, sin.new_zeros(sin.shape[0], pad)), -1)
    return cos[:, None], sin[:, None]


def rope_with_cache(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    cos: Tensor,
    sin: Tensor,
    *,
    positions: Tensor | None,
    k_cache: Tensor,
    v_cache: Tensor,
    slot_mapping: Tensor,
    interleaved: bool = False,
    rotary_dim: int | None = None,
) -> Tensor:
    """Rotate q and k by their tokens' positions, write the rotated k and the plain v into the
    caches (`write_kv_cache`); returns the rotated q. The reference of
    posenc_kernels.apply_rope_with_cache, with the same arguments.

    q: (T, Hq, D); k, v: (T, Hk, D); cos, sin: (L_max, F) tables read at positions (T,), or
    per-token (T, F) with positions=None (M-RoPE); rotary_dim R >= 2F: dims R .. D - 1 pass
    through, pairs F .. R/2 - 1 stand still. Rotation: posenc.functional.apply_rope's.
    """
    c, s = _tables(cos, sin, positions, rotary_dim)
    q_out = apply_rope(q, c, s, interleaved=interleaved)
    write_kv_cache(k_cache, v_cache, apply_rope(k, c, s, interleaved=interleaved), v, slot_mapping)
    return q_out


def gather_pages(cache: Tensor, block_table: Tensor, kv_lens: Tensor) -> Tensor:
    """Sequence b's keys (or values) 0 .. kv_lens[b] - 1 out of a paged cache, as one
    (B, Hk, L, D) tensor, L = max(kv_lens); rows past a sequence's length are zero."""
    page = cache.shape[1]
    lens = [int(n) for n in kv_lens]
    longest = max(lens, default=0)
    out = cache.new_zeros(len(lens), cache.shape[2], longest, cache.shape[3])
    for b, n in enumerate(lens):
        j = torch.arange(n, device=cache.device)
        blocks = block_table[b, j // page].long()
        out[b, :, :n] = cache[blocks, j % page].transpose(0, 1)  # (n, Hk, D) -> (Hk, n, D)
    return out


def paged_attention(
    q: Tensor,
    k_cache: Tensor,
    v_cache: Tensor,
    block_table: Tensor,
    kv_lens: Tensor,
    *,
    bias,
    causal: bool = False,
    scale: float | None = None,
) -> Tensor:
    """posenc.functional.relative_attention over paged caches: q (B, H, Lq, D), row b's keys
    0 .. kv_lens[b] - 1 gathered from its blocks (`gather_pages`), its queries at their end.
    The reference of posenc_kernels.relative_attention(..., block_table=, kv_lens=)."""
    k, v = (gather_pages(c, block_table, kv_lens) for c in (k_cache, v_cache))
    return relative_attention(q, k, v, bias=bias, causal=causal, scale=scale, kv_lens=kv_lens)
