"""Nothing lost, nothing mixed: a run's folder is its own (its report reads its rows only; an
empty or foreign hydra.run.dir refused), config.yaml is there before the first row (a resume
after kill -9 or SIGTERM refuses other settings), a second run into a running run's folder is
refused, and a plugin that calls sys.exit loses its own row only."""

import json
import os
import resource
import signal
import subprocess
import sys
import time

import pytest

from bench.report import rows as report_rows
from tests.helpers import FAST_ARGS, PYTHONPATH, ROOT, read_rows, run_bench

QUICK = [
    "cases=[rope]",
    "batch=1",
    "seq_len=[8,16,32]",
    "d_model=16",
    "num_heads=2",
    "mode=[forward]",
    *FAST_ARGS,
    "calibrate=false",
    "report=false",
]

SLOW = """
import time
from bench.registry import Impl, register_impl
from bench.cases.rope import reference_fn

def make(inputs):
    xs, tables = (inputs["q"], inputs["k"]), inputs["tables"]
    def call():
        time.sleep(0.5)
        return reference_fn(xs, tables)
    return call

register_impl("rope", "slow", Impl(make))
"""

EXITS = """
import sys
from bench.registry import Impl, register_impl

def make(inputs):
    def call():
        {how}
    return call

register_impl("rope", "exits", Impl(make))
"""


def _plugin(tmp_path, name: str, code: str):
    path = tmp_path / f"{name}.py"
    path.write_text(code)
    return path


