"""Grouped-query attention with a relative bias through the harness: k and v with fewer heads,
every implementation gated against float64 (SDPA with enable_gqa, the reference and the kernel
taking them as they are), and recorded with the knob."""

import json

from tests.helpers import FAST_ARGS, read_rows, run_bench


def test_attention_cases_take_fewer_kv_heads(tmp_path):
    out = tmp_path / "gqa"
    args = [
        "cases=[alibi_attention,t5_attention,shaw_bias_attention,shaw_kv_attention]",
        "impls=[reference,sdpa,triton]",  # sdpa_nobias: the same enable_gqa call as sdpa
        "batch=1",
        "seq_len=24",
        "d_model=128",
        "num_heads=4",
        "num_kv_heads=1",
        "causal=true",
        "mode=forward+backward",
        "calibrate=false",
        *FAST_ARGS,
        f"hydra.run.dir={out}",
    ]
    proc = run_bench(*args)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = read_rows(out / "results.csv")
    kv = {json.loads(r["params"])["num_kv_heads"] for r in rows}
    assert kv == {1}
    ran = [r for r in rows if r["status"] != "skipped"]
    assert {r["status"] for r in ran} == {"ok"}, [
        (r["case"], r["impl"], r["message"]) for r in ran if r["status"] != "ok"
    ]
    triton = [r for r in ran if r["impl"] == "triton"]
    assert len(triton) == 4  # one per family
    sdpa = [r for r in ran if r["impl"] == "sdpa"]
    assert len(sdpa) == 3  # Shaw's value term: not expressible in SDPA
