"""What the figures read: the reference runs' committed files (results/reference/<run>/) and
the formats the pages write figures in."""

from __future__ import annotations

import json
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


def _cpu(env: dict) -> str:
    """The machine as the README names it: 2-core AMD EPYC VM."""
    name = env["cpu"].replace("Intel(R) ", "").replace("(R)", "").replace(" Processor", "")
    return f"{env['cpu_count']}-core {name} VM"
