"""Result rows as the reports read them: every results.csv under some directories, merged
(the latest measurement of a key kept), and each row's speedup against its case's baseline,
taken within one run, side by side."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pandas as pd

from bench.cases import CASES
from bench.results import COLUMNS, KEY, read_rows
from bench.results import SHAPE as _SHAPE

SHAPE = list(_SHAPE)


def knobs(params: str) -> str:
    """The params column's JSON as "layout=bshd causal" (defaults left out: default tiles,
    num_kv_heads null, causal false; empty for none)."""
    try:
        items = json.loads(params).items()
    except (TypeError, ValueError):
        return ""
    return " ".join(
        k if v is True else f"{k}={v}" for k, v in items if v not in (None, False, "default")
    )


def has_rows(dirs: list[Path]) -> bool:
    """Whether any results.csv under dirs holds a row."""
    return any(
        f.stat().st_size and len(f.read_text().splitlines()) > 1
        for d in dirs
        for f in Path(d).rglob("results.csv")
    )


def load_all(dirs: list[Path]) -> pd.DataFrame:
    """Every row of every results.csv under dirs."""
    files = sorted({f for d in dirs for f in Path(d).rglob("results.csv")})
    if not files:
        raise FileNotFoundError(f"no results.csv under {', '.join(map(str, dirs))}")
    frames = [_frame(f) for f in files]
    frames = [f for f in frames if not f.empty]
    if not frames:
        raise FileNotFoundError(f"no rows in the results.csv under {', '.join(map(str, dirs))}")
    df = pd.concat(frames, ignore_index=True)
    df["params"] = df["params"].fillna("{}") if "params" in df else "{}"
    for column in COLUMNS:  # an older run lacks the columns added since: read as empty
        if column not in df:
            df[column] = float("nan")
    return df.sort_values("timestamp", kind="stable").reset_index(drop=True)


def _frame(path: Path) -> pd.DataFrame:
    """A results.csv's rows, each checked (bench/results.py: read_rows); a torn last row (a write
    cut short) is left out, saying so: `resume=true` measures its point again."""
    read = read_rows(path)
    if read.torn is not None:
        print(f"{path}: its last row was cut short ({len(read.torn)} bytes): left out")
    return pd.read_csv(io.StringIO(read.text), dtype={"params": str})


def load(dirs: list[Path]) -> pd.DataFrame:
    """One row per key: a row measured more than once (a re-run, or the same point in
    several runs) keeps its latest measurement; attrs["duplicates"] counts the others."""
    df = load_all(dirs)
    latest = df.drop_duplicates(list(KEY), keep="last").reset_index(drop=True)
    latest.attrs["duplicates"] = len(df) - len(latest)
    return latest


def baseline(case: str) -> str:
    return CASES[case].baseline if case in CASES else "reference"


PREFERRED = "hf"  # transformers' own code, where it ran: what most users would otherwise run


def speedups(df: pd.DataFrame) -> pd.DataFrame:
    """Adds `baseline` (the implementation a row's speedup is against: transformers' `hf` where
    it ran ok at the same point, mode, device and run, else the case's baseline), `speedup`: that
    baseline's time over this impl's (timed side by side; never a ratio of two runs' times), and
    `base_suspect`: whether that baseline row is suspect (df has `suspect`)."""
    key = ["case", "mode", "device", "device_name", "dtype", *SHAPE]
    key += ["run_id"] if "run_id" in df else []
    marked = df.assign(suspect=df.get("suspect", ""))
    ran = marked[(marked["impl"] == PREFERRED) & marked["p50_ms"].notna()][key]
    ran = ran.drop_duplicates().assign(_hf=True)
    marked = marked.merge(ran, on=key, how="left")
    marked["baseline"] = marked["case"].map(baseline).where(marked["_hf"].ne(True), PREFERRED)
    base = marked[marked["impl"] == marked["baseline"]][key + ["p50_ms", "suspect"]]
    base = base.rename(columns={"p50_ms": "base_ms", "suspect": "base_suspect"})
    base["base_suspect"] = base["base_suspect"] != ""
    out = df.assign(baseline=marked["baseline"].to_numpy()).merge(base, on=key, how="left")
    out["speedup"] = out["base_ms"] / out["p50_ms"]
    return out
