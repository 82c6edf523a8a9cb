"""A report from the rows alone: bench.report loads neither torch nor the case registry (each row
carries its case's level and baseline), so a run re-reported after its cases changed reads as
it did, and reporting costs no torch import."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
PROBE = """
import sys
from bench.report import build
loaded = [m for m in ("torch", "bench.cases", "bench.registry", "posenc") if m in sys.modules]
print("loaded:", loaded)
build.build([sys.argv[1]], sys.argv[2])
loaded = [m for m in ("torch", "bench.cases", "bench.registry", "posenc") if m in sys.modules]
print("loaded:", loaded)
"""


def test_a_report_loads_no_torch_and_no_cases(tmp_path):
    run = ROOT / "results" / "reference" / "quick-cpu"
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, str(run), str(tmp_path / "r")],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.splitlines()[-2:] == ["loaded: []", "loaded: []"], proc.stdout
    text = (tmp_path / "r" / "report.md").read_text()
    assert "## Headline" in text and "## rope / forward / float32" in text


def test_rows_before_the_baseline_column_read_the_same(tmp_path):
    """A run whose rows predate the `baseline` column (results schema 7) gets the same speedups
    as the same rows with the column: the baseline read from which implementations ran."""
    import pandas as pd

    from bench.cases import CASES
    from bench.report.rows import load, speedups

    runs = {}
    for name in ("quick-cpu", "serving-cpu"):  # rope_cache's baseline is eager
        rows = pd.read_csv(ROOT / "results" / "reference" / name / "results.csv", dtype=str)
        for kind, frame in (
            ("without", rows.drop(columns=["baseline"], errors="ignore")),
            ("with", rows.assign(baseline=rows["case"].map(lambda c: CASES[c].baseline))),
        ):
            (tmp_path / name / kind).mkdir(parents=True)
            frame.to_csv(tmp_path / name / kind / "results.csv", index=False)
            runs[name, kind] = speedups(load([tmp_path / name / kind]))
    for name in ("quick-cpu", "serving-cpu"):
        now, before = runs[name, "with"], runs[name, "without"]
        assert now["baseline"].tolist() == before["baseline"].tolist(), name
        pd.testing.assert_series_equal(now["speedup"], before["speedup"])
        assert now["speedup"].notna().sum() > 10
    assert "eager" in set(runs["serving-cpu", "with"]["baseline"])
