"""Plan -> rows: the plan swept point by point (bench/run/point.py measures each), every row
appended to results.csv as it is measured (bench/results.py), progress printed as it goes
(bench/run/progress.py).

One failing point becomes rows with their status and the sweep goes on. With resume, rows whose
key is already in results.csv are not measured again. With timing.passes = P > 1 the plan is
swept P times and each row's samples pooled (bench/run/passes.py); an ok row is written in the
last pass.
"""

from __future__ import annotations

import contextlib
import gc
import json
import threading
import time
from pathlib import Path

import torch

from bench.cases import CASES
from bench.plans import Entry, Plan
from bench.registry import DTYPES, Status
from bench.results import ResultsWriter, row_key
from bench.run import heap, machine
from bench.run.calibrate import Calibrations
from bench.run.eta import Eta, call_seconds, row_seconds, timed_rows
from bench.run.passes import Pool
from bench.run.point import Clock, Measurer
from bench.run.progress import Progress, clock
from bench.run.tasks import Task
from bench.run.verify import Guard

IN_FLIGHT = ".in_flight"  # the point being measured; gone when its rows are written

# Dynamo's limits during a run. Every compiled implementation compiles one code object per point
# and mode (static shapes: bench/cases/_common.py), so a sweep passes Dynamo's default of 8
# recompiles per code object (FlexAttention over 3 families x 2 causal x 2 modes is 12), after
# which Dynamo would silently run the frame eagerly and the rows would time eager code under a
# compiled name. Raised here, and a hit raises, so it becomes the row's error.
RECOMPILE_LIMIT = 512
ROW_LIMIT_BASE_S = 120.0  # a row's time limit: this plus 20x its modelled time (compiles: here)


def _dynamo_limits(plan: Plan):
    """Dynamo's recompile limits raised for the run, when an implementation it runs is
    compiled (Impl.compiled); else nothing (importing Dynamo alone takes over a second)."""
    if not any(CASES[e.case].impls[i].compiled for e in plan.entries for i in e.impls):
        return contextlib.nullcontext()
    import torch._dynamo

    wanted = dict(
        recompile_limit=RECOMPILE_LIMIT,
        accumulated_recompile_limit=4 * RECOMPILE_LIMIT,
        fail_on_recompile_limit_hit=True,
    )
    known = {k: v for k, v in wanted.items() if hasattr(torch._dynamo.config, k)}
    return torch._dynamo.config.patch(**known)


