"""The correctness check (bench/run/check.py) and what the runner times in the backward modes."""

import pytest
import torch

from bench.registry import Case, Cost, Impl, Point
from bench.run import check
from tests.helpers import run_toy


class _WrongGrad(torch.autograd.Function):
    """y = 2x with a backward that returns 3 * dy: a right forward, a wrong gradient."""

    @staticmethod
    def forward(ctx, x):
        return 2 * x

    @staticmethod
    def backward(ctx, dy):
        return 3 * dy


def _table_case(impls, dtype_note=""):
    """y = 2x + table[None, :L] with a learned table: x and the table are the grad inputs."""

    def build(p, device, dtype):
        return {
            "x": torch.randn(p.batch, p.seq_len, device=device, dtype=dtype),
            "table": torch.nn.Parameter(torch.randn(p.seq_len, device=device, dtype=dtype)),
        }

    return Case(
        name="toy",
        level="encoder",
        build=build,
        reference=lambda i: 2 * i["x"] + i["table"],
        impls=impls,
        baseline="good",
        cost=lambda p, dtype, mode: Cost(8 * p.batch * p.seq_len, p.batch * p.seq_len),
        grad_inputs=("x", "table"),
        batched=("x",),
    )


GOOD = Impl(lambda i: lambda: 2 * i["x"] + i["table"])
MODES = ("forward", "backward", "forward+backward")


def _by(rows):
    return {(r["impl"], r["mode"]): r for r in rows}


def test_a_wrong_gradient_is_never_timed(tmp_path, monkeypatch):
    """The forward is right, the gradient is not: the backward rows are wrong, not timed."""
    bad = Impl(lambda i: lambda: _WrongGrad.apply(i["x"]) + i["table"])
    rows = _by(run_toy(tmp_path, _table_case({"good": GOOD, "bad": bad}), monkeypatch, modes=MODES))
    assert rows[("bad", "forward")]["status"] == "ok"
    for mode in MODES[1:]:
        assert rows[("good", mode)]["status"] == "ok"
        row = rows[("bad", mode)]
        assert row["status"] == "wrong" and row["p50_ms"] == "", row
        assert row["message"].startswith("d x: relative error")


def test_a_table_without_its_gradient_is_wrong(tmp_path, monkeypatch):
    """Tables are grad inputs too: an implementation that detaches one fails the check."""
    detached = Impl(lambda i: lambda: 2 * i["x"] + i["table"].detach())
    rows = _by(
        run_toy(
            tmp_path, _table_case({"good": GOOD, "detached": detached}), monkeypatch, modes=MODES
        )
    )
    assert rows[("detached", "forward")]["status"] == "ok"
    assert rows[("detached", "backward")]["status"] == "wrong"
    assert rows[("detached", "backward")]["message"] == "no gradient for table"


def test_a_wrong_table_gradient_is_caught_on_the_checked_rows(tmp_path, monkeypatch):
    """B=5: the check compares sequences 0 and 4; the table's gradient sums over the batch, so
    the check's upstream gradient is zero elsewhere. A table gradient taken from sequence 1
    only is wrong."""

    class OneRow(torch.autograd.Function):
        @staticmethod
        def forward(ctx, table, batch):
            ctx.batch = batch
            return table.expand(batch, -1)

        @staticmethod
        def backward(ctx, dy):
            return dy[1] * ctx.batch, None

    bad = Impl(lambda i: lambda: 2 * i["x"] + OneRow.apply(i["table"], i["x"].shape[0]))
    case = _table_case({"good": GOOD, "bad": bad})
    rows = _by(run_toy(tmp_path, case, monkeypatch, points=(Point(5, 8, 4, 2),), modes=MODES[2:]))
    assert rows[("good", "forward+backward")]["status"] == "ok"
    assert rows[("bad", "forward+backward")]["status"] == "wrong"
    assert "d table" in rows[("bad", "forward+backward")]["message"]


def test_timed_gradients_never_accumulate_into_grad(tmp_path, monkeypatch):
    """Every sample of a backward mode asks torch.autograd.grad: no leaf's .grad is ever set
    (accumulating into it would add a read-modify-write of every gradient to each sample)."""
    seen = []

    def watching(i):
        def call():
            seen.append(i["x"].grad is None and i["table"].grad is None)
            return 2 * i["x"] + i["table"]

        return call

    case = _table_case({"good": Impl(watching)})
    run_toy(tmp_path, case, monkeypatch, modes=MODES[1:])
    assert len(seen) > 4 and all(seen)


