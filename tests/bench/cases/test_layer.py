"""The layer cases in-process: every encoding and implementation gated against the float64
layer (the kernels under the interpreter, compiled parts traced by Dynamo with its eager
backend), each row's share of the layer against the `nope` row timed beside it, the decode
steps, and the costs counted by hand."""

import csv
import json

import pytest

from bench import plans as config
from bench.cases import CASES, _common
from bench.cases import layer as L
from bench.registry import Point
from bench.run.runner import Runner
from tests.helpers import FAST

IMPLS = ("nope", "reference", "compiled", "sdpa", "flex", "triton")


def _run(tmp_path, monkeypatch, names, points, modes):
    monkeypatch.setattr(_common, "COMPILE_BACKEND", "eager")  # traced, not code-generated
    entries = tuple(
        config.Entry(
            n,
            tuple(i for i in CASES[n].impls if i.removeprefix(L.PARTNER) in IMPLS),
            points,
            ("float32",),
            ("cpu",),
            modes,
        )
        for n in names
    )
    Runner(config.Plan(entries), FAST, tmp_path, run_id="t", do_calibrate=False).run()
    with open(tmp_path / "results.csv") as f:
        rows = list(csv.DictReader(f))
    ran = [r for r in rows if r["status"] != "skipped"]
    bad = [(r["case"], r["impl"], r["mode"], r["message"]) for r in ran if r["status"] != "ok"]
    assert ran and not bad, bad
    return ran


def _shares_are_against_their_partners(ran):
    """Each row's share against its own partner (the same attention path without the
    encoding, else `nope`), its best share against the fastest partner timed beside it."""
    by = {(r["case"], r["mode"], r["impl"], r["params"]): r for r in ran}
    checked = 0
    for (case, mode, impl, params), r in by.items():
        plain = {"nope", *CASES[case].share_partners.values()}
        if impl in plain:
            assert r["pe_share"] == "" and r["pe_share_profiler"] == ""
            continue
        partner = CASES[case].partner(impl)
        assert r["share_partner"] == partner
        timed = [float(by[k]["p50_ms"]) for p in plain if (k := (case, mode, p, params)) in by]
        share, p50 = float(r["pe_share"]), float(r["p50_ms"])
        got = float(by[(case, mode, partner, params)]["p50_ms"])
        assert share == pytest.approx(1 - got / p50, rel=1e-6)
        assert float(r["pe_share_best"]) == pytest.approx(1 - min(timed) / p50, rel=1e-6)
        assert float(r["pe_share_lo"]) <= share <= float(r["pe_share_hi"])
        assert float(r["tokens_per_s"]) == pytest.approx(_tokens(r) / float(r["p50_ms"]) * 1e3)
        profiled = r["pe_share_profiler"]
        assert (profiled != "") == (mode == "forward"), (case, impl, mode, profiled)
        checked += 1
    return checked


def _tokens(row) -> int:
    decode = row["case"].endswith("_decode")
    return int(row["batch"]) * (1 if decode else int(row["seq_len"]))


def test_every_layer_encoding_and_implementation_is_gated_with_its_share(tmp_path, monkeypatch):
    names = [c.name for c in L.PREFILL]
    point = Point(2, 16, 32, 2, num_kv_heads=1)
    ran = _run(tmp_path, monkeypatch, names, (point,), ("forward",))
    impls = {(r["case"], r["impl"]) for r in ran}
    assert ("layer_rope", "triton") in impls and ("layer_shaw_kv", "triton") in impls
    assert ("layer_t5", "flex") in impls and ("layer_learnable", "compiled") in impls
    assert {r["level"] for r in ran} == {"layer"}
    assert _shares_are_against_their_partners(ran) >= 20


def test_the_gradients_of_each_kind_of_encoding_are_gated(tmp_path, monkeypatch):
    """forward+backward for one encoding of each kind (a learned table added to the input, a
    rotation, a bias table): every weight's and table's gradient through the whole layer. The
    other encodings' backward kernels are checked in tests/posenc_kernels and the attention
    cases."""
    names = ["layer_learnable", "layer_rope", "layer_t5"]
    point = Point(2, 16, 32, 2, num_kv_heads=1)
    ran = _run(tmp_path, monkeypatch, names, (point,), ("forward+backward",))
    assert {r["impl"] for r in ran if r["case"] == "layer_t5"} == {
        "nope",
        *(p + i for p in ("", L.PARTNER) for i in ("reference", "compiled", "sdpa", "triton")),
    }  # FlexAttention has no CPU backward
    assert _shares_are_against_their_partners(ran) >= 7


