"""The GPU run (python -m tools.gpurun): rehearsed on the CPU (--smoke: Triton's interpreter,
tiny points) in the same order with the same parts, so that the driver itself cannot be what
fails on the GPU; its limits checked against the estimates of what each part launches."""

import json
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pandas as pd
import pytest

from tests.helpers import PYTHONPATH
from tools.gpurun.parts import BUDGET_S, ENV_S, PARTS
from tools.gpurun.warm import CARRIED

ROOT = Path(__file__).resolve().parents[3]


FAKE_AUDIT = """import argparse, pathlib
p = argparse.ArgumentParser(); p.add_argument("--out"); p.add_argument("--dry", action="store_true")
a = p.parse_args(); assert a.dry
(pathlib.Path(a.out) / "audit.csv").write_text("group,impl\\nrope,fake\\n")
"""


def _smoke_run(tmp_path, *args, audit=None, env=None):
    """The smoke run, on the box's stack under make rehearse (REHEARSE_PYTHON: Python 3.12,
    torch 2.11, Triton 3.6, the carried wheels), else this interpreter; the audit a stand-in
    that writes its CSV (the shared one is not in the repository), or absent."""
    out = tmp_path / "out"
    if audit is None:
        audit = tmp_path / "audit.py"
        audit.write_text(FAKE_AUDIT)
    cmd = [
        os.environ.get("REHEARSE_PYTHON") or sys.executable,
        "-m",
        "tools.gpurun",
        "--smoke",
        "--out",
        str(out),
        "--audit",
        str(audit),
        *args,
    ]
    env = dict(env or os.environ, PYTHONPATH=PYTHONPATH)  # the interpreter as in the tests
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=1800, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    with tarfile.open(out / "results.tgz") as tar:
        tar.extractall(tmp_path / "x", filter="data")
    return out, tmp_path / "x" / "gpu", proc.stdout


@pytest.mark.rehearsal  # make rehearse (CI), not make test: about two minutes
def test_smoke_run_runs_every_part_in_order_into_one_archive(tmp_path):
    out, res, stdout = _smoke_run(tmp_path)
    assert sorted(p.name for p in out.iterdir()) == ["results.tgz", "run.log"]
    status = (res / "status.txt").read_text()
    ran = re.findall(r"^== ([\w-]+): (?:exit 0|done)", status, re.M)
    assert ran == ["env", *(p.name for p in PARTS)], status  # the same order as on the GPU
    assert (res / "audit" / "audit.csv").read_text().startswith("group,impl")
    # the test part names each outcome as it finishes (a part cut at its limit keeps them)
    assert re.search(r"test_rope\.py::.+ PASSED", (out / "run.log").read_text())
    core = pd.read_csv(res / "sweep-gpu" / "results.csv")
    triton = core[core["impl"] == "triton"]
    assert set(triton["case"]) == {
        "rope",
        "alibi_attention",
        "t5_attention",
        "shaw_bias_attention",
        "shaw_kv_attention",
        "rope_cache",
        "alibi_paged",
        "t5_paged",
        "shaw_kv_paged",
    }
    assert set(triton["status"]) == {"ok", "skipped"}  # the serving cases have no backward
    assert set(triton[triton["mode"] == "forward"]["status"]) == {"ok"}
    assert not set(core["impl"]) & {"compiled", "flex", "flex_paged"}  # after the audit
    serving = pd.read_csv(res / "sweep-serving" / "results.csv")
    assert set(serving["impl"]) == {"triton", "compiled", "flex_paged"}
    assert set(serving["status"]) == {"ok"}
    flex = pd.read_csv(res / "sweep-flex" / "results.csv")
    assert set(flex["impl"]) == {"triton", "flex"} and set(flex["status"]) == {"ok"}
    seq = pd.read_csv(res / "sweep-sequences" / "results.csv")
    seq_triton = seq[seq["impl"] == "triton"]
    assert set(seq_triton["case"]) == {"alibi_decode", "t5_packed"}
    assert set(seq_triton["status"]) == {"ok"}
    compiled = pd.read_csv(res / "sweep-compiled" / "results.csv")
    assert set(compiled["impl"]) == {"triton", "compiled"} and set(compiled["status"]) == {"ok"}
    probe = pd.read_csv(res / "probe-tiny" / "probe.csv", keep_default_na=False)
    assert set(probe["status"]) == {"ok", "n/a"}
    assert (res / "sweep-gpu" / "report.md").exists()
    assert (res / "profile-rope" / "top_ops.md").exists()
    assert (res / "tests.xml").read_text().count("<testcase") >= 3
    if CARRIED.is_file():  # make gpu-cache ran (CI: before make rehearse): unpacked first
        assert "== warm Triton cache: " in status.splitlines()[0], status
    versions = (res / "versions.txt").read_text()
    assert "torch" in versions and "MISSING" not in versions, versions  # the wheels unpacked


def test_a_short_budget_skips_parts_and_still_returns_the_archive(tmp_path):
    _out, res, _ = _smoke_run(tmp_path, "--budget", "20", audit=tmp_path / "not-carried.py")
    status = (res / "status.txt").read_text()
    assert "== tests: skipped" in status and "== sweep: skipped" in status
    assert "== audit: skipped" in status and "not carried" in status
    assert (res / "versions.txt").exists()


def test_a_broken_carried_cache_leaves_the_run_cold_not_stopped(tmp_path):
    junk = tmp_path / "cache.tgz"
    junk.write_bytes(b"not a tar archive")
    _out, res, _ = _smoke_run(tmp_path, "--budget", "20", "--triton-cache", str(junk))
    status = (res / "status.txt").read_text()
    assert "== warm Triton cache: not unpacked" in status and "== env: done" in status, status
    assert (res / "versions.txt").exists()


