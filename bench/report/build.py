"""Tables and plots from results alone: `python -m bench.report RUN_DIR [RUN_DIR ...]`.

Reads every results.csv under the given directories (a run, a multirun sweep, runs copied from
several machines), merges them, and writes merged.csv (every row), report.md and PNG plots.
One directory: its own report, rebuilt in place. Several: a new directory (--out, default
results/reports/<time>-merged), never one of the runs'. `--compare`: bench/report/compare.py.

Cells carry marks (bench/report/flags.py): `~` an uncertain median (95% interval wider than +-10%),
`#` measured while other processes held the CPU, `!` physically impossible as measured (past a
copy or the matmul rate, forward+backward faster than forward): listed under "Suspect figures";
`i` a Triton kernel under the interpreter (its time is not the kernel's speed).
Speedups are taken within one run only; a row measured in several runs shows the latest.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import pandas as pd

from bench.report import compare, flags, plots
from bench.report.markdown import cell, markdown
from bench.report.rows import has_rows, load, load_all, results_of, speedups
from bench.results import NO_SPACE, read_rows


def build(dirs: list[Path], out: Path | None = None) -> Path:
    dirs = [Path(d) for d in dirs]
    out = Path(out or dirs[0])
    out.mkdir(parents=True, exist_ok=True)
    load_all(dirs).to_csv(out / "merged.csv", index=False)
    df = frame(dirs)
    files = [f.parent / "env.json" for d in dirs for f in results_of(d)]
    envs = [json.loads(f.read_text()) for f in files if f.is_file()]
    (out / "report.md").write_text(markdown(df, envs))
    plots.write_all(df, out)
    return out


def frame(dirs: list[Path]) -> pd.DataFrame:
    """The runs' rows as the report reads them: flags, speedups and each row's table `cell`."""
    df = load([Path(d) for d in dirs])
    dup = df.attrs.get("duplicates", 0)
    df["suspect"] = flags.suspect(df)
    df = speedups(df)
    df.attrs["duplicates"] = dup
    df.attrs["runs"] = sorted(str(d) for d in dirs)
    df["uncertain"], df["contended"] = flags.uncertain(df), flags.contended(df)
    df["interpreted"], df["throttled"] = flags.interpreted(df), flags.throttled(df)
    df["speedup_suspect"] = flags.speedup_suspect(df)
    df["cell"] = df.apply(cell, axis=1)
    return df


def _new_dir(kind: str) -> Path:
    return Path("results") / "reports" / f"{time.strftime('%Y%m%d-%H%M%S')}-{kind}"


def main(argv: list[str] | None = None) -> Path:
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
    try:  # a malformed row, named by its file and line, before anything is written
        for f in (f for d in args.dirs for f in results_of(d)):
            read_rows(f)
    except ValueError as exc:
        parser.exit(2, f"bench.report: {exc}\n")
    out = args.out or (args.dirs[0] if len(args.dirs) == 1 else _new_dir("merged"))
    try:
        out = build(args.dirs, out)
    except OSError as exc:
        if exc.errno not in NO_SPACE:
            raise
        parser.exit(1, f"bench.report: cannot write in {out}: {exc.strerror}\n")
    print(f"wrote {out}/report.md, merged.csv and plots")
    return out
