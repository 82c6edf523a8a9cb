"""bench.timing with a fake clock: warm-up by time, repeat limits, quantiles."""

import pytest
import torch

from bench.timing import GRAPH_BELOW_MS, Timing, measure


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
    t = measure(clock.fn, warmup_s=0.25, min_reps=5, max_reps=50, budget_s=0.01, clock=clock)
    assert clock.calls - t.n == 3  # three 100 ms calls pass the 250 ms warm-up
    assert t.n == 10  # 10 ms budget of 1 ms calls (never below min_reps)
    assert t.samples_ms == pytest.approx((1.0,) * 10)


def test_min_reps_beats_budget_and_max_reps_caps():
    slow = FakeClock([1.0] * 100)
    assert measure(slow.fn, warmup_s=0, min_reps=4, budget_s=0.5, clock=slow).n == 4
    fast = FakeClock([1e-6] * 1000)
    assert measure(fast.fn, warmup_s=0, max_reps=20, budget_s=10, clock=fast).n == 20


def test_quantiles():
    t = Timing(tuple(float(v) for v in range(1, 102)))  # 1 .. 101
    assert t.p50 == 51
    assert t.p20 == pytest.approx(21)
    assert t.p80 == pytest.approx(81)


def test_ratio_is_per_round_and_side_by_side():
    """a takes 3 units, b takes 1; the machine slows down 10x halfway: the ratio stays 3."""
    clock = FakeClock([])
    calls = {"n": 0}

    def step(units):
        calls["n"] += 1
        clock.now += units * (10.0 if calls["n"] > 30 else 1.0)

    from bench.timing import measure_ratio

    t = measure_ratio(lambda: step(3), lambda: step(1), rounds=20, warmup_s=0, clock=clock)
    assert t.n == 20
    off = [r for r in t.samples_ms if r != pytest.approx(3.0)]
    assert len(off) <= 1  # only the round in which the slowdown began
    assert t.p50 == pytest.approx(3.0)


def test_rel_spread_stops_early_once_samples_agree():
    steady = FakeClock([0.001] * 1000)
    t = measure(steady.fn, warmup_s=0, min_reps=5, budget_s=100, rel_spread=0.1, clock=steady)
    assert t.n == 5  # the first check passes
    noisy = FakeClock([0.001, 0.003] * 500)
    t = measure(
        noisy.fn, warmup_s=0, min_reps=5, max_reps=40, budget_s=100, rel_spread=0.1, clock=noisy
    )
    assert t.n == 40  # never converges: runs to max_reps


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
        fn, warmup_s=0, min_reps=3, max_reps=3, budget_s=0, before_each=slow_flush, clock=clock
    )
    assert t.samples_ms == pytest.approx((1.0, 1.0, 1.0))
    assert order == ["call", "flush", "call", "flush", "call", "flush", "call"]


def test_cpu_timing_is_host_clock():
    assert measure(lambda: None, warmup_s=0, min_reps=3, max_reps=3).method == "host"


def test_short_calls_are_timed_through_a_cuda_graph_on_cuda_only():
    """On the CPU a graph threshold never applies (host clock); on CUDA (run by gpu-check) a
    tiny call is graph-timed, while a host sync or a long call keeps CUDA events."""
    if not torch.cuda.is_available():
        t = measure(lambda: None, "cpu", warmup_s=0, min_reps=3, max_reps=3, graph_below_ms=1e9)
        assert t.method == "host"
        return
    x = torch.ones(16, device="cuda")
    quick = {"warmup_s": 0.05, "min_reps": 5, "budget_s": 0.05, "graph_below_ms": GRAPH_BELOW_MS}
    tiny = measure(lambda: x.mul_(1.0), "cuda", **quick)
    assert tiny.method == "cuda_graph" and 0 < tiny.p50 < 0.01
    synced = measure(lambda: x.sum().item(), "cuda", **quick)
    assert synced.method == "events"  # a host sync cannot be captured: events instead
    big = torch.ones(1 << 26, device="cuda")
    long = measure(lambda: big.mul_(1.0), "cuda", **quick)
    assert long.method == "events"
