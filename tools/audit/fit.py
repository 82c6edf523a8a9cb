"""The time model's fit (tools/audit/model.py) to the committed GPU runs' rows, and what it
predicts for a commit's kernels.

    python -m tools.audit.fit [--now REV] [--audit-commit REV --python PY]

prints the fit (every measured row against its prediction, from the audit of the commit the
run measured: results/gpu-compile/measured/) and what the kernels of `--now` (default: the one
audit there that no run measured) should take at the newest run's points; `--audit-commit REV`
compiles REV's attention kernels (a temporary git worktree, under `--python`'s Triton: the GPU
stack's, .venv-compat) into results/gpu-compile/measured/{commit}.csv.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd

from tools.audit.model import (
    KERNELS,
    T5_DISTANCE,
    Params,
    case_cycles,
    case_rows,
    fixed_seconds,
)

ROOT = Path(__file__).resolve().parents[2]
MEASURED = ROOT / "results/gpu-compile/measured"
RUNS = ROOT / "results/gpu"
CASES = {f"{f}_attention": f for f in ("alibi", "t5", "shaw_bias", "shaw_kv")}


def run_commit(run: Path) -> str:
    """The commit a GPU run measured, as its reports name it."""
    for report in sorted(run.glob("*/report.md")):
        found = re.search(r"\bgit ([0-9a-f]{7,})", report.read_text())
        if found:
            return found.group(1)
    raise ValueError(f"{run}: no report names its commit")


def measured_points() -> pd.DataFrame:
    """The triton rows of the committed GPU runs' attention sweeps (ok, bfloat16, D=128):
    one per (run, case, mode, shape), the first sweep's where two timed it."""
    frames = []
    for run in sorted(p for p in RUNS.iterdir() if p.is_dir()):
        commit = run_commit(run)
        copy = pd.read_csv(run / "audit/audit.csv")
        copy_gbps = float(copy.loc[copy["impl"].str.startswith("copy"), "gbps"].iloc[0])
        for sweep in sorted(run.glob("sweep-*/results.csv")):
            df = pd.read_csv(sweep)
            if "params" not in df:  # a sweep cut before its first row
                continue
            df = df[(df["impl"] == "triton") & df["case"].isin(CASES) & (df["status"] == "ok")]
            df = df[(df["dtype"] == "bfloat16") & (df["head_dim"] == 128)]
            params = df["params"].map(json.loads)
            plain = params.map(lambda q: not q.get("sinks") and not q.get("window"))
            df, params = df.loc[plain.astype(bool)], params.loc[plain.astype(bool)]
            if df.empty:
                continue
            frames.append(
                pd.DataFrame(
                    dict(
                        run=run.name,
                        commit=commit,
                        copy_bps=copy_gbps * 1e9,
                        family=df["case"].map(CASES),
                        mode=df["mode"],
                        batch=df["batch"],
                        seq_len=df["seq_len"],
                        heads=df["num_heads"],
                        head_dim=df["head_dim"],
                        causal=params.map(lambda q: bool(q.get("causal"))),
                        shaw_k=params.map(lambda q: q.get("shaw_k") or 16),
                        measured_s=df["p50_ms"] / 1e3,
                    )
                )
            )
    out = pd.concat(frames, ignore_index=True)
    key = ["run", "family", "mode", "batch", "seq_len", "heads", "causal", "shaw_k"]
    return out.drop_duplicates(key).reset_index(drop=True)


def flex_seconds(point) -> float:
    """FlexAttention's time at a measured point of the same run (its `flex` row)."""
    run = RUNS / point["run"]
    for sweep in sorted(run.glob("sweep-*/results.csv")):
        df = pd.read_csv(sweep)
        if "params" not in df:
            continue
        at = (df["impl"] == "flex") & (df["case"] == f"{point['family']}_attention")
        at &= (df["mode"] == point["mode"]) & (df["seq_len"] == point["seq_len"])
        at &= df["params"].map(lambda q: bool(json.loads(q).get("causal")) == point["causal"])
        if at.any():
            return float(df.loc[at, "p50_ms"].iloc[0]) / 1e3
    raise ValueError(f"{run.name}: no FlexAttention row at {dict(point)}")


def audit_rows(commit: str) -> pd.DataFrame:
    path = MEASURED / f"{commit[:10]}.csv"
    if not path.exists():
        raise SystemExit(
            f"{commit[:10]}: no audit of its kernels; run python -m tools.audit.fit "
            f"--audit-commit {commit[:10]} --python <the GPU stack's python>"
        )
    return _with_slots(pd.read_csv(path))


