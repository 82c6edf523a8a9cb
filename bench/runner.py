"""Plan -> rows. Per point: build the inputs once; per mode: compute the float64 truth (outputs,
and in the backward modes the gradients), check every implementation against it (the case's
reference first: its error in the row's dtype is the others' bound, bench/check.py), time the
passing ones side by side with a same-size copy, measure memory, append the rows.

One failing point (OOM, error, unsupported device or dtype) becomes rows with their status and
a message that says which part failed (building the inputs, the truth, the check, the timing),
and the sweep goes on. Rows are appended as they are measured; with resume, rows whose key is
already in results.csv are not measured again. With timing.passes = P > 1 the plan is swept P
times and each row's samples pooled (bench/passes.py); an ok row is written in the last pass.
"""

from __future__ import annotations

import gc
import importlib.util
import json
import os
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import torch
from tqdm import tqdm

from bench import check, machine, memory
from bench.calibrate import calibrate, copy_call
from bench.cases import CASES
from bench.config import DTYPES, Entry, Plan
from bench.eta import Eta, call_seconds, row_seconds, timed_rows
from bench.memory import peak_bytes, peak_reserved_bytes
from bench.metrics import row_metrics
from bench.passes import Pool
from bench.registry import Case, Point
from bench.results import ResultsWriter, row_key
from bench.tasks import Task, leaves_of, make_call, run_for_check, timed_call
from bench.timing import GRAPH_BELOW_MS, Timing, l2_flusher, measure_side_by_side

COPY = "(copy)"  # the same-size copy in each side-by-side group; no impl name has parentheses
# Dynamo's limits during a run. Every compiled implementation compiles one code object per point
# and mode (static shapes: bench/cases/_common.py), so a sweep passes Dynamo's default of 8
# recompiles per code object (FlexAttention over 3 families x 2 causal x 2 modes is 12), after
# which Dynamo would silently run the frame eagerly and the rows would time eager code under a
# compiled name. Raised here, and a hit raises, so it becomes the row's error.
RECOMPILE_LIMIT = 512


def _dynamo_limits():
    import torch._dynamo

    wanted = dict(
        recompile_limit=RECOMPILE_LIMIT,
        accumulated_recompile_limit=4 * RECOMPILE_LIMIT,
        fail_on_recompile_limit_hit=True,
    )
    known = {k: v for k, v in wanted.items() if hasattr(torch._dynamo.config, k)}
    return torch._dynamo.config.patch(**known)


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


def _is_oom(exc: BaseException) -> bool:
    text = str(exc).lower()
    return (
        isinstance(exc, torch.OutOfMemoryError)
        or "out of memory" in text
        or "can't allocate memory" in text
    )


def _status(exc: BaseException) -> str:
    return "oom" if _is_oom(exc) else "error"


def _message(exc: BaseException, part: str = "") -> str:
    first = (str(exc).strip().splitlines() or [""])[0]
    return f"{part}{': ' if part else ''}{type(exc).__name__}: {first}"[:300]


