"""The positional encoding's share of its layer, from the rows of the cases that measure one
(pe_share, bench/run/share.py): a table, the sentence a user wants (how much of the layer a
faster implementation saves), and share_of_layer_<mode>_<dtype>.png."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from bench.report.figures import LEGEND_PT, save  # noqa: E402
from bench.report.rows import knobs  # noqa: E402
from bench.tables import markdown_table  # noqa: E402


def _shared(df: pd.DataFrame) -> pd.DataFrame:
    if "pe_share" not in df:
        return df.iloc[0:0]
    return df[(df["status"] == "ok") & df["pe_share"].notna()]


def _pct(x) -> str:
    return "" if pd.isna(x) else f"{100 * x:.0f}%"


def _cell(row) -> str:
    text = f"{_pct(row['pe_share'])} [{_pct(row['pe_share_lo'])}, {_pct(row['pe_share_hi'])}]"
    if row["pe_share_hi"] < 0:  # never a plain negative cost
        text += " (below 0: its partner read slower)"
    best, profiled = row.get("pe_share_best"), row.get("pe_share_profiler")
    text += f"; best {_pct(best)}" if pd.notna(best) else ""
    return text + (f"; prof. {_pct(profiled)}" if pd.notna(profiled) else "")


def _label(row) -> str:
    """The encoding (the case less its "layer_") and the knobs that change it."""
    extra = [
        k for k in knobs(row["params"]).split() if not k.startswith(("num_kv_heads=", "d_ff="))
    ]
    name = row["case"].removeprefix("layer_")
    return " ".join([name, *(k for k in extra if not k.endswith("=none"))])


def section(df: pd.DataFrame) -> list[str]:
    """Markdown lines: per mode, dtype and device, the share of each encoding's layer per
    implementation and length, then the savings sentences."""
    rows = _shared(df)
    if rows.empty:
        return []
    lines = [
        "## Share of the layer",
        "",
        "The positional encoding's share of its layer: 1 - t(partner) / t(layer), its partner "
        "the same layer and attention path without the encoding, timed beside it (`nope_sdpa` "
        "for an SDPA row; `nope` for a rotation or an embedding), with the interval of the two "
        "medians' 95% intervals; `best`: against the fastest layer without an encoding at the "
        "point; `prof.`: the profiler's attribution to the encoding's operators (forward "
        "rows). The absolute encodings are added once per model: a share of one layer.",
        "",
    ]
    rows = rows.assign(encoding=rows.apply(_label, axis=1), cell=rows.apply(_cell, axis=1))
    for (mode, dtype, device), g in rows.groupby(["mode", "dtype", "device"], sort=False):
        table = g.pivot_table(
            index=["encoding", "batch", "seq_len"], columns="impl", values="cell", aggfunc="first"
        )
        lines += [f"### {mode} / {dtype} / {device}", "", _markdown(table), ""]
        lines += [f"- {s}" for s in savings(df[(df["mode"] == mode) & (df["dtype"] == dtype)])]
        lines += [""]
    return lines


def savings(df: pd.DataFrame) -> list[str]:
    """Per layer and length, the fastest implementation against the eager reference: how much
    faster the whole layer is, and the encoding's share under each; only where the two medians'
    95% intervals do not overlap (a saving within the noise is not one)."""
    rows = _shared(df)
    out = []
    for _, g in rows.groupby(["case", "params", "device", "batch", "seq_len"], sort=False):
        ref = g[g["impl"] == "reference"]
        best = g[g["impl"] != "reference"].nsmallest(1, "p50_ms")
        if ref.empty or best.empty:
            continue
        r, b = ref.iloc[0], best.iloc[0]
        if not b["p50_ci_hi_ms"] < r["p50_ci_lo_ms"]:
            continue
        out.append(
            f"{_label(r)}, L={r['seq_len']}: {b['impl']} makes the layer "
            f"{100 * (1 - b['p50_ms'] / r['p50_ms']):.0f}% faster than the eager reference "
            f"(its encoding: {_pct(b['pe_share'])} of the layer, from {_pct(r['pe_share'])})."
        )
    return out


def _markdown(table: pd.DataFrame) -> str:
    table = table.fillna("").reset_index()
    return "\n".join(markdown_table(list(map(str, table.columns)), table.itertuples(index=False)))


def plot(df: pd.DataFrame, out: Path) -> list[Path]:
    """share_of_layer_<mode>_<dtype>.png: per length a panel of horizontal bars, one group per
    encoding, one bar per implementation, the removal share with its interval."""
    rows = _shared(df)
    written = []
    for (mode, dtype), g in rows.groupby(["mode", "dtype"], sort=False):
        g = g.assign(encoding=g.apply(_label, axis=1))
        lengths = sorted(set(g["seq_len"]))
        impls = sorted(set(g["impl"]))
        encodings = list(dict.fromkeys(g["encoding"]))
        fig, axes = plt.subplots(
            1,
            len(lengths),
            figsize=(6 * len(lengths), 1.6 + 0.25 * len(encodings) * len(impls)),
            squeeze=False,
            sharey=True,
            layout="constrained",
        )
        width = 0.8 / len(impls)
        for ax, n in zip(axes[0], lengths, strict=True):
            at = g[g["seq_len"] == n]
            for k, impl in enumerate(impls):
                r = at[at["impl"] == impl].set_index("encoding").reindex(encodings)
                y = [i + k * width for i in range(len(encodings))]
                err = [r["pe_share"] - r["pe_share_lo"], r["pe_share_hi"] - r["pe_share"]]
                bars = ax.barh(
                    y, 100 * r["pe_share"], width, xerr=[100 * e for e in err], label=impl
                )
                for bar, hi in zip(bars, r["pe_share_hi"], strict=True):
                    if hi < 0:  # its partner read slower: hatched, never a plain negative cost
                        bar.set_hatch("//")
            ax.axvline(0, color="black", linewidth=0.8)
            ax.set_title(f"L={n}")
            ax.set_xlabel("% of the layer: 1 - t(partner) / t(layer); hatched: partner slower")
        axes[0][0].set_yticks([i + 0.4 - width / 2 for i in range(len(encodings))], encodings)
        axes[0][0].invert_yaxis()
        axes[0][-1].legend(fontsize=LEGEND_PT)
        fig.suptitle(f"The positional encoding's share of its layer ({mode}, {dtype})")
        path = out / f"share_of_layer_{mode.replace('+', '_')}_{dtype}.png"
        save(fig, path, dpi=110)
        written.append(path)
    return written
