"""`python -m bench` end to end in subprocesses: a run, a multirun (basic and submitit_local
launchers) aggregated at its end, profiling, resume, and CUDA asked for on a CPU box. The command
line's errors: tests/bench/test_cli.py."""

import json
import os
import subprocess
import sys

import pytest
import torch

from tests.helpers import PYTHONPATH, ROOT, TINY, read_rows, run_bench


def test_single_run_writes_results_env_report_and_plots(tmp_path):
    out = tmp_path / "run"
    proc = run_bench(*TINY, "batch=[1,2]", f"hydra.run.dir={out}", report=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = read_rows(out / "results.csv")
    assert len(rows) == 2 * 2 * 2 and {r["status"] for r in rows} == {"ok"}
    for name in ("env.json", "report.md", "merged.csv", "config.yaml", "timing_summary.json"):
        assert (out / name).exists(), name
    assert "harness overhead" in proc.stdout
    env = json.loads((out / "env.json").read_text())
    assert env["torch_threads"] >= 1 and "thp_mem_alloc_enable" in env and env["cpu"]


def test_seed_5_2_sweep_pools_its_passes(tmp_path):
    """sweep=seed_5_2 as configured (12 passes), shrunk: each of its 7 encoder rows and 4 Shaw
    attention rows is written once, from one sample per pass, and the tutorial's table is
    printed."""
    out = tmp_path / "seed"
    shrink = ["smoke=true", "timing.budget_s=0", "timing.warmup_s=0", "calibrate=false"]
    proc = run_bench("sweep=seed_5_2", *shrink, f"hydra.run.dir={out}", report=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = read_rows(out / "results.csv")
    assert len(rows) == 11 and {r["status"] for r in rows} == {"ok"}
    assert {int(r["n_samples"]) for r in rows} == {12}
    assert {r["case"] for r in rows if r["tutorial_ms_per_100"]} == {
        "sinusoidal",
        "learnable",
        "rope_module",
    }  # the tutorial's 5.2 times encoders only
    assert "pass 12 of 12" in proc.stdout and "tutorial ms / 100 calls" in proc.stdout
    assert json.loads((out / "timing_summary.json").read_text())["passes"] == 12


@pytest.mark.parametrize("launcher", ["basic", "submitit_local"])
def test_multirun_is_aggregated_at_its_end(tmp_path, launcher):
    sweep = tmp_path / "sweep"
    proc = run_bench(
        "-m",
        *TINY,
        "batch=1,2",
        f"hydra/launcher={launcher}",
        f"hydra.sweep.dir={sweep}",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    jobs = sorted(p.parent.name for p in sweep.rglob("results.csv"))
    assert len(jobs) == 2
    merged = read_rows(sweep / "merged.csv")
    assert {r["batch"] for r in merged} == {"1", "2"}
    assert "multirun report" in proc.stdout


def test_profile_writes_a_trace_and_top_operators(tmp_path):
    out = tmp_path / "prof"
    proc = run_bench(
        *TINY,
        "batch=1",
        "profile=true",
        "cases=[rope]",
        "impls=[reference]",
        f"hydra.run.dir={out}",
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (out / "trace_reference.json").stat().st_size > 0
    assert "aten::" in (out / "top_ops.md").read_text()


def test_profile_without_impls_takes_the_baseline_and_the_kernel_not_the_first_listed(tmp_path):
    """The default sweep lists the tutorial's code (seed) first."""
    out = tmp_path / "prof"
    proc = run_bench(
        "profile=true",
        "cases=[rope]",
        "batch=1",
        "seq_len=8",
        "d_model=16",
        "num_heads=2",
        "mode=forward",
        f"hydra.run.dir={out}",
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    traces = sorted(p.name for p in out.glob("trace_*.json"))
    assert traces == ["trace_reference.json", "trace_triton.json"]  # triton: the interpreter
    assert "rope / reference / forward" in (out / "top_ops.md").read_text()


def test_a_run_directory_is_never_overwritten_nor_written_where_it_cannot_be(tmp_path):
    out = tmp_path / "run"
    first = run_bench(*TINY, "batch=1", f"hydra.run.dir={out}")  # report=false
    assert first.returncode == 0, first.stderr[-2000:]
    assert not (out / "report.md").exists() and "python -m bench.report" in first.stdout
    saved = (out / ".hydra" / "config.yaml").read_text()
    again = run_bench(*TINY, "batch=2", f"hydra.run.dir={out}")
    assert again.returncode == 2 and "holds a run: pass resume=true" in again.stderr
    assert (out / ".hydra" / "config.yaml").read_text() == saved  # not rewritten by Hydra
    (tmp_path / "file").write_text("")
    blocked = run_bench(*TINY, f"hydra.run.dir={tmp_path / 'file' / 'run'}")
    assert blocked.returncode == 2 and "is a file, not a directory" in blocked.stderr
    assert "Traceback" not in blocked.stderr


def test_a_case_without_some_default_implementations_runs(tmp_path):
    """The default sweep lists sdpa, which rope lacks: rope's own implementations run."""
    out = tmp_path / "rope"
    proc = run_bench(
        "cases=[rope]",
        "batch=1",
        "seq_len=8",
        "d_model=16",
        "num_heads=2",
        "mode=forward",
        "timing.budget_s=0",
        "timing.warmup_s=0",
        "calibrate=false",
        f"hydra.run.dir={out}",
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert {r["impl"] for r in read_rows(out / "results.csv")} >= {"reference", "seed"}


def test_a_run_directory_is_named_by_what_changed_and_a_rejected_one_is_not_left(tmp_path):
    proc = run_bench(*TINY, "batch=1", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (run,) = (tmp_path / "results" / "runs").iterdir()
    tag = run.name.split("-", 2)[2]
    assert tag == (
        "quick-batch_1-cases_sinusoidal_rope-d_model_16-impls_reference_seed-mode_forward"
        "-num_heads_2-seq_len_8-timing.budget_s_0-timing.max_reps_1-timing.min_reps_1"
    )
    bad = run_bench(*TINY, "batch=-1", cwd=tmp_path)
    assert bad.returncode == 2
    assert len(list((tmp_path / "results" / "runs").iterdir())) == 1  # no empty directory


def test_resume_needs_the_run_and_its_configuration(tmp_path):
    out = tmp_path / "run"
    first = run_bench(*TINY, "batch=1", f"hydra.run.dir={out}")  # report=false
    assert first.returncode == 0, first.stderr[-2000:]
    assert not (out / "report.md").exists() and "python -m bench.report" in first.stdout
    config, env = (out / "config.yaml").read_text(), json.loads((out / "env.json").read_text())
    n_rows = len(read_rows(out / "results.csv"))
    missing = run_bench(*TINY, "batch=1", "resume=true", f"hydra.run.dir={tmp_path / 'nope'}")
    assert missing.returncode == 2 and "hydra.run.dir" in missing.stderr
    assert not (tmp_path / "nope").exists()
    other = run_bench(*TINY, "batch=2", "resume=true", f"hydra.run.dir={out}")
    assert other.returncode == 2 and "batch: 1 -> 2" in other.stderr
    again = run_bench(*TINY, "batch=1", "resume=true", f"hydra.run.dir={out}")
    assert again.returncode == 0, again.stderr[-2000:]
    assert (out / "config.yaml").read_text() == config  # the run's own config stays
    resumed = json.loads((out / "env.json").read_text())
    assert resumed["overrides"] == env["overrides"] and len(resumed["resumes"]) == 1
    assert len(read_rows(out / "results.csv")) == n_rows == 4  # nothing measured twice


def test_ctrl_c_keeps_the_rows_and_says_how_to_resume(tmp_path):
    import signal
    import time

    out = tmp_path / "stop"
    slow = [  # every row samples for its whole budget: the rows after the first last >= 1.5 s
        "timing.budget_s=0.3",
        "timing.rel_ci=null",
        "timing.max_reps=1000000",
        "seq_len=[8,16,32,64,128,256]",
        "batch=1",
        "cases=[sinusoidal]",
        "impls=[reference]",
        "mode=forward",
        "calibrate=false",
        f"hydra.run.dir={out}",
    ]
    env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONPATH=PYTHONPATH)
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench", *slow],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # a test runner started in the background (`cmd &` without job control, nohup) hands
        # its children SIGINT ignored, and Python then installs no KeyboardInterrupt for it
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    for line in proc.stdout:  # wait for the first row
        if line.startswith("[1/"):
            break
    time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    _out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-2000:]
    assert "Traceback" not in err and "resume=true hydra.run.dir=" in err
    saved = len(read_rows(out / "results.csv"))
    assert saved >= 1 and f"interrupted: {saved} rows are saved" in err
    assert (out / "report.md").exists()  # a report of the rows so far


def test_cuda_without_a_gpu_is_skipped_with_one_message(tmp_path):
    out = tmp_path / "cuda"
    proc = run_bench(*TINY, "batch=1", "device=[cpu,cuda]", f"hydra.run.dir={out}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    devices = {r["device"] for r in read_rows(out / "results.csv")}
    if torch.cuda.is_available():  # on a GPU box both run
        assert devices == {"cpu", "cuda"}
    else:
        assert proc.stdout.count("CUDA is not available") == 1
        assert devices == {"cpu"}


def test_kernel_launches_are_read_from_a_trace(tmp_path):
    """The GPU part of the profile, on a synthetic trace (no GPU here): grids, blocks, registers."""
    from bench.run.profile import kernel_launches

    launch = {
        "cat": "kernel",
        "name": "_rope_kernel",
        "args": {
            "grid": [4096, 1, 1],
            "block": [128, 1, 1],
            "registers per thread": 40,
            "shared memory": 0,
        },
    }
    trace = {"traceEvents": [launch, launch, {"cat": "cpu_op", "name": "aten::add", "args": {}}]}
    (tmp_path / "trace.json").write_text(json.dumps(trace))
    text = kernel_launches(tmp_path / "trace.json")
    assert "| _rope_kernel | [4096, 1, 1] | [128, 1, 1] | 40 | 0 | 2 |" in text
    assert "aten::add" not in text


def test_half_precision_on_a_cpu_is_said_and_report_folders_are_not_committed(tmp_path):
    proc = run_bench(*TINY, "batch=1", "dtype=bfloat16", f"hydra.run.dir={tmp_path / 'bf16'}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    if not torch.cuda.is_available():
        assert "note: bfloat16 on the CPU" in proc.stdout
    for path in ("results/reports/x/report.md", "results/gpu-run/x/run.log"):
        ignored = subprocess.run(["git", "check-ignore", "-q", path], cwd=ROOT)
        assert ignored.returncode == 0, path
