"""PNG plots from result rows (called by bench.report.build; never from the timing loop).

- time_vs_seq_len_<mode>_<dtype>.png: one panel per case and knob combination (a sweep of
  RoPE's schedules gets one per schedule), median ms vs L at its most common (B, d_model, H),
  one line per impl @ device with its p20-p80 band; one colour per impl @ device in every
  panel; hollow markers for uncertain, contended, throttled or suspect medians (bench.report.flags).
- speedup_<mode>_<dtype>.png: each case's implementations against its baseline, named on each
  bar (left out: it is the 1.0 line) at the panel's largest L, values on the bars.
- pct_copy_bw_<mode>_<dtype>.png: the encoders' time as % of a same-size copy timed beside
  them (memory-bound work); pct_matmul_<mode>_<dtype>.png: the attention and layer cases'
  FLOP/s as % of the run's measured matmul rate (compute-bound work).
- cpu_vs_cuda_<mode>_<dtype>.png: CPU time / CUDA time per impl, when both devices ran.
- share_of_layer_<mode>_<dtype>.png: the encoding's share of its layer (bench/report/share.py).
- models_<mode>_<dtype>.png: per model, RoPE against a copy and its shares (bench/report/models.py).
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from bench.report import headline, models, share  # noqa: E402
from bench.report.figures import LEGEND_PT, save, wrap  # noqa: E402
from bench.report.rows import knobs, own_semantics  # noqa: E402

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
    extra = knobs(common[3])
    return f"{case} (B={common[0]}, d={common[1]}, H={common[2]}{', ' + extra if extra else ''})"


def _with_best(rows: pd.DataFrame, key: list[str]) -> pd.DataFrame:
    """A device's rows and, per point, its fastest implementation again as impl "best"
    (the CPU-against-CUDA plot's last bar: the fastest on the CPU against the fastest on CUDA)."""
    point, doing = [k for k in key if k != "impl"], rows[~own_semantics(rows)]
    best = doing.loc[doing.groupby(point, sort=False)["p50_ms"].idxmin()]
    best = best.assign(impl="best of each")
    return pd.concat([rows, best], ignore_index=True)


def _hatches(df: pd.DataFrame) -> list[str]:
    """xx: suspect (impossible as measured); //: uncertain, contended or throttled; else none."""
    suspect = df["suspect"].fillna("") != "" if "suspect" in df else [False] * len(df)
    return ["xx" if s else "//" if m else "" for s, m in zip(suspect, _marked(df), strict=True)]


def _marked(df: pd.DataFrame) -> pd.Series:
    """Points not to be read as plain results: uncertain, contended, throttled or suspect
    (flags.py)."""
    flag = df["uncertain"].astype(bool)
    for column in ("contended", "throttled"):
        if column in df:
            flag |= df[column].astype(bool)
    if "suspect" in df:
        flag |= df["suspect"].fillna("") != ""
    return flag


def _panels(df: pd.DataFrame) -> list[tuple[str, tuple]]:
    """(case, (B, d_model, H, knobs)) per panel: each case's knob combinations (a sweep over
    RoPE's schedules plots every schedule), each at its most common (B, d_model, H)."""
    out = []
    for case in dict.fromkeys(df["case"]):
        g = df[df["case"] == case]
        for params in dict.fromkeys(g["params"]):
            out.append((case, _common(g[g["params"] == params])))
    return out


def _time_vs_seq_len(df: pd.DataFrame, colors: dict, path: Path, title: str) -> None:
    panels = _panels(df)
    cols = min(3, len(panels))
    rows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(
        rows, cols, figsize=(4.6 * cols, 3.5 * rows), squeeze=False, layout="constrained"
    )
    shown = {}
    for ax, (case, common) in zip(axes.flat, panels, strict=False):
        g = _at(df[df["case"] == case], common)
        single = g["seq_len"].nunique() == 1  # one length: labelled points, not a line
        for label, line in g.groupby(_label(g)):
            line = line.sort_values("seq_len")
            color = colors[label]
            if not single:
                shown[label] = ax.plot(line["seq_len"], line["p50_ms"], color=color)[0]
                ax.fill_between(
                    line["seq_len"], line["p20_ms"], line["p80_ms"], color=color, alpha=0.15
                )
            sure, unsure = line[~_marked(line)], line[_marked(line)]
            dot = ax.scatter(sure["seq_len"], sure["p50_ms"], color=color, s=18, zorder=3)
            ax.scatter(
                unsure["seq_len"], unsure["p50_ms"], facecolors="none", edgecolors=color, s=26
            )
            shown.setdefault(label, dot)
            if single:
                for x, y in zip(line["seq_len"], line["p50_ms"], strict=True):
                    ax.annotate(f"{y:.3g}", (x, y), xytext=(5, 0), textcoords="offset points",
                                fontsize=LEGEND_PT, va="center")  # fmt: skip
        if single:
            ax.set_xticks(sorted(set(g["seq_len"])))
        else:
            ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(wrap(_point(case, common), 48), fontsize=8)
        ax.set_xlabel("seq_len")
        ax.set_ylabel("ms (median, p20-p80)")
    for ax in list(axes.flat)[len(panels) :]:
        ax.axis("off")
    fig.legend(
        shown.values(), shown.keys(), loc="outside lower center", fontsize=LEGEND_PT,
        ncols=min(4, len(shown)), frameon=False,
    )  # fmt: skip
    marked = "hollow: uncertain, contended, throttled or suspect (report.md)"
    fig.suptitle(wrap(f"{title}; {marked}", 90), fontsize=9)
    save(fig, path)


def _largest_points(df: pd.DataFrame) -> pd.DataFrame:
    """Per panel (case and knob combination): its rows at the panel's largest L."""
    keep = []
    for case, common in _panels(df):
        g = _at(df[df["case"] == case], common)
        keep.append(g[g["seq_len"] == g["seq_len"].max()])
    return pd.concat(keep) if keep else df.iloc[:0]


def bar_label(row) -> str:
    """case / impl @ device [vs its baseline] (B, L[, knobs]): a bar's whole identity."""
    return f"{row['case']} / {_short(row, True, True)} ({_where(row)})"


def _short(row, device: bool, versus: bool) -> str:
    """What a bar is within its panel: the implementation [@ device] [vs its baseline, on a
    speedup's bar only]."""
    return f"{row['impl']}{' @ ' + row['device'] if device else ''}{_versus(row) if versus else ''}"


def _where(row) -> str:
    return f"B={row['batch']}, L={row['seq_len']}{_knobs(row)}"


def _versus(row) -> str:
    """The baseline a speedup bar is against (its `baseline` column, when the plot has one)."""
    base = row.get("baseline")
    return f" vs {base}" if isinstance(base, str) and base else ""


def _knobs(row) -> str:
    extra = knobs(row.get("params", "{}"))
    return f", {extra}" if extra else ""


def _bars(
    values: pd.DataFrame,
    column: str,
    colors: dict,
    path: Path,
    title: str,
    xlabel: str,
    reference: float | None = None,
    versus: bool = False,
) -> bool:
    """Horizontal bars in one panel per case and point: the panel's title names the case and
    the knobs its bars share (wrapped), each bar its implementation (vs its baseline where
    `versus`: a speedup's), the value on each bar over a white ground, hatched // where not a
    plain result and xx where suspect; a dashed line at `reference`, behind the bars. False if
    nothing to draw."""
    values = values[values[column].notna()]
    if values.empty:
        return False
    devices = values["device"].nunique() > 1
    groups = [
        (f"{case} ({where})", g)
        for (case, where), g in values.groupby(
            [values["case"], values.apply(_where, axis=1)], sort=False
        )
    ]
    heights = [len(g) for _, g in groups]
    fig, axes = plt.subplots(
        len(groups), 1, figsize=(8, 0.3 * sum(heights) + 0.55 * len(groups) + 1.2),
        height_ratios=heights, sharex=True, squeeze=False, layout="constrained",
    )  # fmt: skip
    for ax, (header, g) in zip(axes[:, 0], groups, strict=True):
        bars = ax.barh(
            range(len(g)),
            g[column],
            color=[colors[lbl] for lbl in _label(g)],
            hatch=_hatches(g),
            zorder=2,
        )
        for text in ax.bar_label(bars, fmt="%.3g", fontsize=LEGEND_PT, padding=2):
            text.set_bbox(dict(facecolor="white", edgecolor="none", pad=0.5))
            text.set_zorder(3)
        if reference is not None:
            ax.axvline(reference, color="black", linestyle="--", linewidth=1, zorder=1)
        names = [_short(r, devices, versus) for _, r in g.iterrows()]
        ax.set_yticks(range(len(g)), names, fontsize=8)
        ax.set_ylim(len(g) - 0.5, -0.5)
        ax.set_title(wrap(header, 90), fontsize=8, loc="left")
        ax.margins(x=0.12)
    axes[-1, 0].set_xlabel(wrap(xlabel, 80))
    fig.suptitle(wrap(title, 80), fontsize=9)
    save(fig, path)
    return True


def write_all(df: pd.DataFrame, out: Path) -> list[Path]:
    """df: merged rows with `speedup` and `uncertain` (bench.report.build). -> the files written."""
    written = []
    ok = df[(df["status"] == "ok") & df["p50_ms"].notna()]
    if ok.empty:
        return written
    colors = _colors(ok)
    level, baseline = ok["level"].fillna("encoder"), ok["baseline"]  # rows' own (build)
    for (mode, dtype), g in ok.groupby(["mode", "dtype"]):
        tag = f"{mode.replace('+', '_')}_{dtype}"
        path = out / f"time_vs_seq_len_{tag}.png"
        _time_vs_seq_len(g, colors, path, f"{mode}, {dtype}")
        written.append(path)
        top = _largest_points(g)
        faster = top[top["impl"] != baseline[top.index]].assign(baseline=baseline[top.index])
        plots = (
            (
                "speedup",
                faster,
                "speedup",
                "speedup: the named baseline's median over this one's (dashed: 1.0)",
                1.0,
            ),
            (
                "pct_copy_bw",
                top[level[top.index] == "encoder"],
                "pct_copy_bw",
                "% of a same-size copy timed beside it (memory-bound work)",
                100.0,
            ),
            (
                "pct_matmul",
                top[level[top.index] != "encoder"],
                "pct_peak_flops",
                "% of the run's measured matmul FLOP/s (compute-bound work)",
                None,
            ),
        )
        for name, values, column, xlabel, ref in plots:
            if column not in values:
                continue
            path = out / f"{name}_{tag}.png"
            title = (
                f"{mode}, {dtype}, each case at its largest L; hatched //: uncertain, "
                "contended or throttled; xx: suspect"
            )
            if _bars(values, column, colors, path, title, xlabel, ref, name == "speedup"):
                written.append(path)
        if {"cpu", "cuda"} <= set(g["device"]):
            key = ["case", "impl", *OTHER, "seq_len"]
            sides = [_with_best(g[g["device"] == d], key) for d in ("cpu", "cuda")]
            both = sides[0].merge(sides[1], on=key, suffixes=("_cpu", "_cuda"))
            both = both.assign(
                ratio=both["p50_ms_cpu"] / both["p50_ms_cuda"],
                device="cuda",
                uncertain=_marked(both.rename(columns=lambda c: c.removesuffix("_cpu")))
                | _marked(both.rename(columns=lambda c: c.removesuffix("_cuda"))),
            )
            path = out / f"cpu_vs_cuda_{tag}.png"
            if _bars(
                _largest_points(both.assign(status="ok")),
                "ratio",
                {**colors, "best of each @ cuda": (0.2, 0.2, 0.2, 1.0)},
                path,
                f"{mode}, {dtype}",
                "CPU time / CUDA time",
                1.0,
            ):
                written.append(path)
    written += headline.plot(df, out)
    written += share.plot(ok, out)
    written += models.plot(df, out)
    return written
