"""Tables and plots from results alone: `python -m bench.report RUN_DIR [RUN_DIR ...]`.

Reads every results.csv under the given directories (a run, a multirun sweep, runs copied from
several machines), merges them, and writes merged.csv, report.md and PNG plots to --out (default:
the first directory).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd

from bench import plots
from bench.cases import CASES
from bench.config import MODES

SHAPE = ["batch", "seq_len", "d_model", "num_heads"]


def load(dirs: list[Path]) -> pd.DataFrame:
    files = sorted({f for d in dirs for f in Path(d).rglob("results.csv")})
    if not files:
        raise FileNotFoundError(f"no results.csv under {', '.join(map(str, dirs))}")
    frames = [pd.read_csv(f) for f in files]
    df = pd.concat([f for f in frames if not f.empty], ignore_index=True)
    # The same row measured twice (a resumed or re-run point) keeps its latest measurement.
    key = ["case", "impl", "mode", "device", "device_name", "dtype", *SHAPE]
    return df.sort_values("timestamp").drop_duplicates(key, keep="last").reset_index(drop=True)


def _speedups(df: pd.DataFrame) -> pd.DataFrame:
    """Adds `speedup`: the case's baseline impl time over this impl's, same point and device."""
    base_impl = df["case"].map(lambda c: CASES[c].baseline if c in CASES else "reference")
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


def _to_markdown(table: pd.DataFrame) -> str:
    cols = list(table.columns)
    head = "| B | L | d_model | H | " + " | ".join(cols) + " |"
    rule = "|" + "---|" * (4 + len(cols))
    body = [
        "| "
        + " | ".join(str(v) for v in idx)
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


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dirs", nargs="+", type=Path, help="run or sweep directories")
    parser.add_argument("--out", type=Path, default=None, help="where to write (default: first)")
    args = parser.parse_args(argv)
    for d in args.dirs:
        if not d.is_dir():
            parser.error(f"dirs: {d} is not a directory")
    out = build(args.dirs, args.out)
    print(f"wrote {out}/report.md, merged.csv and plots")
    return out


if __name__ == "__main__":
    main()
