"""Configuration validated into a plan: every bad value named, the product of the axes, knobs
crossed only where declared, grids and their filters, smoke points, pinned axes."""

import dataclasses

import pytest
import torch

from bench.cases._common import kv_heads
from bench.config.plan import make_plan
from tests.helpers import cfg


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        ({"cases": ["nope"]}, "cases"),
        ({"impls": ["nonesuch"]}, "impls"),
        ({"batch": [1, -2]}, "batch"),
        ({"seq_len": 0}, "seq_len"),
        ({"d_model": 10, "num_heads": 3}, "divisible"),
        ({"dtype": "float8"}, "dtype"),
        ({"device": "tpu"}, "device"),
        ({"mode": ["sideways"]}, "mode"),
        ({"timing.min_reps": 0}, "timing"),
        ({"timing.passes": 0}, "timing.passes"),
        ({"timing.rel_ci": 0.0}, "timing.rel_ci"),
        ({"timing.rel_spread": -0.1}, "timing.rel_spread"),
        ({"layout": "bsdh"}, "layout"),
        ({"num_kv_heads": 3, "num_heads": 4, "d_model": 16}, "num_kv_heads"),
        ({"causal": "yes"}, "causal"),
        ({"fwd_tiles": "128x64"}, "fwd_tiles"),
        ({"fwd_tiles": "7x7x4x2"}, "fwd_tiles: block_m must be a power of two"),
        ({"bwd_tiles": "64x64x3x2"}, "bwd_tiles: num_warps must be"),
        ({"timing.threads": 0}, "timing.threads"),
        ({"dtype": "bfloat61"}, "did you mean bfloat16"),
        ({"cases": ["rope"], "impls": ["sdpa"]}, "impls"),
    ],
)
def test_invalid_config_names_the_key(overrides, key):
    with pytest.raises(ValueError, match=key):
        make_plan(cfg(**overrides))


def test_plan_is_the_product_of_the_axes():
    plan = make_plan(cfg(batch=[1, 2], seq_len=[8, 16, 32], d_model=16, num_heads=[2, 4]))
    assert {len(e.points) for e in plan.entries} == {2 * 3 * 2}
    assert plan.devices == ("cuda",) if torch.cuda.is_available() else ("cpu",)


def test_knobs_cross_only_the_cases_that_declare_them():
    """layout and num_kv_heads are rope's knobs: rope gets 2 x 2 points per shape, sinusoidal
    one; each point's knobs end in the params column."""
    plan = make_plan(
        cfg(
            cases=["rope", "sinusoidal"],
            d_model=32,
            num_heads=4,
            batch=1,
            seq_len=8,
            layout=["bshd", "bhsd"],
            num_kv_heads=[None, 2],
        )
    )
    by = {e.case: e for e in plan.entries}
    assert len(by["rope"].points) == 4 and len(by["sinusoidal"].points) == 1
    assert {p.params(("layout", "num_kv_heads")) for p in by["rope"].points} == {
        '{"layout": "bshd", "num_kv_heads": null}',
        '{"layout": "bshd", "num_kv_heads": 2}',
        '{"layout": "bhsd", "num_kv_heads": null}',
        '{"layout": "bhsd", "num_kv_heads": 2}',
    }


def test_grids_union_their_products_and_the_top_level_filters_them():
    grids = [
        {"cases": ["rope"], "seq_len": [8, 16]},
        {"cases": ["alibi_attention", "rope"], "seq_len": 32, "impls": ["reference", "sdpa"]},
    ]
    plan = make_plan(cfg(grids=grids, batch=1, d_model=32, num_heads=4))
    assert [(e.case, len(e.points)) for e in plan.entries] == [
        ("rope", 2),
        ("alibi_attention", 1),
        ("rope", 1),
    ]
    assert plan.entries[1].impls == ("reference", "sdpa")
    assert plan.entries[2].impls == ("reference",)  # rope has no sdpa
    only = make_plan(
        cfg(grids=grids, batch=1, d_model=32, num_heads=4, cases=["rope"], impls=["reference"])
    )
    assert [(e.case, e.impls) for e in only.entries] == [("rope", ("reference",))] * 2
    with pytest.raises(ValueError, match=r"grids\[1\]\.seq_len"):
        make_plan(cfg(grids=[{}, {"seq_len": 0}]))
    with pytest.raises(ValueError, match=r"grids\[0\]\.seqlen: not an axis"):
        make_plan(cfg(grids=[{"seqlen": 8}]))


