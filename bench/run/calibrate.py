"""What this device achieves, measured in the same run: copy bandwidth and matmul rate.

Every row's GB/s and TFLOP/s are divided by these to give % of (measured) peak; no hardware
peak is hard-coded. Copy: dst.copy_(src) of 64 MiB (CPU) or 1 GiB (CUDA), counted as read +
write. Matmul: an n x n product in the row's dtype, the best rate of n = 512, 1024 and 2048
(CPU: which size runs fastest depends on the cache and the thread count) or n = 8192 (CUDA).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from bench.run.timing import Budget, measure


def calibrate(device: torch.device, dtype: torch.dtype, budget_s: float = 0.5) -> dict:
    cuda = device.type == "cuda"
    n_copy = (1 << 30 if cuda else 1 << 26) // dtype.itemsize
    src = torch.randn(n_copy, device=device).to(dtype)
    dst = torch.empty_like(src)
    t_copy = measure(
        lambda: dst.copy_(src), device, budget=Budget(warmup_s=0.05, min_reps=5, budget_s=budget_s)
    )
    rates = []
    for n in (8192,) if cuda else (512, 1024, 2048):
        a = torch.randn(n, n, device=device).to(dtype)
        b = torch.randn(n, n, device=device).to(dtype)
        t_mm = measure(
            lambda a=a, b=b: a @ b,
            device,
            budget=Budget(warmup_s=0.05, min_reps=3, budget_s=budget_s),
        )
        rates.append(2 * n**3 / (t_mm.p50 * 1e-3) / 1e12)
    return {
        "calib_copy_gbps": 2 * src.numel() * src.element_size() / (t_copy.p50 * 1e-3) / 1e9,
        "calib_matmul_tflops": max(rates),
    }


def copy_call(n_bytes: int, device: torch.device) -> Callable[[], object] | None:
    """dst.copy_(src) that moves n_bytes in all (half read, half written): the copy the runner
    times side by side with the implementations of each point and mode, so that a row's
    `pct_copy_bw` compares it with a same-size copy measured under the same machine phase (a
    calibration made once per run drifts with a shared machine's speed). None when there is
    nothing to copy or the buffers do not fit."""
    n = n_bytes // 8  # float32 elements per buffer
    if n < 1:
        return None
    try:
        src = torch.ones(n, device=device)
        dst = torch.empty_like(src)
    except Exception:  # out of memory: the row keeps its other columns
        return None
    return lambda: dst.copy_(src)
