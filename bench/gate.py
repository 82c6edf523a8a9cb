"""The correctness gate: an implementation's output against the float64 truth, before timing.

A wrong result is recorded as status "wrong" with its error and is never timed.
"""

from __future__ import annotations

import torch

from bench.registry import Output, as_tuple

# Relative tolerance per input dtype; atol is the same number scaled by max |truth|, so that
# outputs of any magnitude are held to the dtype's precision (float16/bfloat16 outputs also
# carry the rounding of weights and inputs, hence the margin over their eps).
TOLERANCE = {
    torch.float64: 1e-9,
    torch.float32: 1e-4,
    torch.float16: 1e-2,
    torch.bfloat16: 5e-2,
}


def gate(got: Output, want: Output, dtype: torch.dtype) -> tuple[bool, float, str]:
    """(passed, max abs error, message)."""
    got_t, want_t = as_tuple(got), as_tuple(want)
    if len(got_t) != len(want_t):
        return False, float("inf"), f"{len(got_t)} outputs, expected {len(want_t)}"
    tol, worst = TOLERANCE[dtype], 0.0
    for i, (g, w) in enumerate(zip(got_t, want_t, strict=True)):
        if g.shape != w.shape:
            return False, float("inf"), f"output {i}: shape {tuple(g.shape)}, want {tuple(w.shape)}"
        g64 = g.detach().to(device=w.device, dtype=torch.float64)
        if not torch.isfinite(g64).all():
            return False, float("inf"), f"output {i} has non-finite values"
        err = (g64 - w).abs()
        worst = max(worst, err.max().item() if err.numel() else 0.0)
        limit = tol * max(1.0, w.abs().max().item() if w.numel() else 0.0) + tol * w.abs()
        if (err > limit).any():
            n_bad = int((err > limit).sum())
            return False, worst, f"output {i}: {n_bad} elements beyond tolerance {tol:g}"
    return True, worst, ""
