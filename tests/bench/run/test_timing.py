"""bench.run.timing with a fake clock: warm-up by time, repeat limits, quantiles."""

import math
import time

import pytest
import torch

from bench.run.samples import Timing
from bench.run.timing import GRAPH_BELOW_MS, Budget, measure


class FakeClock:
    """Advances by the duration of each call to `fn`; reading it is free."""

    def __init__(self, durations):
        self.now = 0.0
        self.durations = iter(durations)
        self.calls = 0

    def __call__(self):
        return self.now

    def fn(self):
        self.calls += 1
        self.now += next(self.durations)


def test_warmup_by_time_then_min_reps_within_budget():
    clock = FakeClock([0.1] * 3 + [0.001] * 1000)
    t = measure(
        clock.fn, budget=Budget(warmup_s=0.25, min_reps=5, max_reps=50, budget_s=0.01), clock=clock
    )
    assert clock.calls - t.n == 3  # three 100 ms calls pass the 250 ms warm-up
    assert t.n == 10  # 10 ms budget of 1 ms calls (never below min_reps)
    assert t.samples_ms == pytest.approx((1.0,) * 10)


def test_min_reps_beats_budget_and_max_reps_caps():
    slow = FakeClock([1.0] * 100)
    assert measure(slow.fn, budget=Budget(warmup_s=0, min_reps=4, budget_s=0.5), clock=slow).n == 4
    fast = FakeClock([1e-6] * 1000)
    assert measure(fast.fn, budget=Budget(warmup_s=0, max_reps=20, budget_s=10), clock=fast).n == 20


def test_quantiles():
    t = Timing(tuple(float(v) for v in range(1, 102)))  # 1 .. 101
    assert t.p50 == 51
    assert t.p20 == pytest.approx(21)
    assert t.p80 == pytest.approx(81)


def test_rel_spread_stops_early_once_samples_agree():
    steady = FakeClock([0.001] * 1000)
    t = measure(
        steady.fn, budget=Budget(warmup_s=0, min_reps=5, budget_s=100, rel_spread=0.1), clock=steady
    )
    assert t.n == 5  # the first check passes
    noisy = FakeClock([0.001, 0.003] * 500)
    t = measure(
        noisy.fn,
        budget=Budget(warmup_s=0, min_reps=5, max_reps=40, budget_s=100, rel_spread=0.1),
        clock=noisy,
    )
    assert t.n == 40  # never converges: runs to max_reps


def test_rel_ci_stops_once_the_median_is_known_well_enough():
    steady = FakeClock([0.001, 0.00101] * 500)  # 1% apart: the median's interval is that narrow
    t = measure(
        steady.fn, budget=Budget(warmup_s=0, min_reps=5, budget_s=100, rel_ci=0.02), clock=steady
    )
    assert t.n == 5 and t.rel_ci <= 0.02
    noisy = FakeClock([0.001, 0.003] * 500)  # two values: the interval always spans both
    t = measure(
        noisy.fn,
        budget=Budget(warmup_s=0, min_reps=5, max_reps=40, budget_s=100, rel_ci=0.02),
        clock=noisy,
    )
    assert t.n == 40


@pytest.mark.parametrize(("n", "ranks"), [(5, (1, 5)), (6, (1, 6)), (10, (2, 9)), (100, (40, 61))])
def test_median_ci_is_the_binomial_order_statistics(n, ranks):
    """The standard distribution-free 95% interval: (x_(k), x_(n+1-k)) with P(Bin(n, 1/2) <= k-1)
    <= 2.5% (tables give x_(2), x_(9) for n = 10 and x_(40), x_(61) for n = 100); (min, max) when
    even that has less than 95% coverage (n < 6; for n = 6, P(Bin <= 0) = 1/64 qualifies)."""
    samples = tuple(float(i) for i in range(n, 0, -1))  # x_(i) = i, given in reverse
    assert Timing(samples).median_ci() == (float(ranks[0]), float(ranks[1]))


def test_median_ci_covers_the_true_median_at_least_95_percent():
    """Over 4000 sets of 25 independent draws from an exponential (median ln 2), the interval
    holds the true median in >= 95% of them (its exact coverage for n = 25 is 95.7%)."""
    gen = torch.Generator().manual_seed(0)
    draws = torch.empty(4000, 25, dtype=torch.float64).exponential_(generator=gen)
    covered = 0
    for row in draws.tolist():
        lo, hi = Timing(tuple(row)).median_ci()
        covered += lo <= math.log(2) <= hi
    assert 0.945 <= covered / 4000 <= 0.97


def test_single_sample_quantiles():
    t = Timing((2.0,))
    assert t.p20 == t.p50 == t.p80 == 2.0


