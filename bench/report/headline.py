"""The report's opening table: the answer before the detail. For each case, mode, dtype and
device, at the run's largest length of the case (at its most measured other knobs): the fastest
implementation that computes the encoding and was checked (ok against float64, not suspect),
its median, its baseline's and the speedup; and what the same attention costs without the
encoding where the run timed it beside (SDPA without a bias), or, for an encoder, how near its
speed is to a copy of the call's bytes. A GPU's rows come first."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from bench.report.rows import checked, own_semantics
from bench.tables import markdown_table

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
    doing = at[~own_semantics(at)]
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


def fastest(df: pd.DataFrame) -> pd.DataFrame:
    """Per case, mode, dtype, device and length (at the case's most measured other knobs): the
    fastest checked row that computes the encoding, and `floor_ms`, SDPA without a bias at
    the same point where the run timed it."""
    out = []
    for _, g in checked(df).groupby(["device", "case", "mode", "dtype"], sort=False):
        point = g.groupby(POINT, sort=False).size().idxmax()
        g = g[(g[POINT] == pd.Series(point, index=POINT)).all(axis=1)]
        own = own_semantics(g)
        floor = g[g["impl"] == FLOOR].groupby("seq_len")["p50_ms"].min()
        doing = g[~own]
        if doing.empty:
            continue
        best = doing.loc[doing.groupby("seq_len")["p50_ms"].idxmin()]
        out.append(best.assign(floor_ms=best["seq_len"].map(floor)))
    return pd.concat(out, ignore_index=True) if out else df.iloc[0:0]


def plot(df: pd.DataFrame, out: Path) -> list[Path]:
    """headline_<mode>_<dtype>.png: per device and level a panel of the encodings' fastest
    checked time against L (log-log), the attention panel with SDPA without a bias dashed."""
    from bench.report.figures import LEGEND_PT, plt, save, wrap

    best, written = fastest(df), []
    for (mode, dtype), g in best.groupby(["mode", "dtype"], sort=False):
        panels = list(g.groupby(["device", "level"], sort=True))
        fig, axes = plt.subplots(
            1, len(panels), figsize=(5.2 * len(panels), 4.2), squeeze=False, layout="constrained"
        )
        for ax, ((device, level), p) in zip(axes[0], panels, strict=True):
            for case, c in p.groupby("case", sort=False):
                c = c.sort_values("seq_len")
                ax.plot(c["seq_len"], c["p50_ms"], marker="o", label=case)
            floor = p.groupby("seq_len")["floor_ms"].min().dropna()
            if not floor.empty:  # the cases share the point's heads: one floor per length
                ax.plot(floor.index, floor, "k--", linewidth=1, label="SDPA without a bias")
            lengths = sorted(p["seq_len"].unique())
            ax.set(xscale="log", yscale="log", xlabel="L (tokens)", ylabel="ms per call")
            ax.set_xticks(lengths, [str(n) for n in lengths])
            ax.xaxis.set_minor_locator(plt.NullLocator())
            ax.set_title(wrap(f"{level} on {device}", 50), fontsize=9)
            ax.legend(fontsize=LEGEND_PT, frameon=False)
        title = f"Each encoding at its fastest checked implementation ({mode}, {dtype})"
        fig.suptitle(wrap(title, 100), fontsize=10)
        path = out / f"headline_{mode.replace('+', '_')}_{dtype}.png"
        save(fig, path)
        written.append(path)
    return written


def headline(df: pd.DataFrame) -> list[str]:
    """The opening section's lines ([] when no row is ok)."""
    ok = checked(df)
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
