"""The A/B mode of the timing gate: bench.regress.judge.paired on synthetic records (drift,
busy moments, processes that read apart, a true regression), the mode's arguments, and one run
of real worker processes on a commit of a throwaway repository (what each side imports; no
timing is judged)."""

import json
import math
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench.regress import ab, gate, judge, worker
from bench.regress.files import Unusable

ROOT = Path(__file__).resolve().parents[3]
KEYS = (("rope", "forward"), ("t5_attention", "forward+backward"))


def _record(
    *,
    factor=1.0,
    slow="rope",
    blocks=16,
    rounds=9,
    seed=0,
    drift=0.0,
    busy=None,
    process_spread=0.15,
    bad=None,
):
    """Rounds ~ N(t, 2%) times a machine speed that drifts block by block (both sides alike),
    three times slower in block `busy` (both sides), and times a per-process factor (one of
    each side's processes per block, uniform within +-process_spread); `slow` reads `factor`
    times slower on the current side."""
    rng = random.Random(seed)
    pairs = []
    for block in range(blocks):
        speed = (1 + drift) ** block * (3 if block == busy else 1)
        for case, mode in KEYS:
            sides = {}
            for side in ("base", "current"):
                proc = 1 + rng.uniform(-process_spread, process_spread)
                f = factor if (side == "current" and case == slow) else 1.0
                sides[side] = [5e-3 * speed * proc * f * rng.gauss(1, 0.02) for _ in range(rounds)]
            if bad is not None and case == slow and block == 3:
                sides["current"][0] = bad
            pairs.append(dict(case=case, mode=mode, block=block, first="base", **sides))
    return {
        "pairs": pairs,
        "base_ref": "HEAD~1",
        "base_commit": "0" * 40,
        "current": "1" * 12,
        "slowdown": None,
        "cpus": [1],
        "blocks": blocks,
        "rounds": rounds,
    }


def _verdicts(record, threshold=0.10):
    return {v.case: v for v in judge.paired(record, {}, threshold, 0.01)}


def test_drift_busy_moments_and_process_spread_are_not_regressions():
    v = _verdicts(_record(drift=0.05, busy=4))
    assert {x.verdict for x in v.values()} == {"ok"}
    assert all(abs(x.change) < 0.08 for x in v.values())


def test_a_true_regression_is_flagged_with_its_interval():
    v = _verdicts(_record(factor=1.3))
    rope = v["rope-forward"]
    assert rope.verdict == "regression" and rope.p_value < 0.01
    assert rope.interval[0] < 0.3 < rope.interval[1]
    assert v["t5_attention-forward+backward"].verdict == "ok"


def test_faster_and_below_threshold():
    assert _verdicts(_record(factor=0.7))["rope-forward"].verdict == "faster"
    assert _verdicts(_record(factor=1.05, process_spread=0.0))["rope-forward"].verdict == "ok"


def test_significance_is_required():
    """Six blocks: Wilcoxon's one-sided p is at least 1/64 > 0.01, whatever the change."""
    assert _verdicts(_record(factor=1.5, blocks=6))["rope-forward"].verdict == "ok"
    with pytest.raises(Unusable, match="--blocks 6: cannot reach p < 0.01"):
        judge.check_blocks(6, 0.01)
    judge.check_blocks(7, 0.01)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), 0.0, -1e-3])
def test_a_timing_that_is_not_a_time_is_refused(bad):
    with pytest.raises(Unusable, match="rope-forward, block 3, current side"):
        judge.paired(_record(bad=bad), {}, 0.1, 0.01)


def test_median_interval_covers_the_median():
    values = [math.log(1 + x / 100) for x in range(-8, 9)]
    low, high = judge.median_interval(values)
    assert low < 0 < high and low > values[0] and high < values[-1]


def _fake_runs(monkeypatch, factors):
    """gate's A/B passes return records with these factors in turn; -> the calls' keys."""
    calls = []

    def fake_run(tree, ref, *, blocks, rounds, slowdown=None, logs=None, keys=None, device="cpu"):
        calls.append(keys)
        return _record(factor=factors[len(calls) - 1], seed=len(calls))

    monkeypatch.setattr(ab, "run", fake_run)
    return calls