def test_before_each_runs_untimed_before_every_sample():
    clock = FakeClock([0.001] * 100 + [5.0] * 100)
    order = []

    def slow_flush():
        order.append("flush")
        clock.now += 5.0  # must not show up in the samples

    def fn():
        order.append("call")
        clock.fn()

    t = measure(
        fn,
        budget=Budget(warmup_s=0, min_reps=3, max_reps=3, budget_s=0),
        before_each=slow_flush,
        clock=clock,
    )
    assert t.samples_ms == pytest.approx((1.0, 1.0, 1.0))
    assert order == ["call", "flush", "call", "flush", "call", "flush", "call"]


def test_cpu_timing_is_host_clock():
    assert measure(lambda: None, budget=Budget(warmup_s=0, min_reps=3, max_reps=3)).method == "host"


def test_short_calls_are_timed_through_a_cuda_graph_on_cuda_only():
    """On the CPU a graph threshold never applies (host clock); on CUDA (run by gpu-check) a
    tiny call is graph-timed, while a host sync or a long call keeps CUDA events."""
    if not torch.cuda.is_available():
        t = measure(
            lambda: None,
            "cpu",
            budget=Budget(warmup_s=0, min_reps=3, max_reps=3),
            graph_below_ms=1e9,
        )
        assert t.method == "host"
        return
    x = torch.ones(16, device="cuda")
    quick = Budget(warmup_s=0.05, min_reps=5, budget_s=0.05)
    graph = {"graph_below_ms": GRAPH_BELOW_MS}
    tiny = measure(lambda: x.mul_(1.0), "cuda", quick, **graph)
    assert tiny.method == "cuda_graph" and 0 < tiny.p50 < 0.01
    synced = measure(lambda: x.sum().item(), "cuda", quick, **graph)
    assert synced.method == "events"  # a host sync cannot be captured: events instead
    big = torch.ones(1 << 26, device="cuda")
    long = measure(lambda: big.mul_(1.0), "cuda", quick, **graph)
    assert long.method == "events"


def test_cuda_samples_time_the_gpu_not_the_host_launch():
    """A CUDA sample queues a spin before its begin event that outlasts the call's host launch
    work, so a call whose host side takes 3 ms to launch a tiny kernel measures the kernel
    (timed on the GPU box's test run); with no lead (the control) the events count the host's
    3 ms. On the CPU there is no lead: the host clock is the time."""
    from bench.run import timing

    if not torch.cuda.is_available():
        assert timing._lead_ms(lambda: None, torch.device("cpu"), time.perf_counter) == 0.0
        return
    x = torch.ones(16, device="cuda")

    def slow_launch():
        time.sleep(0.003)
        x.mul_(1.0)

    quick = Budget(warmup_s=0.05, min_reps=5, max_reps=20, budget_s=0.5)
    assert measure(slow_launch, "cuda", quick).p50 < 1.0
    cuda = torch.device("cuda")
    timing._sync(cuda)
    assert timing._time_once(slow_launch, cuda, time.perf_counter, 0.0) > 2.5


class SlowPhaseMachine:
    """A fake clock whose calls take twice as long during [slow_from, slow_to): the slow phase
    of a shared machine."""

    def __init__(self, slow_from, slow_to):
        self.now, self.slow = 0.0, (slow_from, slow_to)

    def __call__(self):
        return self.now

    def call(self, units):
        def fn():
            self.now += units * (2.0 if self.slow[0] <= self.now < self.slow[1] else 1.0)

        return fn


def test_side_by_side_spreads_a_slow_phase_over_every_call():
    """a takes 3 units and b 1; the first 40% of the window is twice as slow. Measured one after
    the other, a lands in the slow phase and looks 6x slower than b; side by side, both see the
    same mix and the median ratio stays 3."""
    from bench.run.timing import measure_side_by_side

    kw = dict(budget=Budget(warmup_s=0, min_reps=1, max_reps=100_000, budget_s=10.0))
    seq = SlowPhaseMachine(0, 8)
    a = measure(seq.call(0.003), clock=seq, **kw)
    b = measure(seq.call(0.001), clock=seq, **kw)
    assert a.p50 / b.p50 == pytest.approx(6.0)
    sbs = SlowPhaseMachine(0, 8)
    t = measure_side_by_side(
        {"a": sbs.call(0.003), "b": sbs.call(0.001)}, clock=sbs, rounds=200, **kw
    )  # slices of 50 ms
    assert t["a"].p50 / t["b"].p50 == pytest.approx(3.0)
    assert sbs.now == pytest.approx(20.0, abs=0.1)  # the group's budget: 10 per call
    assert t["a"].n == pytest.approx(t["b"].n / 3, rel=0.05)  # equal time, not equal counts


