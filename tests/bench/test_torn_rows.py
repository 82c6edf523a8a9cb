"""A results.csv whose last row was cut short (a kill or a full disk mid-write) is repaired on
resume: the torn line set aside verbatim, its point measured again, never counted as measured;
a malformed row anywhere else is refused, naming the file and the line (bench/results.py)."""

import csv

import pytest

from bench.results import COLUMNS, RESULTS, ResultsWriter, read_rows
from tests.helpers import read_rows as read_dicts
from tests.helpers import run_bench, run_module


def _row(i: int) -> dict:
    return dict.fromkeys(COLUMNS, "") | dict(
        run_id="r", case="rope", impl=f"impl{i}", mode="forward", device="cpu",
        device_name="cpu", dtype="float32", batch="1", seq_len="128", d_model="64",
        num_heads="2", params="{}", p50_ms=str(0.1 * (i + 1)), status="ok",
        message="a, quoted, message", timestamp="2026-12-04T05:00:00",
    )  # fmt: skip


def _file(path, n: int) -> bytes:
    writer = ResultsWriter(path)
    for i in range(n):
        writer.append(_row(i))
    writer.close()
    return path.read_bytes()


def test_a_row_cut_at_any_byte_is_set_aside_and_measured_again(tmp_path):
    whole = _file(tmp_path / "whole.csv", 4)
    last = whole.rstrip(b"\r\n").rfind(b"\n") + 1  # where the last row starts
    keys = [RESULTS.key_of(_row(i)) for i in range(4)]
    for cut in range(last, len(whole)):
        path = tmp_path / f"cut{cut}" / "results.csv"
        path.parent.mkdir()
        path.write_bytes(whole[:cut])
        path.chmod(0o640)  # the repaired file keeps its mode
        writer = ResultsWriter(path)
        assert writer.existing == set(keys[:3]), cut  # the torn row is not counted
        torn = whole[last:cut]
        if torn:
            assert (path.parent / "results.csv.torn").read_bytes() == torn + b"\n"
            assert "cut short" in writer.set_aside
        else:
            assert writer.set_aside is None
        writer.append(_row(3))  # measured again
        writer.close()
        assert path.read_bytes() == whole, cut  # every row once, none duplicated
        assert path.stat().st_mode & 0o777 == 0o640, cut


@pytest.mark.parametrize(
    ("column", "value", "text"),
    [("p50_ms", "0.1x", "p50_ms is '0.1x', not a number"), ("status", "fine", "status is 'fine'")],
)
def test_a_malformed_row_is_refused_with_its_line(tmp_path, column, value, text):
    path = tmp_path / "results.csv"
    _file(path, 3)
    rows = list(csv.DictReader(path.open(newline="")))
    rows[1][column] = value
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    with pytest.raises(ValueError, match=f"results.csv, line 3: {text}"):
        read_rows(path)
    with pytest.raises(ValueError, match="line 3"):
        ResultsWriter(path)


def test_a_missing_field_is_refused(tmp_path):
    path = tmp_path / "results.csv"
    text = _file(path, 2).decode()
    lines = text.split("\r\n")
    lines[1] = lines[1].rsplit(",", 1)[0]  # one field fewer, line end kept
    with open(path, "w", newline="") as f:
        f.write("\r\n".join(lines))
    with pytest.raises(ValueError, match=f"line 2: {len(COLUMNS) - 1} fields"):
        read_rows(path)


def test_a_run_cut_short_resumes_by_measuring_the_torn_point(tmp_path):
    out = tmp_path / "run"
    args = [
        "cases=[rope,sinusoidal]", "impls=[reference,seed]", "seq_len=[128,256]", "batch=1",
        "calibrate=false", "timing.warmup_s=0", "timing.min_reps=1", "timing.max_reps=3",
        "timing.budget_s=0",
    ]  # fmt: skip
    assert run_bench(*args, f"hydra.run.dir={out}").returncode == 0
    results = out / "results.csv"
    whole = read_dicts(results)
    assert len(whole) == 16
    results.write_bytes(results.read_bytes()[:-40])
    proc = run_bench(*args, "resume=true", f"hydra.run.dir={out}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "its last row was cut short" in proc.stdout
    rows = read_dicts(results)
    assert len(rows) == 16 and len({RESULTS.key_of(r) for r in rows}) == 16
    assert (out / "results.csv.torn").exists()


def test_the_report_of_a_malformed_csv_is_one_line_naming_it(tmp_path):
    path = tmp_path / "run" / "results.csv"
    path.parent.mkdir()
    _file(path, 3)
    text = path.read_text().replace("0.2", "0.2x", 1)  # the second row's p50_ms
    path.write_text(text)
    proc = run_module("bench.report", path.parent)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert f"{path}, line 3: p50_ms is '0.2x', not a number" in lines[0]
    assert not (path.parent / "report.md").exists()
