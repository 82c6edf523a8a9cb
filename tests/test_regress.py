"""bench.regress on synthetic pytest-benchmark JSON: machines that are faster or slower as a
whole, a true regression, missing cases, corrupt files, other suites."""

import json
import random

import pytest

from bench import regress

CASES = ("rope-forward", "sinusoidal-forward", "t5_attention-forward+backward")


def _json(path, *, scale=1.0, slow=None, factor=1.0, suite="posenc-cpu-v1", drop=None, seed=0):
    """Rounds ~ N(10 ms, 2%) per case and ~N(1 ms, 2%) per calibration, times `scale` (the
    machine's speed); the `slow` case takes `factor` times longer."""
    rng = random.Random(seed)
    benches = []
    for key in CASES:
        if key == drop:
            continue
        case, mode = key.split("-", 1)
        calib = [scale * 1e-3 * rng.gauss(1, 0.02) for _ in range(31)]
        rounds = [
            scale * 1e-2 * rng.gauss(1, 0.02) * (factor if key == slow else 1) for _ in range(31)
        ]
        for kind, data in (("calibration", calib), ("case", rounds)):
            info = {"suite": suite, "case": case, "mode": mode, "kind": kind, "threads": 2}
            if kind == "case":
                info["paired_calibration"] = calib
            benches.append({"name": f"test_perf[{key}-{kind}]", "extra_info": info,
                            "stats": {"data": data, "median": sorted(data)[15]}})  # fmt: skip
    path.write_text(json.dumps({"machine_info": {"machine": "x86_64"}, "benchmarks": benches}))
    return path


def _run(tmp_path, capsys, **current):
    base = _json(tmp_path / "base.json")
    cur = _json(tmp_path / "cur.json", seed=1, **current)
    code = regress.main(["--baseline", str(base), "--current", str(cur)])
    return code, capsys.readouterr()


@pytest.mark.parametrize("scale", [0.5, 2.0])
def test_a_faster_or_slower_machine_is_not_a_regression(tmp_path, capsys, scale):
    code, out = _run(tmp_path, capsys, scale=scale)
    assert code == 0 and "verdict: ok" in out.out


def test_a_true_regression_is_flagged(tmp_path, capsys):
    code, out = _run(tmp_path, capsys, slow="sinusoidal-forward", factor=1.3)
    assert code == 1
    assert "| sinusoidal-forward |" in out.out and "regression" in out.out
    assert "REGRESSION in sinusoidal-forward" in out.out


def test_below_threshold_or_per_case_threshold_is_ok(tmp_path, capsys):
    code, _ = _run(tmp_path, capsys, slow="rope-forward", factor=1.15)
    assert code == 0
    base = _json(tmp_path / "b.json")
    cur = _json(tmp_path / "c.json", seed=1, slow="rope-forward", factor=1.3)
    assert regress.main(["--baseline", str(base), "--current", str(cur),
                         "--threshold", "rope=0.4"]) == 0  # fmt: skip


@pytest.mark.parametrize(
    ("current", "text"),
    [
        ({"drop": "rope-forward"}, "cases in only one file"),
        ({"suite": "other-v2"}, "different suites"),
    ],
)
def test_unusable_input_exits_2_and_says_why(tmp_path, capsys, current, text):
    code, out = _run(tmp_path, capsys, **current)
    assert code == 2 and text in out.err


def test_corrupt_or_missing_file_exits_2(tmp_path, capsys):
    base = _json(tmp_path / "base.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert regress.main(["--baseline", str(base), "--current", str(bad)]) == 2
    assert "not a pytest-benchmark JSON" in capsys.readouterr().err
    assert regress.main(["--baseline", str(base), "--current", str(tmp_path / "nope.json")]) == 2
