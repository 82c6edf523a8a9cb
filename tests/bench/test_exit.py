"""The run's last line and exit status when rows are wrong or in error (bench/__main__.py)."""

import csv

from bench.__main__ import not_ok
from bench.results import COLUMNS


def _write(path, statuses):
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        for i, status in enumerate(statuses):
            writer.writerow(
                dict.fromkeys(COLUMNS, "")
                | dict(case="rope", impl=f"impl{i}", mode="forward", seq_len="128",
                       params='{"layout": "bshd"}', status=status)
            )  # fmt: skip


def test_ok_and_skipped_rows_say_nothing(tmp_path):
    _write(tmp_path / "r.csv", ["ok", "skipped", "skipped"])
    assert not_ok(tmp_path / "r.csv") is None


def test_an_oom_row_is_counted_it_measured_nothing(tmp_path):
    _write(tmp_path / "r.csv", ["ok", "skipped", "oom"])
    line = not_ok(tmp_path / "r.csv")
    assert line.startswith("1 rows wrong, in error, timed out, out of memory or")


def test_wrong_and_error_rows_are_counted_and_named(tmp_path):
    _write(tmp_path / "r.csv", ["ok", "wrong", "error", *["wrong"] * 4])
    line = not_ok(tmp_path / "r.csv")
    assert line.startswith("6 rows wrong, in error, timed out, out of memory or unchecked")
    assert "rope impl1 forward L=128 layout=bshd: wrong" in line
    assert "rope impl2 forward L=128 layout=bshd: error" in line
    assert line.endswith("; and 2 more")


def test_an_unchecked_row_counts_unless_the_run_allows_it(tmp_path):
    """A row whose float64 truth could not be computed was timed, never verified: it counts
    like a wrong row, unless the run said allow_unchecked=true."""
    _write(tmp_path / "r.csv", ["ok", "unchecked"])
    assert "rope impl1 forward L=128 layout=bshd: unchecked" in not_ok(tmp_path / "r.csv")
    assert not_ok(tmp_path / "r.csv", allow_unchecked=True) is None
