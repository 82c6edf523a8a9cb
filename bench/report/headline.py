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


def _without(best: pd.Series) -> str:
    if pd.notna(best["floor_ms"]):
        return f"{best['p50_ms'] / best['floor_ms']:.2f}x SDPA without a bias"
    if best.get("level") == "encoder" and pd.notna(best.get("copy_ms")):
        return f"{100 * best['copy_ms'] / best['p50_ms']:.0f}% of a copy's speed"
    return ""


def fastest(df: pd.DataFrame) -> pd.DataFrame:
    """Per case, mode, dtype, device and length (at the case's most measured other knobs): the
    fastest checked row that computes the encoding, and `floor_ms`, SDPA without a bias at
    the same point where the run timed it."""
    out = []
    for _, g in checked(df).groupby(["device_name", "case", "mode", "dtype"], sort=False):
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
        panels = list(g.groupby(["device_name", "level"], sort=True))
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
    """The opening section's lines ([] when no row is ok): fastest() at each case's longest
    length."""
    best = fastest(df)
    if best.empty:
        return []
    longest = best.groupby(["device_name", "case", "mode", "dtype"])["seq_len"].transform("max")
    best = best[best["seq_len"] == longest].assign(_gpu=best["device"] != "cuda")
    rows = []
    for _, r in best.sort_values(["_gpu", "device_name", "case", "mode", "dtype"]).iterrows():
        speedup = f"{r['speedup']:.2f}x" if pd.notna(r.get("speedup")) else ""
        base = f"{r['base_ms']:.3g}" if pd.notna(r.get("base_ms")) else ""
        rows.append(
            [r["case"], r["mode"], r["dtype"], r["device_name"], int(r["seq_len"]), r["impl"]]
            + [f"{r['p50_ms']:.3g}", f"{r.get('baseline', '')} {base}".strip(), speedup]
            + [_without(r)]
        )
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
