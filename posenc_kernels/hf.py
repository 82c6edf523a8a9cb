"""The fused RoPE behind Hugging Face transformers' own signature, so that a transformers model
runs with it in place of its eager rotation (docs/kernels.md, "In a transformers model").

transformers' attention calls `apply_rotary_pos_emb(q, k, cos, sin)` with q and k (B, H, L, D)
views of its projections' (B, L, H, D) memory and the tables its rotary embedding returned for
the step: (B, L, R), both halves equal (`cat((freqs, freqs))`), attention factor included, in
the model's dtype. This reads their first half as per-token float32 tables (R/2 columns: a cast
and nothing else for float32 models, 4 L R bytes a step for half-precision ones, shared by every
layer's call only if the caller caches it) and rotates q and k in one launch, through the
layout argument: nothing is transposed or copied. Imports nothing of transformers.
"""

from __future__ import annotations

from torch import Tensor

from posenc_kernels.rope import apply_rope

_LAYOUTS = {1: "bhsd", 2: "bshd"}  # transformers' unsqueeze_dim: where the head axis is


def apply_rotary_pos_emb(
    q: Tensor, k: Tensor, cos: Tensor, sin: Tensor, unsqueeze_dim: int = 1
) -> tuple[Tensor, Tensor]:
    """transformers' `apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1)`, fused.

    q: (B, Hq, L, D) for unsqueeze_dim=1 (transformers' Llama, Qwen2, Mistral, ...) or
       (B, L, Hq, D) for unsqueeze_dim=2; k likewise with Hk heads (grouped-query attention).
    cos, sin: (B, L, R) or (1, L, R) as the model's rotary embedding returns them, R <= D even,
       the two halves of each row equal (half-split pairs (i, i + R/2)); dims R .. D-1 of q and
       k pass through unchanged. Differentiable in q and k, like transformers' own.
    Returns (q_embed, k_embed) shaped like q and k."""
    layout = _LAYOUTS.get(unsqueeze_dim)
    if layout is None:
        raise ValueError(
            f"unsqueeze_dim must be 1 (B, H, L, D) or 2 (B, L, H, D), got {unsqueeze_dim!r}"
        )
    if not isinstance(cos, Tensor) or cos.dim() != 3 or cos.shape[-1] % 2:
        raise ValueError(f"cos must be (B, L, R) with R even, got {getattr(cos, 'shape', cos)}")
    half = cos.shape[-1] // 2
    return apply_rope(q, k, cos[..., :half].float(), sin[..., :half].float(), layout=layout)
