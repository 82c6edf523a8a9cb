"""The decode and packed attention cases through the harness: every implementation gated
against float64 (the kernel under the interpreter), the seeded lengths, and the costs counted
by hand."""

import json

import pytest
import torch

from bench.cases import CASES
from bench.cases.sequences import document_bounds, kv_lengths
from bench.registry import Point
from tests.helpers import FAST_ARGS, read_rows, run_bench

FAMILIES = ("alibi", "t5", "shaw_bias", "shaw_kv", "fox")


def _run(tmp_path, name, *args):
    out = tmp_path / name
    proc = run_bench(*args, "calibrate=false", *FAST_ARGS, f"hydra.run.dir={out}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = read_rows(out / "results.csv")
    ran = [r for r in rows if r["status"] != "skipped"]
    assert ran and {r["status"] for r in ran} == {"ok"}, [
        (r["case"], r["impl"], r["params"], r["message"]) for r in ran if r["status"] != "ok"
    ]
    return rows, ran


def test_decode_cases_gate_every_implementation(tmp_path):
    """A step of 1 and of 3 queries against full and ragged caches, grouped-query heads."""
    cases = ",".join(f"{f}_decode" for f in FAMILIES)
    rows, ran = _run(
        tmp_path,
        "decode",
        f"cases=[{cases}]",
        "impls=[reference,sdpa,sdpa_nobias,triton]",
        "batch=3",
        "seq_len=40",
        "d_model=64",
        "num_heads=2",
        "num_kv_heads=1",
        "q_len=3",
        "kv_cache=[full,ragged]",
        "mode=forward",
    )
    triton = [r for r in ran if r["impl"] == "triton"]
    assert len(triton) == len(FAMILIES) * 2  # every family at every point
    params = {r["params"] for r in triton}
    assert {json.loads(p)["kv_cache"] for p in params} == {"full", "ragged"}
    assert len([r for r in ran if r["impl"] == "sdpa"]) == 3 * 2  # not Shaw's value term, FoX


def test_packed_cases_gate_forward_and_backward(tmp_path):
    cases = ",".join(f"{f}_packed" for f in FAMILIES)
    rows, ran = _run(
        tmp_path,
        "packed",
        f"cases=[{cases}]",
        "impls=[reference,sdpa,sdpa_nobias,triton]",
        "batch=1",
        "seq_len=29",
        "d_model=64",
        "num_heads=2",
        "num_kv_heads=1",
        "documents=3",
        "causal=true",
        "mode=forward+backward",
    )
    assert len([r for r in ran if r["impl"] == "triton"]) == len(FAMILIES)


def test_flex_takes_the_sequences_as_block_masks(tmp_path):
    """FlexAttention (compiled on the CPU, forward: no CPU backward) with per-row offsets in its
    score_mod and the caches' lengths in its block mask."""
    _run(
        tmp_path,
        "flex",
        "cases=[t5_decode]",
        "impls=[reference,flex]",
        "batch=2",
        "seq_len=40",
        "d_model=64",
        "num_heads=2",
        "kv_cache=ragged",
        "q_len=2",
        "mode=forward",
    )


def test_lengths_are_seeded_and_within_bounds():
    p = Point(6, 100, 64, 2, kv_cache="ragged", q_len=3)
    lens = kv_lengths(p)
    assert lens == kv_lengths(Point(6, 100, 64, 2, kv_cache="ragged", q_len=3))
    assert lens[0] == 100 and all(50 <= n <= 100 for n in lens) and len(set(lens)) > 1
    assert kv_lengths(Point(3, 100, 64, 2)) == [100] * 3
    cu = document_bounds(Point(1, 50, 64, 2, documents=5))
    assert cu == document_bounds(Point(1, 50, 64, 2, documents=5))
    assert (
        cu[0] == 0
        and cu[-1] == 50
        and len(cu) == 6
        and all(b > a for a, b in zip(cu, cu[1:], strict=False))
    )


def test_bad_points_say_why():
    assert "batch must be 1" in CASES["alibi_packed"].check(Point(2, 16, 64, 2))
    assert "documents=20 > seq_len=16" in CASES["alibi_packed"].check(
        Point(1, 16, 64, 2, documents=20)
    )
    assert "q_len=20 > seq_len=16" in CASES["alibi_decode"].check(Point(1, 16, 64, 2, q_len=20))


BF16 = torch.bfloat16


@pytest.mark.parametrize(
    ("case", "point", "want"),
    [
        # decode, full caches: B=2, H=2, Hk=1, D=8, one query against 10 keys. q and out
        # (2 x 2 x 1 x 8) bf16 = 64 B each; k and v (2 x 1 x 10 x 8) = 320 B each; slopes 8 B.
        # FLOPs 4 H D per pair: 2 rows x 10 pairs x 64 = 1280
        ("alibi_decode", Point(2, 10, 16, 2, num_kv_heads=1), (2 * 64 + 2 * 320 + 8, 1280)),
        # 3 queries at the end of 10 keys: q and out 192 B each; pairs 8 + 9 + 10 = 27 a row
        ("alibi_decode", Point(2, 10, 16, 2, num_kv_heads=1, q_len=3), (1032, 3456)),
    ],
)
def test_decode_costs_by_hand(case, point, want):
    got = CASES[case].cost(point, BF16, "forward")
    assert (got.bytes, got.flops) == want


def test_packed_and_ragged_costs_count_the_pairs_seen():
    """Packed: the documents' own squares (or triangles when causal); ragged: the cache rows'
    own lengths, in the FLOPs and in the bytes of k and v."""
    p = Point(1, 30, 16, 2, documents=3, causal=True)
    cu = document_bounds(p)
    sizes = [b - a for a, b in zip(cu, cu[1:], strict=False)]
    pairs = sum(n * (n + 1) // 2 for n in sizes)
    assert CASES["t5_packed"].cost(p, BF16, "forward").flops == 4 * 2 * pairs * 8
    r = Point(4, 64, 16, 2, kv_cache="ragged")
    keys = sum(kv_lengths(r))
    got = CASES["alibi_decode"].cost(r, BF16, "forward")
    assert got.flops == 4 * 2 * keys * 8
    assert got.bytes == 2 * (2 * 4 * 8 * 2) + 2 * (2 * keys * 8 * 2) + 8
