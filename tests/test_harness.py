"""The harness in-process: config validation, the gate, failing points, resume, the report."""

import csv
import dataclasses
import json

import pytest
import torch
from omegaconf import OmegaConf

from bench.config.plan import make_plan
from bench.config.schema import TimingConfig, config_class
from bench.registry import Case, Cost, Impl, Point
from bench.run.runner import Runner

FAST = TimingConfig(warmup_s=0.0, min_reps=2, max_reps=3, budget_s=0.0, rel_spread=None)


def _cfg(**overrides):
    cfg = OmegaConf.structured(config_class())
    for key, value in overrides.items():
        OmegaConf.update(cfg, key, value)
    return cfg


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        ({"cases": ["nope"]}, "cases"),
        ({"impls": ["nope"]}, "impls"),
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
        make_plan(_cfg(**overrides))


def test_plan_is_the_product_of_the_axes():
    plan = make_plan(_cfg(batch=[1, 2], seq_len=[8, 16, 32], d_model=16, num_heads=[2, 4]))
    assert {len(e.points) for e in plan.entries} == {2 * 3 * 2}
    assert plan.devices == ("cuda",) if torch.cuda.is_available() else ("cpu",)


def test_knobs_cross_only_the_cases_that_declare_them():
    """layout and num_kv_heads are rope's knobs: rope gets 2 x 2 points per shape, sinusoidal
    one; each point's knobs end in the params column."""
    plan = make_plan(
        _cfg(
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
    plan = make_plan(_cfg(grids=grids, batch=1, d_model=32, num_heads=4))
    assert [(e.case, len(e.points)) for e in plan.entries] == [
        ("rope", 2),
        ("alibi_attention", 1),
        ("rope", 1),
    ]
    assert plan.entries[1].impls == ("reference", "sdpa")
    assert plan.entries[2].impls == ("reference",)  # rope has no sdpa
    only = make_plan(
        _cfg(grids=grids, batch=1, d_model=32, num_heads=4, cases=["rope"], impls=["reference"])
    )
    assert [(e.case, e.impls) for e in only.entries] == [("rope", ("reference",))] * 2
    with pytest.raises(ValueError, match=r"grids\[1\]\.seq_len"):
        make_plan(_cfg(grids=[{}, {"seq_len": 0}]))
    with pytest.raises(ValueError, match=r"grids\[0\]\.seqlen: not an axis"):
        make_plan(_cfg(grids=[{"seqlen": 8}]))


def test_smoke_shrinks_every_point_and_keeps_the_heads():
    plan = make_plan(
        _cfg(
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
    assert (point.batch, point.seq_len, point.head_dim, point.num_heads, point.kv_heads) == (
        1,
        16,
        16,
        32,
        8,
    )


def _toy_case(impls):
    """y = 2x; impls decide whether they get it right."""
    return Case(
        name="toy",
        level="encoder",
        build=lambda p, device, dtype: {"x": torch.randn(p.batch, p.seq_len, device=device)},
        reference=lambda inputs: 2 * inputs["x"].double(),
        impls=impls,
        baseline="good",
        cost=lambda p, dtype, mode: Cost(
            8 * p.batch * p.seq_len * (1 + (mode != "forward")), p.batch * p.seq_len
        ),
        grad_inputs=("x",),
        batched=("x",),
    )


ONE_POINT = (Point(3, 8, 4, 2),)


def _run(tmp_path, case, monkeypatch, *, resume=False, points=ONE_POINT, modes=None, timing=FAST):
    from bench.config import plan as config
    from bench.run import runner

    monkeypatch.setitem(runner.CASES, "toy", case)
    entry = config.Entry(
        "toy",
        tuple(case.impls),
        points,
        ("float32",),
        ("cpu",),
        modes or ("forward", "forward+backward"),
    )
    plan = config.Plan((entry,))
    r = Runner(plan, timing, tmp_path, run_id="t", resume=resume, do_calibrate=False)
    r.run()
    with open(tmp_path / "results.csv") as f:
        return list(csv.DictReader(f))


def test_gate_catches_a_wrong_implementation_and_never_times_it(tmp_path, monkeypatch):
    calls = {"wrong": 0}

    def wrong(inputs):
        def call():
            calls["wrong"] += 1
            return 2 * inputs["x"] + 1e-2 * (inputs["x"].shape[0] > 2)  # off on the last row too

        return call

    case = _toy_case({"good": Impl(lambda i: lambda: 2 * i["x"]), "bad": Impl(wrong)})
    rows = {(r["impl"], r["mode"]): r for r in _run(tmp_path, case, monkeypatch)}
    good = rows[("good", "forward")]
    assert good["status"] == "ok" and float(good["p50_ms"]) > 0
    assert float(good["p50_ci_lo_ms"]) <= float(good["p50_ms"]) <= float(good["p50_ci_hi_ms"])
    bad = rows[("bad", "forward")]
    assert bad["status"] == "wrong" and bad["p50_ms"] == "" and float(bad["max_abs_err"]) > 0
    assert calls["wrong"] == 2  # the gate's one call per mode, no timing


def test_a_failing_implementation_becomes_a_row_and_the_sweep_goes_on(tmp_path, monkeypatch):
    def broken(inputs):
        raise RuntimeError("boom\nsecond line")

    case = _toy_case({"broken": Impl(broken), "good": Impl(lambda i: lambda: 2 * i["x"])})
    rows = _run(tmp_path, case, monkeypatch, modes=("forward",))
    by = {r["impl"]: r for r in rows}
    assert by["broken"]["status"] == "error"
    assert by["broken"]["message"] == "the check's call: RuntimeError: boom"  # says which part
    assert by["good"]["status"] == "ok"


def test_implementations_of_a_point_are_timed_side_by_side(tmp_path, monkeypatch):
    """Per point and mode one side-by-side group of every implementation that passed the gate
    (never a wrong one); backward mode, whose calls hold a graph each, one at a time; a call
    that fails inside the group becomes its own error row."""
    from bench.run import point, timing

    groups = []

    def spy(fns, *args, **kwargs):
        groups.append(sorted(fns))
        return timing.measure_side_by_side(fns, *args, **kwargs)

    monkeypatch.setattr(point, "measure_side_by_side", spy)
    flaky = {"n": 0}

    def fails_when_timed(inputs):
        def call():
            flaky["n"] += 1
            if flaky["n"] > 1:  # passes the gate, then fails in the group's warm-up
                raise RuntimeError("late failure")
            return 2 * inputs["x"]

        return call

    impls = {
        "good": Impl(lambda i: lambda: 2 * i["x"]),
        "fast": Impl(lambda i: lambda: i["x"] + i["x"]),
        "bad": Impl(lambda i: lambda: 3 * i["x"]),
        "flaky": Impl(fails_when_timed),
    }
    modes = ("forward", "forward+backward", "backward")
    rows = {
        (r["impl"], r["mode"]): r
        for r in _run(tmp_path, _toy_case(impls), monkeypatch, modes=modes)
    }
    # flaky fails the gate the 2nd time; the same-size copy joins every group
    assert groups[:2] == [["(copy)", "fast", "flaky", "good"], ["(copy)", "fast", "good"]]
    assert groups[2:] == [["(copy)", "good"], ["(copy)", "fast"]]  # backward: one at a time
    assert rows[("flaky", "forward")]["status"] == "error"
    assert "late failure" in rows[("flaky", "forward")]["message"]
    for mode in modes:
        assert rows[("good", mode)]["status"] == rows[("fast", mode)]["status"] == "ok"
        assert rows[("bad", mode)]["status"] == "wrong"


def test_each_row_carries_the_copy_timed_in_its_group(tmp_path, monkeypatch):
    """copy_ms is the median of a copy of the row's modelled bytes timed side by side with it;
    pct_copy_bw = 100 * copy_ms / p50_ms. With timing.copy_ref off both columns stay empty."""
    from bench.run import calibrate, point

    sizes = []

    def spy(n_bytes, device):
        sizes.append(n_bytes)
        return calibrate.copy_call(n_bytes, device)

    monkeypatch.setattr(point, "copy_call", spy)
    case = _toy_case({"good": Impl(lambda i: lambda: 2 * i["x"])})
    rows = _run(tmp_path, case, monkeypatch)
    assert sizes == [8 * 3 * 8, 2 * 8 * 3 * 8]  # forward, forward+backward (twice the bytes)
    for r in rows:
        copy_ms, p50 = float(r["copy_ms"]), float(r["p50_ms"])
        assert copy_ms > 0
        assert float(r["pct_copy_bw"]) == pytest.approx(100 * copy_ms / p50)
    (tmp_path / "off").mkdir()
    no_copy = dataclasses.replace(FAST, copy_ref=False)
    for r in _run(tmp_path / "off", case, monkeypatch, timing=no_copy):
        assert r["status"] == "ok" and r["copy_ms"] == r["pct_copy_bw"] == ""
    assert len(sizes) == 2


def test_passes_pool_each_rows_samples_over_the_whole_run(tmp_path, monkeypatch):
    """timing.passes=3: the plan is swept three times, each group with a third of the budget
    and max_reps; each ok row is written once, in the last pass, from the samples of all three
    (so its median spans the run); a wrong row is written in the first pass and never again."""
    from bench.run import point

    seen = []

    def fake(fns, device, **kwargs):  # pass k (1, 2, 3) times every call at 10 * k ms
        seen.append(
            (sorted(fns), round(kwargs["budget_s"], 9), kwargs["max_reps"], kwargs["min_reps"])
        )
        k = (len(seen) + 1) // 2  # two groups (modes) per pass
        return {name: point.Timing((10.0 * k,) * 2) for name in fns}

    monkeypatch.setattr(point, "measure_side_by_side", fake)
    made = {"bad": 0}

    def bad(inputs):
        made["bad"] += 1
        return lambda: 3 * inputs["x"]

    case = _toy_case({"good": Impl(lambda i: lambda: 2 * i["x"]), "bad": Impl(bad)})
    timing = dataclasses.replace(FAST, budget_s=0.9, max_reps=10, min_reps=4, passes=3)
    rows = _run(tmp_path, case, monkeypatch, timing=timing)
    assert [s[0] for s in seen] == [["(copy)", "good"]] * 6  # 2 modes x 3 passes
    assert {s[1:] for s in seen} == {(0.3, 4, 2)}  # a third, rounded up
    assert sorted((r["impl"], r["mode"]) for r in rows) == sorted(
        (i, m) for i in ("good", "bad") for m in ("forward", "forward+backward")
    )
    for r in rows:
        if r["impl"] == "bad":
            assert r["status"] == "wrong"
            continue
        assert r["status"] == "ok" and int(r["n_samples"]) == 6
        assert float(r["p20_ms"]) < float(r["p50_ms"]) == 20.0 < float(r["p80_ms"])
        assert float(r["copy_ms"]) == 20.0 and float(r["pct_copy_bw"]) == 100.0
    assert made["bad"] == 2  # gated once per mode, in the first pass only
    summary = json.loads((tmp_path / "timing_summary.json").read_text())
    assert summary["passes"] == 3


def test_an_interrupted_multi_pass_run_resumes_at_its_next_pass(tmp_path, monkeypatch):
    """Ctrl-C in pass 2 of 3: pass 1's samples are in pooled.json; resume=true runs passes 2
    and 3 only and writes rows with all three passes' samples; another timing.passes, or a run
    without resume, is refused rather than losing them."""
    from bench.run import point

    calls = {"n": 0, "stop_at": 3}

    def fake(fns, device, **kwargs):
        calls["n"] += 1
        if calls["n"] == calls["stop_at"]:  # pass 2's first group
            raise KeyboardInterrupt
        return {name: point.Timing((float(calls["n"]),)) for name in fns}

    monkeypatch.setattr(point, "measure_side_by_side", fake)
    case = _toy_case({"good": Impl(lambda i: lambda: 2 * i["x"])})
    timing = dataclasses.replace(FAST, passes=3)
    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path, case, monkeypatch, timing=timing)
    state = json.loads((tmp_path / "pooled.json").read_text())
    assert state["passes_done"] == 1 and len(state["rows"]) == 2
    assert (tmp_path / "results.csv").read_text().count("\n") == 1  # the header only
    with pytest.raises(FileExistsError, match="resume"):
        _run(tmp_path, case, monkeypatch, timing=timing)
    with pytest.raises(ValueError, match="timing.passes=3"):
        _run(tmp_path, case, monkeypatch, timing=dataclasses.replace(timing, passes=2), resume=True)
    calls.update(n=10, stop_at=0)
    rows = _run(tmp_path, case, monkeypatch, timing=timing, resume=True)
    assert calls["n"] == 14  # passes 2 and 3: two groups each
    by_mode = {r["mode"]: r for r in rows}
    # forward: pass 1 at 1 ms, passes 2-3 at 11 and 13 ms; forward+backward: 2, 12, 14
    assert float(by_mode["forward"]["p50_ms"]) == 11.0
    assert float(by_mode["forward+backward"]["p50_ms"]) == 12.0
    assert {int(r["n_samples"]) for r in rows} == {3}
    assert not (tmp_path / "pooled.json").exists()


def test_copy_call_moves_the_bytes_asked_for():
    from bench.run.calibrate import copy_call

    assert copy_call(7, torch.device("cpu")) is None  # less than one float32 each way
    call = copy_call(64, torch.device("cpu"))
    out = call()
    assert out.numel() * out.element_size() * 2 == 64 and torch.equal(out, torch.ones(8))


def test_resume_measures_only_what_is_missing(tmp_path, monkeypatch):
    counter = {"n": 0}

    def counting(inputs):
        counter["n"] += 1
        return lambda: 2 * inputs["x"]

    case = _toy_case({"good": Impl(counting)})
    points = (Point(1, 8, 4, 2), Point(2, 8, 4, 2))
    first = _run(tmp_path, case, monkeypatch, points=points[:1], modes=("forward",))
    assert len(first) == 1 and counter["n"] == 1
    with pytest.raises(FileExistsError, match="resume"):
        _run(tmp_path, case, monkeypatch, points=points, modes=("forward",))
    rows = _run(tmp_path, case, monkeypatch, points=points, modes=("forward",), resume=True)
    assert len(rows) == 2 and counter["n"] == 2  # only the new point was measured


def test_resume_refuses_a_results_file_of_another_schema(tmp_path, monkeypatch):
    from bench.results import COLUMNS, ResultsWriter

    (tmp_path / "results.csv").write_text(",".join(COLUMNS[:-1]) + "\n" + "x," * 30 + "x\n")
    with pytest.raises(ValueError, match="another column schema"):
        ResultsWriter(tmp_path / "results.csv")


def test_reserved_memory_is_a_cuda_column():
    from bench.run.memory import peak_bytes, peak_reserved_bytes

    if not torch.cuda.is_available():
        assert peak_reserved_bytes("cpu") is None
        return
    x = torch.ones(1 << 20, device="cuda")
    allocated = peak_bytes(lambda: x * 2, "cuda")
    assert peak_reserved_bytes("cuda") >= allocated >= 4 << 20


def test_an_axis_pinned_on_the_command_line_wins_over_the_grids():
    grids = [{"cases": ["rope"], "seq_len": [8, 16], "batch": 2}]
    plan = make_plan(
        _cfg(grids=grids, seq_len=32, d_model=32, num_heads=4), pinned=frozenset({"seq_len"})
    )
    assert {(p.batch, p.seq_len) for p in plan.entries[0].points} == {(2, 32)}
    overlapping = [{"cases": ["rope"], "seq_len": [8, 16]}, {"cases": ["rope"], "seq_len": 16}]
    plan = make_plan(
        _cfg(
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


def _doubled(x):
    return 2 * x  # one code object: every point recompiles it (static shapes)


def _compiled_toy(monkeypatch):
    from torch._dynamo.testing import CompileCounter

    from bench.cases import _common

    counter = CompileCounter()  # a cheap backend that counts the frames it compiles
    monkeypatch.setattr(_common, "COMPILE_BACKEND", counter)

    def make(inputs):
        fn = _common.compile_impl(_doubled)
        return lambda: fn(inputs["x"])

    impls = {"good": Impl(lambda i: lambda: 2 * i["x"]), "compiled": Impl(make, compiled=True)}
    return _toy_case(impls), counter


TWELVE = tuple(Point(1, 8 + i, 4, 2) for i in range(12))  # past Dynamo's default of 8


def test_compiled_rows_past_dynamos_recompile_limit_stay_compiled(tmp_path, monkeypatch):
    import torch._dynamo

    torch._dynamo.reset()
    case, counter = _compiled_toy(monkeypatch)
    rows = _run(tmp_path, case, monkeypatch, points=TWELVE, modes=("forward",))
    compiled = [r for r in rows if r["impl"] == "compiled"]
    assert len(compiled) == 12 and {r["status"] for r in compiled} == {"ok"}
    assert counter.frame_count == 12  # one static compile per point, none fell back to eager


def test_a_recompile_limit_hit_is_a_row_error_not_an_eager_row(tmp_path, monkeypatch):
    import torch._dynamo

    from bench.run import runner

    torch._dynamo.reset()
    monkeypatch.setattr(runner, "RECOMPILE_LIMIT", 4)
    case, counter = _compiled_toy(monkeypatch)
    rows = _run(tmp_path, case, monkeypatch, points=TWELVE, modes=("forward",))
    status = [r["status"] for r in rows if r["impl"] == "compiled"]
    assert status == ["ok"] * 4 + ["error"] * 8, status
    failed = next(r for r in rows if r["impl"] == "compiled" and r["status"] == "error")
    assert "recompile" in failed["message"].lower(), failed["message"]
    assert counter.frame_count == 4


def test_eager_calls_and_truths_that_would_not_fit_are_not_run(tmp_path, monkeypatch):
    """An implementation holding (B, H, L, L) tensors past the free memory is skipped, saying
    how much it needs; a float64 truth that would not fit is not computed, and the rows that
    lean on it are timed and say they are unchecked."""
    from bench.run import memory

    monkeypatch.setattr(memory, "available_bytes", lambda device: 40 * 2**20)  # 40 MiB free
    calls = {"eager": 0}

    def eager(inputs):
        def call():
            calls["eager"] += 1
            return 2 * inputs["x"]

        return call

    case = dataclasses.replace(
        _toy_case({"good": Impl(lambda i: lambda: 2 * i["x"]), "eager": Impl(eager, holds=4)}),
        level="attention",
        truth_holds=4,
    )
    big = (Point(2, 1024, 8, 4),)  # (2, 4, 1024, 1024) float32: 32 MiB a tensor
    rows = {r["impl"]: r for r in _run(tmp_path, case, monkeypatch, points=big, modes=("forward",))}
    assert rows["eager"]["status"] == "skipped" and calls["eager"] == 0
    assert "needs ~0.1 GiB; 0.0 GiB available" in rows["eager"]["message"]
    assert rows["good"]["status"] == "ok"
    assert (
        "not checked" in rows["good"]["message"]
        and "float64 truth needs" in rows["good"]["message"]
    )


def test_a_top_level_value_is_named_as_the_user_wrote_it():
    """sweep-like grids with seq_len pinned on the command line: the error names seq_len, not
    grids[0].seq_len; a value the grid set keeps its grid's name."""
    grids = [{"cases": ["rope"], "seq_len": [8, 16]}]
    with pytest.raises(ValueError, match=r"^seq_len: every value"):
        make_plan(
            _cfg(grids=grids, seq_len=[-1], batch=1, d_model=16, num_heads=2),
            frozenset({"seq_len"}),
        )
    with pytest.raises(ValueError, match=r"^grids\[0\]\.seq_len"):
        make_plan(
            _cfg(grids=[{"cases": ["rope"], "seq_len": [-8]}], batch=1, d_model=16, num_heads=2)
        )
