"""The window knob (bench/cases/_window.py) in the bias attention cases: every family with sinks
(without: tests/posenc_kernels/test_relbias_window.py), gated against posenc's windowed reference
in float64 (outputs and gradients), the kernel under the interpreter; FlexAttention with its
sliding-window block mask and SDPA with the band, forward; a window without causality is said,
and the cost counts the pairs a window leaves."""

import json

from bench.cases import CASES
from bench.cases._window import pairs
from bench.registry import Point
from tests.helpers import FAST_ARGS, read_rows, run_bench


def test_every_family_is_gated_within_a_window(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    out = tmp_path / "w"
    grids = (
        "grids=[{cases:[alibi_attention,t5_attention,shaw_kv_attention,fox_attention],"
        "impls:[reference,sdpa,triton],sinks:true,mode:forward+backward},"
        "{cases:[alibi_attention,t5_attention],impls:[reference,flex,sdpa],mode:forward}]"
    )
    args = [grids, "causal=true", "window=5", "seq_len=[24]", "batch=1", "d_model=64"]
    args += ["num_heads=2", "num_kv_heads=1", "calibrate=false", *FAST_ARGS]
    args += ["impls=[reference,sdpa,flex,triton]"]  # each grid takes its own
    proc = run_bench(*args, f"hydra.run.dir={out}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = read_rows(out / "results.csv")
    assert all(json.loads(r["params"])["window"] == 5 for r in rows)
    ran = [(r["case"], r["impl"]) for r in rows if r["status"] != "skipped"]
    assert not [r for r in rows if r["status"] not in ("ok", "skipped")]
    for case in ("alibi_attention", "t5_attention", "shaw_kv_attention", "fox_attention"):
        assert ran.count((case, "triton")) == 1 and ran.count((case, "reference")) >= 1
    assert ("alibi_attention", "flex") in ran and ("t5_attention", "sdpa") in ran


def test_a_window_needs_causality_and_counts_its_pairs():
    case = CASES["alibi_attention"]
    assert case.constraint(Point(1, 16, 32, 2, window=4)) == "window needs causal=true"
    assert case.constraint(Point(1, 16, 32, 2, window=4, causal=True)) is None
    assert pairs(Point(1, 16, 32, 2, window=4, causal=True)) == 4 * 5 // 2 + 12 * 4
    assert pairs(Point(1, 16, 32, 2, causal=True)) == 16 * 16 // 2
    assert pairs(Point(1, 16, 32, 2, window=40, causal=True)) == 16 * 16 // 2
