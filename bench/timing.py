"""Timers: warm-up by time, device sync, many repeats, quantiles. Setup is never timed.

`fn` is a zero-argument closure over inputs built beforehand.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Timing:
    samples_ms: tuple[float, ...]

    @property
    def n(self) -> int:
        return len(self.samples_ms)

    def quantile(self, q: float) -> float:
        return statistics.quantiles(self.samples_ms, n=100, method="inclusive")[round(q * 100) - 1]

    @property
    def p20(self) -> float:
        return self.quantile(0.2)

    @property
    def p50(self) -> float:
        return statistics.median(self.samples_ms)

    @property
    def p80(self) -> float:
        return self.quantile(0.8)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure(
    fn: Callable[[], object],
    device: torch.device | str = "cpu",
    *,
    warmup_s: float = 0.2,
    min_reps: int = 10,
    max_reps: int = 200,
    budget_s: float = 2.0,
    clock: Callable[[], float] = time.perf_counter,
) -> Timing:
    """Per-call times in ms after warm-up; stops at max_reps or when budget_s has passed
    (but never before min_reps). On CUDA each call is bracketed by events on the stream."""
    device = torch.device(device)
    start = clock()
    while True:  # at least one call: compiles, allocator, caches
        fn()
        _sync(device)
        if clock() - start >= warmup_s:
            break
    samples: list[float] = []
    deadline = clock() + budget_s
    while len(samples) < max_reps and (len(samples) < min_reps or clock() < deadline):
        if device.type == "cuda":
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            begin.record()
            fn()
            end.record()
            end.synchronize()
            samples.append(begin.elapsed_time(end))
        else:
            t0 = clock()
            fn()
            samples.append((clock() - t0) * 1e3)
    return Timing(tuple(samples))