def test_parts_named_run_alone_in_the_runs_order(tmp_path):
    """--parts: what an earlier run was cut in or skipped, measured again without the rest (the
    machine's versions first, as always)."""
    _out, res, _ = _smoke_run(tmp_path, "--parts", "audit", "--budget", "120")
    status = (res / "status.txt").read_text()
    assert re.findall(r"^== ([\w-]+): (?:exit 0|done)", status, re.M) == ["env", "audit"], status
    assert (res / "audit" / "audit.csv").exists() and (res / "versions.txt").exists()


FAKE_SMI = """#!/bin/sh
case "$*" in
  *clocks_event_reasons*) echo "Field is not a valid field to query." >&2; exit 2;;
  *) echo "1980 MHz, 2619 MHz, 96.50 W, 700.00 W, 37, 0x0000000000000004";;
esac
"""


def test_each_part_says_the_gpus_state_before_and_after(tmp_path):
    """status.txt gives the clocks, power and the reasons holding them down around each part,
    from nvidia-smi (a stand-in here, with a driver that knows only the older field name)."""
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    (bin_ / "nvidia-smi").write_text(FAKE_SMI)
    (bin_ / "nvidia-smi").chmod(0o755)
    env = dict(os.environ, PATH=f"{bin_}{os.pathsep}{os.environ['PATH']}")
    _out, res, _ = _smoke_run(tmp_path, "--parts", "audit", "--budget", "120", env=env)
    status = (res / "status.txt").read_text()
    state = "1980 MHz, 2619 MHz, 96.50 W, 700.00 W, 37, 0x0000000000000004"
    assert f"   gpu before: {state}; after: {state}" in status, status


def test_parts_named_run_in_the_order_named():
    """--parts tiles,profile-attention,sweep: what decides the kernels' defaults first, as
    named, each part once (the default order is the run's)."""
    from tools.gpurun.parts import PARTS, chosen

    order = [p.name for p in chosen("tiles,profile-attention,sweep,tiles")]
    assert order == ["tiles", "profile-attention", "sweep"]
    assert chosen(None) == PARTS


def test_the_default_order_measures_what_decides_the_defaults_first():
    """The tile sweep and the attention kernel's profile choose the kernels' defaults: they run
    first, with their limits reserved, so a run cut short still has them."""
    names = [p.name for p in PARTS]
    assert names[:3] == ["tiles", "profile-attention", "sweep"]
    assert all(p.reserved for p in PARTS[:3])


@pytest.mark.parametrize("names", ["nope", "tests,sweeps", ","])
def test_an_unknown_part_is_an_error_naming_the_option(names, capsys):
    from tools.gpurun.__main__ import main

    with pytest.raises(SystemExit) as exit_:
        main(["--parts", names, "--out", "unused"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "--parts: no part" in err
    assert "tiles,profile-attention,sweep" in err
    assert not Path("unused").exists()


def _compiling(code: str) -> str:
    """Runs code in a process with Triton's JIT (the estimate records launches that the
    interpreter, on in this test process, would run)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


@pytest.fixture(scope="module")
def plan():
    """(the estimates' Markdown table, {part: (limit, estimate)})."""
    out = _compiling(
        "import json; from tools.gpurun import estimate as e; rows = e.estimates(); "
        "print(e.markdown(rows)); print('JSON', json.dumps({r.part.name: "
        "[r.part.limit_s, r.seconds] for r in rows}))"
    )
    table, _, numbers = out.rpartition("JSON ")
    return table.rstrip(), json.loads(numbers)


def test_every_limit_covers_its_estimate_and_the_parts_fit_the_budget(plan):
    _, numbers = plan
    assert list(numbers) == [p.name for p in PARTS]
    for name, (limit, seconds) in numbers.items():
        assert limit >= seconds, (name, limit, seconds)
    reserved = [p.reserved for p in PARTS]
    assert reserved == sorted(reserved, reverse=True)  # reserved parts first, then the rest
    assert ENV_S + sum(p.limit_s for p in PARTS if p.reserved) <= BUDGET_S


def test_the_sweep_estimate_counts_the_kernels_the_plan_launches():
    """sweep=gpu's Triton rows: 4 bias families x causal or not x (forward, dq, dk/dv), and
    Shaw's key and value terms at K=64 (another constexpr) likewise, the backward's delta
    kernel (one specialization for all), RoPE's forward and backward (the
    layouts and lengths share a specialization); the serving path's paged decode forward (3
    families; 64 x 32 programs fill the SMs: no split, no combine) and the fused RoPE + cache
    write with shared and per-token (M-RoPE) tables; ALiBi's forward with a sink per head (its
    backward's kernels are those without: the sinks' gradient is the host's)."""
    out = _compiling(
        "from tools.gpurun import estimate; from tools.gpurun.parts import PARTS; "
        "from tools.audit.capture import plan_launches; "
        "part = next(p for p in PARTS if p.name == 'sweep'); "
        "print(plan_launches(estimate.plan_of(part.argv)[0]))"
    )
    assert eval(out) == {
        "_relbias_fwd_kernel": 8 + 2 + 3 + 1,
        "_relbias_bwd_dq_kernel": 8 + 2,
        "_relbias_bwd_dkdv_kernel": 8 + 2,
        "_relbias_bwd_delta_kernel": 1,
        "_rope_kernel": 2,
        "_rope_cache_kernel": 2,
    }
