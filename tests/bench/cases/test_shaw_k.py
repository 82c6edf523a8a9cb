"""The shaw_k knob (bench/cases/families.py): Shaw's clip distance K in the Shaw cases, its
tables (2K + 1 rows) built at the point's K and every implementation gated against float64 at
that K (the kernel under the interpreter); its cost grows with K; a bad value is refused in one
line naming the knob; rows at the default keep their params."""

import json

import torch

from bench.cases import CASES
from bench.cases.families import FAMILIES, SHAW_K
from bench.registry import Point
from tests.helpers import FAST_ARGS, read_rows, run_bench


def test_the_shaw_cases_run_at_each_k(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    out = tmp_path / "k"
    grids = (
        "grids=[{cases:[shaw_kv_attention,shaw_bias_attention],impls:[reference,sdpa,triton],"
        "mode:forward+backward},{cases:[shaw_kv_decode],impls:[reference,triton],mode:forward}]"
    )
    args = [grids, "shaw_k=[3,20]", "seq_len=[40]", "batch=1", "d_model=64", "num_heads=2"]
    args += ["calibrate=false", *FAST_ARGS, "impls=[reference,sdpa,triton]"]
    proc = run_bench(*args, f"hydra.run.dir={out}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = read_rows(out / "results.csv")
    assert not [r for r in rows if r["status"] not in ("ok", "skipped")]
    ran = [(r["case"], r["impl"], json.loads(r["params"])["shaw_k"]) for r in rows]
    for case in ("shaw_kv_attention", "shaw_bias_attention", "shaw_kv_decode"):
        for k in (3, 20):
            assert (case, "triton", k) in ran and (case, "reference", k) in ran


def test_the_tables_and_the_cost_follow_k():
    point = Point(1, 32, 64, 2, shaw_k=5)
    tables = CASES["shaw_kv_attention"].build(point, "cpu", torch.float32)["params"]
    assert tuple(tables["emb_k"].shape) == (11, 32) == tuple(tables["emb_v"].shape)
    bias = CASES["shaw_bias_attention"].build(point, "cpu", torch.float32)["params"]["table"]
    assert tuple(bias.shape) == (2, 11)
    cost = CASES["shaw_kv_attention"].cost
    small, large = (cost(Point(1, 32, 64, 2, shaw_k=k), torch.float32, "forward") for k in (5, 64))
    assert large.flops > small.flops and large.bytes > small.bytes
    assert FAMILIES["shaw_kv"].at(Point(1, 32, 64, 2)) is FAMILIES["shaw_kv"]


def test_a_bad_k_is_refused_in_one_line(tmp_path):
    proc = run_bench("cases=[shaw_kv_attention]", "shaw_k=0", f"hydra.run.dir={tmp_path / 'b'}")
    assert proc.returncode != 0
    lines = [x for x in proc.stderr.strip().splitlines() if x.strip()]
    assert len(lines) == 1 and "shaw_k" in lines[0], proc.stderr


def test_the_default_k_leaves_the_params_as_before():
    assert Point(1, 32, 64, 2, shaw_k=SHAW_K.default).knobs == ()
    assert "shaw_k" in {k.name for k in CASES["shaw_kv_attention"].knobs}
    assert "shaw_k" not in {k.name for k in CASES["alibi_attention"].knobs}
