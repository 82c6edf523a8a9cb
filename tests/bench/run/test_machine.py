"""Rows timed while other processes hold the CPU are marked: the CPU time others take is read
from /proc/stat around each side-by-side group (bench/run/machine.py)."""

import csv
import subprocess
import sys

import pytest
import torch

from bench.config.schema import TimingConfig
from bench.plans import Entry, Plan
from bench.registry import Case, Cost, Impl, Point
from bench.run import machine
from bench.run.runner import Runner

linux = pytest.mark.skipif(machine.snapshot() is None, reason="reads /proc/stat")
# long enough a window for /proc/stat's 10 ms ticks: 0.6 s of samples per implementation
TIMING = TimingConfig(
    warmup_s=0.0, min_reps=50, max_reps=100000, budget_s=0.6, rel_ci=None, threads=1
)


def _case():
    return Case(
        name="toy",
        level="encoder",
        build=lambda p, device, dtype: {"x": torch.randn(p.batch, p.seq_len, device=device)},
        reference=lambda inputs: 2 * inputs["x"].double(),
        impls={"a": Impl(lambda i: lambda: 2 * i["x"]), "b": Impl(lambda i: lambda: i["x"] * 2)},
        baseline="a",
        cost=lambda p, dtype, mode: Cost(8 * p.batch * p.seq_len, p.seq_len),
    )


def _rows(tmp_path, monkeypatch, capsys=None):
    from bench.run import runner

    monkeypatch.setitem(runner.CASES, "toy", _case())
    plan = Plan(
        (Entry("toy", ("a", "b"), (Point(2, 64, 4, 2),), ("float32",), ("cpu",), ("forward",)),)
    )
    Runner(plan, TIMING, tmp_path, run_id="t", do_calibrate=False).run()
    with open(tmp_path / "results.csv") as f:
        return list(csv.DictReader(f))


@pytest.fixture
def neighbour():
    """A CPU-bound process beside the test: a whole core taken while it runs."""
    proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    yield proc
    proc.kill()
    proc.wait()


@linux
def test_rows_timed_beside_a_busy_neighbour_are_marked_contended(
    tmp_path, monkeypatch, neighbour, capsys
):
    rows = _rows(tmp_path, monkeypatch)
    assert {r["status"] for r in rows} == {"ok"}
    for r in rows:
        assert float(r["others_cpu"]) > 0.5, r["others_cpu"]  # the neighbour's core, about 1
        assert r["contended"] == "True"
    assert "warning: the machine is busy" in capsys.readouterr().out


def test_rows_timed_on_an_idle_machine_are_not_marked(tmp_path, monkeypatch):
    """The same run where /proc/stat says only this process used the CPU."""
    clock = {"t": 0.0}

    def idle():  # others took nothing: the machine's busy time is this process's own
        clock["t"] += 1.0
        return machine.Snapshot(busy_s=clock["t"], own_s=clock["t"], wall_s=clock["t"])

    monkeypatch.setattr(machine, "snapshot", idle)
    rows = _rows(tmp_path, monkeypatch)
    for r in rows:
        assert float(r["others_cpu"]) == 0.0 and r["contended"] == "False"


def test_others_cores_counts_the_machines_busy_time_less_this_processes():
    a = machine.Snapshot(busy_s=100.0, own_s=10.0, wall_s=0.0)
    b = machine.Snapshot(busy_s=103.0, own_s=11.0, wall_s=2.0)  # 3 s busy, 1 s of it ours
    assert machine.others_cores(a, b) == pytest.approx(1.0)
    assert machine.others_cores(None, b) is None


@pytest.mark.parametrize(
    ("cores", "others", "threads"),
    [
        (1, 0.0, 1),
        (2, 0.0, 1),
        (16, 0.0, 15),
        (16, 1.1, 14),
        (16, 0.2, 15),
        (2, 1.0, 1),
        (4, 3.5, 1),
    ],
)
def test_auto_threads_leave_a_core_and_those_others_use(cores, others, threads):
    assert machine.auto_threads(cores, others) == threads
