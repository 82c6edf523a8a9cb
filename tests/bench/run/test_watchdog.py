"""A time limit per row (bench/run/watchdog.py): a call that never returns, a compile that never
ends and a float64 truth that never ends each become a `timeout` row, the sweep finishes the
other rows, and the run exits non-zero; resume measures timed-out rows again only when asked."""

import time
from pathlib import Path

from bench.results import ResultsWriter
from bench.run.watchdog import Watchdog
from tests.helpers import TINY, read_rows, run_bench

FAST_ARGS = [a for a in TINY if a.startswith(("timing.", "calibrate"))]

PLUGIN = Path(__file__).with_name("hang_plugin.py")


class _Task:
    def __init__(self, impl):
        self.impl = impl


def test_the_innermost_phase_past_its_limit_hands_over_its_rows():
    """A phase inside another (a truth inside a check) is what runs: its rows, once; in a
    timing phase only the implementation running; a phase that ends in time hands nothing."""
    fired = []
    dog = Watchdog(lambda rows, what, limit: fired.append((rows, what, limit)), poll_s=0.01)
    a, b = (_Task("a"), {"k": 1}), (_Task("b"), {"k": 2})
    with dog.phase([a, b], "quick", 5.0):
        time.sleep(0.05)
    assert not fired
    with dog.phase([a], "the check", 5.0), dog.phase([a, b], "the float64 truth", 0.05):
        time.sleep(0.3)
    assert fired == [([a, b], "the float64 truth", 0.05)]
    dog = Watchdog(lambda rows, what, limit: fired.append((rows, what, limit)), poll_s=0.01)
    with dog.phase([a, b], "the timing", 0.05):
        dog.running("b")
        time.sleep(0.3)
    assert fired[-1] == ([b], "the timing of b", 0.05)
    assert len(fired) == 2  # once per watchdog


def test_hanging_calls_compiles_and_truths_time_out_and_the_sweep_finishes(tmp_path):
    """The issue's command, with three ways to hang and a 3 s limit: the reference's row ok,
    each hanging one `timeout` naming where it was stuck, exit 3, each restart said."""
    out = tmp_path / "run"
    proc = run_bench(
        f"plugins=[{PLUGIN}]",
        "cases=[rope]",
        "impls=[reference,hangs,hang_compile,hang_truth]",
        "seq_len=[128]",
        "batch=1",
        "mode=[forward]",
        "timing.row_limit_s=3",
        *FAST_ARGS,
        f"hydra.run.dir={out}",
    )
    assert proc.returncode == 3, proc.stderr[-3000:]
    rows = {r["impl"]: r for r in read_rows(out / "results.csv")}
    assert rows["reference"]["status"] == "ok"
    where = {"hangs": "the check", "hang_compile": "the check", "hang_truth": "float64 truth"}
    for impl, text in where.items():
        assert rows[impl]["status"] == "timeout", rows[impl]
        assert "within 3 s" in rows[impl]["message"] and text in rows[impl]["message"]
    assert proc.stderr.count("the run goes on in a new process") == 3
    assert "3 rows wrong, in error, timed out, out of memory or unchecked" in proc.stdout


def test_resume_measures_timed_out_rows_again_only_when_asked(tmp_path):
    """retry: the timeout rows leave results.csv (kept in results.csv.retried) and their keys
    are no longer measured; without it they stay and are skipped."""
    path = tmp_path / "results.csv"
    writer = ResultsWriter(path)
    base = dict(run_id="t", case="rope", impl="a", mode="forward", device="cpu", dtype="float32")
    base.update(batch=1, seq_len=8, d_model=8, num_heads=1, head_dim=8, params="{}")
    writer.append(dict(base, status="ok"))
    writer.append(dict(base, impl="b", status="timeout", message="stuck"))
    writer.close()
    assert len(ResultsWriter(path).existing) == 2
    again = ResultsWriter(path, retry=("timeout",))
    assert len(again.existing) == 1 and "measured again" in again.set_aside
    assert [r["impl"] for r in read_rows(path)] == ["a"]
    assert [r["impl"] for r in read_rows(tmp_path / "results.csv.retried")] == ["b"]
