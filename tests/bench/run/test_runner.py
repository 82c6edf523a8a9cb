"""The runner in-process on a toy case: the gate, failing points, side-by-side groups, the copy
in each group, passes pooled and resumed, Dynamo's recompile limit, the memory guard."""

import dataclasses
import json

import pytest
import torch

from bench.registry import Impl, Point
from tests.helpers import FAST, ONE_POINT, run_toy, toy_case


def test_gate_catches_a_wrong_implementation_and_never_times_it(tmp_path, monkeypatch):
    calls = {"wrong": 0}

    def wrong(inputs):
        def call():
            calls["wrong"] += 1
            return 2 * inputs["x"] + 1e-2 * (inputs["x"].shape[0] > 2)  # off on the last row too

        return call

    case = toy_case({"good": Impl(lambda i: lambda: 2 * i["x"]), "bad": Impl(wrong)})
    rows = {(r["impl"], r["mode"]): r for r in run_toy(tmp_path, case, monkeypatch)}
    good = rows[("good", "forward")]
    assert good["status"] == "ok" and float(good["p50_ms"]) > 0
    assert float(good["p50_ci_lo_ms"]) <= float(good["p50_ms"]) <= float(good["p50_ci_hi_ms"])
    bad = rows[("bad", "forward")]
    assert bad["status"] == "wrong" and bad["p50_ms"] == "" and float(bad["max_abs_err"]) > 0
    assert calls["wrong"] == 2  # the gate's one call per mode, no timing


def test_a_failing_implementation_becomes_a_row_and_the_sweep_goes_on(tmp_path, monkeypatch):
    def broken(inputs):
        raise RuntimeError("boom\nsecond line")

    case = toy_case({"broken": Impl(broken), "good": Impl(lambda i: lambda: 2 * i["x"])})
    rows = run_toy(tmp_path, case, monkeypatch, modes=("forward",))
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
        for r in run_toy(tmp_path, toy_case(impls), monkeypatch, modes=modes)
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
    case = toy_case({"good": Impl(lambda i: lambda: 2 * i["x"])})
    rows = run_toy(tmp_path, case, monkeypatch)
    assert sizes == [8 * 3 * 8, 2 * 8 * 3 * 8]  # forward, forward+backward (twice the bytes)
    for r in rows:
        copy_ms, p50 = float(r["copy_ms"]), float(r["p50_ms"])
        assert copy_ms > 0
        assert float(r["pct_copy_bw"]) == pytest.approx(100 * copy_ms / p50)
    (tmp_path / "off").mkdir()
    no_copy = dataclasses.replace(FAST, copy_ref=False)
    for r in run_toy(tmp_path / "off", case, monkeypatch, timing=no_copy):
        assert r["status"] == "ok" and r["copy_ms"] == r["pct_copy_bw"] == ""
    assert len(sizes) == 2


def test_passes_pool_each_rows_samples_over_the_whole_run(tmp_path, monkeypatch):
    """timing.passes=3: the plan is swept three times, each group with a third of the budget
    and max_reps; each ok row is written once, in the last pass, from the samples of all three
    (so its median spans the run); a wrong row is written in the first pass and never again."""
    from bench.run import point

    seen = []

    def fake(fns, device, budget, **kwargs):  # pass k (1, 2, 3) times every call at 10 * k ms
        seen.append((sorted(fns), round(budget.budget_s, 9), budget.max_reps, budget.min_reps))
        k = (len(seen) + 1) // 2  # two groups (modes) per pass
        return {name: point.Timing((10.0 * k,) * 2) for name in fns}

    monkeypatch.setattr(point, "measure_side_by_side", fake)
    made = {"bad": 0}

    def bad(inputs):
        made["bad"] += 1
        return lambda: 3 * inputs["x"]

    case = toy_case({"good": Impl(lambda i: lambda: 2 * i["x"]), "bad": Impl(bad)})
    timing = dataclasses.replace(FAST, budget_s=0.9, max_reps=10, min_reps=4, passes=3)
    rows = run_toy(tmp_path, case, monkeypatch, timing=timing)
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

    def fake(fns, device, budget, **kwargs):
        calls["n"] += 1
        if calls["n"] == calls["stop_at"]:  # pass 2's first group
            raise KeyboardInterrupt
        return {name: point.Timing((float(calls["n"]),)) for name in fns}

    monkeypatch.setattr(point, "measure_side_by_side", fake)
    case = toy_case({"good": Impl(lambda i: lambda: 2 * i["x"])})
    timing = dataclasses.replace(FAST, passes=3)
    with pytest.raises(KeyboardInterrupt):
        run_toy(tmp_path, case, monkeypatch, timing=timing)
    state = json.loads((tmp_path / "pooled.json").read_text())
    assert state["passes_done"] == 1 and len(state["rows"]) == 2
    assert (tmp_path / "results.csv").read_text().count("\n") == 1  # the header only
    with pytest.raises(FileExistsError, match="resume"):
        run_toy(tmp_path, case, monkeypatch, timing=timing)
    with pytest.raises(ValueError, match="timing.passes=3"):
        run_toy(
            tmp_path, case, monkeypatch, timing=dataclasses.replace(timing, passes=2), resume=True
        )
    calls.update(n=10, stop_at=0)
    rows = run_toy(tmp_path, case, monkeypatch, timing=timing, resume=True)
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

    case = toy_case({"good": Impl(counting)})
    points = (Point(1, 8, 4, 2), Point(2, 8, 4, 2))
    first = run_toy(tmp_path, case, monkeypatch, points=points[:1], modes=("forward",))
    assert len(first) == 1 and counter["n"] == 1
    with pytest.raises(FileExistsError, match="resume"):
        run_toy(tmp_path, case, monkeypatch, points=points, modes=("forward",))
    rows = run_toy(tmp_path, case, monkeypatch, points=points, modes=("forward",), resume=True)
    assert len(rows) == 2 and counter["n"] == 2  # only the new point was measured


