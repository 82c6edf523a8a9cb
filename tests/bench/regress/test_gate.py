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
    cpu="AMD EPYC",
    nan=False,
    stack=None,
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
                **(stack or {}),
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
            if nan and key == slow:
                data[0] = float("nan")
            info = {
                "suite": suite,
                "case": case,
                "mode": mode,
                "kind": "case",
                "repeat": block,
                "threads": threads,
                "anchor": times(2, speed),
                **(stack or {}),
            }
            benches.append(
                {"name": f"test_perf[r{block}-{key}]", "extra_info": info, "stats": {"data": data}}
            )
    machine = {"machine": "x86_64", "cpu": {"brand_raw": cpu}}
    path.write_text(json.dumps({"machine_info": machine, "benchmarks": benches}))
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


def test_a_faster_case_says_the_baseline_is_stale(tmp_path, capsys):
    """Faster than the baseline by more than the threshold: `stale`, with the command that
    refreshes it (a stale baseline lets a slowdown of up to that much pass); exit 0."""
    code, out = _run(tmp_path, capsys, slow="rope-forward", factor=0.6)
    assert code == 0 and "| stale |" in out.out
    assert "stale baseline: rope-forward" in out.out and "make regress-update" in out.out


def test_below_threshold_or_per_case_threshold_is_ok(tmp_path, capsys):
    code, _ = _run(tmp_path, capsys, slow="rope-forward", factor=1.1)
    assert code == 0
    code, _ = _run(tmp_path, capsys, "--threshold", "rope=0.4", slow="rope-forward", factor=1.3)
    assert code == 0
    code, _ = _run(tmp_path, capsys, "--default-threshold", "0.05", slow="rope-forward", factor=1.1)
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
        ({"cpu": "Intel Xeon"}, "baseline measured on AMD EPYC, this run on Intel Xeon"),
        ({"slow": "rope-forward", "nan": True}, "nan is not a positive finite number"),
        ({"rounds": 0}, "no timings"),
    ],
)
def test_unusable_input_exits_2_in_one_line(tmp_path, capsys, current, text):
    code, out = _run(tmp_path, capsys, **current)
    assert code == 2 and text in out.err and len(out.err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "args",
    [
        ["--threshold", "rope"],
        ["--threshold", "rope=0"],
        ["--threshold", "rope=-0.2"],
        ["--threshold", "rope=nan"],
        ["--threshold", "ropes=0.2"],  # no such case
        ["--threshold", "rope-backward=0.2"],  # no such mode in the suite
        ["--default-threshold", "0"],
        ["--default-threshold", "inf"],
        ["--alpha", "-1"],
        ["--alpha", "5"],
        ["--alpha", "0"],
        ["--alpha", "1"],
        ["--alpha", "nan"],
        ["--alpha", "x"],
        ["--perf-slowdown", "nope"],
        ["--blocks", "0"],
    ],
)
def test_a_bad_argument_is_one_line_and_exit_2(tmp_path, capsys, args):
    with pytest.raises(SystemExit) as stop:
        code = regress.main(
            ["--baseline", str(_json(tmp_path / "b.json")), "--current", str(tmp_path / "b.json")]
            + args
        )
        raise SystemExit(code)
    err = capsys.readouterr().err.strip()
    assert stop.value.code == 2 and len(err.splitlines()) == 1, err
    assert args[0] in err


def test_confirmation_reruns_the_whole_suite_so_a_case_timed_alone_cannot_clear_it(
    tmp_path, capsys, monkeypatch
):
    """A fake suite in which rope-forward reads 30% slower inside the whole suite but at the
    baseline's speed when timed alone (as a lone case reads faster on a real VM): the
    confirmation must take its rounds as the first pass did, so the regression stands."""
    base = _json(tmp_path / "base.json")
    cur = _json(tmp_path / "cur.json", seed=1, slow="rope-forward", factor=1.3)
    calls = []

    def fake_suite(out, keys=None, *rest, **kwargs):
        alone = isinstance(keys, (list, tuple)) and len(keys) < len(CASES)
        calls.append("alone" if alone else "whole suite")
        _json(out, seed=2, slow="rope-forward", factor=1.0 if alone else 1.3)

    monkeypatch.setattr(regress, "run_suite", fake_suite)
    code = regress.main(
        ["--baseline", str(base), "--current", str(cur), "--confirm", "--out", str(tmp_path / "o")]
    )
    out = capsys.readouterr().out
    assert calls == ["whole suite"]
    assert code == 1 and "REGRESSION in rope-forward" in out


