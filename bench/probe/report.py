"""probe.md and probe.png from probe.csv alone: `python -m bench.probe.report <run dir>`.

probe.md: per task, a table of encoding (RoPE under each evaluation schedule on its own line)
x evaluation length, each cell the mean exact-match accuracy over seeds and its range
(min-max); n/a where the encoding has no positions that far. probe.png: one panel per task,
accuracy against evaluation length, one line per encoding (mean, with its min-max band).
"""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from bench.probe.model import ENCODINGS  # noqa: E402
from bench.probe.tasks import TASKS  # noqa: E402
from bench.tables import markdown_table  # noqa: E402


def load(out_dir: Path) -> pd.DataFrame:
    df = pd.read_csv(Path(out_dir) / "probe.csv", keep_default_na=False, na_values=[""])
    df["line"] = df["encoding"].where(
        df["eval_scaling"] == "none", df["encoding"] + "+" + df["eval_scaling"]
    )
    return df


def summary(df: pd.DataFrame) -> pd.DataFrame:
    """Mean, min, max accuracy over seeds per (task, line, eval_len); status n/a kept."""
    ok = df[df["status"] == "ok"]
    stats = ok.groupby(["task", "line", "eval_len"])["accuracy"].agg(
        ["mean", "min", "max", "count"]
    )
    na = df[df["status"] == "n/a"].groupby(["task", "line", "eval_len"]).size().rename("na")
    return stats.join(na, how="outer").reset_index()


def _order(lines) -> list[str]:
    rank = {e: i for i, e in enumerate(ENCODINGS)}
    return sorted(set(lines), key=lambda s: (rank.get(s.split("+")[0], 99), s))


def _cell(r) -> str:
    if pd.isna(r["mean"]):
        return "n/a" if r.get("na", 0) else "error"
    if r["count"] == 1 or r["max"] - r["min"] < 0.005:
        return f"{r['mean']:.2f}"
    return f"{r['mean']:.2f} ({r['min']:.2f}-{r['max']:.2f})"


def markdown(df: pd.DataFrame) -> str:
    s = summary(df)
    seeds = df["seed"].nunique()
    train_len = int(df["train_len"].iloc[0])
    lines = [
        f"# Length-generalization probe: exact-match accuracy (mean over {seeds} seeds, "
        f"min-max in brackets), trained at {train_len} tokens",
        "",
    ]
    errors = df[df["status"] == "error"]
    for task in [t for t in TASKS if t in set(s["task"])]:
        st = s[s["task"] == task]
        lengths = sorted(st["eval_len"].unique())
        chance = float(df[df["task"] == task]["chance"].iloc[0])
        header = ["encoding", *(f"{n} ({n // train_len}x)" for n in lengths)]
        rows = []
        for line in _order(st["line"]):
            by_len = st[st["line"] == line].set_index("eval_len")
            rows.append(
                [line, *(_cell(by_len.loc[n]) if n in by_len.index else "" for n in lengths)]
            )
        lines += [f"## {task} (chance {chance:.3g})", "", *markdown_table(header, rows), ""]
    if len(errors):
        lines += ["## Errors", ""] + [
            f"- {r.encoding} {r.eval_scaling} {r.task} L={r.eval_len} seed {r.seed}: {r.message}"
            for r in errors.itertuples()
        ]
    return "\n".join(lines) + "\n"


def plot(df: pd.DataFrame, path: Path) -> None:
    s = summary(df)
    tasks = [t for t in TASKS if t in set(s["task"])]
    fig, axes = plt.subplots(1, len(tasks), figsize=(5 * len(tasks), 4), squeeze=False)
    colours = {e: plt.cm.tab10(i) for i, e in enumerate(ENCODINGS)}
    for ax, task in zip(axes[0], tasks, strict=True):
        st = s[(s["task"] == task) & s["mean"].notna()]
        for line in _order(st["line"]):
            g = st[st["line"] == line].sort_values("eval_len")
            enc, _, schedule = line.partition("+")
            style = {
                "": "-",
                "linear": ":",
                "dynamic": "--",
                "yarn": "-.",
                "llama3": (0, (5, 1, 1, 1)),
            }.get(schedule, "-")
            ax.plot(
                g["eval_len"],
                g["mean"],
                style,
                marker="o",
                ms=3,
                label=line,
                color=colours.get(enc),
            )
            ax.fill_between(g["eval_len"], g["min"], g["max"], alpha=0.12, color=colours.get(enc))
        chance = float(df[df["task"] == task]["chance"].iloc[0])
        ax.axhline(chance, color="grey", lw=0.8, ls=":")
        ax.axvline(int(df["train_len"].iloc[0]), color="black", lw=0.8, ls="--")
        ax.set_xscale("log", base=2)
        lengths = sorted(df["eval_len"].unique())
        ax.set_xticks(lengths, [str(n) for n in lengths])
        ax.set(
            title=task,
            xlabel="evaluation length (tokens; dashed: training length)",
            ylabel="exact-match accuracy",
            ylim=(-0.03, 1.03),
        )
    axes[0][-1].legend(fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def build(out_dir: Path) -> None:
    out_dir = Path(out_dir)
    df = load(out_dir)
    if df.empty:
        return
    (out_dir / "probe.md").write_text(markdown(df))
    plot(df, out_dir / "probe.png")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m bench.probe.report <run dir holding probe.csv>")
    build(Path(sys.argv[1]))
    print(f"{Path(sys.argv[1]) / 'probe.md'}")
