"""Sweep points -> rows. Per point: build inputs once, compute the float64 truth once, then per
mode: gate each implementation, time the passing ones side by side, measure memory, append rows.

One failing point (OOM, error, unsupported device or dtype) becomes a row with its status and
message, and the sweep goes on. Rows are appended as they are measured; with resume, rows whose
key is already in results.csv are not measured again.

With timing.passes = P > 1 the runner sweeps the whole plan P times and pools each row's samples,
so that every row's median spans the whole run rather than the seconds one group takes: what
makes a CPU median repeat between runs on a VM whose speed drifts over minutes. Each pass gives a
group 1/P of the budget and max_reps; warm-up, the gate and input building are redone per pass
(inputs come from the same seed); memory and the tutorial's timing are measured in the last pass,
when an ok row is written. A row that fails in any pass is written then and not measured again.
After each pass but the last, the pooled samples are saved (pooled.json), and resume=true goes on
from the next pass.
"""

from __future__ import annotations

import gc
import importlib.util
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from tqdm import tqdm

from bench.calibrate import calibrate, copy_call
from bench.cases import CASES
from bench.config import DTYPES, Plan
from bench.gate import gate
from bench.memory import peak_bytes, peak_reserved_bytes
from bench.registry import Case, Impl, Point, as_tuple
from bench.results import ResultsWriter, row_key
from bench.timing import GRAPH_BELOW_MS, Timing, l2_flusher, measure_side_by_side

BYTES_FACTOR = {"forward": 1, "backward": 1, "forward+backward": 2}
COPY = "(copy)"  # the same-size copy in each side-by-side group; no impl name has parentheses
FLOPS_FACTOR = {"forward": 1, "backward": 2, "forward+backward": 3}


