"""Bad inputs, swept: every one is a single line naming the key, exit 2, nothing written
(docs/harness.md lists them). The command-line checks and the plan are asked in-process (a few
ms each); three runs hold the whole contract end to end (one line on stderr, exit 2, no run
directory left)."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir

from bench.config import cli, schema
from bench.config.plan import make_plan
from tests.helpers import ROOT, run_bench

schema.register()

COMMAND_LINE = [  # (override, what the one line says), refused before Hydra runs
    ("rope_scaling.factor=8", "rope_scaling.factor: rope_scaling takes a value, not keys"),
    ("+rope_scaling.factor=8", "rope_scaling.factor: rope_scaling takes a value, not keys"),
    ("+batch=2", "+batch: batch is already a key; drop the +"),
    ("~batch", "~batch: keys cannot be removed"),
    ("~timing", "~timing: keys cannot be removed"),
    ("timing=3", "timing: set its keys"),
    ("timing.budget=1", "timing.budget: not a timing key; did you mean budget_s?"),
    ("batchsize=4", "batchsize: not a key of this harness"),
    ("+foo=1", "foo: not a key of this harness"),
    ("foo/bar=x", "foo/bar: not a key of this harness"),
    ("hydra/launcher=nope", "hydra/launcher: unknown value 'nope'; choose from basic"),
    ("sweep=quik", "sweep: unknown value 'quik'; did you mean quick?"),
    ("batch", "'batch': not an override Hydra can parse (missing EQUAL"),
    ("cases=rope]", "'cases=rope]': not an override Hydra can parse"),
    ("seq_len=[128", "'seq_len=[128': not an override Hydra can parse"),
    ("layout.kind=bshd", "layout.kind: layout takes a value, not keys"),
]


def _first_problem(argv: list[str]) -> str | None:
    return (
        cli.syntax_problem(argv)
        or cli.unknown_key(argv)
        or cli.sweep_problem(argv)
        or cli.group_problem(argv)
    )


@pytest.mark.parametrize(("override", "says"), COMMAND_LINE)
def test_command_line_problems_are_one_line(override, says):
    problem = _first_problem([override])
    assert problem is not None and problem.startswith(says), problem
    assert "\n" not in problem


PLAN = [  # (overrides, what the one line says), refused by the plan before anything runs
    (["cases=[rope]", "rope_form=partial"], "rope_form: no chosen case reads it"),
    (["cases=[layer_rope]", "sinks=true"], "sinks: no chosen case reads it"),
    (["cases=[rope]", "causal=true"], "causal: no chosen case reads it"),
    (["cases=[sinusoidal]", "layout=bshd"], "layout: no chosen case reads it"),
    (["batch=0"], "batch: every value must be a positive integer"),
    (["batch=abc"], "batch: every value must be a positive integer"),
    (["seq_len=[1,x]"], "seq_len: every value must be a positive integer"),
    (["d_model=100", "num_heads=3"], "d_model=100 is not divisible by num_heads=3"),
    (["num_heads=4", "num_kv_heads=3", "cases=[rope]"], "num_kv_heads=3 does not divide"),
    (["dtype=float64"], "dtype: unknown value 'float64'; did you mean float16?"),
    (["device=tpu"], "device: unknown value 'tpu'"),
    (["mode=fwd"], "mode: unknown value 'fwd'; did you mean forward?"),
    (["cases=[rop]"], "cases: unknown value 'rop'; did you mean rope?"),
    (["impls=[refrence]"], "impls: unknown value 'refrence'; did you mean reference?"),
    (["cases=[rope]", "impls=[sdpa]"], "impls: none of the chosen implementations"),
    (["grids=3"], "grids[0]: expected a mapping of axes"),
    (["grids=[{cases:[rope],seqlen:[4]}]"], "grids[0].seqlen: not an axis"),
    (["timing.threads=-1"], "timing.threads: auto, a positive integer or null"),
    (["timing.passes=0"], "timing.passes: must be a positive integer"),
    (["timing.min_reps=5", "timing.max_reps=2"], "timing: need 1 <= min_reps <= max_reps"),
    (["timing.rel_ci=-1"], "timing.rel_ci: must be positive or null"),
    (["timing.cpu_heap=jemalloc"], "timing.cpu_heap: keep or system, got 'jemalloc'"),
    (["report=maybe"], "report: true or false, got 'maybe'"),
    (["calibrate=1"], "calibrate: true or false, got 1"),
    (["smoke=yes"], "smoke: true or false, got 'yes'"),
    (["cases=[rope]", "rope_scaling=yarnn"], "rope_scaling: unknown value 'yarnn'"),
    (["cases=[rope]", "layout=bsdh"], "layout: unknown value 'bsdh'"),
    (["cases=[alibi_attention]", "causal=maybe"], "causal:"),
    (["cases=[alibi_attention]", "fwd_tiles=64x64"], "fwd_tiles:"),
    (["cases=[rope]", "rope_theta=-1"], "rope_theta: every value must be a positive number"),
    (["cases=[rope]", "rope_original=1.5"], "rope_original: every value must be a positive"),
    (["cases=[layer_rope]", "rope_theta=5e5"], "rope_theta: no chosen case reads it"),
]


@pytest.mark.parametrize(("overrides", "says"), PLAN, ids=[" ".join(o) for o, _ in PLAN])
def test_plan_problems_are_one_line(overrides, says):
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        cfg = compose("bench", overrides=overrides)
    pinned = frozenset(o.split("=", 1)[0] for o in overrides)
    with pytest.raises(ValueError) as exc:
        make_plan(cfg, pinned)
    assert says in str(exc.value) and "\n" not in str(exc.value), str(exc.value)


@pytest.mark.parametrize(
    "args",
    [
        ["rope_scaling.factor=8"],
        ["cases=[rope]", "rope_form=partial"],
        ["hydra/launcher=nope"],
    ],
)
def test_the_whole_run_says_one_line_and_writes_nothing(tmp_path, args):
    out = tmp_path / "run"
    proc = run_bench(*args, f"hydra.run.dir={out}")
    assert proc.returncode == 2
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("invalid configuration: "), proc.stderr
    assert args[-1].split("=")[0].lstrip("+") in lines[0]
    assert not out.exists()
