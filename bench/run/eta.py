"""How long a run will take, from what will run: its rows, each one's timing settings, and its
call's time modelled from its bytes and FLOPs at the copy and matmul rates this machine
measured (bench/run/calibrate.py). The model is a lower bound for a call (an eager implementation
moves and computes more than the minimum the cost model counts), so the progress line corrects
it by what the finished rows took against what they were predicted to take.
"""

from __future__ import annotations

from collections.abc import Iterator

CHECK_CALLS = 2  # the check's call of the row and (once per mode) of the baseline


def timed_rows(plan, devices: tuple[str, ...] | None = None) -> Iterator[tuple]:
    """(case, impl name, point, mode, device, dtype) of every row the runner would time: the
    rows that are not skipped for a point, device, mode or knob the implementation lacks."""
    from bench.cases import CASES

    for entry in plan.entries:
        case = CASES[entry.case]
        for device in entry.devices:
            if devices is not None and device not in devices:
                continue
            for dtype in entry.dtypes:
                for point in entry.points:
                    if case.check(point):
                        continue
                    for mode in entry.modes:
                        for name in entry.impls:
                            impl = case.impls[name]
                            if device not in impl.devices or impl.supports(point):
                                continue
                            if mode != "forward" and (not impl.grad or not case.grad_inputs):
                                continue
                            if mode == "backward" and impl.compiled:
                                continue
                            yield case, name, point, mode, device, dtype


def call_seconds(cost, calib: dict | None) -> float:
    """The least time a call can take on this machine: its bytes at the measured copy rate or
    its FLOPs at the measured matmul rate, whichever is longer (0 without a calibration)."""
    if not calib:
        return 0.0
    moved = cost.bytes / (calib["calib_copy_gbps"] * 1e9) if cost.bytes else 0.0
    computed = cost.flops / (calib["calib_matmul_tflops"] * 1e12) if cost.flops else 0.0
    return max(moved, computed)


def row_seconds(call_s: float, timing, passes: int = 1) -> float:
    """One row over the whole run: its warm-up (at least one call) and samples (the budget,
    but at least min_reps calls) in every pass, its share of the copy timed in its group, and
    the check's calls in the first pass."""
    warm = max(timing.warmup_s, call_s)
    samples = max(timing.budget_s / passes, -(-timing.min_reps // passes) * call_s)
    copy = (timing.warmup_s + timing.budget_s / passes) / 4 if timing.copy_ref else 0.0
    return passes * (warm + samples + copy) + CHECK_CALLS * call_s


class Eta:
    """The time left: what the rows still to run were predicted to take, scaled by what the
    finished work took over what was predicted for it (with passes, a row is finished a pass
    at a time)."""

    def __init__(self, predicted: dict, start: float):
        self.predicted, self.start = dict(predicted), start  # row key -> seconds
        self.fraction = dict.fromkeys(predicted, 0.0)
        self.done_s, self.rest_s = 0.0, sum(predicted.values())

    def total(self) -> float:
        return sum(self.predicted.values())

    def advance(self, key, fraction: float = 1.0) -> None:
        if key not in self.fraction:
            return
        step = min(fraction, 1.0 - self.fraction[key])
        self.fraction[key] += step
        self.done_s += step * self.predicted[key]
        self.rest_s -= step * self.predicted[key]

    def left(self, now: float) -> float:
        if self.done_s <= 0:
            return max(0.0, self.rest_s)
        return max(0.0, self.rest_s) * (now - self.start) / self.done_s
