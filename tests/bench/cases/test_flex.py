"""FlexAttention in the bias cases: `flex` with the family's learned table (its gradient summed
by Flex) and, beside it, `flex_frozen`, the table frozen (requires_grad=False), each gated
against its own float64 truth; ALiBi, whose slopes are fixed, has no frozen twin."""

import json

import torch

from bench.cases import CASES
from bench.cases._flex import frozen
from bench.registry import Point, as_call
from tests.helpers import FAST_ARGS, read_rows, run_bench


def test_frozen_and_learned_flex_are_gated_beside_each_other(tmp_path):
    out = tmp_path / "flex"
    proc = run_bench(
        "cases=[t5_attention]",
        "impls=[reference,flex,flex_frozen]",
        "seq_len=[32]",
        "batch=1",
        "d_model=32",
        "num_heads=2",
        "causal=true",
        "mode=forward",
        "calibrate=false",
        *FAST_ARGS,
        f"hydra.run.dir={out}",
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    rows = {(r["case"], r["impl"]): r for r in read_rows(out / "results.csv")}
    assert rows[("t5_attention", "flex")]["status"] == "ok"
    assert "table learned" in rows[("t5_attention", "flex")]["message"]
    assert rows[("t5_attention", "flex_frozen")]["status"] == "ok"
    assert "frozen" in rows[("t5_attention", "flex_frozen")]["message"]
    assert json.loads(rows[("t5_attention", "flex")]["params"])["causal"] is True
    learned = {n for n, c in CASES.items() if "flex_frozen" in c.impls}
    assert {"t5_attention", "shaw_bias_attention"} <= learned
    assert "alibi_attention" not in learned  # fixed slopes: nothing to freeze


def test_the_frozen_twin_differentiates_q_k_v_alone():
    """Its call's leaves are q, k and v, and its truth has no path to the table, so the
    backward modes compare the gradients a frozen-table model pays for."""
    case = CASES["t5_attention"]
    point = Point(1, 8, 16, 2, causal=True)
    inputs = case.build(point, "cpu", torch.float64)
    for t in (inputs["q"], inputs["k"], inputs["v"], *inputs["params"].values()):
        t.requires_grad_(True)
    call = as_call(case.impls["flex_frozen"].make(inputs))
    assert sorted(call.leaves) == ["k", "q", "v"]
    out = case.impls["flex_frozen"].reference(inputs)
    table = next(iter(inputs["params"].values()))
    assert torch.autograd.grad(out.sum(), table, allow_unused=True)[0] is None
    assert not any(p.requires_grad for p in frozen(inputs)["params"].values())
