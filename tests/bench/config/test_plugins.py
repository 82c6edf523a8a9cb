"""Your own implementation through plugins=[...]: the example in docs/harness.md as written, a
plugin whose gradient is wrong (reported wrong, never timed), a plugin case with a knob of its
own (a key, in --help, checked, in params), and a plugin that fails to load (named)."""

import re

from tests.helpers import ROOT, read_rows, run_bench

QUICK = [
    "batch=1",
    "seq_len=[8,16]",
    "d_model=16",
    "num_heads=2",
    "timing.warmup_s=0",
    "timing.min_reps=2",
    "timing.max_reps=2",
    "timing.budget_s=0",
    "calibrate=false",
]


def test_the_documented_plugin_runs_as_written(tmp_path):
    docs = (ROOT / "docs" / "harness.md").read_text()
    code = next(b for b in re.findall(r"```python\n(.*?)```", docs, re.S) if "my_rope" in b)
    plugin = tmp_path / "my_rope.py"
    plugin.write_text(code)
    run = tmp_path / "run"
    proc = run_bench(
        f"plugins=[{plugin}]",
        "cases=[rope]",
        "impls=[reference,my_rope]",
        *QUICK,
        f"hydra.run.dir={run}",
        report=True,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    mine = [r for r in read_rows(run / "results.csv") if r["impl"] == "my_rope"]
    assert len(mine) == 2 * 2 and {r["status"] for r in mine} == {"ok"}  # 2 lengths, 2 modes
    assert all(float(r["p50_ms"]) > 0 and r["err_ratio"] for r in mine)
    assert "my_rope @ cpu" in (run / "report.md").read_text()


WRONG_GRAD = """
import torch
from bench.registry import Impl, register_impl

class Rope(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, cos, sin):
        half = x.shape[-1] // 2
        c, s = cos[: x.shape[-2]], sin[: x.shape[-2]]
        a, b = x[..., :half], x[..., half:]
        ctx.save_for_backward(c, s)
        return torch.cat([a * c - b * s, b * c + a * s], -1)

    @staticmethod
    def backward(ctx, g):
        return g, None, None  # wrong: the identity instead of the inverse rotation

def make(inputs):
    q, k, cos, sin = inputs["q"], inputs["k"], inputs["cos"], inputs["sin"]
    return lambda: (Rope.apply(q, cos, sin), Rope.apply(k, cos, sin))

register_impl("rope", "bad_grad", Impl(make))
"""


def test_a_plugin_with_a_wrong_gradient_is_wrong_in_the_backward_modes(tmp_path):
    plugin = tmp_path / "bad_grad.py"
    plugin.write_text(WRONG_GRAD)
    run = tmp_path / "run"
    proc = run_bench(
        f"plugins=[{plugin}]",
        "cases=[rope]",
        "impls=[reference,bad_grad]",
        "mode=[forward,backward,forward+backward]",
        *QUICK,
        f"hydra.run.dir={run}",
        report=True,
    )
    assert proc.returncode == 3, proc.stderr[-3000:]  # wrong rows: kept, reported, said
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith("4 rows wrong, in error, timed out, out of memory or unchecked"), last
    assert "bad_grad backward" in last, last
    assert (run / "report.md").exists()
    status = {
        (r["mode"], r["seq_len"]): r
        for r in read_rows(run / "results.csv")
        if r["impl"] == "bad_grad"
    }
    for n in ("8", "16"):
        assert status[("forward", n)]["status"] == "ok"
        for mode in ("backward", "forward+backward"):
            row = status[(mode, n)]
            assert row["status"] == "wrong" and row["p50_ms"] == "", row
            assert row["message"].startswith(("d q:", "d k:")), row  # the gradient named


WINDOWED = """
import torch
from bench.checks import positive_ints
from bench.registry import Case, Cost, Impl, Knob, register_case

SPAN = Knob("span", 4, "the toy's span: positive integers", positive_ints)

def build(point, device, dtype):
    return {"x": torch.randn(point.batch, point.seq_len, device=device).to(dtype),
            "span": point.span}

def summed(inputs):  # a running sum over the last `span` positions
    x, w = inputs["x"], inputs["span"]
    c = torch.nn.functional.pad(x.cumsum(-1), (w, 0))
    return c[..., w:] - c[..., :-w]

register_case(Case(
    name="windowed", level="encoder", build=build,
    reference=lambda inputs: summed({"x": inputs["x"].double(), "span": inputs["span"]}),
    impls={"cumsum": Impl(lambda i: lambda: summed(i), grad=False)}, baseline="cumsum",
    cost=lambda p, dtype, mode: Cost(8 * p.batch * p.seq_len, 2 * p.batch * p.seq_len),
    knobs=(SPAN,),
))
"""


def test_a_knob_declared_once_is_a_key_a_help_line_a_check_and_a_params_entry(tmp_path):
    plugin = tmp_path / "windowed.py"
    plugin.write_text(WINDOWED)
    run = tmp_path / "run"
    args = [f"plugins=[{plugin}]", "cases=[windowed]", "impls=all", "mode=forward"]
    proc = run_bench(*args, "span=[2,4]", *QUICK, f"hydra.run.dir={run}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = read_rows(run / "results.csv")
    assert {r["params"] for r in rows} == {'{"span": 2}', '{"span": 4}'}
    assert len(rows) == 2 * 2 and {r["status"] for r in rows} == {"ok"}  # 2 lengths x 2 spans
    assert "span" in run_bench(*args, "--help").stdout
    bad = run_bench(*args, "span=0", *QUICK, f"hydra.run.dir={tmp_path / 'bad'}")
    assert bad.returncode == 2 and "span: every value must be a positive integer" in bad.stderr


def test_a_plugin_that_fails_to_load_is_named(tmp_path):
    plugin = tmp_path / "broken.py"
    plugin.write_text(
        "from bench.registry import register_impl\nregister_impl('nope', 'x', None)\n"
    )
    proc = run_bench(f"plugins=[{plugin}]", f"hydra.run.dir={tmp_path / 'run'}")
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert f"plugins: {plugin}: ValueError: register_impl: no case 'nope'" in proc.stderr
    missing = run_bench("plugins=[no_such_module_here]", f"hydra.run.dir={tmp_path / 'run'}")
    assert missing.returncode == 2 and "plugins: no_such_module_here: ModuleNotFoundError" in (
        missing.stderr
    )
