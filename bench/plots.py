"""PNG plots from result rows (called by bench.report; never from the timing loop).

- time_vs_seq_len_<mode>_<dtype>.png: one panel per case, median ms vs L at the case's most
  common (B, d_model, H, knobs), one line per impl @ device with its p20-p80 band; one colour
  per impl @ device in every panel; hollow markers for uncertain medians (bench.report).
- speedup_<mode>_<dtype>.png: each case's implementations against its baseline (left out: it
  is the 1.0 line) at the case's largest L, values on the bars.
- pct_copy_bw_<mode>_<dtype>.png: the encoders' time as % of a same-size copy timed beside
  them (memory-bound work); pct_matmul_<mode>_<dtype>.png: the attention cases' FLOP/s as % of
  the run's measured matmul rate (compute-bound work).
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
    """The most frequent (B, d_model, H, knobs); ties go to the largest (least overhead)."""
    sizes = g.groupby(OTHER).size()
    return sizes[sizes == sizes.max()].index[-1]


def _at(g: pd.DataFrame, point: tuple) -> pd.DataFrame:
    return g[(g[OTHER] == pd.Series(point, index=OTHER)).all(axis=1)]


def _label(df: pd.DataFrame) -> pd.Series:
    return df["impl"] + " @ " + df["device"]


def _colors(df: pd.DataFrame) -> dict[str, tuple]:
    """One colour per impl @ device, the same in every panel and plot of a report."""
    labels = sorted(set(_label(df)))
    cmap = plt.get_cmap("tab10" if len(labels) <= 10 else "tab20")
    return {label: cmap(i % cmap.N) for i, label in enumerate(labels)}


def _point(case: str, common: tuple) -> str:
    from bench.report import knobs

    extra = knobs(common[3])
    return f"{case} (B={common[0]}, d={common[1]}, H={common[2]}{', ' + extra if extra else ''})"


def _time_vs_seq_len(df: pd.DataFrame, colors: dict, path: Path, title: str) -> None:
    cases = list(dict.fromkeys(df["case"]))
    cols = min(3, len(cases))
    rows = math.ceil(len(cases) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.4 * cols, 3.3 * rows), squeeze=False)
    for ax, case in zip(axes.flat, cases, strict=False):
        g = df[df["case"] == case]
        common = _common(g)
        g = _at(g, common)
        for label, line in g.groupby(_label(g)):
            line = line.sort_values("seq_len")
            color = colors[label]
            ax.plot(line["seq_len"], line["p50_ms"], color=color, label=label)
            ax.fill_between(line["seq_len"], line["p20_ms"], line["p80_ms"], color=color,
                            alpha=0.15)  # fmt: skip
            sure = line[~line["uncertain"]]
            unsure = line[line["uncertain"]]
            ax.scatter(sure["seq_len"], sure["p50_ms"], color=color, s=14, zorder=3)
            ax.scatter(unsure["seq_len"], unsure["p50_ms"], facecolors="none", edgecolors=color,
                       s=24, zorder=3)  # fmt: skip
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(_point(case, common), fontsize=8)
        ax.set_xlabel("seq_len")
        ax.set_ylabel("ms (median; band p20-p80)")
        ax.legend(fontsize=6)
    for ax in list(axes.flat)[len(cases) :]:
        ax.axis("off")
    fig.suptitle(f"{title}; hollow: uncertain median", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _largest_points(df: pd.DataFrame) -> pd.DataFrame:
    """Per case: rows at the most common (B, d_model, H, knobs) and that case's largest L."""
    keep = []
    for _, g in df.groupby("case"):
        g = _at(g, _common(g))
        keep.append(g[g["seq_len"] == g["seq_len"].max()])
    return pd.concat(keep) if keep else df.iloc[:0]


def _bars(values: pd.DataFrame, column: str, colors: dict, path: Path, title: str,
          xlabel: str, reference: float | None = None) -> bool:  # fmt: skip
    """Horizontal bars, one per row, labelled case / impl @ device (point), the value on each
    bar, hatched where uncertain; a dashed line at `reference`. False if nothing to draw."""
    values = values[values[column].notna()]
    if values.empty:
        return False
    labels = [f"{r['case']} / {r['impl']} @ {r['device']} (B={r['batch']}, L={r['seq_len']})"
              for _, r in values.iterrows()]  # fmt: skip
    fig, ax = plt.subplots(figsize=(8, 0.32 * len(values) + 1.3))
    bars = ax.barh(range(len(values)), values[column],
                   color=[colors[lbl] for lbl in _label(values)],
                   hatch=["//" if u else "" for u in values["uncertain"]])  # fmt: skip
    ax.bar_label(bars, fmt="%.3g", fontsize=7, padding=2)
    if reference is not None:
        ax.axvline(reference, color="black", linestyle="--", linewidth=1)
    ax.set_yticks(range(len(values)), labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel(xlabel)
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def write_all(df: pd.DataFrame, out: Path) -> list[Path]:
    """df: merged rows with `speedup` and `uncertain` (bench.report). -> the files written."""
    from bench.cases import CASES

    written = []
    ok = df[(df["status"] == "ok") & df["p50_ms"].notna()]
    if ok.empty:
        return written
    colors = _colors(ok)
    level = ok["case"].map(lambda c: CASES[c].level if c in CASES else "encoder")
    baseline = ok["case"].map(lambda c: CASES[c].baseline if c in CASES else "reference")
    for (mode, dtype), g in ok.groupby(["mode", "dtype"]):
        tag = f"{mode.replace('+', '_')}_{dtype}"
        path = out / f"time_vs_seq_len_{tag}.png"
        _time_vs_seq_len(g, colors, path, f"{mode}, {dtype}")
        written.append(path)
        top = _largest_points(g)
        plots = (
            ("speedup", top[top["impl"] != baseline[top.index]], "speedup",
             "speedup vs the case's baseline (dashed: 1.0, the baseline)", 1.0),
            ("pct_copy_bw", top[level[top.index] == "encoder"], "pct_copy_bw",
             "% of a same-size copy timed beside it (memory-bound work)", 100.0),
            ("pct_matmul", top[level[top.index] == "attention"], "pct_peak_flops",
             "% of the run's measured matmul FLOP/s (compute-bound work)", None),
        )  # fmt: skip
        for name, values, column, xlabel, ref in plots:
            if column not in values:
                continue
            path = out / f"{name}_{tag}.png"
            title = f"{mode}, {dtype}, each case at its largest L; hatched: uncertain"
            if _bars(values, column, colors, path, title, xlabel, ref):
                written.append(path)
        if {"cpu", "cuda"} <= set(g["device"]):
            key = ["case", "impl", *OTHER, "seq_len"]
            both = g[g["device"] == "cpu"].merge(
                g[g["device"] == "cuda"], on=key, suffixes=("_cpu", "_cuda")
            )
            both = both.assign(
                ratio=both["p50_ms_cpu"] / both["p50_ms_cuda"],
                device="cuda",
                uncertain=both["uncertain_cpu"] | both["uncertain_cuda"],
            )
            path = out / f"cpu_vs_cuda_{tag}.png"
            if _bars(_largest_points(both.assign(status="ok")), "ratio", colors, path,
                     f"{mode}, {dtype}", "CPU time / CUDA time", 1.0):  # fmt: skip
                written.append(path)
    return written