def test_side_by_side_min_reps_spread_and_a_failing_call():
    from bench.run.timing import measure_side_by_side

    clock = SlowPhaseMachine(0, 0)
    calls = {"n": 0}

    def breaks_on_third():
        calls["n"] += 1
        if calls["n"] == 3:
            raise RuntimeError("boom")
        clock.now += 0.001

    noisy_steps = iter([0.001, 0.003] * 1000)

    def noisy():
        clock.now += next(noisy_steps)

    group = {"steady": clock.call(0.001), "noisy": noisy, "broken": breaks_on_third}
    t = measure_side_by_side(
        group,
        budget=Budget(warmup_s=0, min_reps=5, max_reps=40, budget_s=100, rel_spread=0.1),
        clock=clock,
        rounds=50_000,
    )
    assert isinstance(t["broken"], RuntimeError) and "boom" in str(t["broken"])
    assert 5 <= t["steady"].n < 40  # converged: left the group early
    assert t["noisy"].n == 40  # never converges: max_reps
    group = {"fast": clock.call(0.001), "slow": clock.call(1.0)}
    t = measure_side_by_side(
        group, budget=Budget(warmup_s=0, min_reps=5, budget_s=0.5), clock=clock, rounds=250
    )
    assert t["slow"].n == 5  # min_reps beats the budget
    assert t["fast"].n >= 5  # past the budget too: it stops once it has min_reps


def test_side_by_side_spreads_every_call_over_the_whole_window():
    """A 1 ms call and a 30 ms one, 40 samples each; the machine turns twice as slow halfway
    through. Each slice takes at most 40 / 20 = 2 samples, so the fast call is sampled in every
    round, in the slow half as much as the slow call is (with 20 ms slices it used to take its
    40 samples in the first two rounds and never see the slow phase)."""
    from bench.run.timing import measure_side_by_side

    clock = SlowPhaseMachine(0.6, float("inf"))  # 20 rounds of 2 x (1 + 30) ms: 1.24 s
    group = {"fast": clock.call(0.001), "slow": clock.call(0.030)}
    t = measure_side_by_side(
        group,
        budget=Budget(warmup_s=0, min_reps=5, max_reps=40, budget_s=100),
        clock=clock,
        rounds=20,
    )
    assert t["fast"].n == t["slow"].n == 40
    slowed = {
        name: sum(s > base * 1.5e3 for s in t[name].samples_ms)
        for name, base in (("fast", 0.001), ("slow", 0.030))
    }
    assert slowed["fast"] >= 18 and abs(slowed["fast"] - slowed["slow"]) <= 2  # about half
    with pytest.raises(ValueError, match="rounds"):
        measure_side_by_side(group, clock=clock, rounds=0)


def test_one_timing_method_per_side_by_side_group(monkeypatch):
    """On CUDA a group is timed one way: CUDA graphs for every call when the fastest is under
    graph_below_ms and all can be captured, else events for every call (never a mix of warm-L2
    graph samples and cold-L2 event samples in one group's ratios)."""
    from bench.run import timing

    monkeypatch.setattr(timing, "_sync", lambda device: None)
    monkeypatch.setattr(timing, "_time_once", lambda fn, device, clock, lead=0.0: fn())  # its ms
    capturable = {"fast", "slow"}

    def graphed(fn, device, calls):
        return fn if fn.__name__ in capturable else None

    monkeypatch.setattr(timing, "_graphed", graphed)

    def fast():
        return 0.002

    def slow():
        return 1.0

    cuda = torch.device("cuda")
    group = timing._prepare_group(
        {"fast": fast, "slow": slow}, cuda, 0.0, GRAPH_BELOW_MS, FakeClock([])
    )
    assert {name: p[0] for name, p in group.items()} == {"fast": "cuda_graph", "slow": "cuda_graph"}
    capturable.discard("slow")  # one call cannot be captured: the whole group keeps events
    group = timing._prepare_group(
        {"fast": fast, "slow": slow}, cuda, 0.0, GRAPH_BELOW_MS, FakeClock([])
    )
    assert {name: p[0] for name, p in group.items()} == {"fast": "events", "slow": "events"}
    group = timing._prepare_group({"slow": slow}, cuda, 0.0, GRAPH_BELOW_MS, FakeClock([]))
    assert group["slow"][0] == "events"  # nothing under the threshold


def test_a_cuda_rows_wall_time_syncs_around_each_call(monkeypatch):
    """wall_ms, the host-inclusive column of CUDA rows: each of its calls starts on a synced
    device and ends synced, its time the host clock's (a fake clock and a counted sync stand in
    for the GPU: 2 ms of host work, then 1 ms waiting for the device)."""
    from bench.run import timing

    now, events = [0.0], []

    def sync(device):
        events.append("sync")
        now[0] += 0.001  # the device finishes the queued work

    def call():
        events.append("call")
        now[0] += 0.002  # the host's launch work

    monkeypatch.setattr(timing, "_sync", sync)
    ms = timing.wall_ms(call, torch.device("cuda"), lambda: now[0], n=3)
    assert ms == pytest.approx(3.0)
    assert events == ["sync", "call", "sync"] * 3


def test_cpu_rows_have_no_separate_wall_time():
    t = measure(lambda: None, budget=Budget(warmup_s=0, min_reps=3, max_reps=3))
    assert t.wall_ms is None
