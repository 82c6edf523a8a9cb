"""Per model (rows with a `model`, python -m bench model=...): what RoPE costs against the bytes
it moves, and what share of a decoder layer and of a decode step it takes. A report section and
models_<mode>_<dtype>.png, one row of bars per model:

  RoPE / copy   the fastest implementation of the rope case over a same-size copy timed beside
                it (1.0: at the memory's speed), at the model's largest length;
  layer share   the fastest implementation's share of a global decoder layer of the model
                (layer_rope: 1 - t(partner) / t(layer), bench/run/share.py), with its interval;
  decode share  the same for one decode step against the model's KV cache (layer_rope_decode).
"""

from __future__ import annotations

import json
from pathlib import Path, PurePath

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from bench.report.figures import save, wrap  # noqa: E402
from bench.tables import markdown_table  # noqa: E402

PANELS = (  # (case, what the bar shows, axis label)
    ("rope", "copy_ratio", "RoPE time over a same-size copy (1 = memory speed)"),
    ("layer_rope", "pe_share", "% of a decoder layer"),
    ("layer_rope_decode", "pe_share", "% of a decode step"),
)


def _rows(df: pd.DataFrame) -> pd.DataFrame:
    """The ok rows with a model at each (model, mode, dtype, case)'s largest length, nope left
    out, in the model's own form (the fewest knobs set: DeepSeek-V4's rope_targets=q rows are
    another measure); copy_ratio = p50 / copy_ms (the rope rows')."""
    if "model" not in df:
        return df.iloc[0:0]
    named = df["model"].notna() & (df["model"].astype(str) != "")
    ours = df["case"].isin([case for case, _, _ in PANELS])
    ok = df[(df["status"] == "ok") & named & ours & df["p50_ms"].notna()]
    ok = ok[ok["impl"] != "nope"]
    if ok.empty:
        return ok
    ok = ok.assign(model=ok["model"].map(short_name))
    ok = ok.assign(copy_ratio=ok["p50_ms"] / ok["copy_ms"] if "copy_ms" in ok else float("nan"))
    keys = ["model", "mode", "dtype", "case"]
    count = ok["params"].map(lambda p: len(json.loads(p)) if isinstance(p, str) else 0)
    ok = ok.assign(knobs_set=count)
    ok = ok[ok["knobs_set"] == ok.groupby(keys)["knobs_set"].transform("min")]
    return ok[ok["seq_len"] == ok.groupby(keys)["seq_len"].transform("max")]


def short_name(model: str) -> str:
    """A model's label: a preset's name as it is; a config.json path by its folder
    (.../deepseek_v4/config.json: deepseek_v4), another .json by its stem."""
    path = PurePath(str(model))
    if path.suffix != ".json":
        return str(model)
    return path.parent.name if path.stem == "config" and path.parent.name else path.stem


def _value(row, column: str) -> str:
    if column == "copy_ratio":
        return "" if pd.isna(row[column]) else f"{row[column]:.2f}x"
    lo, hi = row.get("pe_share_lo"), row.get("pe_share_hi")
    span = "" if pd.isna(lo) or pd.isna(hi) else f" [{100 * lo:.0f}, {100 * hi:.0f}]"
    return f"{100 * row[column]:.1f}%{span}"


def section(df: pd.DataFrame) -> list[str]:
    """Markdown: per mode and dtype a table of models against the three measures, each cell
    every implementation's figure."""
    rows = _rows(df)
    if rows.empty:
        return []
    lines = [
        "## Per model",
        "",
        "At each model's largest length: RoPE's time over a same-size copy timed beside it, "
        "and RoPE's share of a global decoder layer and of a decode step (1 - t(nope) / "
        "t(layer), with the interval of the two medians' 95% intervals), per implementation.",
        "",
    ]
    for (mode, dtype), g in rows.groupby(["mode", "dtype"], sort=False):
        panels = [p for p in PANELS if (g["case"] == p[0]).any()]
        header = ["model", *(f"{c}, L" for c, _, _ in panels)]
        body = []
        for model, m in g.groupby("model"):
            cells = []
            for case, column, _ in panels:
                r = m[m["case"] == case].sort_values("impl")
                text = "; ".join(f"{x['impl']} {_value(x, column)}" for _, x in r.iterrows())
                cells.append(f"{text}, {r['seq_len'].iloc[0]}" if len(r) else "")
            body.append([model, *cells])
        lines += [f"### {mode} / {dtype}", "", *markdown_table(header, body), ""]
    return lines


