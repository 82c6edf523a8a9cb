"""One task's check against the float64 truth, before any timing (the gate rule itself is
bench/run/check.py): the truth computed once per point and mode, the baseline checked first in
each mode (its error in the row's dtype bounds the others'), a row that cannot run (device,
package, backward, knob, memory) decided without a call. A Checker is given what it uses (the
seed, the pooled passes, the clock, the Guard of row time limits) by bench/run/point.py's
Measurer; the outcome helpers (status_of, message_of) are the run core's."""

from __future__ import annotations

import importlib.util
import os
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from bench.registry import Call, Case, Point, Status
from bench.run import check, memory
from bench.run.tasks import Task, leaves_of, make_call, run_for_check
from bench.run.watchdog import NoWatchdog


def _is_oom(exc: BaseException) -> bool:
    text = str(exc).lower()
    return (
        isinstance(exc, torch.OutOfMemoryError)
        or "out of memory" in text
        or "can't allocate memory" in text
    )


def without_frames(exc: BaseException) -> BaseException:
    """exc with its traceback, and those of the exceptions it chains, dropped: kept for the
    rest of the point, a traceback would keep its frames' tensors alive (a float64 truth that
    ran out of memory would hold what it had allocated, and the rows after it would fail)."""
    e, seen = exc, set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        e.__traceback__ = None
        e = e.__cause__ or e.__context__
    return exc


def status_of(exc: BaseException) -> str:
    return Status.OOM if _is_oom(exc) else Status.ERROR


def message_of(exc: BaseException, part: str = "") -> str:
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


@dataclass
class Checked:
    """A task that passed its check (or could not be checked, and says so): timed next."""

    call: Call
    leaves: dict[str, torch.Tensor]
    fields: dict  # the row's check fields: max_abs_err, err_ratio, a message


@dataclass
class Finished:
    """A task decided without timing: its row's fields (status, message, errors)."""

    fields: dict


@dataclass
class Guard:
    """Row time limits and the watchdog that enforces them (bench/run/watchdog.py), shared by
    the check and the timing: `limit_s(row)` a row's seconds, `watch.phase(rows, what,
    limit)` a part of the work bounded by it. The command line swaps in a real watchdog."""

    watch: object = field(default_factory=NoWatchdog)
    limit_s: Callable[[dict], float] = lambda row: float("inf")


