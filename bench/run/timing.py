"""Timers: warm-up by time, device sync, many repeats, quantiles. Setup is never timed.

`fn` is a zero-argument closure over inputs built beforehand.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from bench.run import gpu_state, machine
from bench.run.samples import Timing

GRAPH_BELOW_MS = 0.01  # CUDA calls shorter than 10 us are timed through a CUDA graph
LEAD_MAX_MS = 50.0  # the longest GPU spin put before a CUDA sample (see _lead_ms)


@dataclass(frozen=True)
class Budget:
    """When a call's sampling stops: the one object of timing options, from the config's
    `timing` (bench/config/schema.py) to the timer. Stops at max_reps, when budget_s has passed,
    or (with rel_spread) once the samples' (p80 - p20) / p50 is at most rel_spread, or (with
    rel_ci) once the median's 95% interval is within +-rel_ci of it; never before min_reps."""

    warmup_s: float = 0.2
    min_reps: int = 10
    max_reps: int = 200
    budget_s: float = 2.0
    rel_spread: float | None = None
    rel_ci: float | None = None

    @classmethod
    def of(cls, timing) -> Budget:
        """The budget of a config's `timing` (any object with these fields)."""
        return cls(**{f: getattr(timing, f) for f in cls.__dataclass_fields__})

    def per_pass(self, passes: int) -> Budget:
        """One pass's share when a run sweeps its plan `passes` times (bench/run/passes.py)."""
        return dataclasses.replace(
            self,
            budget_s=self.budget_s / passes,
            min_reps=-(-self.min_reps // passes),
            max_reps=-(-self.max_reps // passes),
        )


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure(
    fn: Callable[[], object],
    device: torch.device | str = "cpu",
    budget: Budget = Budget(),
    *,
    before_each: Callable[[], object] | None = None,
    clock: Callable[[], float] = time.perf_counter,
    graph_below_ms: float | None = None,
) -> Timing:
    """Per-call times in ms after warm-up, until the budget says stop (Budget).
    On CUDA each call is bracketed by events on the stream. before_each (untimed) runs before
    every sample, e.g. an L2 flush (`l2_flusher`).

    On CUDA, a call whose event-timed median is below graph_below_ms (None: never; the runner
    passes GRAPH_BELOW_MS for forward calls, not for autograd ones) is timed
    through a CUDA graph instead: events around a launch overhead of several us would measure the
    launch, not the kernel. Each sample is then one replay of a graph of back-to-back calls,
    divided by their count (so L2 is warm within a replay; before_each runs once per replay).
    A call that cannot be captured (host syncs, CPU work) keeps its event timing."""
    timing = measure_side_by_side(
        {"fn": fn},
        device,
        budget,
        before_each=before_each,
        clock=clock,
        graph_below_ms=graph_below_ms,
    )["fn"]
    if isinstance(timing, Exception):
        raise timing
    return timing


def measure_side_by_side(
    fns: dict[str, Callable[[], object]],
    device: torch.device | str = "cpu",
    budget: Budget = Budget(),
    *,
    before_each: Callable[[], object] | None = None,
    clock: Callable[[], float] = time.perf_counter,
    graph_below_ms: float | None = None,
    rounds: int = 20,
    monitor: machine.Monitor | None = None,
    running: Callable[[str], object] | None = None,
) -> dict[str, Timing | Exception]:
    """Several calls timed side by side, so that a slow phase of a shared machine (seconds long
    on a cloud VM) lands on all of them rather than on whichever was being measured: after each
    one's warm-up, rounds give every unfinished call a slice (at least one sample), starting each
    round with the next call. A slice ends after budget_s / rounds seconds or max_reps / rounds
    samples, so that each call's samples spread over about `rounds` rounds, the whole window of
    the group, whether its budget or its max_reps ends it (a 2 ms copy beside a 70 ms call must
    not take its 200 samples in the first second). A call is finished at max_reps, or with
    min_reps once its spread is within rel_spread or its median's 95% interval within +-rel_ci
    (both checked every 5 samples) or the group's budget (budget_s per call) has passed. Per
    sample as in `measure` (events, graphs, before_each), which is this with one call. A call
    that raises leaves the group; its exception is returned in its place. `monitor`
    (bench/run/machine.py) measures what other processes took meanwhile (the runner keeps one
    for the run); gpu_state.window what held a GPU's clocks down (gpu_held). `running(name)` is
    told which call warms up or takes its slice (the row watchdog's), never inside a sample."""
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    warmup_s, min_reps, max_reps = budget.warmup_s, budget.min_reps, budget.max_reps
    budget_s, rel_spread, rel_ci = budget.budget_s, budget.rel_spread, budget.rel_ci
    slice_s, slice_reps = budget_s / rounds, -(-max_reps // rounds)
    device = torch.device(device)
    running = running or (lambda name: None)
    prepared = _prepare_group(fns, device, warmup_s, graph_below_ms, clock, running)
    samples: dict[str, list[float]] = {name: [] for name in fns}
    cpu = {name: [0.0, 0.0] for name in fns}  # process CPU s, wall s over the samples
    deadline = clock() + budget_s * len(fns)

    def finished(name: str) -> bool:
        n = len(samples[name])
        if isinstance(prepared[name], Exception) or n >= max_reps:
            return True
        if n < min_reps:
            return False
        if clock() >= deadline:
            return True
        if n % 5 or (rel_spread is None and rel_ci is None):  # checked every 5 samples
            return False
        t = Timing(tuple(samples[name]))
        return (rel_spread is not None and t.spread <= rel_spread) or (
            rel_ci is not None and t.rel_ci <= rel_ci
        )

    turn = 0  # rounds done so far
    monitor = monitor or machine.Monitor()
    monitor.mark()
    gpu = gpu_state.window(device)
    while active := [name for name in fns if not finished(name)]:
        first = turn % len(active)
        turn += 1
        for name in active[first:] + active[:first]:
            _method, calls, timed, _first, lead = prepared[name]
            running(name)
            end, taken = clock() + slice_s, 0
            try:
                while True:
                    if before_each is not None:
                        before_each()
                    c0 = time.process_time()
                    ms = _time_once(timed, device, clock, lead)
                    cpu[name][0] += time.process_time() - c0
                    cpu[name][1] += ms / 1e3
                    samples[name].append(ms / calls)
                    taken += 1
                    if finished(name) or clock() >= end or taken >= slice_reps:
                        break
            except Exception as exc:  # one failing call never stops the others
                prepared[name] = exc
    others, held = monitor.others(), gpu.held() if gpu is not None else None
    return {
        name: p
        if isinstance(p, Exception)
        else Timing(
            tuple(samples[name]),
            p[0],
            cpu[name][0] / cpu[name][1] if p[0] == "host" and cpu[name][1] > 0 else None,
            p[3],
            others,
            wall_ms(fns[name], device, clock) if device.type == "cuda" else None,
            held,
        )
        for name, p in prepared.items()
    }


def wall_ms(fn: Callable[[], object], device: torch.device, clock, n: int = 5) -> float:
    """The median of n calls timed on the host clock from a synced device to the call's end
    synced: what a caller that waits for each call pays, launch work included (a batch-1
    decode step is host-bound where the GPU-time median says otherwise)."""
    times = []
    for _ in range(n):
        _sync(device)
        t0 = clock()
        fn()
        _sync(device)
        times.append((clock() - t0) * 1e3)
    return statistics.median(times)


def _prepare_group(fns, device, warmup_s, graph_below_ms, clock, running=None) -> dict:
    """Each call warmed up, then one timing method for the whole group, so that its ratios
    compare like with like: on CUDA, a CUDA graph of back-to-back calls for every call when the
    fastest one's event-timed median is below graph_below_ms and every call can be captured
    (L2 then stays warm within a replay), else CUDA events for every call (each sample after
    before_each, e.g. a cold-L2 flush); on the CPU, the host clock. A call that raises is
    returned as its exception. Each entry: (method, calls per sample, the timed callable, the
    first call's ms, the GPU lead in ms before each sample: _lead_ms)."""
    prepared: dict[str, tuple[str, int, Callable[[], object], float, float] | Exception] = {}
    running = running or (lambda name: None)
    for name, fn in fns.items():
        running(name)
        try:
            first = _warm_up(fn, device, warmup_s, clock)
            method = "host" if device.type != "cuda" else "events"
            prepared[name] = (method, 1, fn, first, _lead_ms(fn, device, clock))
        except Exception as exc:
            prepared[name] = exc
    live = {n: p for n, p in prepared.items() if not isinstance(p, Exception)}
    if device.type != "cuda" or graph_below_ms is None or not live:
        return prepared
    probes = {
        n: statistics.median(_time_once(p[2], device, clock, p[4]) for _ in range(5))
        for n, p in live.items()
    }
    if min(probes.values()) >= graph_below_ms:
        return prepared
    graphed = {}
    for name, (_, _, fn, first, _) in live.items():
        running(name)
        calls = max(1, min(1000, round(0.5 / max(probes[name], 1e-4))))  # ~0.5 ms per replay
        replay = _graphed(fn, device, calls)
        if replay is None:  # one call cannot be captured: the whole group keeps events
            return prepared
        graphed[name] = ("cuda_graph", calls, replay, first, _lead_ms(replay, device, clock))
    return {**prepared, **graphed}


def _warm_up(fn: Callable[[], object], device: torch.device, warmup_s: float, clock) -> float:
    """Calls fn until warmup_s has passed, at least once (compiles, allocator, caches) -> the
    first call's ms."""
    start, first = clock(), None
    while True:
        fn()
        _sync(device)
        first = (clock() - start) * 1e3 if first is None else first
        if clock() - start >= warmup_s:
            return first


def _graphed(fn: Callable[[], object], device: torch.device, calls: int):
    """graph.replay for `calls` back-to-back calls of fn captured in one CUDA graph (warmed up
    on a side stream first, as capture requires), or None when fn cannot be captured."""
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream(device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            for _ in range(calls):
                fn()
    except Exception:  # not capturable: a host sync, an allocation pattern, CPU work
        torch.cuda.synchronize(device)
        return None
    return graph.replay


def _time_once(fn: Callable[[], object], device: torch.device, clock, lead_ms=0.0) -> float:
    """One call in ms: CUDA events around it on the GPU (after a spin of lead_ms that keeps the
    GPU busy while the host launches the call: _lead_ms), the host clock on the CPU."""
    if device.type == "cuda":
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        if lead_ms > 0:
            torch.cuda._sleep(int(lead_ms * _cycles_per_ms(device)))
        begin.record()
        fn()
        end.record()
        end.synchronize()
        return begin.elapsed_time(end)
    t0 = clock()
    fn()
    return (clock() - t0) * 1e3


def _lead_ms(fn: Callable[[], object], device: torch.device, clock) -> float:
    """How long the GPU spins before each CUDA sample: 1.5x the host's time to launch the call
    (the median of 5, each after a sync) plus 20 us, at most LEAD_MAX_MS; 0 off CUDA. Why: a
    sample syncs at its end, so without a lead the begin event fires at once and the GPU then
    waits for the host's launch work (Python, argument checks, autograd), which the events
    counted as the call's time (an H200 run: 0.27 ms for a RoPE kernel that runs in 0.17 ms
    when queued ahead, as in a model's forward). With the spin queued first, the call's kernels
    are all queued by the time the begin event fires, so the events time the GPU's work. A call
    that syncs inside still waits on the host: its time is host time, as its users pay."""
    if device.type != "cuda":
        return 0.0
    host = []
    for _ in range(5):
        _sync(device)
        t0 = clock()
        fn()
        host.append((clock() - t0) * 1e3)
    _sync(device)
    return min(LEAD_MAX_MS, 1.5 * statistics.median(host) + 0.02)


_CYCLES: dict[torch.device, float] = {}


def _cycles_per_ms(device: torch.device) -> float:
    """GPU clock cycles per ms, measured once per device (torch.cuda._sleep spins in cycles)."""
    if device not in _CYCLES:
        cycles = 1 << 22
        torch.cuda._sleep(cycles)  # first use loads the kernel
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        torch.cuda._sleep(cycles)
        end.record()
        end.synchronize()
        _CYCLES[device] = cycles / max(begin.elapsed_time(end), 1e-3)
    return _CYCLES[device]


def l2_flusher(device: torch.device) -> Callable[[], object] | None:
    """On CUDA, a call that overwrites twice the L2 size so the next sample starts cold (the
    events bracket only the timed call, so the flush is not counted); None on the CPU."""
    if device.type != "cuda":
        return None
    l2 = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) or (64 << 20)
    buf = torch.empty(2 * l2 // 4, dtype=torch.float32, device=device)
    return buf.zero_
