"""Result rows as the reports read them: every results.csv under some directories, merged
(the latest measurement of a key kept), and each row's speedup against its case's baseline,
taken within one run, side by side."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pandas as pd

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


def results_of(d: Path) -> list[Path]:
    """The results.csv a folder stands for: a run's own; a multirun's, its jobs' (one level
    down, as Hydra numbers them); never every results.csv below it (a run started inside the
    repository would otherwise report the committed runs' rows as its own)."""
    d = Path(d)
    if (d / "results.csv").is_file():
        return [d / "results.csv"]
    return sorted(p for p in d.glob("*/results.csv") if p.parent.name.isdigit())


def has_rows(dirs: list[Path]) -> bool:
    """Whether the results.csv of dirs hold a row."""
    return any(
        f.stat().st_size and len(f.read_text().splitlines()) > 1
        for d in dirs
        for f in results_of(d)
    )


def load_all(dirs: list[Path]) -> pd.DataFrame:
    """Every row of the results.csv of dirs (`results_of`)."""
    files = sorted({f for d in dirs for f in results_of(d)})
    if not files:
        raise FileNotFoundError(
            f"no results.csv in {', '.join(map(str, dirs))} (a run's folder, or a multirun's)"
        )
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


# Rows from before the `baseline` column (results schema 7): every case's baseline was the
# first of these that ran at its point (eager: the serving step's)
EARLIER_BASELINES = ("reference", "eager")


def declared(df: pd.DataFrame, key: list[str]) -> pd.Series:
    """Each row's case baseline, from the rows alone: its `baseline` column, or in older rows
    the first of EARLIER_BASELINES that ran at its point (key)."""
    column = df["baseline"] if "baseline" in df else pd.Series(float("nan"), index=df.index)
    ran = df.groupby(key, dropna=False, sort=False)["impl"].transform(
        lambda impls: next((b for b in EARLIER_BASELINES if b in set(impls)), "reference")
    )
    return column.astype(object).where(column.notna() & (column.astype(str) != ""), ran)


PREFERRED = "hf"  # transformers' own code, where it ran: what most users would otherwise run
OWN = "own semantics"  # in the message of a row computing other work (bench/run/point.py)


def own_semantics(df: pd.DataFrame) -> pd.Series:
    """Rows that compute something else than their case (SDPA without a bias: a floor)."""
    message = df["message"] if "message" in df else pd.Series("", index=df.index)
    return message.astype(object).fillna("").astype(str).str.contains(OWN, regex=False)


def checked(df: pd.DataFrame) -> pd.DataFrame:
    """The ok rows with a median that are not suspect: what a comparison may rest on."""
    suspect = df["suspect"].fillna("") if "suspect" in df else ""
    return df[(df["status"] == "ok") & df["p50_ms"].notna() & (suspect == "")]


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
    marked["baseline"] = declared(marked, key).where(marked["_hf"].ne(True), PREFERRED)
    base = marked[marked["impl"] == marked["baseline"]][key + ["p50_ms", "suspect"]]
    base = base.rename(columns={"p50_ms": "base_ms", "suspect": "base_suspect"})
    base["base_suspect"] = base["base_suspect"] != ""
    out = df.assign(baseline=marked["baseline"].to_numpy()).merge(base, on=key, how="left")
    out["speedup"] = out["base_ms"] / out["p50_ms"]
    return out