class Checker:
    """One task's check (module docstring), with its collaborators passed in."""

    def __init__(self, seed: int, pool, clock, guard: Guard):
        self.seed, self.pool, self.clock, self.guard = seed, pool, clock, guard

    def check(self, state: PointState, task: Task, key: tuple, in_flight: list) -> object:
        """Checked (may be timed) or Finished (decided) for the task; in_flight: the (task,
        row) of its group, whose rows a stuck truth times out."""
        return self._check(state, task, key, in_flight)

    def _too_big(self, task: Task) -> str | None:
        """An eager call whose (B, H, L, L) tensors would not fit in this device's memory."""
        holds = task.spec.holds * (2 if task.grad else 1)
        if not holds or task.case.level not in ("attention", "layer"):
            return None
        need = holds * memory.scores_bytes(task.point, task.dtype.itemsize)
        return memory.too_big(need, task.device, f"its (B, H, L, L) scores ({holds} at once)")

    def _truth(self, state: PointState, task: Task, own: bool, in_flight: list):
        """The float64 truth for the task's mode (the impl's own semantics if `own`), computed
        once per point; an exception when it could not be (the truth's OOM, not the impl's)."""
        ref = task.spec.reference if own else None
        key = (ref, task.grad)
        if key not in state.truths:
            t0 = time.perf_counter()
            holds = state.case.truth_holds * (2 if task.grad else 1)
            rows = None if state.rows is None else len(state.rows)
            need = holds * memory.scores_bytes(task.point, 8, rows)
            # its float64 copies of the inputs and output (and their gradients)
            copies = state.case.cost(task.point, task.dtype, "forward").bytes
            need += copies * (8 // task.dtype.itemsize) * (2 if task.grad else 1)
            big = memory.too_big(need, task.device, "the float64 truth")
            try:
                if big:
                    raise MemoryError(big)
                # the case's truth stands for every row of the group; an impl's own, its row's
                rows = [p for p in in_flight if p[0] is task] if ref else in_flight
                limit = self.guard.limit_s(rows[0][1]) if rows else float("inf")
                with self.guard.watch.phase(rows, "the float64 truth", limit):
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
                state.truths[key] = without_frames(exc)
            self.clock.truth_s += time.perf_counter() - t0
        return state.truths[key]

    def _check(self, state: PointState, task: Task, key: tuple, in_flight: list):
        """-> (Call, leaves, check fields) of a task that may be timed, or a finished row's
        fields (skipped, wrong, error, oom). The case's baseline is checked first in each mode:
        its errors bound the others' (bench/run/check.py). A row an earlier pass checked is not
        checked again (bench/run/passes.py)."""
        spec, dev = task.spec, task.device.type
        if dev not in spec.devices:
            hint = f"; {spec.elsewhere}" if spec.elsewhere else ""
            return Finished(
                {
                    "status": Status.SKIPPED,
                    "message": f"runs on {', '.join(spec.devices)} only{hint}",
                }
            )
        if spec.needs and importlib.util.find_spec(spec.needs) is None:
            return Finished(
                {"status": Status.SKIPPED, "message": f"needs {spec.needs} (not installed)"}
            )
        if task.grad and (not spec.grad or not state.case.grad_inputs):
            return Finished(
                {"status": Status.SKIPPED, "message": "no backward for this implementation"}
            )
        why = spec.supports(task.point)
        if task.mode == "backward" and spec.compiled:
            why = (
                "torch.compile donates the forward's buffers to its backward, which therefore "
                "cannot be repeated alone: see forward+backward"
            )
        why = why or self._too_big(task)
        if why:
            return Finished({"status": Status.SKIPPED, "message": why})
        earlier = self.pool.checked(key) if key else None
        if earlier is not None:
            call = make_call(task, state.inputs)
            return Checked(call, leaves_of(call, state.inputs, state.case), earlier)
        truth = self._truth(state, task, spec.reference is not None, in_flight)
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
            return Finished({"status": Status.SKIPPED, "message": message_of(exc)})
        except Exception as exc:
            status, message = status_of(exc), message_of(exc, "the check's call")
            return Finished({"status": status, "message": message})
        finally:
            self.clock.work_s += time.perf_counter() - t0
        if isinstance(truth, Exception):  # timed, and its row unchecked, never ok
            msg = message_of(truth, "not checked: the float64 truth failed")
            return Checked(call, leaves, {"status": Status.UNCHECKED, "message": msg})
        errs = check.measure_errors(out, truth, grads, state.rows, state.case.batched)
        if isinstance(errs, str):
            return Finished({"status": Status.WRONG, "max_abs_err": float("inf"), "message": errs})
        ref = None
        if task.impl != state.case.baseline:
            ref = self._ref_errors(state, task, in_flight)
        passed, ratio, why = check.verdict(errs, ref, task.dtype)
        fields = {"max_abs_err": errs.worst, "err_ratio": ratio}
        said = _own_warnings(caught)
        if said:  # e.g. a kernel that fell back to smaller tiles: the row says so
            fields["message"] = said
        if not passed:
            return Finished(
                {"status": Status.WRONG, **fields, "message": f"{why}; {spec.note}".strip("; ")}
            )
        if task.impl == state.case.baseline:
            state.ref_errors[task.mode] = errs
        return Checked(call, leaves, fields)

    def _ref_errors(self, state: PointState, task: Task, in_flight: list) -> check.Errors | None:
        """The baseline's errors in this mode (checked now if it is not in the group)."""
        if task.mode not in state.ref_errors:
            base = Task(
                task.case, task.case.baseline, task.mode, task.point, task.device, task.dtype
            )
            got = self._check(state, base, (), in_flight)
            state.ref_errors.setdefault(task.mode, None)  # did not run: the fixed tolerance
            del got
        return state.ref_errors[task.mode]


def _own_warnings(caught) -> str:
    """What this project's kernels and references warned during the check (tile fallbacks),
    one line; torch's own notices are left out."""
    ours = {
        str(w.message).splitlines()[0]
        for w in caught
        if any(os.sep + pkg + os.sep in w.filename for pkg in ("posenc_kernels", "posenc"))
    }
    return "; ".join(sorted(ours))[:300]


def _outputs(call) -> tuple:
    from bench.registry import as_tuple

    with torch.no_grad():
        return as_tuple(call.fn())


def rows_checked(case: Case, point: Point, device) -> torch.Tensor | None:
    """The sequences the check compares: first and last (None: all of them)."""
    if not case.batched or point.batch <= 2:
        return None
    return torch.tensor([0, point.batch - 1], device=device)