def plot(df: pd.DataFrame, out: Path) -> list[Path]:
    """models_<mode>_<dtype>.png: a panel per measure, per model a bar per implementation (one
    colour each, one legend); the shares with their intervals and, as dots, the profiler's."""
    rows = _rows(df)
    written = []
    for (mode, dtype), g in rows.groupby(["mode", "dtype"], sort=False):
        models = sorted(set(g["model"]))
        impls = sorted(set(g["impl"]))
        colors = dict(zip(impls, plt.get_cmap("tab10").colors, strict=False))
        panels = [p for p in PANELS if (g["case"] == p[0]).any()]
        fig, axes = plt.subplots(
            1,
            len(panels),
            figsize=(4.2 * len(panels), 1.6 + 0.16 * len(models) * len(impls)),
            squeeze=False,
            sharey=True,
            layout="constrained",
        )
        width = 0.8 / len(impls)
        for ax, (case, column, label) in zip(axes[0], panels, strict=True):
            _panel(ax, g[g["case"] == case], models, impls, colors, column, width)
            lengths = sorted(set(g.loc[g["case"] == case, "seq_len"].astype(int)))
            ax.set_title(wrap(f"{case}, L={'/'.join(map(str, lengths))}", 40), fontsize=9)
            ax.set_xlabel(wrap(label, 40), fontsize=9)
        centre = [i + 0.4 - width / 2 for i in range(len(models))]
        axes[0][0].set_yticks(centre, models, fontsize=9)
        axes[0][0].invert_yaxis()
        handles = [plt.Rectangle((0, 0), 1, 1, color=colors[i]) for i in impls]
        fig.legend(handles, impls, loc="outside lower center", ncols=len(impls), fontsize=9)
        dots = "; dots: the profiler's share" if len(panels) > 1 else ""
        fig.suptitle(wrap(f"RoPE per model ({mode}, {dtype}){dots}", 45 * len(panels)))
        path = out / f"models_{mode.replace('+', '_')}_{dtype}.png"
        save(fig, path, dpi=110)
        written.append(path)
    return written


def _panel(ax, g: pd.DataFrame, models, impls, colors, column: str, width: float) -> None:
    share = column == "pe_share"
    scale = 100 if share else 1
    for k, impl in enumerate(impls):
        r = g[g["impl"] == impl].set_index("model").reindex(models)
        y = [i + k * width for i in range(len(models))]
        err = None
        if share:
            err = [
                scale * (r["pe_share"] - r["pe_share_lo"]),
                scale * (r["pe_share_hi"] - r["pe_share"]),
            ]
        ax.barh(y, scale * r[column], width, xerr=err, color=colors[impl], error_kw={"lw": 0.8})
        if share and "pe_share_profiler" in r:
            ax.plot(scale * r["pe_share_profiler"], y, "k.", markersize=4)
    ax.axvline(1.0 if not share else 0.0, color="black", linestyle="--", linewidth=1)
    if share:  # around the shares themselves: an interval past the frame is cut at its edge
        seen = scale * pd.concat([g["pe_share"], g.get("pe_share_profiler", g["pe_share"])])
        ax.set_xlim(min(-2.0, 1.5 * seen.min()), max(2.0, 1.5 * seen.max()))
    ax.tick_params(labelsize=8)
