"""PNG plots from result rows (called by bench.report; never from the timing loop).

- time_vs_seq_len_<mode>_<dtype>.png: one panel per case, median ms vs L, one line per
  impl @ device with its p20-p80 band, at the most common (B, d_model, H).
- speedup_<mode>_<dtype>.png: speedup vs the case's baseline at each case's largest L.
- pct_peak_bw_<mode>_<dtype>.png: achieved GB/s as % of the run's measured copy bandwidth.
- pct_copy_bw_<mode>_<dtype>.png: the same against the same-size copy timed side by side.
- cpu_vs_cuda_<mode>_<dtype>.png: CPU time / CUDA time per impl, when both devices ran.
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

OTHER = ["batch", "d_model", "num_heads", "params"]


def _common(g: pd.DataFrame) -> tuple:
    """The most frequent (B, d_model, H); ties go to the largest (the least overhead-bound)."""
    sizes = g.groupby(OTHER).size()
    return sizes[sizes == sizes.max()].index[-1]


def _ok(df: pd.DataFrame) -> pd.DataFrame:
    return df[(df["status"] == "ok") & df["p50_ms"].notna()]


def _largest_points(df: pd.DataFrame) -> pd.DataFrame:
    """Per case: rows at the most common (B, d_model, H) and that case's largest L."""
    keep = []
    for _, g in df.groupby("case"):
        common = _common(g)
        g = g[(g[OTHER] == pd.Series(common, index=OTHER)).all(axis=1)]
        keep.append(g[g["seq_len"] == g["seq_len"].max()])
    return pd.concat(keep) if keep else df.iloc[:0]


def _time_vs_seq_len(df: pd.DataFrame, path: Path, title: str) -> None:
    cases = list(dict.fromkeys(df["case"]))
    cols = min(3, len(cases))
    rows = math.ceil(len(cases) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.2 * rows), squeeze=False)
    for ax, case in zip(axes.flat, cases, strict=False):
        g = df[df["case"] == case]
        common = _common(g)
        g = g[(g[OTHER] == pd.Series(common, index=OTHER)).all(axis=1)]
        for label, line in g.groupby(g["impl"] + " @ " + g["device"]):
            line = line.sort_values("seq_len")
            ax.plot(line["seq_len"], line["p50_ms"], marker="o", label=label)
            ax.fill_between(line["seq_len"], line["p20_ms"], line["p80_ms"], alpha=0.2)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(f"{case} (B={common[0]}, d={common[1]}, H={common[2]})", fontsize=9)
        ax.set_xlabel("seq_len")
        ax.set_ylabel("ms (p50, band p20-p80)")
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(cases) :]:
        ax.axis("off")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _bars(values: pd.DataFrame, column: str, path: Path, title: str, xlabel: str) -> None:
    if values.empty:
        return
    labels = values["case"] + " / " + values["impl"] + " @ " + values["device"]
    fig, ax = plt.subplots(figsize=(7, 0.3 * len(values) + 1.2))
    ax.barh(range(len(values)), values[column])
    ax.set_yticks(range(len(values)), labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel(xlabel)
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def write_all(df: pd.DataFrame, out: Path) -> list[Path]:
    """df: merged rows with a `speedup` column (bench.report). Returns the files written."""
    written = []
    ok = _ok(df)
    for (mode, dtype), g in ok.groupby(["mode", "dtype"]):
        tag = f"{mode.replace('+', '_')}_{dtype}"
        path = out / f"time_vs_seq_len_{tag}.png"
        _time_vs_seq_len(g, path, f"{mode}, {dtype}")
        written.append(path)
        top = _largest_points(g)
        for column, name, xlabel in (
            ("speedup", "speedup", "speedup vs the case's baseline (same device)"),
            ("pct_peak_bw", "pct_peak_bw", "% of the measured copy bandwidth"),
            ("pct_copy_bw", "pct_copy_bw", "% of a same-size copy timed alongside"),
        ):
            values = top[top[column].notna()] if column in top else top.iloc[:0]
            path = out / f"{name}_{tag}.png"
            _bars(values, column, path, f"{mode}, {dtype}, largest L per case", xlabel)
            written.append(path) if not values.empty else None
        if {"cpu", "cuda"} <= set(g["device"]):
            key = ["case", "impl", *OTHER, "seq_len"]
            both = g[g["device"] == "cpu"].merge(
                g[g["device"] == "cuda"], on=key, suffixes=("_cpu", "_cuda")
            )
            both = both.assign(ratio=both["p50_ms_cpu"] / both["p50_ms_cuda"], device="cuda")
            path = out / f"cpu_vs_cuda_{tag}.png"
            _bars(_largest_points(both.assign(status="ok")), "ratio", path,
                  f"{mode}, {dtype}", "CPU time / CUDA time")  # fmt: skip
            written.append(path)
    return [p for p in written if p.exists()]
