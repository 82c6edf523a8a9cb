"""What the figures read: the reference runs' committed files (results/reference/<run>/) and
the formats the pages write figures in."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from functools import cache
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
REF = ROOT / "results" / "reference"
README = ROOT / "README.md"
TESTS = REF / "tests.json"  # make test's record (tools/figures/record.py)


@cache
def _rows(run: str) -> pd.DataFrame:
    return pd.read_csv(REF / run / "results.csv")


def _json(run: str, name: str) -> dict:
    return json.loads((REF / run / name).read_text())


def _minutes(seconds: float) -> str:
    return f"{int(seconds // 60)}:{round(seconds % 60):02d}"


def _pct(x: float) -> str:
    return f"{round(100 * x)}"


def pct_span(values) -> str:
    """Shares as whole percents: 17%, 0-17%, -1 to 32% (no -0)."""
    lo, hi = (round(100 * v) + 0 for v in (min(values), max(values)))
    return f"{lo}%" if lo == hi else f"{lo} to {hi}%" if lo < 0 else f"{lo}-{hi}%"


def jit_stdout(code: str) -> str:
    """What `python -c code` prints in a process without Triton's interpreter: the GPU run's
    estimates record the JIT's launches, which the interpreter (the tests') would run."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
        check=True,
    )  # fmt: skip
    return out.stdout


def _cpu(env: dict) -> str:
    """The machine as the README names it: 2-core AMD EPYC VM."""
    name = env["cpu"].replace("Intel(R) ", "").replace("(R)", "").replace(" Processor", "")
    return f"{env['cpu_count']}-core {name} VM"


@cache
def report_rows(run: str) -> pd.DataFrame:
    """A reference run's rows as its report reads them (bench.report.build.frame): flags,
    speedups against the side-by-side baseline, and each row's table cell."""
    from bench.report.build import frame

    return frame([REF / run])


def pick(df: pd.DataFrame, **eq) -> pd.Series:
    """The one row of `df` whose columns (or, where a key is no column, whose params) equal
    `eq`; anything but exactly one row is an error, so a figure never reads the wrong row."""
    mask = pd.Series(True, index=df.index)
    for key, value in eq.items():
        knob = df["params"].map(lambda p, k=key: json.loads(p).get(k)) if key not in df else None
        mask &= (df[key] if knob is None else knob) == value
    if mask.sum() != 1:
        raise LookupError(f"{eq}: {int(mask.sum())} rows, not one")
    return df[mask].iloc[0]


def g3(x: float) -> str:
    """Three significant digits, trailing zeros kept (32.0, 8.95, 547)."""
    return f"{x:#.3g}".rstrip(".") if x < 1000 else f"{x:.0f}"


def run_line(run: str) -> str:
    """Where a reference run comes from: its commit, machine, torch, rows and wall time."""
    env, summary = _json(run, "env.json"), _json(run, "timing_summary.json")
    return (
        f"{_cpu(env)}, torch {env['torch']}, commit {env['git_sha'][:7]}; "
        f"{len(_rows(run))} rows in {round(summary['wall_s'])} s"
    )


def contended(run: str) -> str:
    """ "none contended" or "N contended": the rows timed while other processes held the CPU."""
    n = int(_rows(run)["contended"].fillna(False).astype(bool).sum())
    return f"{n or 'none'} contended"


def span(values, fmt: str = "{:.1f}", sep: str = "-") -> str:
    """lo-hi of values in one format, or the one value where both print alike."""
    lo, hi = fmt.format(min(values)), fmt.format(max(values))
    return lo if lo == hi else f"{lo}{sep}{hi}"


def sci(x: float, digits: int = 1) -> str:
    """1.9e-3 as the pages write small errors (no leading zero in the exponent)."""
    mantissa, exponent = f"{x:.{digits}e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def parts(figure, n: int) -> dict:
    """A figure that returns n fragments (one sentence quoting several) as n named figures."""
    return {f"{figure.__name__}_{i}": (lambda i=i: figure()[i]) for i in range(n)}
