"""One point of the plan, measured: its inputs built once; per mode, the float64 truth (outputs,
and in the backward modes the gradients), every implementation checked against it (the case's
baseline first: its error in the row's dtype is the others' bound, bench/run/check.py), the
passing ones timed side by side with a same-size copy, and each row finished (metrics, memory)
or failed, with a message that says which part failed (building the inputs, the truth, the
check, the timing).

A check (bench/run/verify.py) ends in a Checked (the call may be timed) or a Finished (the row
is decided: skipped, wrong, error, oom). This module never writes a row: it hands each to the
runner (emit).
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from bench.registry import Status
from bench.results import row_key
from bench.run import check, machine, share
from bench.run.calibrate import Calibrations, copy_call
from bench.run.memory import inputs_too_big, peak_bytes, peak_reserved_bytes
from bench.run.metrics import row_metrics
from bench.run.passes import Pool
from bench.run.samples import Timing
from bench.run.tasks import Task, timed_call
from bench.run.timing import GRAPH_BELOW_MS, Budget, l2_flusher, measure_side_by_side
from bench.run.verify import (
    Checker,
    Finished,
    Guard,
    PointState,
    message_of,
    rows_checked,
    status_of,
)

COPY = "(copy)"  # the same-size copy in each side-by-side group; no impl name has parentheses


@dataclass
class Clock:
    """Wall time spent running implementations (check, warm-up, samples, memory) vs the rest."""

    start: float = field(default_factory=time.perf_counter)
    work_s: float = 0.0  # implementations running: check call, warm-up, samples, memory probe
    truth_s: float = 0.0  # float64 truths for the check (part of the overhead)
    calib_s: float = 0.0  # copy and matmul calibration (part of the overhead)

    def summary(self) -> dict:
        wall = time.perf_counter() - self.start
        return {
            "wall_s": wall,
            "work_s": self.work_s,
            "truth_s": self.truth_s,
            "calib_s": self.calib_s,
            "overhead_pct": 100 * (1 - self.work_s / wall),
        }


class Measurer:
    """The measurement state of one run (timing options, the pooled passes, calibrations, the
    L2 flusher, the monitor of other processes) and one point's check-then-time; the check is
    its Checker's, the row time limits its Guard's (both passed what they use)."""

    def __init__(
        self,
        timing,
        pool: Pool,
        *,
        clock: Clock,
        calibrations: Calibrations,
        monitor: machine.Monitor,
        guard: Guard,
        now: Callable[[], float],
        emit: Callable,
        advance: Callable,
        seed: int = 0,
        tutorial_timing: bool = False,
    ):
        self.timing, self.pool, self.seed = timing, pool, seed
        self.passes = pool.passes
        self.tutorial_timing = tutorial_timing
        self.emit, self.advance = emit, advance  # a finished row; a pass of a row done
        self.clock, self.calibrations, self.monitor = clock, calibrations, monitor
        self.guard = guard  # row time limits (bench/run/watchdog.py)
        self.now = now  # the timer's clock (tests pass a fake one)
        self._flusher = None  # made on the first CUDA row
        self.checker = Checker(seed, pool, clock, guard)

    def point(self, todo: list[Task], rows: dict, pass_index: int = 0) -> None:
        """Measures the tasks of one point (each with its row's identity fields in rows) in
        pass pass_index of the run's passes, emitting every row."""
        first = todo[0]
        case, point, device, dtype = first.case, first.point, first.device, first.dtype
        reason = case.check(point)
        if reason:
            for t in todo:
                self.emit(t, dict(rows[t], status=Status.SKIPPED, message=reason))
            return
        big = inputs_too_big(case, point, device, dtype)
        if big:  # counted with the wrong rows: what was asked for was not measured
            for t in todo:
                self.emit(t, dict(rows[t], status=Status.OOM, message=f"not built: {big}"))
            return
        torch.manual_seed(self.seed)
        pairs = [(t, rows[t]) for t in todo]
        try:
            limit = self.guard.limit_s(rows[first])
            with self.guard.watch.phase(pairs, "building the inputs", limit):
                inputs = case.build(point, device, dtype)
            state = PointState(case, inputs, rows_checked(case, point, device))
        except Exception as exc:  # the point itself does not fit: every row says so
            for t in todo:
                self.emit(
                    t,
                    dict(
                        rows[t],
                        status=status_of(exc),
                        message=message_of(exc, "building the inputs"),
                    ),
                )
            return
        calib = self.calibrations.of(device, dtype)
        for mode in dict.fromkeys(t.mode for t in todo):
            group = [(t, dict(rows[t], **calib)) for t in todo if t.mode == mode]
            self._group(state, group, pass_index == self.passes - 1)
        del state
        gc.collect()  # once per point: ~1 ms, the run's imports frozen (Runner.run)
        if device.type == "cuda":
            torch.cuda.empty_cache()

    def _group(self, state: PointState, group: list[tuple[Task, dict]], last: bool) -> None:
        """The implementations of one point and mode: each checked (the baseline first), then
        the passing ones timed side by side (bench.run.timing.measure_side_by_side), so that a slow
        phase of the machine lands on all of them and their speedups stay honest; `backward`
        mode, whose calls each keep a forward graph alive, times one implementation at a time.
        With timing.copy_ref, a copy of the row's modelled bytes joins each group. last: the
        run's last pass (its rows are written; earlier passes pool their samples)."""
        case, mode = state.case, group[0][0].mode
        for name in case.grad_inputs:  # the leaves users would train
            for t in check.leaves(state.inputs, (name,)).values():
                t.requires_grad_(mode != "forward")
        group.sort(key=lambda tr: tr[0].impl != case.baseline)
        ready = []
        for task, row in group:
            try:
                with self.guard.watch.phase([(task, row)], "the check", self.guard.limit_s(row)):
                    checked = self.checker.check(state, task, row_key(row), group)
            except Exception as exc:  # building the call (a pass after the check)
                fields = {"status": status_of(exc), "message": message_of(exc, "the call")}
                checked = Finished(fields)
            if isinstance(checked, Finished):
                self.emit(task, dict(row, **checked.fields))
            else:
                call, leaves, fields = checked.call, checked.leaves, checked.fields
                self.pool.note_check(row_key(row), fields)
                ready.append((task, dict(row, **fields), call, leaves))
        batches = [ready] if mode != "backward" else [[r] for r in ready]
        for batch in filter(None, batches):
            self._time(batch, last)
        for t in check.leaves(state.inputs, case.grad_inputs).values():
            t.requires_grad_(False)

    def _time(self, batch: list, last: bool) -> None:
        """One side-by-side group: timed calls made (a backward call holds its forward graph),
        timed with the copy, then each row finished (metrics, memory) or failed."""
        task0 = batch[0][0]
        device, mode = task0.device, task0.mode
        calls = {}
        for task, _row, call, leaves in batch:
            try:
                calls[task.impl] = timed_call(call, leaves, mode, self.seed)
            except Exception as exc:
                calls[task.impl] = exc
        fns = {n: c for n, c in calls.items() if not isinstance(c, Exception)}
        cost = task0.case.cost(task0.point, task0.dtype, mode)
        tm, passes = self.timing, self.passes
        if tm.copy_ref and fns:
            copy = copy_call(cost.bytes, device)
            fns.update({COPY: copy} if copy is not None else {})
        t0 = time.perf_counter()
        pairs = [(task, row) for task, row, _call, _leaves in batch]
        limit = sum(self.guard.limit_s(row) for _task, row in pairs)
        with self.guard.watch.phase(pairs, "the timing", limit):
            timings = measure_side_by_side(
                fns,
                device,
                Budget.of(tm).per_pass(passes),
                before_each=self._flush(device),
                graph_below_ms=GRAPH_BELOW_MS if mode == "forward" else None,
                clock=self.now,
                monitor=self.monitor,
                running=self.guard.watch.running,
            )
        self.clock.work_s += time.perf_counter() - t0
        copy_t = timings.pop(COPY, None)
        copy_t = copy_t if isinstance(copy_t, Timing) else None
        fns = None  # the copy's buffers go before memory is probed
        if device.type == "cuda":
            torch.cuda.empty_cache()  # nor stay in the reserved pool that the probe reads
        pooled = {}  # impl -> (its samples over the passes, the copy's) or the exception
        for task, row, _call, _leaves in batch:
            try:
                for failed in (calls[task.impl], timings.get(task.impl)):
                    if isinstance(failed, Exception):
                        raise failed
                pooled[task.impl] = self.pool.add(row_key(row), timings[task.impl], copy_t)
            except Exception as exc:
                pooled[task.impl] = exc
        with self.guard.watch.phase(pairs, "the layer share's profile", limit):
            shares = self._shares(task0, pooled, calls) if last else {}
        for task, row, call, _leaves in batch:
            try:
                if isinstance(pooled[task.impl], Exception):
                    raise pooled[task.impl]
                t, copy_row = pooled[task.impl]
                if not last:  # an ok row is written in the last pass, with all its samples
                    self.advance(row_key(row), 1 / passes)
                    continue
                timed, note = calls[task.impl], row.get("message", "")
                unchecked = row.get("status") == Status.UNCHECKED  # the check said so
                limit = self.guard.limit_s(row)
                with self.guard.watch.phase([(task, row)], "the memory probe", limit):
                    row.update(self._finish(task, call, timed, t, copy_row, note))
                row["status"] = Status.UNCHECKED if unchecked else row["status"]
                own = dict(shares.get(task.impl, {}))
                if note := own.pop("share_note", None):
                    row["message"] = "; ".join(filter(None, [row.get("message"), note]))
                row.update(own)
            except Exception as exc:
                row.update(status=status_of(exc), message=message_of(exc, "timing"))
            self.emit(task, row)

    def _shares(self, task: Task, pooled: dict, calls: dict) -> dict:
        """The positional encoding's share of each row (bench/run/share.py) when the case has a
        share_base and it was timed in this group; its profile is taken after the timing."""
        base = task.case.share_base
        if base is None:
            return {}
        timings = {n: p[0] for n, p in pooled.items() if not isinstance(p, Exception)}
        fns = {n: calls[n] for n in timings}
        t0 = time.perf_counter()
        try:
            calls_n = min(share.PROFILE_CALLS, self.timing.min_reps)  # no more than timed
            partners = task.case.share_partners
            return share.group_shares(base, partners, timings, fns, task.mode, task.device, calls_n)
        finally:
            self.clock.work_s += time.perf_counter() - t0

    def _finish(
        self, task: Task, call, timed, t: Timing, copy_t: Timing | None, note: str = ""
    ) -> dict:
        """A timed row's fields: times, derived rates, memory, status and notes (`note`: the
        check's, e.g. that the truth did not fit)."""
        t0 = time.perf_counter()
        peak = reserved = None  # see Impl.compiled
        if task.device.type == "cuda" or not task.spec.compiled:
            try:
                peak = peak_bytes(timed, task.device)
                reserved = peak_reserved_bytes(task.device)
            except Exception:  # a probe that cannot follow an op leaves the column empty
                peak = None
        encoder = task.mode == "forward" and task.case.level == "encoder"  # section 5.2's scope
        tutorial = self._tutorial_ms(call.fn) if encoder else None
        self.clock.work_s += time.perf_counter() - t0
        cost = task.case.cost(task.point, task.dtype, task.mode)
        row = row_metrics(
            cost, t, self.calibrations.of(task.device, task.dtype), copy_t, torch.get_num_threads()
        )
        notes = [
            note,
            task.spec.note,
            "own semantics" if task.spec.reference else "",
            "timed via CUDA graph (warm L2)" if t.method == "cuda_graph" else "",
        ]
        return dict(
            row,
            peak_mem_bytes=peak,
            peak_reserved_bytes=reserved,
            status=Status.OK,
            tutorial_ms_per_100=tutorial,
            message="; ".join(m for m in notes if m),
        )

    def _flush(self, device):
        """A cold-L2 flush before each CUDA sample (bench.run.timing.l2_flusher), made once."""
        if device.type != "cuda":
            return None
        if self._flusher is None:
            self._flusher = l2_flusher(device)
        return self._flusher

    def _tutorial_ms(self, fn) -> float | None:
        """Section 5.2's way: wall clock around 100 calls, no warm-up, no device sync."""
        if not self.tutorial_timing:
            return None
        start = time.time()
        for _ in range(100):
            with torch.no_grad():
                fn()
        return (time.time() - start) * 1000
