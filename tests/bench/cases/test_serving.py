"""The serving cases (bench/cases/serving.py) through the harness: the fused RoPE + cache write
of a mixed step and the decode attention over paged caches, every implementation gated against
float64 (the kernels under the interpreter); the step's layout and cost counted by hand; the
gate sees a cache written at a wrong slot."""

import json

import torch

from bench.cases import CASES
from bench.cases.sequences import kv_lengths
from bench.cases.serving import _step, block_table, new_tokens
from bench.registry import Point, as_call
from bench.run import check
from tests.bench.cases.test_sequences import FAMILIES, _run

STEP = dict(num_kv_heads=2, prefill=2, chunk=5, block_size=4, kv_cache="ragged")


def test_the_serving_cases_gate_every_implementation(tmp_path):
    """One run (one process: the cases' plumbing, the kernels gated elsewhere too):
    - a mixed step (2 of 3 sequences prefilling 5 tokens, ragged caches, blocks of 4) in each
      RoPE form, eager and the fused kernel against posenc's float64 reference;
    - every family's decode over shuffled blocks of 8, ragged caches, 2 queries a sequence
      (one: the kernel tests), the kernel on the pages;
    - T5's on the gathered caches and through torch's PagedAttention over FlexAttention
      (compiled on the CPU), its bias a score_mod at each row's query offset; Shaw's value
      term is said to be inexpressible there."""
    paged = ",".join(f"{f}_paged" for f in FAMILIES)
    grids = (
        "grids=[{cases:[rope_cache],batch:3,seq_len:24,d_model:128,num_heads:4,num_kv_heads:2,"
        "prefill:2,chunk:5,block_size:4,kv_cache:ragged,"
        "rope_form:[half_split,interleaved,partial,mrope],impls:[eager,triton]},"
        f"{{cases:[{paged}],batch:2,seq_len:40,d_model:64,num_heads:2,num_kv_heads:1,"
        "q_len:2,block_size:8,kv_cache:ragged,impls:[reference,triton]},"
        "{cases:[t5_paged,shaw_kv_paged],batch:2,seq_len:48,d_model:64,num_heads:2,"
        "kv_cache:ragged,impls:[reference,triton_dense,flex_paged]}]"
    )
    impls = "impls=[eager,reference,triton,triton_dense,flex_paged]"  # each grid takes its own
    rows, ran = _run(tmp_path, "serving", grids, impls, "mode=forward")
    step = [r for r in ran if r["case"] == "rope_cache"]
    assert len(step) == 2 * 4
    assert {json.loads(r["params"])["rope_form"] for r in step} == {
        "half_split", "interleaved", "partial", "mrope"
    }  # fmt: skip
    assert all(float(r["tokens_per_s"]) > 0 for r in step)  # tokens: 2 chunks of 5 + 1 decode
    triton = {r["case"] for r in ran if r["impl"] == "triton" and r["case"] != "rope_cache"}
    assert triton == {f"{f}_paged" for f in FAMILIES}  # FoX's gates at the table's positions
    assert {r["case"] for r in ran if r["impl"] == "triton_dense"} == {"t5_paged", "shaw_kv_paged"}
    assert [r["case"] for r in ran if r["impl"] == "flex_paged"] == ["t5_paged"]
    skipped = [r for r in rows if r["impl"] == "flex_paged" and r["case"] == "shaw_kv_paged"]
    assert "not expressible" in skipped[0]["message"]


def test_the_step_layout_and_cost_by_hand():
    """Contexts from the ragged draw, then each sequence's new tokens; every token a distinct
    slot inside its sequence's own blocks; bytes of q, k, v read and written once plus each
    token's table rows, position and slot."""
    point = Point(3, 24, 128, 4, **STEP)
    contexts = kv_lengths(point)
    assert new_tokens(point) == [5, 5, 1]
    positions, owner = _step(point)
    assert positions == [
        *range(contexts[0], contexts[0] + 5), *range(contexts[1], contexts[1] + 5), contexts[2]
    ]  # fmt: skip
    assert owner == [0] * 5 + [1] * 5 + [2]
    totals = [c + n for c, n in zip(contexts, new_tokens(point), strict=True)]
    table, num_blocks = block_table(point, totals, "cpu")
    assert num_blocks == sum(-(-n // 4) for n in totals)
    used = [table[b, : -(-n // 4)].tolist() for b, n in enumerate(totals)]
    assert sorted(sum(used, [])) == list(range(num_blocks))  # each block owned once
    inputs = CASES["rope_cache"].build(point, torch.device("cpu"), torch.float32)
    slots = inputs["slot_mapping"].tolist()
    assert len(set(slots)) == 11
    for s, p, b in zip(slots, positions, owner, strict=True):
        assert s // 4 == used[b][p // 4] and s % 4 == p % 4
    cost = CASES["rope_cache"].cost(point, torch.bfloat16, "forward")
    t, d = 11, 32
    assert cost.tokens == t
    assert cost.bytes == 2 * t * (4 + 2 * 2) * d * 2 + t * (8 * 16 + 16)
    assert cost.flops == 3 * t * (4 + 2) * d


def test_the_gate_sees_a_cache_written_at_a_wrong_slot():
    """The caches are outputs the check compares: eager's step passes; the same step with two
    tokens' k swapped between their slots is wrong."""
    case, point = CASES["rope_cache"], Point(3, 24, 128, 4, **STEP)
    inputs = case.build(point, torch.device("cpu"), torch.float32)
    want = check.truth(case.reference, inputs, case, None, 3, torch.float32, grad=False)
    good = as_call(case.impls["eager"].make(inputs)).fn()
    q, kc, vc = (t.clone() for t in good)
    flat, slots = kc.view(-1, *kc.shape[2:]), inputs["slot_mapping"]
    flat[slots[[0, 1]]] = flat[slots[[1, 0]]].clone()
    errs = {n: check.measure_errors(o, want, None, None, ()) for n, o in (("good", good),)}
    ok, _, _ = check.verdict(errs["good"], None, torch.float32)
    assert ok
    bad, ratio, why = check.verdict(
        check.measure_errors((q, kc, vc), want, None, None, ()), errs["good"], torch.float32
    )
    assert not bad and "out1" in why, why
