"""posenc_kernels: fused Triton GPU kernels (RoPE, attention with relative bias).

The design's `kernels/` package, under a name of its own: Hugging Face's kernel hub, which
transformers imports, is the top-level package `kernels`, and one process can hold only one.

Imports torch and triton only, never `posenc`: the references in `posenc` are tested against these
kernels from `tests/`, and `bench/` measures both. `apply_rope` on CPU tensors runs a one-pass C
kernel (rope_cpu.py, built at first use); under Triton's interpreter (TRITON_INTERPRET=1, set
before triton is imported) CPU tensors run the Triton kernels themselves, which is how CI tests
them.
"""

from posenc_kernels.hf import apply_rotary_pos_emb
from posenc_kernels.relbias import relative_attention
from posenc_kernels.rope import FusedRoPE, apply_rope
from posenc_kernels.rope_cache import apply_rope_with_cache

__all__ = [
    "FusedRoPE",
    "apply_rope",
    "apply_rope_with_cache",
    "apply_rotary_pos_emb",
    "relative_attention",
]
