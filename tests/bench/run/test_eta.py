"""The run's time estimate (bench/run/eta.py) against the run's actual time, on a fake clock: each
call advances it by three times its modelled time, so a run's real duration is known."""

import re

import torch

from bench.config.schema import TimingConfig
from bench.plans import Entry, Plan
from bench.registry import Case, Cost, Impl, Point
from bench.run import eta
from bench.run.runner import Runner

RATES = {"calib_copy_gbps": 1e-6, "calib_matmul_tflops": 1.0}  # 1 kB/s: a 8 kB row is 8 s
TIMING = TimingConfig(
    warmup_s=0.0, min_reps=3, max_reps=3, budget_s=0.0, rel_ci=None, copy_ref=False, threads=1
)


def _cost(p, dtype, mode):
    return Cost(8 * p.seq_len, 0)


class FakeClock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def _case(clock):
    def make(inputs):
        seconds = 3 * _cost(inputs["point"], None, "forward").bytes / 1e3  # 3x the model

        def call():
            clock.t += seconds
            return 2 * inputs["x"]

        return call

    return Case(
        name="toy",
        level="encoder",
        build=lambda p, device, dtype: {"x": torch.randn(p.batch, p.seq_len), "point": p},
        reference=lambda inputs: 2 * inputs["x"].double(),
        impls={"a": Impl(make), "b": Impl(make)},
        baseline="a",
        cost=_cost,
    )


def _seconds(text):
    m, s = text.split(":")[-2:]
    return 60 * int(m) + int(s)


def test_the_time_left_follows_the_rows_costs_not_their_count(tmp_path, monkeypatch, capsys):
    """Small rows first, then rows 16x as large: the progress line halfway through predicts the
    rest within 10% of what it takes. Dividing the time so far by the rows done (the estimate
    before bench/run/eta.py) would predict a sixth of it."""
    from bench.run import calibrate, runner

    clock = FakeClock()
    monkeypatch.setitem(runner.CASES, "toy", _case(clock))
    monkeypatch.setattr(calibrate, "calibrate", lambda device, dtype: dict(RATES))
    points = tuple(Point(1, n, 4, 2) for n in [*range(64, 70), *range(1024, 1030)])
    plan = Plan((Entry("toy", ("a", "b"), points, ("float32",), ("cpu",), ("forward",)),))
    r = Runner(plan, TIMING, tmp_path, run_id="t")
    r.now = clock
    r.run()
    lines = re.findall(r"\[(\d+)/(\d+), ([\d:]+) in, ~([\d:]+) left\]", capsys.readouterr().out)
    assert len(lines) == 24
    total = _seconds(lines[-1][2])
    count, _, done, left = lines[11]  # the last small row
    assert count == "12"
    actual = total - _seconds(done)
    assert abs(_seconds(left) - actual) <= 0.1 * actual, (left, actual)
    assert _seconds(done) < actual / 5  # the row-count estimate: as long again as so far


def test_the_start_estimate_counts_budget_and_modelled_calls():
    timing = TimingConfig(warmup_s=0.1, min_reps=5, budget_s=0.5, copy_ref=False)
    assert eta.row_seconds(0.0, timing) == 0.1 + 0.5  # fast calls: warm-up and budget
    assert eta.row_seconds(1.0, timing) == 1.0 + 5 * 1.0 + eta.CHECK_CALLS * 1.0  # slow ones
    assert (
        eta.call_seconds(Cost(2e9, 0), {"calib_copy_gbps": 4.0, "calib_matmul_tflops": 1.0}) == 0.5
    )
