"""`python -m bench` end to end in subprocesses: a run, bad overrides, a multirun (basic and
submitit_local launchers) aggregated at its end, profiling, and CUDA asked for on a CPU box."""

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
TINY = [
    "cases=[sinusoidal,rope]", "impls=[reference,seed]", "d_model=16", "num_heads=2",
    "seq_len=8", "mode=[forward]", "timing.warmup_s=0", "timing.min_reps=2",
    "timing.max_reps=2", "timing.budget_s=0", "calibrate=false",
]  # fmt: skip


def _bench(*args, cwd=ROOT):
    env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, "-m", "bench", *args], cwd=cwd, env=env, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip


def _rows(path: Path) -> list[dict]:
    with open(path) as f:
        return list(csv.DictReader(f))


def test_single_run_writes_results_env_report_and_plots(tmp_path):
    out = tmp_path / "run"
    proc = _bench(*TINY, "batch=[1,2]", f"hydra.run.dir={out}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = _rows(out / "results.csv")
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
    proc = _bench("sweep=seed_5_2", *shrink, f"hydra.run.dir={out}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = _rows(out / "results.csv")
    assert len(rows) == 11 and {r["status"] for r in rows} == {"ok"}
    assert {int(r["n_samples"]) for r in rows} == {12}
    assert {r["case"] for r in rows if r["tutorial_ms_per_100"]} == {
        "sinusoidal",
        "learnable",
        "rope_module",
    }  # the tutorial's 5.2 times encoders only
    assert "pass 12 of 12" in proc.stdout and "tutorial ms / 100 calls" in proc.stdout
    assert json.loads((out / "timing_summary.json").read_text())["passes"] == 12


@pytest.mark.parametrize(
    ("override", "key"),
    [("cases=[nope]", "cases"), ("batch=-1", "batch"), ("num_heads=3", "divisible")],
)
def test_invalid_override_fails_before_anything_runs(tmp_path, override, key):
    out = tmp_path / "bad"
    proc = _bench(*TINY, override, f"hydra.run.dir={out}")
    assert proc.returncode == 2
    assert key in proc.stderr and "invalid configuration" in proc.stderr
    assert not (out / "results.csv").exists()


@pytest.mark.parametrize("launcher", ["basic", "submitit_local"])
def test_multirun_is_aggregated_at_its_end(tmp_path, launcher):
    sweep = tmp_path / "sweep"
    proc = _bench(
        "-m", *TINY, "batch=1,2", f"hydra/launcher={launcher}", f"hydra.sweep.dir={sweep}",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    jobs = sorted(p.parent.name for p in sweep.rglob("results.csv"))
    assert len(jobs) == 2
    merged = _rows(sweep / "merged.csv")
    assert {r["batch"] for r in merged} == {"1", "2"}
    assert "multirun report" in proc.stdout


def test_profile_writes_a_trace_and_top_operators(tmp_path):
    out = tmp_path / "prof"
    proc = _bench(*TINY, "batch=1", "profile=true", "cases=[rope]", "impls=[reference]",
                  f"hydra.run.dir={out}")  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (out / "trace.json").stat().st_size > 0
    assert "aten::" in (out / "top_ops.md").read_text()


def test_cuda_alone_without_a_gpu_reports_nothing_and_succeeds(tmp_path):
    if torch.cuda.is_available():
        return  # the situation this tests cannot arise on a GPU box
    proc = _bench(*TINY, "batch=1", "device=cuda", f"hydra.run.dir={tmp_path / 'cuda'}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "CUDA is not available" in proc.stdout and "nothing to report" in proc.stdout


def test_a_case_without_some_default_implementations_runs(tmp_path):
    """The default sweep lists sdpa, which rope lacks: rope's own implementations run."""
    out = tmp_path / "rope"
    proc = _bench("cases=[rope]", "batch=1", "seq_len=8", "d_model=16", "num_heads=2",
                  "mode=forward", "timing.budget_s=0", "timing.warmup_s=0", "calibrate=false",
                  f"hydra.run.dir={out}")  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert {r["impl"] for r in _rows(out / "results.csv")} >= {"reference", "seed"}


@pytest.mark.parametrize("typo", ["seqlen=128", "+seqlen=128"])
def test_a_key_typo_names_the_nearest_key(tmp_path, typo):
    proc = _bench(typo, f"hydra.run.dir={tmp_path / 'typo'}")
    assert proc.returncode == 2 and "did you mean seq_len?" in proc.stderr
    assert not (tmp_path / "typo").exists()


def test_help_lists_cases_implementations_and_sweeps():
    proc = _bench("--help")
    assert proc.returncode == 0
    for name in ("rope_attention", "sdpa_nobias", "seed_5_2", "gpu_tiles", "timing.passes"):
        assert name in proc.stdout, name


def test_a_run_directory_is_named_by_what_changed_and_a_rejected_one_is_not_left(tmp_path):
    proc = _bench(*TINY, "batch=1", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (run,) = (tmp_path / "results" / "runs").iterdir()
    tag = run.name.split("-", 2)[2]
    assert tag == "quick-batch_1-cases_sinusoidal_rope-d_model_16-impls_reference_seed-mode_forward"
    bad = _bench(*TINY, "batch=-1", cwd=tmp_path)
    assert bad.returncode == 2
    assert len(list((tmp_path / "results" / "runs").iterdir())) == 1  # no empty directory


def test_resume_needs_the_run_and_its_configuration(tmp_path):
    out = tmp_path / "run"
    first = _bench(*TINY, "batch=1", f"hydra.run.dir={out}")
    assert first.returncode == 0, first.stderr[-2000:]
    config, env = (out / "config.yaml").read_text(), json.loads((out / "env.json").read_text())
    n_rows = len(_rows(out / "results.csv"))
    missing = _bench(*TINY, "batch=1", "resume=true", f"hydra.run.dir={tmp_path / 'nope'}")
    assert missing.returncode == 2 and "hydra.run.dir" in missing.stderr
    assert not (tmp_path / "nope").exists()
    other = _bench(*TINY, "batch=2", "resume=true", f"hydra.run.dir={out}")
    assert other.returncode == 2 and "batch: 1 -> 2" in other.stderr
    again = _bench(*TINY, "batch=1", "resume=true", f"hydra.run.dir={out}")
    assert again.returncode == 0, again.stderr[-2000:]
    assert (out / "config.yaml").read_text() == config  # the run's own config stays
    resumed = json.loads((out / "env.json").read_text())
    assert resumed["overrides"] == env["overrides"] and len(resumed["resumes"]) == 1
    assert len(_rows(out / "results.csv")) == n_rows == 4  # nothing measured twice


def test_ctrl_c_keeps_the_rows_and_says_how_to_resume(tmp_path):
    import signal
    import time

    out = tmp_path / "stop"
    slow = ["timing.budget_s=0.3", "seq_len=[8,16,32,64,128,256]", "batch=1",
            "cases=[sinusoidal]", "impls=[reference]", "mode=forward", "calibrate=false",
            f"hydra.run.dir={out}"]  # fmt: skip
    env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-m", "bench", *slow], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    for line in proc.stdout:  # wait for the first row
        if line.startswith("[1/"):
            break
    time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    _out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-2000:]
    assert "Traceback" not in err and "resume=true hydra.run.dir=" in err
    assert len(_rows(out / "results.csv")) >= 1


def test_a_multirun_checks_every_job_before_the_first(tmp_path):
    sweep = tmp_path / "sweep"
    proc = _bench("-m", *TINY, "batch=1", "seq_len=8,-1", f"hydra.sweep.dir={sweep}")
    assert proc.returncode == 2 and "job 1" in proc.stderr and "seq_len" in proc.stderr
    assert not list(sweep.rglob("results.csv"))  # job 0 never ran


def test_cuda_without_a_gpu_is_skipped_with_one_message(tmp_path):
    out = tmp_path / "cuda"
    proc = _bench(*TINY, "batch=1", "device=[cpu,cuda]", f"hydra.run.dir={out}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    devices = {r["device"] for r in _rows(out / "results.csv")}
    if torch.cuda.is_available():  # on a GPU box both run
        assert devices == {"cpu", "cuda"}
    else:
        assert proc.stdout.count("CUDA is not available") == 1
        assert devices == {"cpu"}


def test_kernel_launches_are_read_from_a_trace(tmp_path):
    """The GPU part of the profile, on a synthetic trace (no GPU here): grids, blocks, registers."""
    from bench.profile import kernel_launches

    launch = {"cat": "kernel", "name": "_rope_kernel",
              "args": {"grid": [4096, 1, 1], "block": [128, 1, 1], "registers per thread": 40,
                       "shared memory": 0}}  # fmt: skip
    trace = {"traceEvents": [launch, launch, {"cat": "cpu_op", "name": "aten::add", "args": {}}]}
    (tmp_path / "trace.json").write_text(json.dumps(trace))
    text = kernel_launches(tmp_path / "trace.json")
    assert "| _rope_kernel | [4096, 1, 1] | [128, 1, 1] | 40 | 0 | 2 |" in text
    assert "aten::add" not in text
