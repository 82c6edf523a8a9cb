"""A timed row's derived columns, as pure functions of its cost model, its timing and the run's
calibration: GB/s and TFLOP/s from the case's per-mode bytes and FLOPs, as % of the copy
bandwidth and matmul rate measured in the same run, and as % of a same-size copy timed in the
same side-by-side group."""

from __future__ import annotations

from bench.registry import Cost
from bench.run import machine
from bench.run.samples import Timing


def contended(t: Timing, threads: int) -> bool:
    """Measured while others held the CPU: they took more than machine.CONTENDED_CORES cores on
    average, or (host timing) this process's threads got under half a core each."""
    if t.others_cpu is not None and t.others_cpu > machine.CONTENDED_CORES:
        return True
    return t.cpu_util is not None and t.cpu_util < 0.5 * max(1, threads)


def row_metrics(
    cost: Cost, t: Timing, calib: dict, copy_t: Timing | None, threads: int = 1
) -> dict:
    seconds = t.p50 * 1e-3
    gbps = cost.bytes / seconds / 1e9 if cost.bytes and seconds > 0 else None
    tflops = cost.flops / seconds / 1e12 if cost.flops and seconds > 0 else None
    lo, hi = t.median_ci()
    row = dict(
        p20_ms=t.p20,
        p50_ms=t.p50,
        p80_ms=t.p80,
        p50_ci_lo_ms=lo,
        p50_ci_hi_ms=hi,
        n_samples=t.n,
        gbps=gbps,
        tflops=tflops,
        bytes_moved=cost.bytes,
        flops=cost.flops,
        timing_method=t.method,
        cpu_util=t.cpu_util,
        first_call_ms=t.first_ms,
        others_cpu=t.others_cpu,
        wall_ms=t.wall_ms,
        gpu_held=t.gpu_held,
        contended=contended(t, threads),
        pct_peak_bw=100 * gbps / calib["calib_copy_gbps"] if calib and gbps else None,
        pct_peak_flops=100 * tflops / calib["calib_matmul_tflops"] if calib and tflops else None,
    )
    if cost.tokens and seconds > 0:
        row["tokens_per_s"] = cost.tokens / seconds
    if copy_t is not None and t.p50 > 0:
        row.update(copy_ms=copy_t.p50, pct_copy_bw=100 * copy_t.p50 / t.p50)
    return row