def test_decode_steps_on_ragged_caches_are_gated_with_their_share(tmp_path, monkeypatch):
    """RoPE at per-row offsets, a bias table, Shaw's value term (ALiBi's and Shaw's scalar
    decode attention: tests/bench/cases/test_sequences.py)."""
    names = ["layer_rope_decode", "layer_t5_decode", "layer_shaw_kv_decode"]
    points = (Point(3, 24, 32, 2, num_kv_heads=1, kv_cache="ragged"),)
    ran = _run(tmp_path, monkeypatch, names, points, ("forward",))
    assert {r["impl"] for r in ran if r["case"] == "layer_t5_decode"} == {
        "nope",
        *(p + i for p in ("", L.PARTNER) for i in ("reference", "sdpa", "flex", "triton")),
    }
    assert json.loads(ran[0]["params"])["kv_cache"] == "ragged"
    assert _shares_are_against_their_partners(ran) >= 8


def test_the_schedule_and_mrope_style_are_knobs_of_their_layers():
    assert "rope_scaling" in CASES["layer_rope"].knob_names
    assert "mrope_style" in CASES["layer_mrope"].knob_names
    assert "kv_cache" in CASES["layer_rope_decode"].knob_names
    assert all(c.share_base == "nope" for c in L.PREFILL + L.DECODE)


def test_layer_costs_counted_by_hand():
    """d = 64, H = 4 (D = 16), Hk = 2, d_ff = 96, B = 2, L = 8, float32."""
    p = Point(2, 8, 64, 4, num_kv_heads=2, d_ff=96)
    mats = 64 * 64 * 2 + 2 * 64 * 32 + 3 * 64 * 96  # q, o; k, v; the MLP
    weights = mats + 2 * 64  # and the norms
    tokens, pairs = 16, 2 * 8 * 9 // 2  # causal: (query, visible key) pairs
    fwd = CASES["layer_rope"].cost(p, _f32(), "forward")
    assert fwd.flops == 2 * tokens * mats + 4 * 4 * 16 * pairs
    assert fwd.bytes == 4 * (weights + 2 * tokens * 64)
    assert fwd.tokens == tokens
    both = CASES["layer_rope"].cost(p, _f32(), "forward+backward")
    assert both.flops == fwd.flops + 2 * 2 * tokens * mats + int(2.5 * 4 * 4 * 16 * pairs)
    step = Point(2, 8, 64, 4, num_kv_heads=2, d_ff=96)  # full caches of 8
    assert both.tokens == tokens  # a training step: the same tokens, forward and backward
    dec = CASES["layer_alibi_decode"].cost(step, _f32(), "forward")
    assert dec.tokens == 2  # one new token a sequence
    assert dec.flops == 2 * 2 * mats + 4 * 4 * 16 * (2 * 8)
    assert dec.bytes == 4 * (weights + 2 * 2 * 64) + 4 * 2 * 2 * 16 * (2 * 8)


def _f32():
    import torch

    return torch.float32


def test_the_decode_truth_rotates_each_new_token_at_its_rows_position():
    """Independent of the case's gather: row b's token, rotated by the tables of a sequence of
    kv_lens[b] tokens at its last position, attending to its cache's first kv_lens[b] keys."""
    import torch
    from torch.testing import assert_close

    from posenc import functional as F
    from posenc.layer import KVCache

    case = CASES["layer_rope_decode"]
    point = Point(3, 24, 32, 2, num_kv_heads=1, kv_cache="ragged")
    inputs = case.build(point, torch.device("cpu"), torch.float64)
    got = case.reference(inputs)
    layer = L._layer(inputs)
    for b, n in enumerate(inputs["kv_lens"].tolist()):
        cos, sin = (t[-1:] for t in F.rope_cos_sin(n, 16, dtype=torch.float64))
        cache = KVCache(
            inputs["cache_k"][b : b + 1, :, :n].clone(),
            inputs["cache_v"][b : b + 1, :, :n].clone(),
            torch.tensor([n]),
        )

        def rotate(q, k, cos=cos, sin=sin):
            return F.apply_rope(q, cos, sin), F.apply_rope(k, cos, sin)

        want = layer(inputs["x"][b : b + 1], rotate=rotate, cache=cache)
        assert_close(got[b : b + 1], want)
    assert len(set(inputs["kv_lens"].tolist())) > 1  # ragged: positions differ per row


def test_a_share_base_must_be_one_of_the_cases_implementations():
    import dataclasses

    from bench.registry import register_case

    bad = dataclasses.replace(CASES["layer_rope"], name="layer_rope_again", share_base="nop")
    with pytest.raises(ValueError, match="share partner 'nop'"):
        register_case(bad)