class Runner:
    def __init__(
        self,
        plan: Plan,
        timing,
        out_dir: Path,
        *,
        run_id: str,
        resume: bool = False,
        tutorial_timing: bool = False,
        do_calibrate: bool = True,
        seed: int = 0,
        retry=(),
    ):
        self.plan, self.timing, self.out_dir, self.run_id = plan, timing, Path(out_dir), run_id
        self.passes = int(getattr(timing, "passes", 1))
        if self.passes < 1:
            raise ValueError(f"timing.passes must be >= 1, got {self.passes}")
        self.writer = ResultsWriter(self.out_dir / "results.csv", retry=retry)
        if self.writer.set_aside:
            print(self.writer.set_aside, flush=True)
        self.pool = Pool(self.out_dir / "pooled.json", self.passes)
        if not resume and (self.writer.existing or self.pool.exists()):
            done = "results.csv has rows" if self.writer.existing else "pooled.json has samples"
            raise FileExistsError(f"{self.out_dir}/{done}: pass resume=true")
        self._first_pass = self.pool.load() if resume else 0
        self.devices = [d for d in plan.devices if d != "cuda" or torch.cuda.is_available()]
        self.done = 0  # rows written by this run
        self._total = plan.rows(tuple(self.devices))
        self.now = time.perf_counter  # the timer's and the progress line's clock
        self.clock = Clock()
        self.calibrations = Calibrations(do_calibrate, self.clock)
        self.monitor = machine.Monitor()  # what other processes take, around each group
        self.guard = Guard(limit_s=self.limit_s)
        self.measure = Measurer(
            timing,
            self.pool,
            clock=self.clock,
            calibrations=self.calibrations,
            monitor=self.monitor,
            guard=self.guard,
            now=lambda: self.now(),
            emit=self._emit,
            advance=self._advance,
            seed=seed,
            tutorial_timing=tutorial_timing,
        )
        self.progress: Progress | None = None
        self._lock = threading.Lock()  # rows come from the watchdog's thread too
        self._predicted: dict = {}  # row key -> modelled seconds (its time limit)

    def set_watchdog(self, watch) -> None:
        """The watchdog that enforces the rows' time limits (the command line's restart on a
        stuck row, bench/__main__.py)."""
        self.guard.watch = watch

    def total(self) -> int:
        """Rows this plan makes on this machine (a device it lacks is left out)."""
        return self._total

    def run(self) -> dict:
        threads = torch.get_num_threads()
        # What is loaded before the sweep (torch, Hydra, the cases: ~200k objects) is set aside
        # from the collector for the run: each point's gc.collect (bench/run/point.py) then
        # scans what the run made since, ~1 ms, where it scanned everything, 0.1-0.2 s.
        gc.collect()  # garbage first, so that none is frozen
        gc.freeze()
        try:
            return self._run()
        finally:
            gc.unfreeze()
            torch.set_num_threads(threads)  # the caller's, as it was

    def _run(self) -> dict:
        self._machine()
        if "cuda" in self.plan.devices and "cuda" not in self.devices:
            print("device=cuda: CUDA is not available on this machine; skipping it", flush=True)
        already = sum(1 for _ in self.writer.existing)
        vanished = self.out_dir / IN_FLIGHT
        if vanished.exists():  # a kill -9, the OOM killer, an implementation's os._exit
            print(
                f"note: the run before ended, with nothing said, while measuring "
                f"{vanished.read_text().strip()}; its rows before that are kept, and that "
                "point is measured again",
                flush=True,
            )
            vanished.unlink()
        eta = self._predict()
        self._predicted = eta.predicted
        print(
            f"{self.total() - already} rows to measure ({already} already in results.csv) on "
            f"{', '.join(self.devices) or 'no device'}: about {clock(eta.total())} by "
            "the model (the budget and each call's bytes and FLOPs at this machine's measured "
            "rates; compiles and eager code take longer: the progress line corrects for "
            "them)",
            flush=True,
        )
        self.progress = Progress(self.total() * self.passes, eta, self.now)
        try:
            with _dynamo_limits(self.plan):
                self._passes()
        finally:
            self.progress.close()
            self.writer.close()
        summary = dict(self.clock.summary(), passes=self.passes, rows_before=already)
        if self.calibrations.notes:
            summary["calibration_notes"] = self.calibrations.notes
        (self.out_dir / "timing_summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        return summary

    def _machine(self) -> None:
        """The thread count (timing.threads: auto, a number, or null for torch's default), and
        a warning when other processes already hold the CPU."""
        n, others = machine.cores(), machine.others_now()
        self.monitor.mark()  # the first group's window starts here
        threads = self.timing.threads
        if threads == "auto":
            threads = machine.auto_threads(n, others)
        if threads:
            torch.set_num_threads(int(threads))
        busy = "" if others is None else f"; other processes use {others:.2f} of them"
        if "cpu" in self.devices:
            print(heap.apply(self.timing.cpu_heap), flush=True)
        print(
            f"CPU: {n} cores{busy}; timing with {torch.get_num_threads()} thread(s) "
            f"(timing.threads={self.timing.threads})",
            flush=True,
        )
        if torch.get_num_threads() > n:
            print(
                f"note: timing.threads={self.timing.threads} is more than the {n} cores: "
                "threads wait for one another, so rows read slower than the machine is",
                flush=True,
            )
        half = [
            d for e in self.plan.entries if "cpu" in e.devices for d in e.dtypes if d != "float32"
        ]
        if half and "cpu" in self.devices:
            print(
                f"note: {', '.join(dict.fromkeys(half))} on the CPU: rows time torch's CPU "
                "kernels for that dtype, as fast as float32's only where the CPU has "
                f"half-precision units (this one's capability: "
                f"{torch.backends.cpu.get_cpu_capability()}); the float64 truths still run",
                flush=True,
            )
        if others is not None and others > machine.CONTENDED_CORES:
            print(
                f"warning: the machine is busy ({others:.2f} cores taken by other processes): "
                "rows timed while others take over "
                f"{machine.CONTENDED_CORES} of a core are marked contended",
                flush=True,
            )

    def _predict(self) -> Eta:
        """Each row still to measure, at its predicted seconds (bench/run/eta.py)."""
        predicted = {}
        for case, impl, point, mode, device, dtype in timed_rows(self.plan, tuple(self.devices)):
            task = Task(case, impl, mode, point, torch.device(device), DTYPES[dtype])
            key = row_key(task.row(self.run_id))
            if key in self.writer.existing:
                continue
            cost = case.cost(point, DTYPES[dtype], mode)
            call = call_seconds(cost, self.calibrations.of(task.device, task.dtype))
            predicted[key] = row_seconds(call, self.timing, self.passes)
        return Eta(predicted, self.now())

    def _passes(self) -> None:
        self.progress.step(self.total() * self._first_pass)
        for k in range(self._first_pass, self.passes):
            if self.passes > 1 and self.progress.plain:  # plain lines: rows come at the end
                print(f"pass {k + 1} of {self.passes}", flush=True)
            self._sweep(k)
            if k < self.passes - 1:
                self.pool.save(passes_done=k + 1)
        self.pool.finish()

    def _sweep(self, pass_index: int) -> None:
        for entry in self.plan.entries:
            for device in self._devices(entry):
                for dtype in entry.dtypes:
                    for point in entry.points:
                        self._point(entry, point, torch.device(device), DTYPES[dtype], pass_index)

    def _devices(self, entry: Entry) -> list[str]:
        return [d for d in entry.devices if d in self.devices]

    def _point(self, entry: Entry, point, device, dtype, pass_index: int) -> None:
        case = CASES[entry.case]
        tasks = [
            Task(case, impl, mode, point, device, dtype)
            for mode in entry.modes
            for impl in entry.impls
        ]
        rows = {t: t.row(self.run_id) for t in tasks}
        todo = [t for t in tasks if row_key(rows[t]) not in self.writer.existing]
        self.progress.step(len(tasks) - len(todo))
        if todo:
            marker = self.out_dir / IN_FLIGHT  # what the process measures, for a resume to name
            marker.write_text(f"{entry.case} {point.label()} {device.type} {dtype}\n")
            try:
                self.measure.point(todo, rows, pass_index)
            finally:  # Ctrl-C and errors are said; only a process that vanished leaves it
                marker.unlink(missing_ok=True)

    def limit_s(self, row: dict) -> float:
        """A row's time limit (bench/run/watchdog.py): timing.row_limit_s, or 120 s plus 20
        times the row's modelled seconds (its warm-up, samples and check calls)."""
        fixed = getattr(self.timing, "row_limit_s", None)
        if fixed is not None:
            return float(fixed)
        return ROW_LIMIT_BASE_S + 20 * self._predicted.get(row_key(row), 0.0)

    def timed_out(self, rows: list, what: str, limit_s: float) -> None:
        """The rows in flight past their limit, written as `timeout` (from the watchdog)."""
        for task, row in rows:
            message = f"no result within {limit_s:.0f} s (timing.row_limit_s): stuck in {what}"
            self._emit(task, dict(row, status=Status.TIMEOUT, message=message))

    def _emit(self, task: Task, row: dict) -> None:
        with self._lock:
            if row_key(row) in self.writer.existing:  # written already: timed out
                return
            self.writer.append(row)
            self.pool.written(row_key(row))
            self.progress.eta.advance(row_key(row))
            self.done += 1
            self.progress.row(len(self.writer.existing), self.total(), task, row)

    def _advance(self, key: tuple, fraction: float) -> None:
        """A row's pass done (written in the last one)."""
        self.progress.eta.advance(key, fraction)
        self.progress.step()