@pytest.mark.parametrize(("factors", "code"), [((1.3, 1.3), 1), ((1.3, 1.0), 0), ((1.0,), 0)])
def test_confirmation_is_a_second_whole_ab_run(tmp_path, capsys, monkeypatch, factors, code):
    calls = _fake_runs(monkeypatch, factors)
    argv = ["--base-ref", "HEAD", "--out", str(tmp_path), "--confirm"]
    assert gate.main(argv) == code
    assert calls == [None] * len(factors)  # every pass times the whole suite
    assert json.loads((tmp_path / "ab.json").read_text())["pairs"]
    out = capsys.readouterr().out
    assert ("REGRESSION in rope-forward" in out) == (code == 1)


@pytest.mark.parametrize(
    ("args", "text"),
    [
        (["--base-ref", "no-such-ref-anywhere"], "--base-ref: no commit 'no-such-ref-anywhere'"),
        (["--base-ref", "HEAD", "--blocks", "3"], "--blocks 3: cannot reach p < 0.01"),
        (["--base-ref", "HEAD", "--current", "x.json"], "--current: only with --baseline"),
        (["--base-ref", "HEAD", "--update"], "--update: only with --baseline"),
    ],
)
def test_bad_ab_arguments_are_one_line(tmp_path, capsys, monkeypatch, args, text):
    monkeypatch.chdir(ROOT)
    assert gate.main([*args, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert text in err and len(err.splitlines()) == 1


def _repo(tmp_path) -> Path:
    """A throwaway repository: this checkout's packages committed, then posenc changed."""
    repo = tmp_path / "repo"
    repo.mkdir()
    for pkg in ("bench", "posenc", "posenc_kernels"):
        shutil.copytree(ROOT / pkg, repo / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "base"], check=True)
    with (repo / "posenc" / "__init__.py").open("a") as f:
        f.write("\nSIDE = 'current'\n")
    return repo


def test_each_side_runs_its_own_library(tmp_path):
    """Real workers: the base side imports the commit's posenc (extracted, not the tree's),
    the current side the working tree's; one suite, fresh processes per block."""
    repo = _repo(tmp_path)
    keys = [("sinusoidal", "forward")]
    record = ab.run(repo, "HEAD", blocks=2, rounds=1, keys=keys, logs=tmp_path / "logs")
    base, current = record["libraries"]["base"], record["libraries"]["current"]
    assert Path(current["posenc"]) == repo / "posenc" / "__init__.py"
    assert repo not in Path(base["posenc"]).parents
    assert Path(base["posenc"]).name == "__init__.py"
    assert [(p["block"], p["first"]) for p in record["pairs"]] == [(0, "base"), (1, "current")]
    assert all(len(p["base"]) == len(p["current"]) == 1 for p in record["pairs"])
    assert record["current"].endswith("+dirty")


def test_a_side_that_imports_the_other_library_is_refused(tmp_path):
    """A library folder without posenc: the worker finds the tree's, and the check says so."""
    empty = tmp_path / "lib"
    empty.mkdir()
    side = ab.Side("base", empty, ROOT, None, tmp_path / "base.log", "cpu")
    try:
        side.ask(op="hello")
        with pytest.raises(Unusable, match="the base side imported posenc from"):
            side.check_library()
    finally:
        side.close()


def test_the_worker_answers_each_request_in_one_line(tmp_path):
    boot = worker.BOOT.format("bench.regress.worker")
    requests = '{"op": "hello"}\n{"op": "nope"}\n'
    proc = subprocess.run(
        [sys.executable, "-c", boot, str(ROOT), str(ROOT)],
        input=requests,
        capture_output=True,
        text=True,
        timeout=120,
    )
    answers = [json.loads(line) for line in proc.stdout.splitlines()]
    assert "files" in answers[0] and answers[1] == {"error": "unknown request 'nope'"}
