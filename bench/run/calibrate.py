"""What this device achieves, measured in the same run: copy bandwidth and matmul rate.

Every row's GB/s and TFLOP/s are divided by these to give % of (measured) peak; no hardware
peak is hard-coded. Copy: dst.copy_(src) of 64 MiB (CPU) or 1 GiB (CUDA), counted as read +
write. Matmul: an n x n product in the row's dtype, the best rate of n = 256, 512, 1024 and 2048
(CPU: which size runs fastest depends on the cache and the thread count) or n = 8192 (CUDA).

Bounded in time on every device and dtype: the matrix stops growing once one product takes
more than CALL_S, and each size is timed within a budget, so that a dtype whose matmul this
device emulates (bfloat16 on a CPU without bf16 units: 20-100x slower than float32) costs
seconds, not minutes. Such a dtype is said so (`matmul_note`: env.json and the report), its
rate measured at the sizes that fit the bound.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from bench.run.timing import Budget, measure

CALL_S = 0.05  # one product longer than this: the matrix stops growing
EMULATED = 0.5  # a half-precision matmul at under half float32's rate has no units of its own


def calibrate(
    device: torch.device, dtype: torch.dtype, budget_s: float = 0.5, matmul=torch.matmul
) -> dict:
    """{"calib_copy_gbps", "calib_matmul_tflops"}: the row columns the % columns divide by."""
    cuda = device.type == "cuda"
    n_copy = (1 << 30 if cuda else 1 << 26) // dtype.itemsize
    src = torch.randn(n_copy, device=device).to(dtype)
    dst = torch.empty_like(src)
    t_copy = measure(
        lambda: dst.copy_(src), device, budget=Budget(warmup_s=0.05, min_reps=5, budget_s=budget_s)
    )
    return {
        "calib_copy_gbps": 2 * src.numel() * src.element_size() / (t_copy.p50 * 1e-3) / 1e9,
        "calib_matmul_tflops": matmul_rate(device, dtype, budget_s, matmul),
    }


def matmul_rate(device: torch.device, dtype: torch.dtype, budget_s: float, matmul) -> float:
    """The best TFLOP/s of n x n products, n growing until one product takes over CALL_S."""
    rates = []
    for n in (8192,) if device.type == "cuda" else (256, 512, 1024, 2048):
        a = torch.randn(n, n, device=device).to(dtype)
        b = torch.randn(n, n, device=device).to(dtype)
        start = time.perf_counter()
        matmul(a, b)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        once = time.perf_counter() - start
        if once > CALL_S and rates:  # this size alone would blow the bound
            break
        t_mm = measure(
            lambda a=a, b=b: matmul(a, b),
            device,
            budget=Budget(warmup_s=0.0, min_reps=1 if once > CALL_S else 3, budget_s=budget_s),
        )
        rates.append(2 * n**3 / (t_mm.p50 * 1e-3) / 1e12)
        if once > CALL_S:
            break
    return max(rates)


def matmul_note(calibration: dict, float32: dict | None, dtype: str) -> str | None:
    """A line where the dtype's matmul runs at under EMULATED of float32's on this device."""
    if not float32 or dtype == "float32" or not calibration:
        return None
    ratio = calibration["calib_matmul_tflops"] / float32["calib_matmul_tflops"]
    if ratio >= EMULATED:
        return None
    return (
        f"{dtype} matmul at {ratio:.2f}x float32's on this device: emulated (no {dtype} "
        "units), so its % of peak FLOP/s is against that slow rate"
    )


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


class Calibrations:
    """A run's copy and matmul rates per (device, dtype), measured once each (none when not
    enabled), and the notes they raise (a half-precision dtype this device emulates: env.json,
    the report). clock: where their seconds are counted (calib_s)."""

    def __init__(self, enabled: bool, clock):
        self.enabled, self.clock = enabled, clock
        self.rates: dict[tuple[str, str], dict] = {}
        self.notes: list[str] = []

    def of(self, device, dtype) -> dict:
        key = (str(device), str(dtype))
        if self.enabled and key not in self.rates:
            float32 = self.of(device, torch.float32) if dtype != torch.float32 else {}
            t0 = time.perf_counter()
            self.rates[key] = calibrate(device, dtype)
            if float32:  # a half-precision rate against float32's on the same device
                note = matmul_note(self.rates[key], float32, str(dtype).removeprefix("torch."))
                if note and note not in self.notes:
                    self.notes.append(note)
            self.clock.calib_s += time.perf_counter() - t0
        return self.rates.get(key, {})
