"""kernels: fused Triton GPU kernels (RoPE, attention with relative bias).

Imports torch and triton only, never `posenc`: the references in `posenc` are tested against these
kernels from `tests/`, and `bench/` measures both. On a CPU the kernels run under Triton's
interpreter (TRITON_INTERPRET=1, set before triton is imported).
"""

from kernels.relbias import relative_attention
from kernels.rope import FusedRoPE, apply_rope
from kernels.rope_cache import apply_rope_with_cache

__all__ = ["FusedRoPE", "apply_rope", "apply_rope_with_cache", "relative_attention"]
