"""Implementations from other libraries (bench/cases/_peers.py): transformers' own RoPE, M-RoPE,
T5 bias and BLOOM ALiBi as its models call them, each gated against the float64 truth like
every implementation; where transformers is absent their rows are skipped saying so, never a
crash; where an `hf` row ran, the report's speedups are against it."""

import json

import pytest

from bench.report.rows import speedups
from tests.helpers import FAST_ARGS, read_rows, run_bench

pytest.importorskip("transformers", reason="needs transformers (pip install -e '.[hf]')")

GRIDS = (
    "grids=[{cases:[rope],batch:2,seq_len:[24],d_model:64,num_heads:4,num_kv_heads:2,"
    "layout:bshd,rope_variant:[plain,p_rope,xpos],rope_scaling:[none,yarn]},"
    "{cases:[rope],batch:1,seq_len:[24],d_model:64,num_heads:2,rope_theta:500000.0,"
    "rope_factor:4.0,rope_original:16,rope_scaling:[linear,dynamic,llama3,longrope]},"
    "{cases:[mrope],batch:2,seq_len:[20],d_model:128,num_heads:2,"
    "mrope_style:[qwen2_vl,qwen3_vl]},"
    "{cases:[t5_attention,alibi_attention],batch:2,seq_len:[16],d_model:32,num_heads:2,"
    "causal:[false,true]}]"
)


def _by(rows):
    out = {}
    for r in rows:
        params = json.loads(r["params"])
        out.setdefault((r["case"], r["impl"]), []).append((params, r))
    return out


def test_transformers_rows_are_gated_and_timed(tmp_path):
    out = tmp_path / "hf"
    args = [GRIDS, "impls=[reference,hf]", "mode=forward+backward", "calibrate=false", *FAST_ARGS]
    proc = run_bench(*args, f"hydra.run.dir={out}", report=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    by = _by(read_rows(out / "results.csv"))
    for params, row in by[("rope", "hf")]:
        if params["rope_variant"] == "xpos":
            assert row["status"] == "skipped" and "no xPos" in row["message"]
        elif params["rope_variant"] == "p_rope" and params["rope_scaling"] != "none":
            assert row["status"] == "skipped" and "proportional" in row["message"]
        else:
            assert row["status"] == "ok", row
    assert len([r for p, r in by[("rope", "hf")] if r["status"] == "ok"]) == 3 + 4
    theirs = {p["rope_scaling"]: p for p, r in by[("rope", "hf")] if p.get("rope_theta")}
    assert theirs["llama3"]["rope_theta"] == 500000.0 and theirs["llama3"]["rope_original"] == 16
    for case in ("mrope", "t5_attention"):
        assert {r["status"] for _, r in by[(case, "hf")]} == {"ok"}
    alibi = {p["causal"]: r for p, r in by[("alibi_attention", "hf")]}
    assert alibi[True]["status"] == "ok"
    assert alibi[False]["status"] == "skipped" and "causal only" in alibi[False]["message"]
    report = (out / "report.md").read_text()
    assert "transformers' own code (`hf`) where it ran" in report


def test_without_transformers_the_rows_say_so(tmp_path):
    plugin = tmp_path / "no_transformers.py"
    plugin.write_text("import sys\nsys.modules['transformers'] = None  # as if not installed\n")
    out = tmp_path / "none"
    args = [
        f"plugins=[{plugin}]",
        "cases=[rope]",
        "impls=[reference,hf]",
        "seq_len=[16]",
        "batch=1",
        "d_model=32",
        "num_heads=2",
        "mode=forward",
        "calibrate=false",
        *FAST_ARGS,
    ]
    proc = run_bench(*args, f"hydra.run.dir={out}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = {r["impl"]: r for r in read_rows(out / "results.csv")}
    assert rows["reference"]["status"] == "ok"
    assert rows["hf"]["status"] == "skipped"
    assert rows["hf"]["message"] == "needs transformers (not installed)"


def test_speedups_are_against_hf_where_it_ran():
    import pandas as pd

    base = dict(case="rope", mode="forward", device="cpu", device_name="cpu", dtype="float32")
    shape = dict(batch=1, seq_len=16, d_model=32, num_heads=2, head_dim=16, params="{}")
    rows = [
        dict(base, **shape, impl="reference", p50_ms=2.0),
        dict(base, **shape, impl="hf", p50_ms=4.0),
        dict(base, **shape, impl="triton", p50_ms=1.0),
        dict(base, **dict(shape, seq_len=32), impl="reference", p50_ms=2.0),
        dict(base, **dict(shape, seq_len=32), impl="hf", p50_ms=float("nan")),  # wrong: untimed
        dict(base, **dict(shape, seq_len=32), impl="triton", p50_ms=1.0),
    ]
    got = speedups(pd.DataFrame(rows)).set_index(["seq_len", "impl"])
    assert got.loc[(16, "triton"), "baseline"] == "hf"
    assert got.loc[(16, "triton"), "speedup"] == 4.0
    assert got.loc[(32, "triton"), "baseline"] == "reference"
    assert got.loc[(32, "triton"), "speedup"] == 2.0