def _with_slots(rows: pd.DataFrame) -> pd.DataFrame:
    from tools.audit.compile import blocks_per_sm

    rows = rows[rows["kernel"].isin(KERNELS.values())].copy()
    rows["blocks_per_sm"] = [
        blocks_per_sm(r.registers, r.num_warps, r.shared_bytes, 90) for r in rows.itertuples()
    ]
    return rows


def clip(point) -> int:
    """The kernel's clip distance K: ALiBi's band is the diagonal's (0), T5's its table's
    reach, Shaw's the case's number of relative positions."""
    return {"alibi": 0, "t5": T5_DISTANCE}.get(point["family"], int(point["shaw_k"]))


def predict(points: pd.DataFrame, rows_of, p: Params) -> list[float]:
    """Each point's seconds: its kernels' cycles at p.hz, delta, and its run's call time."""
    out = []
    for _, pt in points.iterrows():
        point = dict(pt, k=clip(pt))
        cycles = case_cycles(case_rows(rows_of(pt), point), point, p.alpha, p.overhead)
        out.append(cycles / p.hz + fixed_seconds(point, pt["copy_bps"]) + p.call(pt["run"]))
    return out


CALL_GRID = [i * 25e-6 for i in range(21)]  # 0 to 0.5 ms


def fit(points: pd.DataFrame) -> Params:
    """alpha, overhead, hz and each run's call time minimising the squared log ratio of
    predicted to measured, on grids (alpha 0-1, overhead 0-8000 cycles, hz 0.8-2.4 GHz, call
    0-0.5 ms)."""
    rows = {c: audit_rows(c) for c in points["commit"].unique()}
    measured = list(points["measured_s"])
    fixed = [fixed_seconds(dict(pt), pt["copy_bps"]) for _, pt in points.iterrows()]
    runs = list(points["run"])
    priced = []  # each point with its kernels' audit rows
    for _, pt in points.iterrows():
        point = dict(pt, k=clip(pt))
        priced.append((case_rows(rows[pt["commit"]], point), point))
    best = None
    for alpha in [i / 10 for i in range(11)]:
        for overhead in (0, 500, 1000, 2000, 4000, 8000):
            cycles = [case_cycles(kr, point, alpha, overhead) for kr, point in priced]
            for hz in [0.8e9 * 1.01**i for i in range(111)]:
                err, calls = 0.0, {}
                for run in sorted(set(runs)):
                    idx = [i for i, r in enumerate(runs) if r == run]
                    e, c = min(
                        (sum(math.log((cycles[i] / hz + fixed[i] + c) / measured[i]) ** 2
                             for i in idx), c)
                        for c in CALL_GRID
                    )  # fmt: skip
                    err, calls[run] = err + e, c
                if best is None or err < best[0]:
                    best = (err, Params(alpha, hz, overhead, tuple(sorted(calls.items()))))
    return best[1]


NAMES = {"alibi": "ALiBi", "t5": "T5", "shaw_bias": "Shaw scalar", "shaw_kv": "Shaw key+value"}


def _label(pt) -> list[str]:
    shape = f"{pt['batch']} x {pt['heads']} x {pt['seq_len']}"
    return [NAMES[pt["family"]], pt["mode"], "yes" if pt["causal"] else "no", shape]


def _table(head: list[str], lines: list[list[str]]) -> str:
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return "\n".join(out + ["| " + " | ".join(cells) + " |" for cells in lines])


def fit_table(points: pd.DataFrame, p: Params) -> str:
    """Each measured row against the model's time for the kernels its run measured."""
    rows = {c: audit_rows(c) for c in points["commit"].unique()}
    predicted = predict(points, lambda pt: rows[pt["commit"]], p)
    head = ["kernels at", "family", "mode", "causal", "B x H x L", "measured ms", "model ms"]
    lines = [
        [pt["commit"][:7], *_label(pt), f"{pt['measured_s'] * 1e3:.2f}", f"{m * 1e3:.2f}"]
        for (_, pt), m in zip(points.iterrows(), predicted, strict=True)
    ]
    return _table(head, lines)


