"""Run-to-run repeatability: `python -m bench.report --compare RUN_A RUN_B [RUN ...]`.

Two runs of one sweep: compare.md, each row's median in run B over run A, and the same for its
speedup vs the case's baseline and its time vs the copy of its group (ratios measured side by
side within each run, which a machine's drift between runs does not move). More runs:
repeatability.md, every pair.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pandas as pd

from bench.report.rows import SHAPE, load, speedups
from bench.tables import markdown_table


def _drift(dir_a: Path, dir_b: Path) -> tuple[pd.DataFrame, dict[str, pd.Series]]:
    """The ok rows of two runs side by side, and |B/A - 1| per row of: their medians ("times");
    their speedups vs the case's baseline ("speedups", the baselines left out); their time
    relative to the copy timed in the same group ("vs copy": pct_copy_bw, where both runs have
    it). The last two are ratios measured side by side within each run."""
    key = ["case", "impl", "mode", "device", "dtype", *SHAPE]
    a, b = (speedups(df[df["status"] == "ok"]) for df in (load([dir_a]), load([dir_b])))
    for df in (a, b):
        if "pct_copy_bw" not in df:  # runs made before the copy was timed alongside
            df["pct_copy_bw"] = float("nan")
    both = a.merge(b, on=key, suffixes=("_a", "_b"))
    if both.empty:
        raise ValueError(f"no ok rows in common between {dir_a} and {dir_b}")
    both["ratio"] = both["p50_ms_b"] / both["p50_ms_a"]
    others = both[both["speedup_a"].notna() & (both["impl"] != both["baseline_a"])]
    copied = both[both["pct_copy_bw_a"].notna() & both["pct_copy_bw_b"].notna()]
    return both, {
        "times": (both["ratio"] - 1).abs(),
        "speedups": (others["speedup_b"] / others["speedup_a"] - 1).abs(),
        "vs copy": (copied["pct_copy_bw_b"] / copied["pct_copy_bw_a"] - 1).abs(),
    }


def _within(dev: pd.Series) -> str:
    return f"{int((dev <= 0.05).sum())} of {len(dev)}"


def compare(dir_a: Path, dir_b: Path) -> str:
    """Run-to-run repeatability: each row's median in run B over its median in run A, and the
    same for its speedup vs the case's baseline and its time vs the copy of its group (ratios
    measured side by side within each run)."""
    both, dev = _drift(dir_a, dir_b)
    times = dev["times"]
    lines = [
        f"# Repeatability: {Path(dir_b).name} vs {Path(dir_a).name}",
        "",
        f"{len(both)} rows in common; median times: |B/A - 1| median {100 * times.median():.1f}%, "
        f"max {100 * times.max():.1f}%; within 5%: {_within(times)}.",
        "",
    ]
    what = {
        "speedups": "Speedups vs the baseline ({n} rows besides the baselines)",
        "vs copy": "Time vs the same-size copy timed alongside, pct_copy_bw ({n} rows)",
    }
    for name, title in what.items():
        d = dev[name]
        if len(d):
            lines += [
                f"{title.format(n=len(d))}: |B/A - 1| median {100 * d.median():.1f}%, "
                f"max {100 * d.max():.1f}%; within 5%: {_within(d)}.",
                "",
            ]
    header = [
        "case",
        "impl",
        "mode",
        "shape",
        "p50 A ms",
        "p50 B ms",
        "B / A",
        "speedup A",
        "speedup B",
        "% copy A",
        "% copy B",
    ]
    body = []
    for _, r in both.iterrows():
        shape = f"B={r['batch']} L={r['seq_len']} d={r['d_model']} H={r['num_heads']}"
        speedups = [f"{r[c]:.2f}x" if pd.notna(r[c]) else "" for c in ("speedup_a", "speedup_b")]
        copies = [
            f"{r[c]:.1f}" if pd.notna(r[c]) else "" for c in ("pct_copy_bw_a", "pct_copy_bw_b")
        ]
        body.append(
            [
                r["case"],
                r["impl"],
                r["mode"],
                shape,
                f"{r['p50_ms_a']:.3f}",
                f"{r['p50_ms_b']:.3f}",
                f"{r['ratio']:.3f}",
                *speedups,
                *copies,
            ]
        )
    return "\n".join([*lines, *markdown_table(header, body)]) + "\n"


def compare_all(dirs: list[Path]) -> str:
    """Repeatability over several runs of one sweep: every pair's drift of the medians, of the
    speedups and of the time vs the copy (median and max over the rows in common), then the
    spread over the pairs."""
    lines = [
        f"# Repeatability over {len(dirs)} runs: every pair",
        "",
        "Runs: " + ", ".join(f"{i + 1} = {Path(d).name}" for i, d in enumerate(dirs)) + ".",
        "",
    ]
    header = [
        "pair",
        "rows",
        "times: median, max of \\|B/A - 1\\|",
        "rows within 5%",
        "speedups: median, max",
        "speedups within 5%",
        "vs copy: median, max",
        "vs copy within 5%",
    ]
    body = []
    medians: dict[str, list[float]] = {"times": [], "speedups": [], "vs copy": []}
    rows = []  # every row of every pair: |B/A - 1| of its median
    for i, j in itertools.combinations(range(len(dirs)), 2):
        both, dev = _drift(dirs[i], dirs[j])
        rows += list(dev["times"])
        cells = [f"{i + 1} vs {j + 1}", str(len(both))]
        for name, d in dev.items():
            if len(d):
                medians[name].append(d.median())
                cells += [f"{100 * d.median():.1f}%, {100 * d.max():.1f}%", _within(d)]
            else:
                cells += ["", ""]
        body.append(cells)
    lines += markdown_table(header, body)
    m = pd.Series(medians["times"])
    lines += [
        "",
        f"Over the {len(m)} pairs, the median drift of the medians ranged from "
        f"{100 * m.min():.1f}% to {100 * m.max():.1f}% (middle pair {100 * m.median():.1f}%;"
        f" {int((m <= 0.05).sum())} of {len(m)} pairs within 5%; row by row, "
        f"{_within(pd.Series(rows))} row pairs within 5%, the largest "
        f"{100 * max(rows):.1f}%).",
    ]
    for name, label in (("speedups", "Speedups"), ("vs copy", "Time vs the copy")):
        if medians[name]:
            sm = pd.Series(medians[name])
            lines[-1] += (
                f" {label}: {100 * sm.min():.1f}% to {100 * sm.max():.1f}% (middle "
                f"pair {100 * sm.median():.1f}%; {int((sm <= 0.05).sum())} of "
                f"{len(sm)} pairs within 5%)."
            )
    return "\n".join(lines) + "\n"