def test_a_regression_that_does_not_repeat_is_not_confirmed(tmp_path, capsys, monkeypatch):
    base = _json(tmp_path / "base.json")
    cur = _json(tmp_path / "cur.json", seed=1, slow="rope-forward", factor=1.3)
    monkeypatch.setattr(regress, "run_suite", lambda out, *a, **k: _json(out, seed=2))
    code = regress.main(
        ["--baseline", str(base), "--current", str(cur), "--confirm", "--out", str(tmp_path / "o")]
    )
    assert code == 0 and "verdict: ok" in capsys.readouterr().out


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


def test_a_stored_run_is_one_process_per_block_merged(tmp_path, monkeypatch):
    """bench.regress.runs: each block is its own pytest run (the ids of that block only), and
    the files merge in block order under the first file's machine information."""
    from bench.regress import runs, suite

    seen = []

    def fake_block(block, out, log, slowdown, device):
        seen.append(block)
        _json(out, blocks=1, seed=block, cpu=f"cpu of block {block}")

    monkeypatch.setattr(runs, "_block", fake_block)
    out = tmp_path / "cur.json"
    runs.run_suite(out, tmp_path / "cur.log")
    data = json.loads(out.read_text())
    assert seen == list(range(suite.REPEATS))
    assert data["machine_info"]["cpu"]["brand_raw"] == "cpu of block 0"
    assert len(data["benchmarks"]) == suite.REPEATS * (2 + len(CASES))
    ids = [i for i in suite.IDS if i.startswith("r3-")]
    assert ids and all(i.startswith("r3-") for i in ids)


H100 = {"gpu": "NVIDIA H100 80GB HBM3", "torch": "2.11.0+cu130", "triton": "3.6.0"}


@pytest.mark.parametrize(
    ("current", "text"),
    [
        (dict(H100, gpu="NVIDIA H200"), "gpu NVIDIA H100 80GB HBM3, torch 2.11.0+cu130"),
        (dict(H100, triton="3.7.0"), "this run with gpu NVIDIA H100 80GB HBM3, torch 2.11.0"),
    ],
)
def test_a_gpu_baseline_is_keyed_by_its_gpu_and_versions(tmp_path, capsys, current, text):
    """Another GPU's, torch's or Triton's baseline is refused in one line; the same GPU on
    another host CPU is judged (the host does not key a GPU suite)."""
    code, out = _run(tmp_path, capsys, base={"stack": H100}, stack=current)
    assert code == 2 and text in out.err and len(out.err.strip().splitlines()) == 1, out.err
    code, out = _run(tmp_path, capsys, base={"stack": H100}, stack=H100, cpu="Intel Xeon")
    assert code == 0 and "measured at ? on NVIDIA H100 80GB HBM3" in out.out, out


def test_a_gpu_without_a_committed_baseline_measures_one_and_says_so(tmp_path, capsys, monkeypatch):
    """--baseline auto on CUDA: this GPU's file when committed; where it is not, the suite is
    measured into --out, the run says where to commit it, and nothing is judged (exit 0)."""
    runs = []
    monkeypatch.setattr(regress, "baseline_for", lambda device: tmp_path / "cuda-h100.json")
    monkeypatch.setattr(regress, "run_suite", lambda out, *a: runs.append((out, a)))
    out_dir = tmp_path / "o"
    code = regress.main(["--baseline", "auto", "--device", "cuda", "--out", str(out_dir)])
    said = capsys.readouterr().out
    assert code == 0 and len(runs) == 1
    measured, rest = runs[0]
    assert measured == out_dir / "cuda-h100.json" and rest[-1] == "cuda"
    assert f"commit it as {tmp_path / 'cuda-h100.json'}" in said and "Nothing judged" in said
    assert said.strip().endswith("verdict: no baseline (measured one)")


def test_the_devices_suites_and_their_arguments(tmp_path, capsys):
    """The GPU suite times the fused kernels at real shapes (each point a case the kernel
    supports); a case of the other device's suite is refused in one line; no CUDA: one line."""
    from bench.cases import CASES as ALL
    from bench.regress import suite

    for case, (impl, point) in suite.ALL_POINTS["cuda"].items():
        assert impl == "triton" and ALL[case].constraint(point) is None
        assert ALL[case].impls[impl].supports(point) is None
    assert suite.SUITES["cuda"] != suite.SUITES["cpu"]
    assert [i for i in suite.ids("cuda") if i.startswith("r0-shaw_kv")]
    base = str(_json(tmp_path / "b.json"))
    args = ["--baseline", base, "--current", base, "--device", "cuda"]
    assert regress.main([*args, "--perf-slowdown", "sinusoidal"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--perf-slowdown: 'sinusoidal' is not a case of the cuda suite" in err
    if not __import__("torch").cuda.is_available():
        assert regress.main(["--baseline", "auto", "--device", "cuda"]) == 2
        assert "--device cuda: no CUDA device here" in capsys.readouterr().err
