"""The harness in-process: config validation, the gate, failing points, resume, the report."""

import csv

import pytest
import torch
from omegaconf import OmegaConf

from bench import report
from bench.config import BenchConfig, TimingConfig, make_plan
from bench.registry import Case, Impl, Point
from bench.runner import Runner

FAST = TimingConfig(warmup_s=0.0, min_reps=2, max_reps=3, budget_s=0.0, rel_spread=None)


def _cfg(**overrides):
    cfg = OmegaConf.structured(BenchConfig)
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
    ],
)
def test_invalid_config_names_the_key(overrides, key):
    with pytest.raises(ValueError, match=key):
        make_plan(_cfg(**overrides))


def test_plan_is_the_product_of_the_axes():
    plan = make_plan(_cfg(batch=[1, 2], seq_len=[8, 16, 32], d_model=16, num_heads=[2, 4]))
    assert len(plan.points) == 2 * 3 * 2
    assert plan.devices == ("cuda",) if torch.cuda.is_available() else ("cpu",)


def _toy_case(impls):
    """y = 2x; impls decide whether they get it right."""
    return Case(
        name="toy",
        level="encoder",
        build=lambda p, device, dtype: {"x": torch.randn(p.batch, p.seq_len, device=device)},
        reference=lambda inputs: 2 * inputs["x"].double(),
        impls=impls,
        baseline="good",
        bytes_moved=lambda p, dtype: 8 * p.batch * p.seq_len,
        flops=lambda p: p.batch * p.seq_len,
        grad_inputs=("x",),
        batched=("x",),
    )


ONE_POINT = (Point(3, 8, 4, 2),)


def _run(tmp_path, case, monkeypatch, *, resume=False, points=ONE_POINT, modes=None):
    from bench import config, runner

    monkeypatch.setitem(runner.CASES, "toy", case)
    plan = config.Plan(
        cases=("toy",), impls=None, points=points, dtypes=("float32",), devices=("cpu",),
        modes=modes or ("forward", "forward+backward"),
    )  # fmt: skip
    r = Runner(plan, FAST, tmp_path, run_id="t", resume=resume, do_calibrate=False)
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
    assert rows[("good", "forward")]["status"] == "ok"
    assert float(rows[("good", "forward")]["p50_ms"]) > 0
    bad = rows[("bad", "forward")]
    assert bad["status"] == "wrong" and bad["p50_ms"] == "" and float(bad["max_abs_err"]) > 0
    assert calls["wrong"] == 2  # the gate's one call per mode, no timing


def test_a_failing_implementation_becomes_a_row_and_the_sweep_goes_on(tmp_path, monkeypatch):
    def broken(inputs):
        raise RuntimeError("boom\nsecond line")

    case = _toy_case({"broken": Impl(broken), "good": Impl(lambda i: lambda: 2 * i["x"])})
    rows = _run(tmp_path, case, monkeypatch, modes=("forward",))
    by = {r["impl"]: r for r in rows}
    assert by["broken"]["status"] == "error" and by["broken"]["message"] == "RuntimeError: boom"
    assert by["good"]["status"] == "ok"


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


def test_report_from_a_saved_run_and_a_merge(tmp_path, monkeypatch):
    case = _toy_case({"good": Impl(lambda i: lambda: 2 * i["x"]), "slow": Impl(
        lambda i: lambda: (2 * i["x"]).clone().mul(1.0))})  # fmt: skip
    monkeypatch.setitem(report.CASES, "toy", case)
    run_a, run_b = tmp_path / "a", tmp_path / "b"
    run_a.mkdir()
    run_b.mkdir()
    _run(run_a, case, monkeypatch, points=(Point(1, 8, 4, 2), Point(1, 16, 4, 2)))
    _run(run_b, case, monkeypatch, points=(Point(2, 8, 4, 2),))
    out = report.build([run_a, run_b], tmp_path / "merged")
    text = (out / "report.md").read_text()
    assert "## toy / forward / float32" in text and "good @ cpu" in text
    with open(out / "merged.csv") as f:
        assert len(list(csv.DictReader(f))) == 2 * 2 * 2 + 2 * 2  # both runs, every row
    assert (out / "time_vs_seq_len_forward_float32.png").exists()


def test_report_compare_two_runs_into_a_new_directory(tmp_path, monkeypatch, capsys):
    case = _toy_case({"good": Impl(lambda i: lambda: 2 * i["x"])})
    monkeypatch.setitem(report.CASES, "toy", case)
    runs = [tmp_path / "a", tmp_path / "b"]
    for run in runs:
        run.mkdir()
        _run(run, case, monkeypatch, points=(Point(1, 8, 4, 2),), modes=("forward",))
    out = report.main([*map(str, runs), "--compare", "--out", str(tmp_path / "new" / "cmp")])
    text = (out / "compare.md").read_text()
    assert "1 rows in common" in text and "| toy | good | forward |" in text


def test_resume_refuses_a_results_file_of_another_schema(tmp_path, monkeypatch):
    from bench.results import COLUMNS, ResultsWriter

    (tmp_path / "results.csv").write_text(",".join(COLUMNS[:-1]) + "\n" + "x," * 30 + "x\n")
    with pytest.raises(ValueError, match="another column schema"):
        ResultsWriter(tmp_path / "results.csv")


def test_reserved_memory_is_a_cuda_column():
    from bench.memory import peak_bytes, peak_reserved_bytes

    if not torch.cuda.is_available():
        assert peak_reserved_bytes("cpu") is None
        return
    x = torch.ones(1 << 20, device="cuda")
    allocated = peak_bytes(lambda: x * 2, "cuda")
    assert peak_reserved_bytes("cuda") >= allocated >= 4 << 20
