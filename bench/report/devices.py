"""The same work on the CPU and on CUDA, side by side (sweep=cpu_vs_cuda and any run with both
devices): per case, mode, dtype and point, each implementation that ran checked on both (its
CPU and CUDA medians and how many times faster CUDA is), then the best of each device: the
fastest checked implementation on the CPU against the fastest on CUDA. A ratio of two devices'
times is taken within one run, never across runs."""

from __future__ import annotations

import pandas as pd

from bench.report.rows import SHAPE, checked, knobs, own_semantics
from bench.tables import markdown_table


def _ms(row: pd.Series, suffix: str = "") -> str:
    """A median, `#` before it where it was timed beside a busy neighbour (flags.contended)."""
    busy = bool(row.get("contended" + suffix, False))
    return ("#" if busy else "") + f"{row['p50_ms' + suffix]:.3g}"


def _rows(g: pd.DataFrame) -> list[list]:
    cpu, cuda = g[g["device"] == "cpu"], g[g["device"] == "cuda"]
    point = [int(g["batch"].iloc[0]), int(g["seq_len"].iloc[0]), knobs(g["params"].iloc[0])]
    rows = []
    both = cpu.merge(cuda, on="impl", suffixes=("_cpu", "_cuda"))
    for _, r in both.sort_values("impl").iterrows():
        ratio = r["p50_ms_cpu"] / r["p50_ms_cuda"]
        rows.append([*point, r["impl"], _ms(r, "_cpu"), _ms(r, "_cuda")])
        rows[-1].append(f"{ratio:.1f}x")
    if not cpu.empty and not cuda.empty:
        a, b = cpu.loc[cpu["p50_ms"].idxmin()], cuda.loc[cuda["p50_ms"].idxmin()]
        best = f"best: {a['impl']} / {b['impl']}"
        rows.append([*point, best, _ms(a), _ms(b)])
        rows[-1].append(f"{a['p50_ms'] / b['p50_ms']:.1f}x")
    return rows


def devices(df: pd.DataFrame) -> list[str]:
    """The report's section, or [] where the run did not time both devices."""
    if not {"cpu", "cuda"} <= set(df["device"]):
        return []
    ok = checked(df)
    ok = ok[~own_semantics(ok)]
    lines = [
        "## CPU against CUDA",
        "",
        "The same point on both devices, each implementation checked on both: its median ms on "
        "the CPU and on CUDA and CUDA's speedup over the CPU; then the fastest of each device "
        "(`#`: timed beside a busy neighbour).",
        "",
    ]
    for (case, mode, dtype), g in ok.groupby(["case", "mode", "dtype"], sort=False):
        rows = []
        for _, point in g.groupby([k for k in SHAPE if k != "params"] + ["params"], sort=True):
            rows += _rows(point)
        if rows:
            header = ["B", "L", "knobs", "implementation", "CPU ms", "CUDA ms", "CUDA faster"]
            lines += [f"### {case} / {mode} / {dtype}", "", *markdown_table(header, rows), ""]
    return lines