@dataclass
class Clock:
    """Wall time spent running implementations (gate, warm-up, samples, memory) vs the rest."""

    start: float = field(default_factory=time.perf_counter)
    work_s: float = 0.0  # implementations running: gate call, warm-up, samples, memory probe
    truth_s: float = 0.0  # float64 references for the gate (part of the overhead)
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
        or ("can't allocate memory" in text)
    )


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
        self.run_id, self.tutorial_timing, self.do_calibrate, self.seed = (
            run_id,
            tutorial_timing,
            do_calibrate,
            seed,
        )
        self.writer = ResultsWriter(self.out_dir / "results.csv")
        self._pooled_path = self.out_dir / "pooled.json"  # passes done so far (timing.passes)
        if not resume and (self.writer.existing or self._pooled_path.exists()):
            done = "results.csv has rows" if self.writer.existing else "pooled.json has samples"
            raise FileExistsError(f"{self.out_dir}/{done}: pass resume=true")
        self.clock = Clock()
        self.calibration: dict[tuple[str, str], dict] = {}
        self._flusher = None  # made on the first CUDA row
        self.done = 0
        self.passes = int(getattr(timing, "passes", 1))
        if self.passes < 1:
            raise ValueError(f"timing.passes must be >= 1, got {self.passes}")
        self._pass = 0  # the pass being run (0-based)
        self._pooled: dict[tuple, dict[str, list[float]]] = {}  # row key -> samples so far
        self._first_pass = self._load_pooled() if resume else 0

    # -- tasks ---------------------------------------------------------------------------------

    def _impls(self, case: Case) -> list[str]:
        names = list(case.impls)
        return [n for n in names if self.plan.impls is None or n in self.plan.impls]

    def total(self) -> int:
        n = 0
        for name in self.plan.cases:
            n += len(self._impls(CASES[name])) * len(self.plan.modes)
        return n * len(self.plan.points) * len(self.plan.dtypes) * len(self.plan.devices)

    def run(self) -> dict:
        if self.timing.threads:
            torch.set_num_threads(self.timing.threads)
        # the bar counts (row, pass) steps: a row is written in its last pass
        bar = tqdm(total=self.total() * self.passes, disable=None, unit="row",
                   dynamic_ncols=True)  # fmt: skip
        self._bar = bar
        try:
            bar.update(self.total() * self._first_pass)
            for k in range(self._first_pass, self.passes):
                self._pass = k
                if self.passes > 1 and bar.disable:  # plain lines: rows come in the last pass
                    print(f"pass {self._pass + 1} of {self.passes}", flush=True)
                for device in self.plan.devices:
                    if device == "cuda" and not torch.cuda.is_available():
                        if self._pass == 0:
                            print("device=cuda: CUDA is not available on this machine; skipping it")
                        bar.update(self.total() // len(self.plan.devices))
                        continue
                    for case_name in self.plan.cases:
                        for dtype in self.plan.dtypes:
                            for point in self.plan.points:
                                self._point(CASES[case_name], point, torch.device(device), dtype)
                if k < self.passes - 1:
                    self._save_pooled(passes_done=k + 1)
            self._pooled_path.unlink(missing_ok=True)  # every row is in results.csv now
        finally:
            bar.close()
            self.writer.close()
        summary = dict(self.clock.summary(), passes=self.passes)
        (self.out_dir / "timing_summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        return summary

    def _save_pooled(self, passes_done: int) -> None:
        """The samples of rows not yet written, after a whole pass: an interrupted multi-pass run
        resumes (resume=true) at the next pass instead of losing them. Written to a temporary
        file, then renamed, so an interruption never leaves half a file."""
        rows = [[list(key), p["row"], p["copy"]] for key, p in self._pooled.items()]
        state = {"passes": self.passes, "passes_done": passes_done, "rows": rows}
        tmp = self._pooled_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state))
        tmp.replace(self._pooled_path)

    def _load_pooled(self) -> int:
        """-> the first pass to run, with the saved samples back in self._pooled (0: none)."""
        if not self._pooled_path.exists():
            return 0
        state = json.loads(self._pooled_path.read_text())
        if state["passes"] != self.passes:
            saved = state["passes"]
            raise ValueError(f"timing.passes={self.passes}, but {self._pooled_path} was saved "
                             f"by a run with timing.passes={saved}: resume with that")  # fmt: skip
        for key, row, copy in state["rows"]:
            self._pooled[tuple(key)] = {"row": row, "copy": copy}
        return state["passes_done"]

    def _base(self, case: Case, impl: str, mode: str, point: Point, device, dtype: str) -> dict:
        name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
        return dict(
            run_id=self.run_id,
            case=case.name,
            level=case.level,
            impl=impl,
            mode=mode,
            device=device.type,
            device_name=name,
            dtype=dtype,
            batch=point.batch,
            seq_len=point.seq_len,
            d_model=point.d_model,
            num_heads=point.num_heads,
            head_dim=point.head_dim,
            params=json.dumps({}),
            threads=torch.get_num_threads(),
            timestamp=time.strftime("%Y-%m-%dT%H:%M:%S"),
        )

    def _emit(self, row: dict) -> None:
        self.writer.append(row)
        self._pooled.pop(row_key(row), None)  # written: its samples are no longer pending
        self.done += 1
        self._bar.update(1)
        if self._bar.disable:  # CI and pipes: one plain line per row
            ms = f"{row['p50_ms']:.3f} ms" if row.get("p50_ms") is not None else ""
            print(
                f"[{self.done}/{self.total()}] {row['case']} {row['impl']} {row['mode']} "
                f"{row['device']} {row['dtype']} B={row['batch']} L={row['seq_len']} "
                f"d={row['d_model']} H={row['num_heads']}: {row['status']} {ms} "
                f"{row.get('message', '')}".rstrip(),
                flush=True,
            )

    def _point(self, case: Case, point: Point, device: torch.device, dtype_name: str) -> None:
        impls = self._impls(case)
        keys = [
            (impl, mode, self._base(case, impl, mode, point, device, dtype_name))
            for impl in impls
            for mode in self.plan.modes
        ]
        todo = [(i, m, b) for i, m, b in keys if row_key(b) not in self.writer.existing]
        self._bar.update(len(keys) - len(todo))
        if not todo:
            return
        reason = case.check(point)
        if reason:
            for _, _, base in todo:
                self._emit(dict(base, status="skipped", message=reason))
            return
        dtype = DTYPES[dtype_name]
        torch.manual_seed(self.seed)
        try:
            inputs = case.build(point, device, dtype)
            rows_checked = _rows_checked(case, point, device)
            t0 = time.perf_counter()
            with torch.no_grad():
                truth = case.reference(_select(inputs, case, rows_checked))
            self.clock.truth_s += time.perf_counter() - t0
        except Exception as exc:  # the point itself does not fit: every row says so
            status = "oom" if _is_oom(exc) else "error"
            for _, _, base in todo:
                self._emit(dict(base, status=status, message=_message(exc)))
            return
        calib = self._calibration(device, dtype)
        for mode in self.plan.modes:
            group = [(impl, dict(base, **calib)) for impl, m, base in todo if m == mode]
            self._group(case, group, mode, point, inputs, truth, device, dtype, rows_checked)
        del inputs, truth
        gc.collect()  # once per point: tens of ms with torch loaded
        if device.type == "cuda":
            torch.cuda.empty_cache()

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

    # -- one row -------------------------------------------------------------------------------

    def _group(self, case, group, mode, point, inputs, truth, device, dtype, rows_checked):
        """The implementations of one point and mode: each gated, then the passing ones timed
        side by side (bench.timing.measure_side_by_side), so that a slow phase of the machine
        lands on all of them and their speedups stay honest; `backward` mode, whose calls each
        keep a forward graph alive, times one implementation at a time. With timing.copy_ref, a
        copy of the row's modelled bytes joins each group: `copy_ms` and `pct_copy_bw`, the
        row's bandwidth against a copy timed in the same window (and, on CUDA, the same cold
        L2). Then memory."""
        leaves = [inputs[name] for name in case.grad_inputs]
        for t in leaves:
            t.requires_grad_(mode != "forward")
        ready = []  # (row, fn, err, impl) that passed the gate
        for impl_name, row in group:
            impl = case.impls[impl_name]
            try:
                gated = self._gate(case, impl, mode, inputs, truth, device, dtype, rows_checked)
            except NotImplementedError as exc:  # the implementation does not support this
                gated = {"status": "skipped", "message": _message(exc)}
            except Exception as exc:
                gated = {"status": "oom" if _is_oom(exc) else "error", "message": _message(exc)}
            if isinstance(gated, dict):
                self._emit(dict(row, **gated))
            else:
                ready.append((row, *gated, impl))
        batches = [ready] if mode != "backward" else [[r] for r in ready]
        for batch in batches:
            calls = {}  # made per batch: a backward call holds its forward graph
            for row, fn, _err, _impl in batch:
                try:
                    calls[row["impl"]] = timed_call(fn, mode)
                except Exception as exc:
                    calls[row["impl"]] = exc
            fns = {name: c for name, c in calls.items() if not isinstance(c, Exception)}
            tm, passes = self.timing, self.passes
            if tm.copy_ref and fns:
                copy = copy_call(case.bytes_moved(point, dtype) * BYTES_FACTOR[mode], device)
                fns.update({COPY: copy} if copy is not None else {})
            t0 = time.perf_counter()
            timings = measure_side_by_side(
                fns,
                device,
                before_each=self._flush(device),
                warmup_s=tm.warmup_s,
                min_reps=-(-tm.min_reps // passes),  # this pass's share, rounded up
                max_reps=-(-tm.max_reps // passes),
                budget_s=tm.budget_s / passes,
                rel_spread=tm.rel_spread,
                rel_ci=tm.rel_ci,
                graph_below_ms=GRAPH_BELOW_MS if mode == "forward" else None,
            )
            self.clock.work_s += time.perf_counter() - t0
            copy_t = timings.pop(COPY, None)
            fns = copy = None  # the copy's buffers go before memory is probed
            if device.type == "cuda" and copy_t is not None:
                torch.cuda.empty_cache()  # nor stay in the reserved pool that the probe reads
            last = self._pass == passes - 1
            for row, fn, err, impl in batch:
                call, t = calls[row["impl"]], timings.get(row["impl"])
                try:
                    for failed in (call, t):
                        if isinstance(failed, Exception):
                            raise failed
                    t, copy_t_row = self._pool(row, t, copy_t)
                    if not last:  # an ok row is written in the last pass, with all its samples
                        self._bar.update(1)
                        continue
                    row.update(self._finish(case, impl, mode, point, fn, call, err, t, device,
                                            dtype))  # fmt: skip
                    if isinstance(copy_t_row, Timing):
                        row.update(copy_ms=copy_t_row.p50, pct_copy_bw=100 * copy_t_row.p50 / t.p50)
                except Exception as exc:
                    row.update(status="oom" if _is_oom(exc) else "error", message=_message(exc))
                self._emit(row)
        for t in leaves:
            t.requires_grad_(False)
            t.grad = None

    def _pool(self, row: dict, t: Timing, copy_t) -> tuple[Timing, Timing | None]:
        """This pass's samples of the row (and of its group's copy) added to its earlier passes'
        -> the pooled Timings. With one pass, t and copy_t as they are."""
        if self.passes == 1:
            return t, copy_t if isinstance(copy_t, Timing) else None
        pooled = self._pooled.setdefault(row_key(row), {"row": [], "copy": []})
        pooled["row"].extend(t.samples_ms)
        if isinstance(copy_t, Timing):
            pooled["copy"].extend(copy_t.samples_ms)
        method = getattr(copy_t, "method", t.method)
        copy = Timing(tuple(pooled["copy"]), method) if pooled["copy"] else None
        return Timing(tuple(pooled["row"]), t.method), copy

    def _gate(self, case: Case, impl: Impl, mode: str, inputs, truth, device, dtype,
              rows_checked):  # fmt: skip
        """-> a finished row's fields (skipped, wrong), or (fn, max error)."""
        if device.type not in impl.devices:
            return {"status": "skipped", "message": f"runs on {', '.join(impl.devices)} only"}
        if impl.needs and importlib.util.find_spec(impl.needs) is None:
            return {"status": "skipped", "message": f"{impl.needs} is not installed"}
        if mode != "forward" and (not impl.grad or not case.grad_inputs):
            return {"status": "skipped", "message": "no backward for this implementation"}
        t0 = time.perf_counter()
        fn = impl.make(inputs)
        with torch.no_grad():
            got = fn()
        t1 = time.perf_counter()
        with torch.no_grad():
            sliced = _select(inputs, case, rows_checked)
            want = truth if impl.reference is None else impl.reference(sliced)
        if rows_checked is not None:
            got = tuple(o.index_select(0, rows_checked) for o in as_tuple(got))
        passed, err, why = gate(got, want, dtype)
        self.clock.work_s += t1 - t0
        self.clock.truth_s += time.perf_counter() - t1
        if not passed:
            why = f"{why}; {impl.note}".strip("; ")
            return {"status": "wrong", "max_abs_err": err, "message": why}
        return fn, err

    def _finish(self, case, impl, mode, point, fn, call, err, t, device, dtype) -> dict:
        """A timed row's fields: times, GB/s and TFLOP/s (and % of the calibration), memory."""
        t0 = time.perf_counter()
        peak = reserved = None  # see Impl.compiled
        if device.type == "cuda" or not impl.compiled:
            try:
                peak = peak_bytes(call, device)
                reserved = peak_reserved_bytes(device)
            except Exception:  # a probe that cannot follow an op leaves the column empty
                peak = None
        row = {"tutorial_ms_per_100": self._tutorial_ms(fn) if mode == "forward" else None}
        self.clock.work_s += time.perf_counter() - t0
        moved = case.bytes_moved(point, dtype) * BYTES_FACTOR[mode]
        flops = case.flops(point) * FLOPS_FACTOR[mode]
        gbps, tflops = moved / (t.p50 * 1e-3) / 1e9, flops / (t.p50 * 1e-3) / 1e12
        calib = self._calibration(device, dtype)
        row.update(
            p20_ms=t.p20,
            p50_ms=t.p50,
            p80_ms=t.p80,
            p50_ci_lo_ms=(ci := t.median_ci())[0],
            p50_ci_hi_ms=ci[1],
            n_samples=t.n,
            gbps=gbps,
            tflops=tflops,
            pct_peak_bw=100 * gbps / calib["calib_copy_gbps"] if calib else None,
            pct_peak_flops=100 * tflops / calib["calib_matmul_tflops"] if calib and flops else None,
            peak_mem_bytes=peak,
            peak_reserved_bytes=reserved,
            max_abs_err=err,
            status="ok",
            message="; ".join(m for m in (
                "" if impl.reference is None else "own semantics",
                impl.note,
                "timed via CUDA graph (warm L2)" if t.method == "cuda_graph" else "",
            ) if m),
        )  # fmt: skip
        return row

    def _tutorial_ms(self, fn) -> float | None:
        """Section 5.2's way: wall clock around 100 calls, no warm-up, no device sync."""
        if not self.tutorial_timing:
            return None
        start = time.time()
        for _ in range(100):
            with torch.no_grad():
                fn()
        return (time.time() - start) * 1000


def timed_call(fn, mode: str):
    """The zero-argument call that `mode` times: forward under no_grad; backward on a graph
    built once here (outside the timed region); or forward then backward."""
    if mode == "forward":

        def forward():
            with torch.no_grad():
                return fn()

        return forward
    outs = [o for o in as_tuple(fn()) if o.requires_grad]
    if not outs:
        raise RuntimeError("no output requires grad: cannot time backward")
    grads = [torch.randn_like(o) for o in outs]
    if mode == "backward":  # the forward graph is built once, outside the timed region
        return lambda: torch.autograd.backward(outs, grads, retain_graph=True)

    def forward_backward():
        torch.autograd.backward([o for o in as_tuple(fn()) if o.requires_grad], grads)

    return forward_backward


def _rows_checked(case: Case, point: Point, device) -> torch.Tensor | None:
    """The sequences the gate checks: first and last (None: all of them)."""
    if not case.batched or point.batch <= 2:
        return None
    return torch.tensor([0, point.batch - 1], device=device)


def _select(inputs: dict, case: Case, rows: torch.Tensor | None) -> dict:
    if rows is None:
        return inputs
    return {k: v.index_select(0, rows) if k in case.batched else v for k, v in inputs.items()}


def _message(exc: BaseException) -> str:
    first = (str(exc).strip().splitlines() or [""])[0]
    return f"{type(exc).__name__}: {first}"[:300]