def test_reserved_memory_is_a_cuda_column():
    from bench.run.memory import peak_bytes, peak_reserved_bytes

    if not torch.cuda.is_available():
        assert peak_reserved_bytes("cpu") is None
        return
    x = torch.ones(1 << 20, device="cuda")
    allocated = peak_bytes(lambda: x * 2, "cuda")
    assert peak_reserved_bytes("cuda") >= allocated >= 4 << 20


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
    return toy_case(impls), counter


TWELVE = tuple(Point(1, 8 + i, 4, 2) for i in range(12))  # past Dynamo's default of 8


def test_compiled_rows_past_dynamos_recompile_limit_stay_compiled(tmp_path, monkeypatch):
    import torch._dynamo

    torch._dynamo.reset()
    case, counter = _compiled_toy(monkeypatch)
    rows = run_toy(tmp_path, case, monkeypatch, points=TWELVE, modes=("forward",))
    compiled = [r for r in rows if r["impl"] == "compiled"]
    assert len(compiled) == 12 and {r["status"] for r in compiled} == {"ok"}
    assert counter.frame_count == 12  # one static compile per point, none fell back to eager


def test_dynamos_limits_are_raised_only_for_a_plan_that_compiles(monkeypatch):
    import contextlib

    from bench.plans import Entry, Plan
    from bench.run import runner

    case, _ = _compiled_toy(monkeypatch)
    monkeypatch.setitem(runner.CASES, "toy", case)

    def plan(*impls):
        return Plan((Entry("toy", impls, TWELVE[:1], ("float32",), ("cpu",), ("forward",)),))

    assert isinstance(runner._dynamo_limits(plan("good")), contextlib.nullcontext)
    with runner._dynamo_limits(plan("good", "compiled")):
        import torch._dynamo

        assert torch._dynamo.config.recompile_limit == runner.RECOMPILE_LIMIT


def test_a_recompile_limit_hit_is_a_row_error_not_an_eager_row(tmp_path, monkeypatch):
    import torch._dynamo

    from bench.run import runner

    torch._dynamo.reset()
    monkeypatch.setattr(runner, "RECOMPILE_LIMIT", 4)
    case, counter = _compiled_toy(monkeypatch)
    rows = run_toy(tmp_path, case, monkeypatch, points=TWELVE, modes=("forward",))
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
        toy_case({"good": Impl(lambda i: lambda: 2 * i["x"]), "eager": Impl(eager, holds=4)}),
        level="attention",
        truth_holds=4,
    )
    big = (Point(2, 1024, 8, 4),)  # (2, 4, 1024, 1024) float32: 32 MiB a tensor
    rows = {
        r["impl"]: r for r in run_toy(tmp_path, case, monkeypatch, points=big, modes=("forward",))
    }
    assert rows["eager"]["status"] == "skipped" and calls["eager"] == 0
    assert "~0.1 GiB needed; 0.0 GiB available" in rows["eager"]["message"]
    assert rows["good"]["status"] == "unchecked"  # timed, never verified
    assert (
        "not checked" in rows["good"]["message"] and "float64 truth: ~" in rows["good"]["message"]
    )


def test_upstream_gradients_have_the_outputs_strides(tmp_path, monkeypatch):
    """An implementation whose output is a transposed view (a bshd output of a bhsd kernel)
    gets its upstream gradient in that layout, in the check and in every timed call: a
    contiguous one would make it copy inside the timed region (the Liger handicap)."""
    seen = []

    class Record(torch.autograd.Function):
        @staticmethod
        def forward(ctx, y):
            return y.view_as(y)

        @staticmethod
        def backward(ctx, g):
            seen.append(g.stride())
            return g

    def strided(i):
        def call():
            y = (2 * i["x"].t().contiguous()).t()  # (B, L) with strides (1, B)
            return Record.apply(y)

        return call

    case = toy_case({"good": Impl(strided)})
    rows = run_toy(tmp_path, case, monkeypatch, modes=("backward", "forward+backward"))
    assert [r["status"] for r in rows] == ["ok", "ok"]
    b = ONE_POINT[0].batch
    assert len(seen) > 4 and set(seen) == {(1, b)}, seen


def test_the_collector_skips_what_was_loaded_before_the_run_and_only_during_it(
    tmp_path, monkeypatch
):
    """Each point collects garbage (point.py); what the process loaded before the run (torch,
    the cases: hundreds of thousands of objects) is frozen for the run, so that the collection
    scans only what the run made, and given back to the collector at its end."""
    import gc

    frozen = []

    def spy(inputs):
        frozen.append(gc.get_freeze_count())
        return lambda: 2 * inputs["x"]

    case = toy_case({"spy": Impl(spy), "good": Impl(lambda i: lambda: 2 * i["x"])})
    before = gc.get_freeze_count()
    rows = run_toy(tmp_path, case, monkeypatch, modes=("forward",))
    assert {r["status"] for r in rows} == {"ok"}
    assert frozen and min(frozen) > before + 10_000  # the loaded modules' objects, frozen
    assert gc.get_freeze_count() == before  # unfrozen at the run's end
