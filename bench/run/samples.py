"""A row's samples and what is read off them: quantiles, the median's distribution-free 95%
interval, the spread, and what the machine did meanwhile."""

from __future__ import annotations

import functools
import math
import statistics
from dataclasses import dataclass


@dataclass(frozen=True)
class Timing:
    samples_ms: tuple[float, ...]
    method: str = "host"  # "host" (perf_counter), "events" (CUDA events), "cuda_graph"
    # the process's CPU time over the wall time of the samples (host timing only): about the
    # number of busy threads when the machine is free; well under 1 means another process took
    # the CPU while this row was timed (bench.report.build marks such rows)
    cpu_util: float | None = None
    # the first call of the warm-up, in ms: what a user pays once (compiles, autotuning, the
    # allocator's first blocks); the GPU run's part limits are estimated from it
    first_ms: float | None = None
    # cores' worth of CPU that other processes (and a VM's other guests) took while the group's
    # samples ran (bench/run/machine.py); above machine.CONTENDED_CORES the row is marked
    others_cpu: float | None = None
    # on CUDA, what a caller that waits for each call pays: the median wall time of a call
    # with one sync after it, the host's launch work included (timing.wall_ms); None on the
    # CPU, whose samples are wall time already
    wall_ms: float | None = None
    # on CUDA, what held the GPU's clocks down while the group was timed (gpu_state.Window):
    # NVML's reasons, comma-separated, "" for nothing; None where it was not read
    gpu_held: str | None = None

    @property
    def n(self) -> int:
        return len(self.samples_ms)

    def quantile(self, q: float) -> float:
        if self.n == 1:
            return self.samples_ms[0]
        return statistics.quantiles(self.samples_ms, n=100, method="inclusive")[round(q * 100) - 1]

    def median_ci(self, level: float = 0.95) -> tuple[float, float]:
        """A distribution-free confidence interval of the median: the order statistics
        (x_(k), x_(n+1-k)) with the largest k such that P(Binomial(n, 1/2) <= k - 1) <= (1 -
        level) / 2, so it covers the true median with probability >= level if the samples are
        independent (with n = 10: x_(2), x_(9)). Below 6 samples no k qualifies and it is
        (min, max). Samples of a machine whose speed drifts are not independent: run-to-run
        differences can exceed this interval (README, "Repeatability")."""
        xs, n = sorted(self.samples_ms), self.n
        k = _median_ci_rank(n, level)
        return (xs[0], xs[-1]) if k == 0 else (xs[k - 1], xs[n - k])

    @property
    def rel_ci(self) -> float:
        """The 95% interval of the median's larger half-width over the median."""
        lo, hi = self.median_ci()
        return max(self.p50 - lo, hi - self.p50) / self.p50 if self.p50 > 0 else 0.0

    @property
    def spread(self) -> float:
        """(p80 - p20) / p50: the relative width of the middle 60% of the samples."""
        return (self.p80 - self.p20) / self.p50 if self.p50 > 0 else 0.0

    @property
    def p20(self) -> float:
        return self.quantile(0.2)

    @property
    def p50(self) -> float:
        return statistics.median(self.samples_ms)

    @property
    def p80(self) -> float:
        return self.quantile(0.8)


@functools.lru_cache(maxsize=4096)
def _median_ci_rank(n: int, level: float) -> int:
    """The largest k with P(Binomial(n, 1/2) <= k - 1) <= (1 - level) / 2 (0: none). Cached:
    the stop rule asks again every 5 samples."""
    tail, cum, k = (1 - level) / 2, 0.0, 0
    while k < n // 2:
        log_pmf = math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)
        cum += math.exp(log_pmf - n * math.log(2))  # P(Binomial(n, 1/2) = k)
        if cum > tail:
            break
        k += 1
    return k