@dataclass
class PointState:
    """What the groups of one point share: inputs, checked rows, truths, the bound's errors."""

    case: Case
    inputs: dict
    rows: torch.Tensor | None
    truths: dict = field(default_factory=dict)  # (impl reference or None, grad) -> Truth | exc
    ref_errors: dict = field(default_factory=dict)  # mode -> check.Errors | None


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
    ):
        self.plan, self.timing, self.out_dir = plan, timing, Path(out_dir)
        self.run_id, self.tutorial_timing = run_id, tutorial_timing
        self.do_calibrate, self.seed = do_calibrate, seed
        self.passes = int(getattr(timing, "passes", 1))
        if self.passes < 1:
            raise ValueError(f"timing.passes must be >= 1, got {self.passes}")
        self.writer = ResultsWriter(self.out_dir / "results.csv")
        self.pool = Pool(self.out_dir / "pooled.json", self.passes)
        if not resume and (self.writer.existing or self.pool.exists()):
            done = "results.csv has rows" if self.writer.existing else "pooled.json has samples"
            raise FileExistsError(f"{self.out_dir}/{done}: pass resume=true")
        self.clock = Clock()
        self.calibration: dict[tuple[str, str], dict] = {}
        self._flusher = None  # made on the first CUDA row
        self._pass = 0
        self._first_pass = self.pool.load() if resume else 0
        self.devices = [d for d in plan.devices if d != "cuda" or torch.cuda.is_available()]
        self.done = 0  # rows written by this run
        self._total = plan.rows(tuple(self.devices))
        self.now = time.perf_counter  # the clock of the timing and the progress line
        self.monitor = machine.Monitor()  # what other processes take, around each group
        self.eta: Eta | None = None

    def _devices(self, entry: Entry) -> list[str]:
        return [d for d in entry.devices if d in self.devices]

    def total(self) -> int:
        """Rows this plan makes on this machine (a device it lacks is left out)."""
        return self._total

    # -- the plan ------------------------------------------------------------------------------

    def run(self) -> dict:
        threads = torch.get_num_threads()
        try:
            return self._run()
        finally:
            torch.set_num_threads(threads)  # the caller's, as it was

    def _run(self) -> dict:
        self._machine()
        if "cuda" in self.plan.devices and "cuda" not in self.devices:
            print("device=cuda: CUDA is not available on this machine; skipping it", flush=True)
        already = sum(1 for _ in self.writer.existing)
        self.eta = self._predict()
        print(
            f"{self.total() - already} rows to measure ({already} already in results.csv) on "
            f"{', '.join(self.devices) or 'no device'}: about {_clock(self.eta.total())} by "
            "the model (the budget and each call's bytes and FLOPs at this machine's measured "
            "rates; compiles and eager code take longer: the progress line corrects for "
            "them)",
            flush=True,
        )
        self._bar = tqdm(
            total=self.total() * self.passes, disable=None, unit="row", dynamic_ncols=True
        )
        try:
            with _dynamo_limits():
                self._passes()
        finally:
            self._bar.close()
            self.writer.close()
        summary = dict(self.clock.summary(), passes=self.passes, rows_before=already)
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
        print(
            f"CPU: {n} cores{busy}; timing with {torch.get_num_threads()} thread(s) "
            f"(timing.threads={self.timing.threads})",
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
        """Each row still to measure, at its predicted seconds (bench/eta.py)."""
        predicted = {}
        for case, impl, point, mode, device, dtype in timed_rows(self.plan, tuple(self.devices)):
            task = Task(case, impl, mode, point, torch.device(device), DTYPES[dtype])
            key = row_key(task.row(self.run_id))
            if key in self.writer.existing:
                continue
            cost = case.cost(point, DTYPES[dtype], mode)
            call = call_seconds(cost, self._calibration(task.device, task.dtype))
            predicted[key] = row_seconds(call, self.timing, self.passes)
        return Eta(predicted, self.now())

    def _passes(self) -> None:
        self._bar.update(self.total() * self._first_pass)
        for k in range(self._first_pass, self.passes):
            self._pass = k
            if self.passes > 1 and self._bar.disable:  # plain lines: rows come at the end
                print(f"pass {k + 1} of {self.passes}", flush=True)
            self._sweep()
            if k < self.passes - 1:
                self.pool.save(passes_done=k + 1)
        self.pool.finish()

    def _sweep(self) -> None:
        for entry in self.plan.entries:
            case = CASES[entry.case]
            for device in self._devices(entry):
                for dtype in entry.dtypes:
                    for point in entry.points:
                        tasks = [
                            Task(case, impl, mode, point, torch.device(device), DTYPES[dtype])
                            for mode in entry.modes
                            for impl in entry.impls
                        ]
                        self._point(tasks)

    def _emit(self, task: Task, row: dict) -> None:
        self.writer.append(row)
        self.pool.written(row_key(row))
        self.eta.advance(row_key(row))
        self.done += 1
        self._bar.update(1)
        if self._bar.disable:  # CI and pipes: one plain line per row, with the time left
            ms = f"{row['p50_ms']:.3f} ms" if row.get("p50_ms") is not None else ""
            count = len(self.writer.existing)
            elapsed = self.now() - self.eta.start
            left = self.eta.left(self.now())
            print(
                f"[{count}/{self.total()}, {_clock(elapsed)} in, ~{_clock(left)} left] "
                f"{row['case']} {row['impl']} {row['mode']} "
                f"{row['device']} {row['dtype']} {task.point.label(task.case.knobs)}: "
                f"{row['status']} {ms} {row.get('message', '')}".rstrip(),
                flush=True,
            )

    # -- one point -----------------------------------------------------------------------------

    def _point(self, tasks: list[Task]) -> None:
        rows = {t: t.row(self.run_id) for t in tasks}
        todo = [t for t in tasks if row_key(rows[t]) not in self.writer.existing]
        self._bar.update(len(tasks) - len(todo))
        if not todo:
            return
        first = todo[0]
        case, point, device, dtype = first.case, first.point, first.device, first.dtype
        reason = case.check(point)
        if reason:
            for t in todo:
                self._emit(t, dict(rows[t], status="skipped", message=reason))
            return
        torch.manual_seed(self.seed)
        try:
            state = PointState(
                case, case.build(point, device, dtype), _rows_checked(case, point, device)
            )
        except Exception as exc:  # the point itself does not fit: every row says so
            for t in todo:
                self._emit(
                    t,
                    dict(
                        rows[t], status=_status(exc), message=_message(exc, "building the inputs")
                    ),
                )
            return
        calib = self._calibration(device, dtype)
        for mode in dict.fromkeys(t.mode for t in todo):
            group = [(t, dict(rows[t], **calib)) for t in todo if t.mode == mode]
            self._group(state, group)
        del state
        gc.collect()  # once per point: tens of ms with torch loaded
        if device.type == "cuda":
            torch.cuda.empty_cache()

    def _too_big(self, task: Task) -> str | None:
        """An eager call whose (B, H, L, L) tensors would not fit in this device's memory."""
        holds = task.spec.holds * (2 if task.grad else 1)
        if not holds or task.case.level != "attention":
            return None
        need = holds * memory.scores_bytes(task.point, task.dtype.itemsize)
        return memory.too_big(need, task.device, f"its (B, H, L, L) scores ({holds} at once)")

    def _truth(self, state: PointState, task: Task, own: bool):
        """The float64 truth for the task's mode (the impl's own semantics if `own`), computed
        once per point; an exception when it could not be (the truth's OOM, not the impl's)."""
        ref = task.spec.reference if own else None
        key = (ref, task.grad)
        if key not in state.truths:
            t0 = time.perf_counter()
            holds = state.case.truth_holds * (2 if task.grad else 1)
            rows = None if state.rows is None else len(state.rows)
            need = holds * memory.scores_bytes(task.point, 8, rows)
            big = holds and memory.too_big(need, task.device, "the float64 truth")
            try:
                if big:
                    raise MemoryError(big)
                state.truths[key] = check.truth(
                    ref or state.case.reference,
                    state.inputs,
                    state.case,
                    state.rows,
                    task.point.batch,
                    task.dtype,
                    task.grad,
                    self.seed,
                )
            except Exception as exc:
                state.truths[key] = exc
            self.clock.truth_s += time.perf_counter() - t0
        return state.truths[key]

    def _check(self, state: PointState, task: Task, key: tuple = ()):
        """-> (Call, leaves, check fields) of a task that may be timed, or a finished row's
        fields (skipped, wrong, error, oom). The case's baseline is checked first in each mode:
        its errors bound the others' (bench/check.py). A row an earlier pass checked is not
        checked again (bench/passes.py)."""
        spec, dev = task.spec, task.device.type
        if dev not in spec.devices:
            hint = f"; {spec.elsewhere}" if spec.elsewhere else ""
            return {"status": "skipped", "message": f"runs on {', '.join(spec.devices)} only{hint}"}
        if spec.needs and importlib.util.find_spec(spec.needs) is None:
            return {"status": "skipped", "message": f"{spec.needs} is not installed"}
        if task.grad and (not spec.grad or not state.case.grad_inputs):
            return {"status": "skipped", "message": "no backward for this implementation"}
        why = spec.supports(task.point)
        if task.mode == "backward" and spec.compiled:
            why = (
                "torch.compile donates the forward's buffers to its backward, which therefore "
                "cannot be repeated alone: see forward+backward"
            )
        why = why or self._too_big(task)
        if why:
            return {"status": "skipped", "message": why}
        earlier = self.pool.checked(key) if key else None
        if earlier is not None:
            call = make_call(task, state.inputs)
            return call, leaves_of(call, state.inputs, state.case), earlier
        truth = self._truth(state, task, own=spec.reference is not None)
        t0 = time.perf_counter()
        try:
            call = make_call(task, state.inputs)
            leaves = leaves_of(call, state.inputs, state.case)
            up = None if isinstance(truth, Exception) else truth.upstream
            if task.grad and up is None:  # no truth: any upstream of the right shape will do
                up = tuple(torch.ones_like(o) for o in _outputs(call))
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                out, grads = run_for_check(call, leaves, task.grad, up)
        except NotImplementedError as exc:  # the implementation does not support this
            return {"status": "skipped", "message": _message(exc)}
        except Exception as exc:
            return {"status": _status(exc), "message": _message(exc, "the check's call")}
        finally:
            self.clock.work_s += time.perf_counter() - t0
        if isinstance(truth, Exception):  # timed, and said to be unchecked
            msg = _message(truth, "not checked: the float64 truth failed")
            return call, leaves, {"message": msg}
        errs = check.measure_errors(out, truth, grads, state.rows, state.case.batched)
        if isinstance(errs, str):
            return {"status": "wrong", "max_abs_err": float("inf"), "message": errs}
        ref = None if task.impl == state.case.baseline else self._ref_errors(state, task)
        passed, ratio, why = check.verdict(errs, ref, task.dtype)
        fields = {"max_abs_err": errs.worst, "err_ratio": ratio}
        said = _own_warnings(caught)
        if said:  # e.g. a kernel that fell back to smaller tiles: the row says so
            fields["message"] = said
        if not passed:
            return {"status": "wrong", **fields, "message": f"{why}; {spec.note}".strip("; ")}
        if task.impl == state.case.baseline:
            state.ref_errors[task.mode] = errs
        return call, leaves, fields

    def _ref_errors(self, state: PointState, task: Task) -> check.Errors | None:
        """The baseline's errors in this mode (checked now if it is not in the group)."""
        if task.mode not in state.ref_errors:
            base = Task(
                task.case, task.case.baseline, task.mode, task.point, task.device, task.dtype
            )
            got = self._check(state, base)
            state.ref_errors.setdefault(task.mode, None)  # did not run: the fixed tolerance
            del got
        return state.ref_errors[task.mode]

    def _group(self, state: PointState, group: list[tuple[Task, dict]]) -> None:
        """The implementations of one point and mode: each checked (the baseline first), then
        the passing ones timed side by side (bench.timing.measure_side_by_side), so that a slow
        phase of the machine lands on all of them and their speedups stay honest; `backward`
        mode, whose calls each keep a forward graph alive, times one implementation at a time.
        With timing.copy_ref, a copy of the row's modelled bytes joins each group."""
        case, mode = state.case, group[0][0].mode
        for name in case.grad_inputs:  # the leaves users would train
            for t in check.leaves(state.inputs, (name,)).values():
                t.requires_grad_(mode != "forward")
        group.sort(key=lambda tr: tr[0].impl != case.baseline)
        ready = []
        for task, row in group:
            try:
                checked = self._check(state, task, row_key(row))
            except Exception as exc:  # building the call (a pass after the check)
                checked = {"status": _status(exc), "message": _message(exc, "the call")}
            if isinstance(checked, dict):
                self._emit(task, dict(row, **checked))
            else:
                call, leaves, fields = checked
                self.pool.note_check(row_key(row), fields)
                ready.append((task, dict(row, **fields), call, leaves))
        batches = [ready] if mode != "backward" else [[r] for r in ready]
        for batch in filter(None, batches):
            self._time(batch)
        for t in check.leaves(state.inputs, case.grad_inputs).values():
            t.requires_grad_(False)

    def _time(self, batch: list) -> None:
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
        timings = measure_side_by_side(
            fns,
            device,
            before_each=self._flush(device),
            warmup_s=tm.warmup_s,
            min_reps=-(-tm.min_reps // passes),
            max_reps=-(-tm.max_reps // passes),
            budget_s=tm.budget_s / passes,
            rel_spread=tm.rel_spread,
            rel_ci=tm.rel_ci,
            graph_below_ms=GRAPH_BELOW_MS if mode == "forward" else None,
            clock=self.now,
            monitor=self.monitor,
        )
        self.clock.work_s += time.perf_counter() - t0
        copy_t = timings.pop(COPY, None)
        copy_t = copy_t if isinstance(copy_t, Timing) else None
        fns = None  # the copy's buffers go before memory is probed
        if device.type == "cuda":
            torch.cuda.empty_cache()  # nor stay in the reserved pool that the probe reads
        last = self._pass == passes - 1
        for task, row, call, _leaves in batch:
            timed, t = calls[task.impl], timings.get(task.impl)
            try:
                for failed in (timed, t):
                    if isinstance(failed, Exception):
                        raise failed
                t, copy_row = self.pool.add(row_key(row), t, copy_t)
                if not last:  # an ok row is written in the last pass, with all its samples
                    self.eta.advance(row_key(row), 1 / passes)
                    self._bar.update(1)
                    continue
                row.update(self._finish(task, call, timed, t, copy_row, row.get("message", "")))
            except Exception as exc:
                row.update(status=_status(exc), message=_message(exc, "timing"))
            self._emit(task, row)

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
            cost, t, self._calibration(task.device, task.dtype), copy_t, torch.get_num_threads()
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
            status="ok",
            tutorial_ms_per_100=tutorial,
            message="; ".join(m for m in notes if m),
        )

    # -- helpers -------------------------------------------------------------------------------

    def _flush(self, device):
        """A cold-L2 flush before each CUDA sample (bench.timing.l2_flusher), made once."""
        if device.type != "cuda":
            return None
        if self._flusher is None:
            self._flusher = l2_flusher(device)
        return self._flusher

    def _calibration(self, device, dtype) -> dict:
        key = (str(device), str(dtype))
        if self.do_calibrate and key not in self.calibration:
            t0 = time.perf_counter()
            self.calibration[key] = calibrate(device, dtype)
            self.clock.calib_s += time.perf_counter() - t0
        return self.calibration.get(key, {})

    def _tutorial_ms(self, fn) -> float | None:
        """Section 5.2's way: wall clock around 100 calls, no warm-up, no device sync."""
        if not self.tutorial_timing:
            return None
        start = time.time()
        for _ in range(100):
            with torch.no_grad():
                fn()
        return (time.time() - start) * 1000


def _clock(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return (
        f"{minutes // 60}:{minutes % 60:02d}:{secs:02d}"
        if minutes >= 60
        else f"{minutes}:{secs:02d}"
    )


def _own_warnings(caught) -> str:
    """What this project's kernels and references warned during the check (tile fallbacks),
    one line; torch's own notices are left out."""
    ours = {
        str(w.message).splitlines()[0]
        for w in caught
        if os.sep + "kernels" + os.sep in w.filename or os.sep + "posenc" + os.sep in w.filename
    }
    return "; ".join(sorted(ours))[:300]


def _outputs(call) -> tuple:
    from bench.registry import as_tuple

    with torch.no_grad():
        return as_tuple(call.fn())


def _rows_checked(case: Case, point: Point, device) -> torch.Tensor | None:
    """The sequences the check compares: first and last (None: all of them)."""
    if not case.batched or point.batch <= 2:
        return None
    return torch.tensor([0, point.batch - 1], device=device)
