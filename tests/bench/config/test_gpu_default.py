"""`python -m bench` on a GPU box: with no sweep named and the default device, the GPU default
(configs/sweep/quick_gpu.yaml) rather than the CPU's; what it would run on CUDA, read from its
plan on this CPU: bfloat16 at a real model's heads, RoPE and every attention family, forward and
forward+backward, every peer the cases declare, within a few minutes by the GPU run's estimate."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.config.cli import GPU_DEFAULT, with_default_sweep

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(
    ("argv", "cuda", "chosen"),
    [
        ([], True, GPU_DEFAULT),
        (["cases=[rope]"], True, GPU_DEFAULT),  # a filter of the GPU default
        (["device=auto"], True, GPU_DEFAULT),
        (["device=cuda:1"], True, GPU_DEFAULT),
        ([], False, None),  # the CPU keeps quick
        (["device=cpu"], True, None),  # the CPU asked for on a GPU box
        (["sweep=quick"], True, "quick"),
        (["resume=true", "hydra.run.dir=results/runs/x"], True, None),  # its run's sweep
    ],
)
def test_the_default_sweep_follows_the_device(argv, cuda, chosen):
    out = with_default_sweep(argv, cuda)
    named = [a.split("=", 1)[1] for a in out if a.startswith("sweep=")]
    assert named == ([chosen] if chosen else []), out
    assert out[: len(argv)] == argv  # what the user typed, unchanged


PLAN = """
import json
from tools.gpurun.estimate import compile_seconds, plan_of, sweep_estimate
from tools.gpurun.parts import Part
from bench.run.eta import timed_rows
from bench.cases._common import kv_heads
plan, cfg = plan_of(("sweep={sweep}",))
rows = list(timed_rows(plan))
est = sweep_estimate(Part("x", 0, 0, ("-m", "bench", "sweep={sweep}")), compile_seconds())
print(json.dumps(dict(
    impls=sorted({{(c.name, i) for c, i, p, m, d, t in rows}}),
    modes=sorted({{m for c, i, p, m, d, t in rows}}),
    dtypes=sorted({{str(t) for c, i, p, m, d, t in rows}}),
    heads=sorted({{(p.num_heads, kv_heads(p), p.head_dim) for c, i, p, m, d, t in rows}}),
    seconds=est.seconds,
)))
"""


def test_the_gpu_default_measures_a_models_shapes_with_every_peer_in_minutes():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}  # sm_90a's binder
    proc = subprocess.run(
        [sys.executable, "-c", PLAN.format(sweep=GPU_DEFAULT)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    import json

    got = json.loads(proc.stdout.strip().splitlines()[-1])
    impls = {tuple(x) for x in got["impls"]}
    assert got["modes"] == ["forward", "forward+backward"] and got["dtypes"] == ["bfloat16"]
    assert {tuple(h) for h in got["heads"]} == {(32, 8, 128)}  # Llama-3.1-8B's attention
    for family in ("alibi", "t5", "shaw_bias", "shaw_kv", "fox"):
        assert (f"{family}_attention", "triton") in impls
        assert (f"{family}_attention", "sdpa_nobias") in impls
    want = {("rope", i) for i in ("reference", "compiled", "hf", "liger", "triton")} | {
        ("alibi_attention", "flex"),
        ("t5_attention", "flex_frozen"),
        ("t5_attention", "sdpa"),
    }
    want |= {("fox_attention", "fla")}
    assert want <= impls, want - impls
    assert got["seconds"] < 300, got["seconds"]  # a few minutes by the estimate