def _start(tmp_path, run, *extra):
    plugin = _plugin(tmp_path, "slow", SLOW)
    env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONPATH=PYTHONPATH)
    args = [f"plugins=[{plugin}]", "impls=[reference,slow]", *QUICK, f"hydra.run.dir={run}"]
    return subprocess.Popen(
        [sys.executable, "-m", "bench", *args, *extra],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for_rows(run, n: int, proc, timeout: float = 120.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        csv = run / "results.csv"
        if csv.exists() and len(read_rows(csv)) >= n:
            return
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.1)
    raise AssertionError(f"no {n} rows in {timeout} s")


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_a_killed_run_keeps_its_rows_and_its_configuration(tmp_path, sig):
    run = tmp_path / "run"
    proc = _start(tmp_path, run)
    _wait_for_rows(run, 1, proc)
    assert (run / "config.yaml").exists()  # written before the first row
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    kept = read_rows(run / "results.csv")
    assert len(kept) >= 1
    if sig == signal.SIGTERM:  # ended as Ctrl-C ends a run: the resume command said
        assert proc.returncode == 130 and "resume=true" in err, err
    plugin = tmp_path / "slow.py"
    other = run_bench(
        f"plugins=[{plugin}]",
        "impls=[reference,slow]",
        *QUICK,
        "dtype=bfloat16",
        "resume=true",
        f"hydra.run.dir={run}",
    )
    assert other.returncode == 2 and "another configuration" in other.stderr, other.stderr
    assert read_rows(run / "results.csv") == kept  # nothing mixed in
    if sig == signal.SIGKILL:  # the same settings: the point in flight named, then finished
        same = run_bench(
            f"plugins=[{plugin}]",
            "impls=[reference,slow]",
            *QUICK,
            "resume=true",
            f"hydra.run.dir={run}",
        )
        assert same.returncode == 0, same.stderr[-2000:]
        assert "the run before ended, with nothing said, while measuring rope B=1" in same.stdout
        rows = read_rows(run / "results.csv")
        assert rows[: len(kept)] == kept and len(rows) == 6


def test_a_second_run_into_a_running_runs_folder_is_refused(tmp_path):
    run = tmp_path / "run"
    first = _start(tmp_path, run)
    try:
        _wait_for_rows(run, 1, first)
        second = _start(tmp_path, run, "resume=true")
        out, err = second.communicate(timeout=120)
        assert second.returncode == 2 and "another run is writing into" in err, err
    finally:
        first.kill()
        first.communicate()
    keys = [(r["impl"], r["seq_len"]) for r in read_rows(run / "results.csv")]
    assert len(keys) == len(set(keys))  # no key twice


@pytest.mark.parametrize("value", ["", "{foreign}"])
def test_a_run_folder_that_is_not_its_own_is_refused(tmp_path, value):
    foreign = tmp_path / "someone"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    proc = run_bench(*QUICK, f"hydra.run.dir={value.format(foreign=foreign)}", cwd=tmp_path)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "hydra.run.dir" in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["someone"]  # nothing written
    assert [p.name for p in foreign.iterdir()] == ["notes.txt"]


def test_a_report_reads_its_own_rows_only(tmp_path):
    """A run's folder with another run below it: its report reads its own results.csv; a
    multirun folder reads its numbered jobs."""
    (tmp_path / "below").mkdir()
    for f in (tmp_path / "results.csv", tmp_path / "below" / "results.csv"):
        f.write_text("x\n")
    assert report_rows.results_of(tmp_path) == [tmp_path / "results.csv"]
    sweep = tmp_path / "sweep"
    for job in ("0", "1", "notes"):
        (sweep / job).mkdir(parents=True)
        (sweep / job / "results.csv").write_text("x\n")
    assert report_rows.results_of(sweep) == [
        sweep / "0" / "results.csv",
        sweep / "1" / "results.csv",
    ]


@pytest.mark.parametrize(
    ("how", "says"),
    [("sys.exit(0)", "sys.exit(0)"), ("raise KeyboardInterrupt", "raised KeyboardInterrupt")],
)
def test_a_plugin_that_calls_sys_exit_loses_its_row_only(tmp_path, how, says):
    plugin = _plugin(tmp_path, "exits", EXITS.format(how=how))
    run = tmp_path / "run"
    proc = run_bench(
        f"plugins=[{plugin}]", "impls=[reference,exits]", *QUICK, f"hydra.run.dir={run}"
    )
    rows = read_rows(run / "results.csv")
    by = {(r["impl"], r["seq_len"]): r for r in rows}
    assert proc.returncode == 3, proc.stderr[-2000:]
    assert all(by[("reference", n)]["status"] == "ok" for n in ("8", "16", "32"))
    assert by[("exits", "8")]["status"] == "error"
    assert says in by[("exits", "8")]["message"]
    assert json.loads(by[("exits", "8")]["params"]) is not None


def test_a_point_that_cannot_fit_is_an_oom_row_never_built(tmp_path):
    """Inputs of 64 TiB (no machine's memory) beside a small point: the small point's rows are
    measured, the large one's are `oom` rows naming the bytes, and the run exits 3."""
    run = tmp_path / "run"
    args = [a for a in QUICK if not a.startswith(("seq_len", "d_model", "num_heads"))]
    proc = run_bench(
        *args, "seq_len=[8,1073741824]", "d_model=4096", "num_heads=32", f"hydra.run.dir={run}"
    )
    by = {r["seq_len"]: r for r in read_rows(run / "results.csv")}
    assert proc.returncode == 3, proc.stderr[-2000:]
    assert by["8"]["status"] == "ok"
    assert by["1073741824"]["status"] == "oom"
    assert (
        "not built: its inputs and output alone: ~66048.0 GiB needed" in by["1073741824"]["message"]
    )


def test_a_full_disk_keeps_the_rows_before_and_says_how_to_resume(tmp_path):
    """A file size limit (RLIMIT_FSIZE, its signal ignored: writes fail with EFBIG as a full
    disk fails them with ENOSPC) stops the run mid-row: exit 74, the last line names the folder
    and the resume command; the resume, with room again, finishes every row once."""
    run = tmp_path / "run"
    args = [a for a in QUICK if not a.startswith("seq_len")] + ["impls=[reference]"]
    args += [f"seq_len=[{','.join(str(n) for n in range(8, 28))}]", f"hydra.run.dir={run}"]

    def small_disk():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (8000, 8000))

    proc = subprocess.run(
        [sys.executable, "-m", "bench", *args],
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=PYTHONPATH),
        capture_output=True,
        text=True,
        preexec_fn=small_disk,
        timeout=300,
    )
    last = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode == 74, proc.stderr[-2000:]
    assert f"cannot write in {run}" in last and "resume=true" in last, proc.stderr
    kept = len(read_rows(run / "results.csv"))
    assert 0 < kept < 20
    resumed = run_bench(
        *[a for a in args if not a.startswith("hydra")], "resume=true", f"hydra.run.dir={run}"
    )
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    keys = [r["seq_len"] for r in read_rows(run / "results.csv")]
    assert sorted(map(int, keys)) == list(range(8, 28))
