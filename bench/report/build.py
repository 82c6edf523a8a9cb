"""Tables and plots from results alone: `python -m bench.report RUN_DIR [RUN_DIR ...]`.

Reads every results.csv under the given directories (a run, a multirun sweep, runs copied from
several machines), merges them, and writes merged.csv (every row), report.md and PNG plots.
One directory: its own report, rebuilt in place. Several: a new directory (--out, default
results/reports/<time>-merged), never one of the runs'. `--compare`: bench/compare.py.

Cells carry marks (bench/flags.py): `~` an uncertain median (95% interval wider than +-10%),
`#` measured while other processes held the CPU, `!` physically impossible as measured (past a
copy or the matmul rate, forward+backward faster than forward): listed under "Suspect figures".
Speedups are taken within one run only; a row measured in several runs shows the latest.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import pandas as pd

from bench.cases import CASES
from bench.registry import MODES
from bench.report import flags, plots
from bench.run import machine

SHAPE = ["batch", "seq_len", "d_model", "num_heads", "params"]


def knobs(params: str) -> str:
    """The params column's JSON as "layout=bshd causal" (defaults left out: default tiles,
    num_kv_heads null, causal false; empty for none)."""
    try:
        items = json.loads(params).items()
    except (TypeError, ValueError):
        return ""
    return " ".join(
        k if v is True else f"{k}={v}" for k, v in items if v not in (None, False, "default")
    )


def has_rows(dirs: list[Path]) -> bool:
    """Whether any results.csv under dirs holds a row."""
    return any(
        f.stat().st_size and len(f.read_text().splitlines()) > 1
        for d in dirs
        for f in Path(d).rglob("results.csv")
    )


KEY = ["case", "impl", "mode", "device", "device_name", "dtype", *SHAPE]


def load_all(dirs: list[Path]) -> pd.DataFrame:
    """Every row of every results.csv under dirs."""
    files = sorted({f for d in dirs for f in Path(d).rglob("results.csv")})
    if not files:
        raise FileNotFoundError(f"no results.csv under {', '.join(map(str, dirs))}")
    frames = [pd.read_csv(f, dtype={"params": str}) for f in files]
    frames = [f for f in frames if not f.empty]
    if not frames:
        raise FileNotFoundError(f"no rows in the results.csv under {', '.join(map(str, dirs))}")
    df = pd.concat(frames, ignore_index=True)
    df["params"] = df["params"].fillna("{}") if "params" in df else "{}"
    return df.sort_values("timestamp", kind="stable").reset_index(drop=True)


def load(dirs: list[Path]) -> pd.DataFrame:
    """One row per key: a row measured more than once (a re-run, or the same point in
    several runs) keeps its latest measurement; attrs["duplicates"] counts the others."""
    df = load_all(dirs)
    latest = df.drop_duplicates(KEY, keep="last").reset_index(drop=True)
    latest.attrs["duplicates"] = len(df) - len(latest)
    return latest


def _baseline(case: str) -> str:
    return CASES[case].baseline if case in CASES else "reference"


def _speedups(df: pd.DataFrame) -> pd.DataFrame:
    """Adds `speedup`: the case's baseline impl time over this impl's, same point, device and
    run (timed side by side; never a ratio of two runs' times), and `base_suspect`: whether
    that baseline row is suspect (df has `suspect`)."""
    base_impl = df["case"].map(_baseline)
    key = ["case", "mode", "device", "device_name", "dtype", *SHAPE]
    key += ["run_id"] if "run_id" in df else []
    marked = df.assign(suspect=df.get("suspect", ""))
    base = marked[marked["impl"] == base_impl][key + ["p50_ms", "suspect"]]
    base = base.rename(columns={"p50_ms": "base_ms", "suspect": "base_suspect"})
    base["base_suspect"] = base["base_suspect"] != ""
    out = df.merge(base, on=key, how="left")
    out["speedup"] = out["base_ms"] / out["p50_ms"]
    return out


def _cell(row) -> str:
    """The median with its marks (`!` suspect, `#` contended, `~` uncertain) and its speedup
    (`!` when it rests on a suspect row)."""
    if row["status"] != "ok":
        return row["status"]
    marks = ("!" if row.get("suspect") else "") + ("#" if row.get("contended") else "")
    text = marks + ("~" if row.get("uncertain") else "") + f"{row['p50_ms']:.3g}"
    if pd.notna(row.get("speedup")):
        text += f" ({'!' if row.get('speedup_suspect') else ''}{row['speedup']:.2f}x)"
    return text


def precision(df: pd.DataFrame) -> list[str]:
    """One line on how well the ok rows' medians are known: the larger half of each one's 95%
    interval (p50_ci_lo_ms, p50_ci_hi_ms) relative to it. [] for runs without the columns."""
    ok = df[df["status"] == "ok"]
    if "p50_ci_lo_ms" not in ok or ok["p50_ci_lo_ms"].isna().all():
        return []
    ok = ok[ok["p50_ci_lo_ms"].notna()]
    half = (
        pd.concat(
            [ok["p50_ms"] - ok["p50_ci_lo_ms"], ok["p50_ci_hi_ms"] - ok["p50_ms"]], axis=1
        ).max(axis=1)
        / ok["p50_ms"]
    )
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
    where = [
        f"- {env.get('gpu') or env.get('cpu')}: torch {env.get('torch')}, triton "
        f"{env.get('triton')}, {env.get('torch_threads')} threads, git "
        f"{str(env.get('git_sha'))[:10]}"
        for env in envs
    ]
    lines += list(dict.fromkeys(where))  # a multirun's jobs share one line
    runs = df.attrs.get("runs", [])
    if len(runs) > 1:
        lines += ["", f"Merged from {len(runs)} runs: " + ", ".join(f"`{r}`" for r in runs) + "."]
    ok = int((df["status"] == "ok").sum())
    lines += [
        "",
        "Cells: median ms per call (speedup vs the case's baseline implementation on",
        "the same device, timed side by side in the same run); non-ok cells show the status",
        "(see results.csv for the message). Marks:",
        f"`~` uncertain ({int(df['uncertain'].sum())} of {ok} ok cells): the median's 95% "
        f"interval is wider than +-{100 * flags.UNCERTAIN_CI:.0f}%;",
        f"`#` contended ({int(df['contended'].sum())} of {ok}): other processes took over "
        f"{machine.CONTENDED_CORES} of a core while it was timed{_busiest(df)};",
        f"`!` suspect ({int((df['suspect'] != '').sum())} of {ok}): physically impossible as "
        'measured ("Suspect figures" below says why); a speedup on a suspect row is marked '
        "too and is not a result.",
        "",
    ]
    if "pct_peak_bw" in df and (df["pct_peak_bw"] > 100).any():
        lines += [
            f"{int((df['pct_peak_bw'] > 100).sum())} ok rows pass the run's calibrated copy "
            "bandwidth (pct_peak_bw over 100%): that copy moves 64 MiB (CPU) or 1 GiB (CUDA) "
            "through memory, and these rows' bytes fit in the caches; pct_copy_bw compares "
            "each row with a copy of its own size, timed beside it.",
            "",
        ]
    dup = df.attrs.get("duplicates", 0)
    if dup:
        lines += [
            f"{dup} rows were measured more than once (re-runs, or the same point in "
            "several runs): each cell shows the latest; merged.csv has them all.",
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
    lines += suspect_table(df) + not_ok_table(df)
    return "\n".join(lines) + "\n"


def _busiest(df: pd.DataFrame) -> str:
    if "others_cpu" not in df or df["others_cpu"].isna().all():
        return ""
    return f" (the most: {df['others_cpu'].max():.2f} cores)"


def _shapes(g: pd.DataFrame) -> str:
    """The shapes of a set of rows, compactly: B=1,8 L=128..1024 (4) d=256 H=4."""
    parts = []
    for col, name in (("batch", "B"), ("seq_len", "L"), ("d_model", "d"), ("num_heads", "H")):
        values = sorted(set(g[col]))
        if len(values) <= 3:
            parts.append(f"{name}={','.join(map(str, values))}")
        else:
            parts.append(f"{name}={values[0]}..{values[-1]} ({len(values)})")
    return " ".join(parts)


def suspect_table(df: pd.DataFrame) -> list[str]:
    bad = df[df["suspect"] != ""]
    if bad.empty:
        return []
    lines = [
        "## Suspect figures",
        "",
        "Not results: each is faster than physics allows as measured (bench/flags.py).",
        "",
        "| case | impl | mode | device | shape | knobs | ms | why |",
        "|" + "---|" * 8,
    ]
    for _, r in bad.iterrows():
        lines.append(
            f"| {r['case']} | {r['impl']} | {r['mode']} | {r['device']} | "
            f"{_shapes(pd.DataFrame([r]))} | {knobs(r['params'])} | {r['p50_ms']:.3g} | "
            f"{r['suspect']} |"
        )
    return [*lines, ""]


def not_ok_table(df: pd.DataFrame) -> list[str]:
    """Rows not ok, one line per (case, impl, mode, device, knobs, status, message), with how
    many rows and which shapes share it."""
    bad = df[df["status"] != "ok"]
    message = (
        bad["message"].astype(object).where(bad["message"].notna(), "")
        if ("message" in bad)
        else ""
    )
    bad = bad.assign(knobs=bad["params"].map(knobs), message=message)
    if bad.empty:
        return []
    lines = [
        "## Rows not ok",
        "",
        "| case | impl | mode | device | knobs | rows | shapes | status | message |",
        "|" + "---|" * 9,
    ]
    key = ["case", "impl", "mode", "device", "knobs", "status", "message"]
    for k, g in bad.groupby(key, sort=False):
        case, impl, mode, device, knob, status, msg = k
        msg = str(msg).replace("|", "/")
        lines.append(
            f"| {case} | {impl} | {mode} | {device} | {knob} | {len(g)} | {_shapes(g)} "
            f"| {status} | {msg} |"
        )
    return lines


def tutorial_table(df: pd.DataFrame) -> list[str]:
    """Section 5.2's numbers as the tutorial measures them, next to proper timing (if any)."""
    if "tutorial_ms_per_100" not in df or df["tutorial_ms_per_100"].isna().all():
        return []
    rows = df[df["tutorial_ms_per_100"].notna() | (df["mode"] == "forward")]
    rows = rows[rows["case"].isin(df.loc[df["tutorial_ms_per_100"].notna(), "case"])]
    order = {"seed": 0, "reference": 1}  # the tutorial's code first, then the corrected ones
    rows = rows.sort_values("impl", key=lambda s: s.map(order).fillna(2), kind="stable")
    rows = rows.sort_values("case", key=lambda s: s.map(list(CASES).index), kind="stable")
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
    load_all(dirs).to_csv(out / "merged.csv", index=False)
    df = load(dirs)
    envs = [json.loads(f.read_text()) for d in dirs for f in sorted(Path(d).rglob("env.json"))]
    dup = df.attrs.get("duplicates", 0)
    df["suspect"] = flags.suspect(df)
    df = _speedups(df)
    df.attrs["duplicates"] = dup
    df.attrs["runs"] = sorted(str(d) for d in dirs)
    df["uncertain"], df["contended"] = flags.uncertain(df), flags.contended(df)
    df["speedup_suspect"] = flags.speedup_suspect(df)
    df["cell"] = df.apply(_cell, axis=1)
    (out / "report.md").write_text(markdown(df, envs))
    plots.write_all(df, out)
    return out


def _new_dir(kind: str) -> Path:
    return Path("results") / "reports" / f"{time.strftime('%Y%m%d-%H%M%S')}-{kind}"


def main(argv: list[str] | None = None) -> Path:
    from bench.report import compare

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dirs", nargs="+", type=Path, help="run or sweep directories")
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="where to write (default: the run itself for one directory, else "
        "a new results/reports/<time>-merged or -compare)",
    )
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
        out = Path(args.out or _new_dir("compare"))
        name, text = (
            ("compare.md", compare.compare(*args.dirs))
            if len(args.dirs) == 2
            else ("repeatability.md", compare.compare_all(args.dirs))
        )
        out.mkdir(parents=True, exist_ok=True)
        (out / name).write_text(text)
        print(text)
        print(f"wrote {out / name}")
        return out
    if not has_rows(args.dirs):
        parser.error(f"dirs: no measured rows under {', '.join(map(str, args.dirs))}")
    out = args.out or (args.dirs[0] if len(args.dirs) == 1 else _new_dir("merged"))
    out = build(args.dirs, out)
    print(f"wrote {out}/report.md, merged.csv and plots")
    return out
