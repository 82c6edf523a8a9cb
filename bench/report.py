"""Tables and plots from results alone: `python -m bench.report RUN_DIR [RUN_DIR ...]`.

Reads every results.csv under the given directories (a run, a multirun sweep, runs copied from
several machines), merges them, and writes merged.csv, report.md and PNG plots to --out (default:
the first directory).
"""

from __future__ import annotations

import argparse
import itertools
import json
from pathlib import Path

import pandas as pd

from bench import plots
from bench.cases import CASES
from bench.config import MODES

SHAPE = ["batch", "seq_len", "d_model", "num_heads", "params"]


def knobs(params: str) -> str:
    """The params column's JSON as "layout=bshd causal=True" (empty for none)."""
    try:
        return " ".join(f"{k}={v}" for k, v in json.loads(params).items())
    except (TypeError, ValueError):
        return ""


def load(dirs: list[Path]) -> pd.DataFrame:
    files = sorted({f for d in dirs for f in Path(d).rglob("results.csv")})
    if not files:
        raise FileNotFoundError(f"no results.csv under {', '.join(map(str, dirs))}")
    frames = [pd.read_csv(f, dtype={"params": str}) for f in files]
    df = pd.concat([f for f in frames if not f.empty], ignore_index=True)
    df["params"] = df["params"].fillna("{}") if "params" in df else "{}"
    # The same row measured twice (a resumed or re-run point) keeps its latest measurement.
    key = ["case", "impl", "mode", "device", "device_name", "dtype", *SHAPE]
    return df.sort_values("timestamp").drop_duplicates(key, keep="last").reset_index(drop=True)


def _baseline(case: str) -> str:
    return CASES[case].baseline if case in CASES else "reference"


def _speedups(df: pd.DataFrame) -> pd.DataFrame:
    """Adds `speedup`: the case's baseline impl time over this impl's, same point and device."""
    base_impl = df["case"].map(_baseline)
    key = ["case", "mode", "device", "device_name", "dtype", *SHAPE]
    base = df[df["impl"] == base_impl][key + ["p50_ms"]].rename(columns={"p50_ms": "base_ms"})
    out = df.merge(base, on=key, how="left")
    out["speedup"] = out["base_ms"] / out["p50_ms"]
    return out


def _cell(row) -> str:
    if row["status"] != "ok":
        return row["status"]
    text = f"{row['p50_ms']:.3g}"
    if pd.notna(row.get("speedup")):
        text += f" ({row['speedup']:.2f}x)"
    return text


def precision(df: pd.DataFrame) -> list[str]:
    """One line on how well the ok rows' medians are known: the larger half of each one's 95%
    interval (p50_ci_lo_ms, p50_ci_hi_ms) relative to it. [] for runs without the columns."""
    ok = df[df["status"] == "ok"]
    if "p50_ci_lo_ms" not in ok or ok["p50_ci_lo_ms"].isna().all():
        return []
    ok = ok[ok["p50_ci_lo_ms"].notna()]
    half = pd.concat([ok["p50_ms"] - ok["p50_ci_lo_ms"], ok["p50_ci_hi_ms"] - ok["p50_ms"]],
                     axis=1).max(axis=1) / ok["p50_ms"]  # fmt: skip
    return [
        f"Precision: the median's 95% interval is within +-2% of it for {(half <= 0.02).sum()} "
        f"of {len(half)} ok rows and within +-5% for {(half <= 0.05).sum()}; its larger "
        f"half-width is {100 * half.median():.1f}% at the median row (assuming independent "
        "samples; run-to-run differences can be larger).",
        "",
    ]


def markdown(df: pd.DataFrame, envs: list[dict]) -> str:
    """df: rows with `speedup` and `cell` (see build)."""
    df = df.assign(column=df["impl"] + " @ " + df["device"])
    lines = ["# posenc-bench report", ""]
    for env in envs:
        where = env.get("gpu") or env.get("cpu")
        lines.append(
            f"- {where}: torch {env.get('torch')}, triton {env.get('triton')}, "
            f"{env.get('torch_threads')} threads, git {str(env.get('git_sha'))[:10]}"
        )
    lines += [
        "",
        "Cells: median ms per call (speedup vs the case's baseline implementation on",
        "the same device); non-ok cells show the status (see results.csv for the message).",
        "",
    ]
    lines += precision(df)
    lines += tutorial_table(df)
    order = {name: i for i, name in enumerate(CASES)}
    groups = df.groupby(["case", "mode", "dtype"], sort=False)
    keys = sorted(groups.groups, key=lambda k: (order.get(k[0], 99), MODES.index(k[1]), k[2]))
    for case, mode, dtype in keys:
        group = groups.get_group((case, mode, dtype))
        # Columns where nothing ran (e.g. CUDA-only impls on a CPU) are left to "Rows not ok".
        group = group[group.groupby("column")["status"].transform(lambda s: (s != "skipped").any())]
        if group.empty:
            continue
        table = group.pivot_table(index=SHAPE, columns="column", values="cell", aggfunc="first")
        lines += [f"## {case} / {mode} / {dtype}", "", _to_markdown(table), ""]
    bad = df[df["status"] != "ok"].drop_duplicates(
        ["case", "impl", "mode", "device", "status", "message"]
    )
    if len(bad):
        lines += [
            "## Rows not ok",
            "",
            "| case | impl | mode | device | shape | status | message |",
            "|---|---|---|---|---|---|---|",
        ]
        for _, r in bad.iterrows():
            shape = f"B={r['batch']} L={r['seq_len']} d={r['d_model']} H={r['num_heads']}"
            msg = str(r.get("message", "")).replace("|", "/")
            lines.append(
                f"| {r['case']} | {r['impl']} | {r['mode']} | {r['device']} | {shape} | "
                f"{r['status']} | {msg} |"
            )
    return "\n".join(lines) + "\n"