def test_bfloat16_is_held_to_the_reference_in_bfloat16(tmp_path, monkeypatch):
    """An error of 1% in bfloat16 (well inside a fixed 5% tolerance) is several times the
    reference's own error in bfloat16: wrong. The reference itself passes."""
    off = Impl(lambda i: lambda: (2 * i["x"] + i["table"]) * 1.01)
    from bench import plans, registry

    monkeypatch.setitem(registry.DTYPES, "bfloat16", torch.bfloat16)
    case = _table_case({"good": GOOD, "off": off})
    from bench.run import runner

    monkeypatch.setitem(runner.CASES, "toy", case)
    entry = plans.Entry(
        "toy", ("good", "off"), (Point(2, 64, 4, 2),), ("bfloat16",), ("cpu",), MODES
    )
    from tests.helpers import FAST

    r = runner.Runner(plans.Plan((entry,)), FAST, tmp_path, run_id="t", do_calibrate=False)
    r.run()
    import csv

    with open(tmp_path / "results.csv") as f:
        rows = _by(csv.DictReader(f))
    for mode in MODES:
        assert rows[("good", mode)]["status"] == "ok"
        assert rows[("off", mode)]["status"] == "wrong", rows[("off", mode)]
        assert "x the reference's" in rows[("off", mode)]["message"]


def test_errors_are_relative_norms_and_zero_truths_are_absolute():
    truth = check.Truth(
        outputs=(torch.tensor([[3.0, 4.0]], dtype=torch.float64),),
        grads={"b": torch.zeros(3, dtype=torch.float64)},
    )
    got = torch.tensor([[3.0, 4.5]])
    errs = check.measure_errors(got, truth, {"b": torch.full((3,), 1e-6)}, None, ())
    assert errs.rel["out0"] == pytest.approx(0.5 / 5.0)
    assert errs.abs["out0"] == pytest.approx(0.5)
    assert errs.zero["d b"] == pytest.approx(1e-6 / 4.0) and "d b" not in errs.rel
    ref = check.Errors({"out0": 0.1}, {"out0": 0.05}, {})
    assert check.verdict(errs, ref, torch.float32)[0]  # 0.1 <= 3 * 0.05
    tight = check.Errors({"out0": 0.1}, {"out0": 0.02}, {})
    passed, ratio, why = check.verdict(errs, tight, torch.float32)
    assert not passed and ratio == pytest.approx(5.0) and "5.0x" in why
    big = check.measure_errors(got, truth, {"b": torch.full((3,), 1.0)}, None, ())
    assert not check.verdict(big, ref, torch.float32)[0]  # 1.0 / 4 of the largest: not zero
    assert check.measure_errors(got, truth, {}, None, ()) == "no gradient for b"


def test_what_a_kernel_warns_during_the_check_is_in_its_row(tmp_path, monkeypatch):
    """A kernel that falls back to smaller tiles warns (posenc_kernels.relbias._run); the row says
    so. Torch's own notices are left out."""
    import warnings

    def warning(i):
        def call():
            warnings.warn_explicit(
                "relative_attention: fwd_tiles (128, 64, 8, 3) do not fit "
                "this GPU; ran with (32, 32, 4, 1)",
                UserWarning,
                filename="/x/posenc_kernels/relbias.py",
                lineno=1,
            )
            warnings.warn("a notice from torch itself", UserWarning, stacklevel=1)
            return 2 * i["x"] + i["table"]

        return call

    rows = _by(
        run_toy(
            tmp_path,
            _table_case({"good": GOOD, "warns": Impl(warning)}),
            monkeypatch,
            modes=MODES[:1],
        )
    )
    message = rows[("warns", "forward")]["message"]
    assert "ran with (32, 32, 4, 1)" in message and "torch itself" not in message
    assert rows[("warns", "forward")]["status"] == "ok"


def test_a_truth_that_does_not_fit_leaves_its_rows_unchecked_not_ok(tmp_path, monkeypatch):
    """The float64 truth runs out of memory (at a length where only the implementations fit):
    the rows are still timed, their status `unchecked` (never ok), and say why; not an impl's
    OOM."""

    def too_big(inputs):
        raise torch.OutOfMemoryError("tried to allocate 1.28 TiB")

    case = _table_case({"good": GOOD})
    case = type(case)(**{**case.__dict__, "reference": too_big})
    rows = _by(run_toy(tmp_path, case, monkeypatch, modes=MODES[::2]))
    for mode in MODES[::2]:
        row = rows[("good", mode)]
        assert row["status"] == "unchecked" and float(row["p50_ms"]) > 0
        assert row["message"].startswith("not checked: the float64 truth failed: OutOfMemoryError")


def test_a_failed_truth_keeps_none_of_its_tensors_alive():
    """The point keeps a failed truth's exception for its rows' messages; its traceback must not
    keep the truth's tensors (an out-of-memory truth would starve the rows after it)."""
    import gc
    import weakref

    from bench.run.verify import without_frames

    refs = []

    def truth():
        big = torch.empty(1000)
        refs.append(weakref.ref(big))
        try:
            raise RuntimeError("inner")
        except RuntimeError as inner:
            raise MemoryError("out of memory") from inner

    try:
        truth()
    except MemoryError as exc:
        kept = without_frames(exc)
    gc.collect()
    assert refs[0]() is None
    assert str(kept) == "out of memory" and str(kept.__cause__) == "inner"
