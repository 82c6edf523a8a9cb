"""`python -m bench`'s command line in subprocesses: a bad key, value or plan is one line on
stderr and exit 2 before anything runs (every job of a multirun checked first); --help lists
what there is. Runs end to end: tests/bench/test_main.py."""

import os
import subprocess
import sys

import pytest
import torch

from tests.helpers import ROOT, TINY, run_bench


@pytest.mark.parametrize(
    ("override", "key"),
    [("cases=[nope]", "cases"), ("batch=-1", "batch"), ("num_heads=3", "divisible")],
)
def test_invalid_override_fails_before_anything_runs(tmp_path, override, key):
    out = tmp_path / "bad"
    proc = run_bench(*TINY, override, f"hydra.run.dir={out}")
    assert proc.returncode == 2
    assert key in proc.stderr and "invalid configuration" in proc.stderr
    assert not (out / "results.csv").exists()


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("device=cuda",), "CUDA is not available on this machine, so nothing would run"),
        (("sweep=gpu",), "CUDA is not available on this machine, so nothing would run"),
        (
            ("d_model=36", "num_heads=4", "cases=[rope]"),
            "rope applies at none of its points: head_dim=9 is odd",
        ),
        (("cases=[rope]", "impls=[triton]"), "runs on cuda only; on a CPU, TRITON_INTERPRET=1"),
    ],
)
def test_a_plan_with_nothing_to_run_here_is_a_configuration_error(tmp_path, args, says):
    if torch.cuda.is_available():
        pytest.skip("on a GPU box these plans run")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench",
            *args,
            "timing.budget_s=0",
            f"hydra.run.dir={tmp_path / 'run'}",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stdout[-1000:] + proc.stderr[-2000:]
    assert says in proc.stderr and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    ("arg", "says"),
    [
        ("sweep=quik", "did you mean quick?"),
        ("dtype=bfloat61", "did you mean bfloat16?"),
        ("fwd_tiles=7x7x4x2", "fwd_tiles: block_m must be"),
        ("timing.threads=0", "timing.threads"),
    ],
)
def test_a_bad_value_is_one_line_and_exit_2(tmp_path, arg, says):
    proc = run_bench(*TINY, arg, f"hydra.run.dir={tmp_path / 'run'}")
    assert proc.returncode == 2 and says in proc.stderr, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and not (tmp_path / "run").exists()


@pytest.mark.parametrize("typo", ["seqlen=128", "+seqlen=128"])
def test_a_key_typo_names_the_nearest_key(tmp_path, typo):
    proc = run_bench(typo, f"hydra.run.dir={tmp_path / 'typo'}")
    assert proc.returncode == 2 and "did you mean seq_len?" in proc.stderr
    assert not (tmp_path / "typo").exists()


def test_help_lists_cases_implementations_and_sweeps():
    proc = run_bench("--help")
    assert proc.returncode == 0
    for name in (
        "rope_attention",
        "sdpa_nobias",
        "seed_5_2",
        "gpu_tiles",
        "timing.passes",
        "rope_scaling",
        "fwd_tiles",
    ):
        assert name in proc.stdout, name
    assert "H100/H200." in proc.stdout  # sweep=gpu's whole first sentence, not cut at a colon


def test_a_multirun_checks_every_job_before_the_first(tmp_path):
    sweep = tmp_path / "sweep"
    proc = run_bench("-m", *TINY, "batch=1", "seq_len=8,-1", f"hydra.sweep.dir={sweep}")
    assert proc.returncode == 2 and "job 1" in proc.stderr and "seq_len" in proc.stderr
    assert not list(sweep.rglob("results.csv"))  # job 0 never ran


def test_hydras_cfg_flag_prints_the_config_of_a_plan_that_would_not_run_here(tmp_path):
    """--cfg=job prints the composed config and runs nothing, as Hydra documents: the plan's
    refusals (sweep=gpu has nothing to run on a CPU) are for runs, not for this look."""
    if torch.cuda.is_available():
        pytest.skip("on a GPU box this plan runs")
    proc = run_bench("sweep=gpu", "report=false", f"hydra.run.dir={tmp_path / 'run'}", "--cfg=job")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "sweep_name: gpu" in proc.stdout and not (tmp_path / "run").exists()
