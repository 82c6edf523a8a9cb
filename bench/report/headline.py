"""The report's opening table: the answer before the detail. For each case, mode, dtype and
device, at the run's largest length of the case (at its most measured other knobs): the fastest
implementation that computes the encoding and was checked (ok against float64, not suspect),
its median, its baseline's and the speedup; and what the same attention costs without the
encoding where the run timed it beside (SDPA without a bias), or, for an encoder, how near its
speed is to a copy of the call's bytes. A GPU's rows come first."""

from __future__ import annotations

import pandas as pd

from bench.tables import markdown_table

OWN = "own semantics"  # a row that computes something else (no bias: the floor), bench/run/point.py
FLOOR = "sdpa_nobias"
POINT = ["batch", "d_model", "num_heads", "params"]


def _without(best: pd.Series, point: pd.DataFrame) -> str:
    floor = point[point["impl"] == FLOOR]
    if not floor.empty:
        return f"{best['p50_ms'] / floor['p50_ms'].iloc[0]:.2f}x SDPA without a bias"
    if best.get("level") == "encoder" and pd.notna(best.get("copy_ms")):
        return f"{100 * best['copy_ms'] / best['p50_ms']:.0f}% of a copy's speed"
    return ""


def _answer(g: pd.DataFrame) -> list | None:
    longest = g[g["seq_len"] == g["seq_len"].max()]
    point = longest.groupby(POINT, sort=False).size().idxmax()
    at = longest[(longest[POINT] == pd.Series(point, index=POINT)).all(axis=1)]
    own = at["message"].astype(object).fillna("").astype(str).str.contains(OWN, regex=False)
    doing = at[~own]
    if doing.empty:
        return None
    best = doing.loc[doing["p50_ms"].idxmin()]
    speedup = f"{best['speedup']:.2f}x" if pd.notna(best.get("speedup")) else ""
    base = f"{best['base_ms']:.3g}" if pd.notna(best.get("base_ms")) else ""
    return [
        best["impl"],
        f"{best['p50_ms']:.3g}",
        f"{best.get('baseline', '')} {base}".strip(),
        speedup,
        _without(best, at),
    ]


def headline(df: pd.DataFrame) -> list[str]:
    """The opening section's lines ([] when no row is ok)."""
    suspect = df["suspect"].fillna("") if "suspect" in df else ""
    ok = df[(df["status"] == "ok") & df["p50_ms"].notna() & (suspect == "")]
    if ok.empty:
        return []
    ok = ok.assign(_gpu=ok["device"] != "cuda")  # False sorts first: a GPU's rows lead
    keys = ["_gpu", "device_name", "case", "mode", "dtype"]
    rows = []
    for (_, device, case, mode, dtype), g in ok.groupby(keys, sort=True):
        answer = _answer(g)
        if answer is not None:
            rows.append([case, mode, dtype, device, int(g["seq_len"].max()), *answer])
    header = ["case", "mode", "dtype", "device", "L", "fastest", "ms", "baseline ms", "speedup"]
    header += ["without the encoding"]
    return [
        "## Headline",
        "",
        "Each case at its longest length in this run: the fastest implementation checked "
        "against float64 (median ms per call), its speedup over the baseline timed beside it, "
        "and the encoding's price: its time over SDPA without a bias (attention) or its speed "
        "as a share of a same-size copy's (encoders).",
        "",
        *markdown_table(header, rows),
        "",
    ]
