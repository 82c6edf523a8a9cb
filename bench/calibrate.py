"""What this device achieves, measured in the same run: copy bandwidth and matmul rate.

Every row's GB/s and TFLOP/s are divided by these to give % of (measured) peak; no hardware
peak is hard-coded. Copy: dst.copy_(src) of 64 MiB (CPU) or 1 GiB (CUDA), counted as read +
write. Matmul: an n x n product in the row's dtype, n = 1024 (CPU) or 8192 (CUDA).
"""

from __future__ import annotations

import torch

from bench.timing import measure


def calibrate(device: torch.device, dtype: torch.dtype, budget_s: float = 0.5) -> dict:
    cuda = device.type == "cuda"
    n_copy = (1 << 30 if cuda else 1 << 26) // dtype.itemsize
    src = torch.randn(n_copy, device=device).to(dtype)
    dst = torch.empty_like(src)
    t_copy = measure(lambda: dst.copy_(src), device, warmup_s=0.05, min_reps=5, budget_s=budget_s)
    n = 8192 if cuda else 1024
    a = torch.randn(n, n, device=device).to(dtype)
    b = torch.randn(n, n, device=device).to(dtype)
    t_mm = measure(lambda: a @ b, device, warmup_s=0.05, min_reps=3, budget_s=budget_s)
    return {
        "calib_copy_gbps": 2 * src.numel() * src.element_size() / (t_copy.p50 * 1e-3) / 1e9,
        "calib_matmul_tflops": 2 * n**3 / (t_mm.p50 * 1e-3) / 1e12,
    }
