"""What the tests share: a toy case and an in-process run of it, the harness's config with
overrides, and `python -m bench` in a subprocess."""

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import torch
from omegaconf import OmegaConf

from bench.config.schema import TimingConfig, config_class
from bench.registry import Case, Cost, Point
from bench.run.runner import Runner

ROOT = Path(__file__).resolve().parents[1]
# the subprocesses' path: the repository, and tests/_site (its sitecustomize speeds up Triton's
# interpreter there as tests/conftest.py does here)
PYTHONPATH = os.pathsep.join([str(ROOT), str(ROOT / "tests" / "_site")])
FAST = TimingConfig(warmup_s=0.0, min_reps=2, max_reps=3, budget_s=0.0, rel_spread=None)


def cfg(**overrides):
    """The schema's config with dotted overrides applied."""
    out = OmegaConf.structured(config_class())
    for key, value in overrides.items():
        OmegaConf.update(out, key, value)
    return out


def toy_case(impls):
    """y = 2x; impls decide whether they get it right."""
    return Case(
        name="toy",
        level="encoder",
        build=lambda p, device, dtype: {"x": torch.randn(p.batch, p.seq_len, device=device)},
        reference=lambda inputs: 2 * inputs["x"].double(),
        impls=impls,
        baseline="good",
        cost=lambda p, dtype, mode: Cost(
            8 * p.batch * p.seq_len * (1 + (mode != "forward")), p.batch * p.seq_len
        ),
        grad_inputs=("x",),
        batched=("x",),
    )


ONE_POINT = (Point(3, 8, 4, 2),)


def run_toy(
    tmp_path, case, monkeypatch, *, resume=False, points=ONE_POINT, modes=None, timing=FAST
):
    from bench import plans
    from bench.run import runner

    monkeypatch.setitem(runner.CASES, "toy", case)
    entry = plans.Entry(
        "toy",
        tuple(case.impls),
        points,
        ("float32",),
        ("cpu",),
        modes or ("forward", "forward+backward"),
    )
    plan = plans.Plan((entry,))
    r = Runner(plan, timing, tmp_path, run_id="t", resume=resume, do_calibrate=False)
    r.run()
    with open(tmp_path / "results.csv") as f:
        return list(csv.DictReader(f))


FAST_ARGS = [  # one sample a row, no warm-up: a run's machinery, not its figures
    "timing.warmup_s=0",
    "timing.min_reps=1",
    "timing.max_reps=1",
    "timing.budget_s=0",
]
TINY = [
    "cases=[sinusoidal,rope]",
    "impls=[reference,seed]",
    "d_model=16",
    "num_heads=2",
    "seq_len=8",
    "mode=[forward]",
    *FAST_ARGS,
    "calibrate=false",
]


def run_bench(*args, cwd=ROOT, report=False):
    """python -m bench with args; without its report and plots (about 2 s a run) unless a
    test reads them (report=True), or the command is --help or a multirun. Run in a fork of a
    process that imported the harness once (tests/bench/forked_runs.py), as a subprocess gets
    it: this environment, cwd, a timeout; a fresh interpreter where that process is gone or
    started in another environment."""
    plain = not report and not {"--help", "-m", "--multirun"} & set(args)
    if plain and not any(str(a).startswith("report=") for a in args):
        args = (*args, "report=false")
    return run_module("bench", *args, cwd=cwd)


def run_module(module: str, *args, cwd=ROOT) -> subprocess.CompletedProcess:
    """python -m <module> (bench, bench.probe, bench.report) with args, forked as run_bench says."""
    env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONPATH=PYTHONPATH)
    env.pop("PYTEST_CURRENT_TEST", None)
    argv = [str(a) for a in args]
    got = _FORKS.run({"module": module, "argv": argv, "cwd": str(cwd), "env": env, "timeout": 300})
    if got is not None:
        return subprocess.CompletedProcess(argv, got["code"], got["stdout"], got["stderr"])
    return subprocess.run(
        [sys.executable, "-m", module, *argv],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


class _Forks:
    """One tests/bench/forked_runs.py process a test process, started at its first run; a
    request whose environment is not the one it started in (a variable read at import, such
    as TRITON_INTERPRET, may differ) gets None: the caller starts a fresh interpreter."""

    def __init__(self):
        self.proc, self.env = None, None

    def run(self, request: dict) -> dict | None:
        env = request["env"]
        if self.proc is None:
            self.env = env
            self.proc = subprocess.Popen(
                [sys.executable, str(ROOT / "tests/bench/forked_runs.py")],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                cwd=ROOT,
                env=env,
                text=True,
            )
        if self.proc.poll() is not None or _at_import(env) != _at_import(self.env):
            return None
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        return json.loads(line) if line else None


def _at_import(env: dict) -> dict:
    """The variables a fork cannot change: all but those read at use (torch.compile sets its
    cache folder's in this process at its first compile)."""
    return {k: v for k, v in env.items() if k != "TORCHINDUCTOR_CACHE_DIR"}


_FORKS = _Forks()


def read_rows(path: Path) -> list[dict]:
    with open(path) as f:
        return list(csv.DictReader(f))


def fake_module(monkeypatch, path: str, **attrs) -> None:
    """Installs a stand-in module at a dotted path (its parents as empty modules), e.g. a
    CUDA-only baseline's autograd Function replaced by a recording CPU one."""
    import types

    parts = path.split(".")
    for i in range(1, len(parts)):
        monkeypatch.setitem(sys.modules, ".".join(parts[:i]), types.ModuleType(".".join(parts[:i])))
    module = types.ModuleType(path)
    for name, value in attrs.items():
        setattr(module, name, value)
    monkeypatch.setitem(sys.modules, path, module)


def call_twice(case, point, impl: str):
    """A case's implementation built at a point on the CPU and called twice (an in-place
    baseline must not compound): (inputs, q and k as built, the call)."""
    from bench.registry import as_call

    inputs = case.build(point, torch.device("cpu"), torch.float32)
    before = {n: inputs[n].clone() for n in "qk"}
    call = as_call(case.impls[impl].make(inputs))
    for _ in range(2):
        call.fn()
    return inputs, before, call