def test_smoke_shrinks_every_point_and_keeps_the_heads():
    plan = make_plan(
        cfg(
            grids=[
                {
                    "cases": ["rope"],
                    "batch": 8,
                    "seq_len": 4096,
                    "d_model": 4096,
                    "num_heads": 32,
                    "num_kv_heads": 8,
                }
            ],
            smoke=True,
        )
    )
    (point,) = plan.entries[0].points
    assert (point.batch, point.seq_len, point.head_dim, point.num_heads, kv_heads(point)) == (
        1,
        16,
        16,
        32,
        8,
    )


def test_an_axis_pinned_on_the_command_line_wins_over_the_grids():
    grids = [{"cases": ["rope"], "seq_len": [8, 16], "batch": 2}]
    plan = make_plan(
        cfg(grids=grids, seq_len=32, d_model=32, num_heads=4), pinned=frozenset({"seq_len"})
    )
    assert {(p.batch, p.seq_len) for p in plan.entries[0].points} == {(2, 32)}
    overlapping = [{"cases": ["rope"], "seq_len": [8, 16]}, {"cases": ["rope"], "seq_len": 16}]
    plan = make_plan(
        cfg(
            grids=overlapping,
            batch=1,
            d_model=32,
            num_heads=4,
            device="cpu",
            impls=["reference"],
            mode="forward",
        )
    )
    assert plan.rows() == 2  # the point both grids list counts once


def test_a_top_level_value_is_named_as_the_user_wrote_it():
    """sweep-like grids with seq_len pinned on the command line: the error names seq_len, not
    grids[0].seq_len; a value the grid set keeps its grid's name."""
    grids = [{"cases": ["rope"], "seq_len": [8, 16]}]
    with pytest.raises(ValueError, match=r"^seq_len: every value"):
        make_plan(
            cfg(grids=grids, seq_len=[-1], batch=1, d_model=16, num_heads=2),
            frozenset({"seq_len"}),
        )
    with pytest.raises(ValueError, match=r"^grids\[0\]\.seq_len"):
        make_plan(
            cfg(grids=[{"cases": ["rope"], "seq_len": [-8]}], batch=1, d_model=16, num_heads=2)
        )


def test_a_share_case_runs_its_partner_whatever_the_impls():
    """layer_rope's share is 1 - t(nope) / t(row): nope joins the chosen impls."""
    plan = make_plan(
        cfg(cases=["layer_rope"], impls=["reference"], d_model=32, num_heads=4, seq_len=8)
    )
    assert plan.entries[0].impls == ("nope", "reference")


def test_knobs_are_those_of_the_registered_cases(monkeypatch):
    """KNOBS is derived from the registered cases: a case built but not registered declares
    nothing; a registered one adds its knobs; a knob named like a base axis, or a second knob
    of a name with other settings, refuses the case in one line and adds nothing."""
    from bench import registry
    from bench.checks import one_of

    monkeypatch.setattr(registry, "CASES", dict(registry.CASES))
    monkeypatch.setattr(registry, "KNOBS", dict(registry.KNOBS))
    rope = registry.CASES["rope"]

    def case(name, *knobs):
        return dataclasses.replace(rope, name=name, knobs=knobs)

    flavour = registry.Knob("flavour", "a", "a test knob", one_of("a", "b"))
    built = case("built_only", flavour)
    assert "flavour" not in registry.KNOBS
    registry.register_case(built)
    assert registry.KNOBS["flavour"] is flavour
    other = registry.Knob("flavour", "b", "the same name, another default", one_of("a", "b"))
    shadow = registry.Knob("batch", 1, "a base axis", one_of(1))
    for bad, why in ((other, "declared twice, differently"), (shadow, "not a name a knob")):
        with pytest.raises(ValueError, match=why):
            registry.register_case(case("refused", registry.Knob("extra", 0, "x", one_of(0)), bad))
        assert "refused" not in registry.CASES and "extra" not in registry.KNOBS
