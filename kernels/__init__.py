"""kernels: fused Triton GPU kernels (RoPE, attention with relative bias).

Imports torch and triton only, never `posenc`: the references in `posenc` are tested against these
kernels from `tests/`, and `bench/` measures both.
"""