def summary(points: pd.DataFrame, p: Params) -> str:
    """The fitted constants and how far the model is from the rows it was fitted to."""
    rows = {c: audit_rows(c) for c in points["commit"].unique()}
    predicted = predict(points, lambda pt: rows[pt["commit"]], p)
    errors = [abs(math.log(m / t)) for m, t in zip(predicted, points["measured_s"], strict=True)]
    return (
        f"alpha {p.alpha:.1f}, {p.hz / 1e9:.2f} G cycles a second, {p.overhead:.0f} cycles a "
        f"program, a call's time besides its kernels "
        + ", ".join(f"{c * 1e3:.3f} ms ({run})" for run, c in p.call_s)
        + f"; {len(points)} rows, median error {100 * (math.exp(_median(errors)) - 1):.0f}%"
        f", largest {100 * (math.exp(max(errors)) - 1):.0f}%"
    )


@functools.cache
def fitted() -> tuple[pd.DataFrame, Params]:
    """The committed runs' points and the constants fitted to them (once a process)."""
    points = measured_points()
    return points, fit(points)


def now_commit() -> str:
    """The commit of the one audit in measured/ that no run measured: the kernels the model
    predicts by default (its CSV replaced when the kernels change)."""
    runs = {run_commit(r)[:10] for r in RUNS.iterdir() if r.is_dir()}
    others = sorted(p.stem for p in MEASURED.glob("*.csv") if p.stem not in runs)
    if len(others) != 1:
        raise SystemExit(
            f"{MEASURED.relative_to(ROOT)}: {len(others)} audits no run measured, not 1"
        )
    return others[0]


def _median(xs: list[float]) -> float:
    xs = sorted(xs)
    return (xs[(len(xs) - 1) // 2] + xs[len(xs) // 2]) / 2


def now_table(points: pd.DataFrame, p: Params, commit: str) -> str:
    """The newest run's points: measured, the model for the kernels it measured and for
    `commit`'s (its audit in measured/), and the gain the model expects."""
    newest = points[points["run"] == points["run"].max()]
    then = predict(newest, lambda pt: audit_rows(pt["commit"]), p)
    rows = audit_rows(commit)
    now = predict(newest, lambda pt: rows, p)
    head = ["family", "mode", "causal", "B x H x L", "measured ms", "model then"]
    head += [f"model at {commit[:7]}", "expected gain"]
    lines = []
    for (_, pt), a, b in zip(newest.iterrows(), then, now, strict=True):
        cells = [*_label(pt), f"{pt['measured_s'] * 1e3:.2f}", f"{a * 1e3:.2f}", f"{b * 1e3:.2f}"]
        lines.append(cells + [f"{a / b:.2f}x"])
    return _table(head, lines)


def _commit(rev: str) -> str:
    found = subprocess.run(["git", "rev-parse", "--verify", "-q", f"{rev}^{{commit}}"], cwd=ROOT,
                           capture_output=True, text=True)  # fmt: skip
    if found.returncode:
        raise SystemExit(f"{rev}: not a commit of this repository")
    return found.stdout.strip()


def audit_commit(rev: str, python: str) -> Path:
    """Compile REV's attention kernels (a temporary worktree) into measured/REV.csv."""
    commit = _commit(rev)
    out = MEASURED / f"{commit[:10]}.csv"
    MEASURED.mkdir(parents=True, exist_ok=True)
    here = Path(__file__).resolve().parent
    with tempfile.TemporaryDirectory(prefix="audit-commit-") as tmp:
        tree = Path(tmp) / "tree"
        subprocess.run(["git", "worktree", "add", "-q", "--detach", str(tree), commit], check=True)
        try:
            env = {"PYTHONPATH": str(tree), "TRITON_CACHE_DIR": str(Path(tmp) / "cache")}
            script = [
                _absolute(python),
                str(here / "_at_commit.py"),
                str(out),
                str(here / "compile.py"),
            ]
            subprocess.run(script, cwd=tree, env=_env(env), check=True)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT)
    return out


def _absolute(python: str) -> str:
    """A relative interpreter path as seen from here (the script runs in the worktree)."""
    return os.path.abspath(python) if os.sep in python else python


def _env(extra: dict) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    return env | extra


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--audit-commit", metavar="REV", help="compile REV's kernels and exit")
    parser.add_argument("--python", default=sys.executable, help="the Triton to compile with")
    parser.add_argument("--now", metavar="REV", help="the kernels to predict (its audit)")
    args = parser.parse_args(argv)
    if args.audit_commit:
        print(audit_commit(args.audit_commit, args.python).relative_to(ROOT))
        return 0
    points, p = fitted()
    print(summary(points, p))
    print()
    print(fit_table(points, p))
    print()
    print(now_table(points, p, _commit(args.now) if args.now else now_commit()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
