"""The 2025 schemes through the harness: FoX as a bias family (its attention and layer cases;
its decode, packed and paged ones are the families' generic cases, whose kernel paths
tests/posenc_kernels/test_relbias_fox_sinks.py covers), sinks on the attention cases, iRoPE's
temperature in a layer; every implementation gated against float64 (gradients too: the gates',
the sinks'), the kernels under the interpreter."""

import json

from tests.bench.cases.test_sequences import _run


def test_fox_sinks_and_irope_cases_gate_every_implementation(tmp_path):
    grids = (
        "grids=[{cases:[fox_attention,alibi_attention],batch:2,seq_len:24,d_model:64,"
        "num_heads:2,num_kv_heads:1,causal:true,sinks:[false,true],mode:forward+backward,"
        "impls:[reference,sdpa,triton]},"
        "{cases:[layer_fox,layer_irope],batch:1,seq_len:16,d_model:64,num_heads:2,"
        "num_kv_heads:1,d_ff:64,mode:forward+backward,impls:[nope,reference,triton]}]"
    )
    rows, ran = _run(tmp_path, "2025", grids, "impls=[nope,reference,sdpa,triton]")
    got = {(r["case"], r["impl"], json.loads(r["params"]).get("sinks")) for r in ran}
    for case in ("fox_attention", "alibi_attention"):
        for sinks in (False, True):
            assert (case, "triton", sinks) in got and (case, "reference", sinks) in got
    assert ("alibi_attention", "sdpa", False) in got  # sinks: no SDPA row, said why
    skipped = {(r["case"], r["message"]) for r in rows if r["status"] == "skipped"}
    assert any(c == "alibi_attention" and "softmax column" in m for c, m in skipped)
    assert any(c == "fox_attention" and "cumulative gates" in m for c, m in skipped)
    assert {r["impl"] for r in ran if r["case"] == "layer_fox"} == {
        "nope",
        *(p + i for p in ("", "nope_") for i in ("reference", "triton")),
    }  # each with its partner: the same attention path without the gates
    assert {r["impl"] for r in ran if r["case"] == "layer_irope"} == {"nope", "reference"}
    fox = [r for r in ran if r["case"] == "layer_fox" and not r["impl"].startswith("nope")]
    assert fox and all(r["pe_share"] != "" for r in fox)
