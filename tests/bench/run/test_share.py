"""The positional encoding's share of a layer: the removal arithmetic and its interval, the
profiler's attribution to posenc.layer's regions."""

import time

import pytest
import torch
from torch.profiler import record_function

from bench.run import share
from bench.run.samples import Timing
from posenc.layer import REGIONS


def test_removal_share_and_its_interval():
    row = Timing(tuple(float(x) for x in range(90, 111)))  # median 100, interval ~[95, 105]
    base = Timing(tuple(float(x) for x in range(70, 91)))  # median 80
    got = share.removal(row, base)
    assert got["pe_share"] == pytest.approx(0.2)
    (lo, hi), (blo, bhi) = row.median_ci(), base.median_ci()
    assert got["pe_share_lo"] == pytest.approx(1 - bhi / lo)
    assert got["pe_share_hi"] == pytest.approx(1 - blo / hi)
    assert got["pe_share_lo"] < 0.2 < got["pe_share_hi"]


def test_the_profilers_share_counts_the_position_and_the_attentions_excess():
    call, pos, att, enc = (
        share.CALL,
        *(REGIONS[k] for k in ("position", "attention", "encoded_attention")),
    )
    base = {call: 8.0, pos: 0.0, att: 3.0, enc: 0.0}
    rope = {call: 9.0, pos: 1.0, att: 3.2, enc: 0.0}  # its attention is the base's: not counted
    alibi = {call: 12.0, pos: 0.0, att: 0.0, enc: 7.0}  # 4 ms beyond the plain attention
    assert share.profiled(rope, base) == pytest.approx(1 / 9)
    assert share.profiled(alibi, base) == pytest.approx(4 / 12)
    assert share.profiled(dict(rope, **{call: 0.0}), base) is None
    partner = {call: 11.0, pos: 0.0, att: 0.0, enc: 6.0}  # nope_sdpa: a caller's attention
    assert share.profiled(alibi, partner) == pytest.approx(1 / 12)


def _layer_like(pos_s: float, rest_s: float):
    def fn():
        with record_function(REGIONS["position"]):
            time.sleep(pos_s)
        with record_function(REGIONS["attention"]):
            time.sleep(rest_s)

    return fn


def test_regions_are_read_from_a_profile():
    """Sleeps, not work: the regions' wall times do not depend on this machine's speed."""
    ms = share.regions_ms(_layer_like(0.02, 0.02), torch.device("cpu"), calls=2)
    assert ms[REGIONS["position"]] >= 19 and ms[REGIONS["attention"]] >= 19
    assert ms[share.CALL] >= ms[REGIONS["position"]] + ms[REGIONS["attention"]]
    assert ms[REGIONS["encoded_attention"]] == 0.0


def test_group_shares_profile_forward_groups_only():
    t = Timing((2.0, 2.0, 2.0))
    fns = {"nope": _layer_like(0.0, 0.01), "rope": _layer_like(0.01, 0.01)}
    timings = {"nope": Timing((1.0, 1.0, 1.0)), "rope": t}
    fwd = share.group_shares("nope", {}, timings, fns, "forward", torch.device("cpu"))
    assert set(fwd) == {"rope"} and fwd["rope"]["pe_share"] == pytest.approx(0.5)
    assert 0.3 < fwd["rope"]["pe_share_profiler"] < 0.7
    both = share.group_shares("nope", {}, timings, fns, "forward+backward", torch.device("cpu"))
    assert "pe_share_profiler" not in both["rope"]
    assert share.group_shares("nope", {}, {"rope": t}, fns, "forward", torch.device("cpu")) == {}


def test_a_call_the_profiler_cannot_follow_keeps_its_removal_share(monkeypatch):
    real = share.regions_ms

    def fails_for_rope(fn, device, calls=share.PROFILE_CALLS):
        if fn is fns["rope"]:
            raise RuntimeError("no profile")
        return real(fn, device, calls)

    fns = {"nope": _layer_like(0.0, 0.001), "rope": _layer_like(0.001, 0.001)}
    monkeypatch.setattr(share, "regions_ms", fails_for_rope)
    timings = {"nope": Timing((1.0,) * 3), "rope": Timing((2.0,) * 3)}
    got = share.group_shares("nope", {}, timings, fns, "forward", torch.device("cpu"))
    assert got["rope"]["pe_share"] == pytest.approx(0.5) and "pe_share_profiler" not in got["rope"]


def _t(ms: float) -> Timing:
    return Timing((ms * 0.99, ms, ms * 1.01) * 7)


def test_each_row_is_shared_against_its_own_partner_and_the_best_one():
    """An SDPA row against SDPA without the bias, an eager row against eager without it; the
    best column against the fastest layer without an encoding, whichever path it took."""
    timings = {
        "nope": _t(10.0),
        "nope_sdpa": _t(8.0),
        "nope_reference": _t(16.0),
        "sdpa": _t(10.0),
        "reference": _t(20.0),
    }
    partners = {"sdpa": "nope_sdpa", "reference": "nope_reference"}
    got = share.group_shares("nope", partners, timings, {}, "forward+backward", "cpu")
    assert set(got) == {"sdpa", "reference"}  # partners get no share of their own
    assert got["sdpa"]["share_partner"] == "nope_sdpa"
    assert got["sdpa"]["pe_share"] == pytest.approx(1 - 8 / 10)
    assert got["reference"]["pe_share"] == pytest.approx(1 - 16 / 20)
    assert got["reference"]["pe_share_best"] == pytest.approx(1 - 8 / 20)
    assert "share_note" not in got["sdpa"]


def test_a_share_wholly_below_zero_is_flagged_as_a_slower_partner():
    timings = {"nope": _t(10.0), "nope_sdpa": _t(12.0), "sdpa": _t(10.0)}
    got = share.group_shares("nope", {"sdpa": "nope_sdpa"}, timings, {}, "forward", "cpu")
    assert got["sdpa"]["pe_share_hi"] < 0
    assert "nope_sdpa (the same path without the encoding) read slower" in got["sdpa"]["share_note"]


def test_a_row_without_its_partner_timed_gets_no_share():
    timings = {"nope": _t(10.0), "sdpa": _t(12.0)}
    got = share.group_shares("nope", {"sdpa": "nope_sdpa"}, timings, {}, "forward", "cpu")
    assert got == {}
