"""tools/gpu_run.sh, the one-call GPU visit, rehearsed on the CPU (--smoke: the Triton
interpreter, tiny points), so that the script itself cannot be what fails on a lent GPU."""

import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]


def _run(tmp_path, budget_s: int, **env):
    out = tmp_path / "out"
    env = dict(os.environ, OUT=str(out), PY=sys.executable, BUDGET_S=str(budget_s),
               AUDIT_PY=str(tmp_path / "no-audit.py"), **env)  # fmt: skip
    proc = subprocess.run([str(ROOT / "tools" / "gpu_run.sh"), "--smoke"], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    with tarfile.open(out / "results.tgz") as tar:
        tar.extractall(tmp_path / "x", filter="data")
    return out, tmp_path / "x" / "gpu"


def test_smoke_visit_returns_every_part_in_one_archive(tmp_path):
    out, res = _run(tmp_path, 400)
    assert sorted(p.name for p in out.iterdir()) == ["gpu_run.log", "results.tgz"]
    status = (res / "status.txt").read_text()
    for part in ("tests", "sweep", "cpu_cuda", "profile", "tiles", "probe"):
        assert f"== {part}: exit 0" in status, status
    assert "== audit: skipped" in status
    probe = pd.read_csv(res / "probe-tiny" / "probe.csv", keep_default_na=False)
    assert set(probe["status"]) == {"ok", "n/a"} and set(probe["device"]) == {"cpu"}
    rows = pd.read_csv(res / "sweep-gpu" / "results.csv")
    triton = rows[rows["impl"] == "triton"]
    assert set(triton["case"]) == {"rope", "alibi_attention", "t5_attention",
                                   "shaw_bias_attention", "shaw_kv_attention"}  # fmt: skip
    assert set(triton["status"]) == {"ok"} and set(triton["mode"]) == {
        "forward",
        "forward+backward",
    }
    assert (res / "sweep-gpu" / "report.md").exists()
    assert (res / "profile-rope" / "top_ops.md").exists()
    assert (res / "tests.xml").read_text().count("<testcase") >= 3
    assert "torch" in (res / "versions.txt").read_text()


def test_a_short_budget_skips_parts_and_still_returns_the_archive(tmp_path):
    _out, res = _run(tmp_path, 20)
    status = (res / "status.txt").read_text()
    assert "== tests: skipped" in status and "== sweep: skipped" in status
    assert (res / "versions.txt").exists()