def tutorial_table(df: pd.DataFrame) -> list[str]:
    """Section 5.2's numbers as the tutorial measures them, next to proper timing (if any)."""
    if "tutorial_ms_per_100" not in df or df["tutorial_ms_per_100"].isna().all():
        return []
    rows = df[df["tutorial_ms_per_100"].notna() | (df["mode"] == "forward")]
    rows = rows[rows["case"].isin(df.loc[df["tutorial_ms_per_100"].notna(), "case"])]
    lines = [
        "## Section 5.2: the tutorial's timing and proper timing",
        "",
        "`tutorial ms / 100 calls`: wall clock around 100 calls, no warm-up, no sync, as in the",
        "tutorial. `p50 ms per call [p20, p80]`: warm-up, one timed sample per call.",
        "",
        "| case | impl | device | shape | tutorial ms / 100 calls | p50 ms per call [p20, p80] "
        "| x 100 | speedup vs seed | status |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for _, r in rows.iterrows():
        seed = rows[
            (rows["case"] == r["case"]) & (rows["impl"] == "seed") & (rows["device"] == r["device"])
        ]["p50_ms"]
        shape = f"B={r['batch']} L={r['seq_len']} d={r['d_model']}"
        tut = "" if pd.isna(r["tutorial_ms_per_100"]) else f"{r['tutorial_ms_per_100']:.1f}"
        if r["status"] != "ok":
            lines.append(
                f"| {r['case']} | {r['impl']} | {r['device']} | {shape} | {tut} | | | | "
                f"{r['status']} |"
            )
            continue
        speed = f"{seed.iloc[0] / r['p50_ms']:.1f}x" if len(seed) and seed.notna().all() else ""
        lines.append(
            f"| {r['case']} | {r['impl']} | {r['device']} | {shape} | {tut} | {r['p50_ms']:.3f} "
            f"[{r['p20_ms']:.3f}, {r['p80_ms']:.3f}] | {100 * r['p50_ms']:.1f} | {speed} | ok |"
        )
    return [*lines, ""]


def _to_markdown(table: pd.DataFrame) -> str:
    cols = list(table.columns)
    head = "| B | L | d_model | H | knobs | " + " | ".join(cols) + " |"
    rule = "|" + "---|" * (5 + len(cols))
    body = [
        "| "
        + " | ".join(str(v) for v in idx[:-1])
        + f" | {knobs(idx[-1])}"
        + " | "
        + " | ".join("" if pd.isna(row[c]) else str(row[c]) for c in cols)
        + " |"
        for idx, row in table.iterrows()
    ]
    return "\n".join([head, rule, *body])


def build(dirs: list[Path], out: Path | None = None) -> Path:
    dirs = [Path(d) for d in dirs]
    out = Path(out or dirs[0])
    out.mkdir(parents=True, exist_ok=True)
    df = load(dirs)
    envs = [json.loads(f.read_text()) for d in dirs for f in sorted(Path(d).rglob("env.json"))]
    df.to_csv(out / "merged.csv", index=False)
    df = _speedups(df)
    df["cell"] = df.apply(_cell, axis=1)
    (out / "report.md").write_text(markdown(df, envs))
    plots.write_all(df, out)
    return out


def _drift(dir_a: Path, dir_b: Path) -> tuple[pd.DataFrame, dict[str, pd.Series]]:
    """The ok rows of two runs side by side, and |B/A - 1| per row of: their medians ("times");
    their speedups vs the case's baseline ("speedups", the baselines left out); their time
    relative to the copy timed in the same group ("vs copy": pct_copy_bw, where both runs have
    it). The last two are ratios measured side by side within each run."""
    key = ["case", "impl", "mode", "device", "dtype", *SHAPE]
    a, b = (_speedups(df[df["status"] == "ok"]) for df in (load([dir_a]), load([dir_b])))
    for df in (a, b):
        if "pct_copy_bw" not in df:  # runs made before the copy was timed alongside
            df["pct_copy_bw"] = float("nan")
    both = a.merge(b, on=key, suffixes=("_a", "_b"))
    if both.empty:
        raise ValueError(f"no ok rows in common between {dir_a} and {dir_b}")
    both["ratio"] = both["p50_ms_b"] / both["p50_ms_a"]
    others = both[both["speedup_a"].notna() & (both["impl"] != both["case"].map(_baseline))]
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
        f"# Repeatability: {Path(dir_b).name} vs {Path(dir_a).name}", "",
        f"{len(both)} rows in common; median times: |B/A - 1| median {100 * times.median():.1f}%, "
        f"max {100 * times.max():.1f}%; within 5%: {_within(times)}.", "",
    ]  # fmt: skip
    what = {
        "speedups": "Speedups vs the baseline ({n} rows besides the baselines)",
        "vs copy": "Time vs the same-size copy timed alongside, pct_copy_bw ({n} rows)",
    }
    for name, title in what.items():
        d = dev[name]
        if len(d):
            lines += [f"{title.format(n=len(d))}: |B/A - 1| median {100 * d.median():.1f}%, "
                      f"max {100 * d.max():.1f}%; within 5%: {_within(d)}.", ""]  # fmt: skip
    lines += [
        "| case | impl | mode | shape | p50 A ms | p50 B ms | B / A | speedup A | speedup B "
        "| % copy A | % copy B |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for _, r in both.iterrows():
        shape = f"B={r['batch']} L={r['seq_len']} d={r['d_model']} H={r['num_heads']}"
        speedups = " | ".join(
            f"{r[c]:.2f}x" if pd.notna(r[c]) else "" for c in ("speedup_a", "speedup_b")
        )
        copies = " | ".join(
            f"{r[c]:.1f}" if pd.notna(r[c]) else "" for c in ("pct_copy_bw_a", "pct_copy_bw_b")
        )
        lines.append(
            f"| {r['case']} | {r['impl']} | {r['mode']} | {shape} | {r['p50_ms_a']:.3f} "
            f"| {r['p50_ms_b']:.3f} | {r['ratio']:.3f} | {speedups} | {copies} |"
        )
    return "\n".join(lines) + "\n"


def compare_all(dirs: list[Path]) -> str:
    """Repeatability over several runs of one sweep: every pair's drift of the medians, of the
    speedups and of the time vs the copy (median and max over the rows in common), then the
    spread over the pairs."""
    lines = [
        f"# Repeatability over {len(dirs)} runs: every pair", "",
        "Runs: " + ", ".join(f"{i + 1} = {Path(d).name}" for i, d in enumerate(dirs)) + ".", "",
        "| pair | rows | times: median, max of \\|B/A - 1\\| | rows within 5% "
        "| speedups: median, max | speedups within 5% | vs copy: median, max | vs copy within 5% |",
        "|---|---|---|---|---|---|---|---|",
    ]  # fmt: skip
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
        lines.append("| " + " | ".join(cells) + " |")
    m = pd.Series(medians["times"])
    lines += ["", f"Over the {len(m)} pairs, the median drift of the medians ranged from "
              f"{100 * m.min():.1f}% to {100 * m.max():.1f}% (middle pair {100 * m.median():.1f}%;"
              f" {int((m <= 0.05).sum())} of {len(m)} pairs within 5%; row by row, "
              f"{_within(pd.Series(rows))} row pairs within 5%, the largest "
              f"{100 * max(rows):.1f}%)."]  # fmt: skip
    for name, label in (("speedups", "Speedups"), ("vs copy", "Time vs the copy")):
        if medians[name]:
            sm = pd.Series(medians[name])
            lines[-1] += (f" {label}: {100 * sm.min():.1f}% to {100 * sm.max():.1f}% (middle "
                          f"pair {100 * sm.median():.1f}%; {int((sm <= 0.05).sum())} of "
                          f"{len(sm)} pairs within 5%).")  # fmt: skip
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dirs", nargs="+", type=Path, help="run or sweep directories")
    parser.add_argument("--out", type=Path, default=None, help="where to write (default: first)")
    parser.add_argument(
        "--compare",
        action="store_true",
        help="runs of the same sweep: compare.md for two, repeatability.md (every pair) for more",
    )
    args = parser.parse_args(argv)
    for d in args.dirs:
        if not d.is_dir():
            parser.error(f"dirs: {d} is not a directory")
    if args.compare:
        if len(args.dirs) < 2:
            parser.error("--compare takes two or more run directories")
        out = Path(args.out or args.dirs[-1])
        name, text = (("compare.md", compare(*args.dirs)) if len(args.dirs) == 2
                      else ("repeatability.md", compare_all(args.dirs)))  # fmt: skip
        out.mkdir(parents=True, exist_ok=True)
        (out / name).write_text(text)
        print(text)
        return out
    out = build(args.dirs, args.out)
    print(f"wrote {out}/report.md, merged.csv and plots")
    return out


if __name__ == "__main__":
    main()
