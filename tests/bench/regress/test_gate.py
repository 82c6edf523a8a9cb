"""bench.regress.gate on synthetic pytest-benchmark JSON: machines that are faster or slower as a
whole or for a moment, a true regression, thresholds, missing cases, corrupt files, other
suites and thread counts."""

import json
import random
import re

import pytest

from bench.regress import gate as regress

CASES = ("rope-forward", "sinusoidal-forward", "t5_attention-forward+backward")


def _json(
    path,
    *,
    scale=1.0,
    slow=None,
    factor=1.0,
    suite="posenc-cpu-v2",
    drop=None,
    seed=0,
    blocks=7,
    rounds=11,
    threads=1,
    hiccup=None,
):
    """Rounds ~ N(10 ms, 2%) per case, anchors ~ N(2 ms, 2%), calibrations ~ N(1 ms, 2%), all
    times `scale` (the machine's speed) and times 3 in block `hiccup` (a busy moment); the
    `slow` case takes `factor` times longer (its anchor does not)."""
    rng = random.Random(seed)

    def times(ms, speed):
        return [speed * ms * 1e-3 * rng.gauss(1, 0.02) for _ in range(rounds)]

    benches = []
    for block in range(blocks):
        speed = scale * (3 if block == hiccup else 1)
        for name in ("copy", "matmul"):
            info = {
                "suite": suite,
                "case": name,
                "mode": "-",
                "kind": "calibration",
                "repeat": block,
                "threads": threads,
            }
            benches.append(
                {
                    "name": f"test_perf[r{block}-{name}]",
                    "extra_info": info,
                    "stats": {"data": times(1, speed)},
                }
            )
        for key in CASES:
            if key == drop:
                continue
            case, mode = key.split("-", 1)
            data = times(10 * (factor if key == slow else 1), speed)
            info = {
                "suite": suite,
                "case": case,
                "mode": mode,
                "kind": "case",
                "repeat": block,
                "threads": threads,
                "anchor": times(2, speed),
            }
            benches.append(
                {"name": f"test_perf[r{block}-{key}]", "extra_info": info, "stats": {"data": data}}
            )
    path.write_text(json.dumps({"machine_info": {"machine": "x86_64"}, "benchmarks": benches}))
    return path


def _run(tmp_path, capsys, *args, base=None, **current):
    base = _json(tmp_path / "base.json", **(base or {}))
    cur = _json(tmp_path / "cur.json", seed=1, **current)
    code = regress.main(["--baseline", str(base), "--current", str(cur), *args])
    return code, capsys.readouterr()


@pytest.mark.parametrize("scale", [0.5, 2.0])
def test_a_faster_or_slower_machine_is_not_a_regression(tmp_path, capsys, scale):
    code, out = _run(tmp_path, capsys, scale=scale)
    assert code == 0 and "verdict: ok" in out.out
    copy = float(re.search(r"copy ([+-][0-9.]+)%", out.out).group(1))  # raw: the machine shows
    assert copy == pytest.approx(100 * (scale - 1), abs=5)


def test_a_busy_moment_is_not_a_regression(tmp_path, capsys):
    """One block three times slower (case and anchor alike), in the current run only."""
    code, out = _run(tmp_path, capsys, hiccup=3)
    assert code == 0 and "verdict: ok" in out.out


def test_a_true_regression_is_flagged(tmp_path, capsys):
    code, out = _run(tmp_path, capsys, slow="sinusoidal-forward", factor=1.3)
    assert code == 1
    row = next(line for line in out.out.splitlines() if line.startswith("| sinusoidal-forward |"))
    assert row.endswith("| regression |")
    assert "REGRESSION in sinusoidal-forward" in out.out


def test_a_faster_case_is_reported_not_failed(tmp_path, capsys):
    code, out = _run(tmp_path, capsys, slow="rope-forward", factor=0.6)
    assert code == 0 and "| faster |" in out.out


def test_below_threshold_or_per_case_threshold_is_ok(tmp_path, capsys):
    code, _ = _run(tmp_path, capsys, slow="rope-forward", factor=1.15)
    assert code == 0
    code, _ = _run(tmp_path, capsys, "--threshold", "rope=0.4", slow="rope-forward", factor=1.3)
    assert code == 0
    code, _ = _run(tmp_path, capsys, "--default-threshold", "0.1", slow="rope-forward", factor=1.15)
    assert code == 1


def test_significance_is_required(tmp_path, capsys):
    """Fewer than 3 blocks: the test runs on pooled rounds; 2 rounds cannot be significant."""
    code, out = _run(
        tmp_path,
        capsys,
        base={"blocks": 1, "rounds": 2},
        blocks=1,
        rounds=2,
        slow="rope-forward",
        factor=1.5,
    )
    assert code == 0
    row = next(line for line in out.out.splitlines() if line.startswith("| rope-forward |"))
    assert "+50" in row and row.endswith("| ok |")


@pytest.mark.parametrize(
    ("current", "text"),
    [
        ({"drop": "rope-forward"}, "cases in only one file: rope-forward"),
        ({"suite": "other-v9"}, "different suites"),
        ({"threads": 2}, "1 vs 2 threads"),
    ],
)
def test_unusable_input_exits_2_and_says_why(tmp_path, capsys, current, text):
    code, out = _run(tmp_path, capsys, **current)
    assert code == 2 and text in out.err


def test_bad_threshold_exits_2(tmp_path, capsys):
    code, out = _run(tmp_path, capsys, "--threshold", "rope")
    assert code == 2 and "--threshold" in out.err


def test_corrupt_or_missing_file_exits_2(tmp_path, capsys):
    base = _json(tmp_path / "base.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert regress.main(["--baseline", str(base), "--current", str(bad)]) == 2
    assert "not a pytest-benchmark JSON" in capsys.readouterr().err
    assert regress.main(["--baseline", str(base), "--current", str(tmp_path / "nope.json")]) == 2
    assert "no such file" in capsys.readouterr().err
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"benchmarks": [{"name": "x", "extra_info": {}, "stats": {}}]}))
    assert regress.main(["--baseline", str(base), "--current", str(other)]) == 2
    assert "is not from bench/regress/suite.py" in capsys.readouterr().err
