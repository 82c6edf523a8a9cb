"""probe.md and probe.png from probe.csv alone: `python -m bench.probe.report <run dir>`.

probe.md: per task, a table of encoding (RoPE under each evaluation schedule on its own line)
x evaluation length, each cell the mean accuracy over seeds and its range (min-max), in the
task's metric (exact match; per token for Ruoss et al.'s string tasks); n/a where the encoding
has no positions that far. For those string tasks, also their paper's score: the per-token
accuracy averaged over the lengths past training, best seed (with mean and worst); and, where
the run has the five encodings Kazemnejad et al. 2023 compared, their aggregate: the mean
reciprocal rank over tasks at twice the training length. probe.png:
one panel per task, accuracy against evaluation length, one line per encoding (mean, with its
min-max band).
"""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from bench.probe.encodings import ENCODINGS  # noqa: E402
from bench.probe.tasks import TASKS  # noqa: E402
from bench.report.figures import LEGEND_PT, save, wrap  # noqa: E402
from bench.tables import markdown_table  # noqa: E402
from posenc._scaling import SCHEDULES  # noqa: E402

# Kazemnejad et al. 2023 (NeurIPS), "The Impact of Positional Encoding on Length Generalization
# in Transformers", Figure 1: mean reciprocal rank of five encodings over their 10 tasks, by
# exact-match accuracy on lengths up to twice the training length. Our names for theirs (APE is
# their sinusoidal absolute embedding, Rotary is RoPE).
KAZEMNEJAD_MRR = {"nope": 0.69, "t5": 0.55, "alibi": 0.50, "rope": 0.33, "sinusoidal": 0.22}


def load(out_dir: Path) -> pd.DataFrame:
    df = pd.read_csv(Path(out_dir) / "probe.csv", keep_default_na=False, na_values=[""])
    df["line"] = df["encoding"].where(
        df["eval_scaling"] == "none", df["encoding"] + "+" + df["eval_scaling"]
    )
    metric = df["task"].map(lambda t: TASKS[t].metric)
    df["score"] = df["accuracy"].where(metric == "accuracy", df["token_accuracy"])
    return df


def summary(df: pd.DataFrame) -> pd.DataFrame:
    """Mean, min, max accuracy over seeds per (task, line, eval_len); status n/a kept."""
    ok = df[df["status"] == "ok"]
    stats = ok.groupby(["task", "line", "eval_len"])["score"].agg(["mean", "min", "max", "count"])
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
    per_token = df["task"].map(_per_token)
    metric = "exact-match accuracy"
    if per_token.any():
        metric = "accuracy (exact match; per token where a task says so)"
    lines = [
        f"# Length-generalization probe: {metric} (mean over {seeds} seeds, min-max in "
        f"brackets), trained at {train_len} tokens",
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
        what = f"{'per-token accuracy, ' if _per_token(task) else ''}chance {chance:.3g}"
        lines += [f"## {task} ({what})", "", *markdown_table(header, rows), ""]
    lines += _string_score(df)
    lines += _reciprocal_rank(df)
    if len(errors):
        lines += ["## Errors", ""] + [
            f"- {r.encoding} {r.eval_scaling} {r.task} L={r.eval_len} seed {r.seed}: {r.message}"
            for r in errors.itertuples()
        ]
    return "\n".join(lines) + "\n"


def _per_token(task: str) -> bool:
    return TASKS[task].metric == "token_accuracy"


def string_score(df: pd.DataFrame) -> pd.DataFrame:
    """Ruoss et al.'s score per (task, line, seed): the per-token accuracy averaged over the
    evaluated lengths past train_len; then max, mean and min over seeds."""
    ok = df[(df["status"] == "ok") & df["task"].map(_per_token)]
    ok = ok[ok["eval_len"] > ok["train_len"]]
    per_seed = ok.groupby(["task", "line", "seed"])["token_accuracy"].mean()
    return per_seed.groupby(["task", "line"]).agg(["max", "mean", "min"]).reset_index()


def _string_score(df: pd.DataFrame) -> list[str]:
    s = string_score(df)
    if s.empty:
        return []
    tasks = [t for t in TASKS if t in set(s["task"])]
    lengths = sorted(df[df["eval_len"] > df["train_len"]]["eval_len"].unique())
    rows = []
    for line in _order(s["line"]):
        cells = []
        for task in tasks:
            r = s[(s["task"] == task) & (s["line"] == line)]
            cells.append(
                ""
                if r.empty
                else f"{r['max'].iloc[0]:.2f} ({r['mean'].iloc[0]:.2f}, {r['min'].iloc[0]:.2f})"
            )
        rows.append([line, *cells])
    return [
        "## String tasks scored as Ruoss et al. 2023 score them",
        "",
        f"Per-token accuracy averaged over the lengths {', '.join(map(str, lengths))} (past "
        "training): best seed (mean, worst).",
        "",
        *markdown_table(["encoding", *tasks], rows),
        "",
    ]


def _mrr(table: pd.DataFrame) -> pd.Series:
    """table: task x encoding accuracies, complete. Per task the best gets rank 1 and ties
    share their mean rank; 1/rank averaged over tasks."""
    return (1 / table.rank(axis=1, ascending=False, method="average")).mean()


def reciprocal_rank(
    df: pd.DataFrame, factor: int = 2, metric: str = "token_accuracy"
) -> pd.DataFrame:
    """Kazemnejad et al.'s aggregate over the tasks where all five of their encodings ran:
    the encodings ranked per task by `metric` at `factor` x train_len, from the seeds' mean;
    and from each seed alone (min, max). Per-token accuracy by default: graded where whole
    answers all fail past training, and for one-answer tasks the same as exact match ("accuracy",
    the paper's metric). Empty where one of the five is missing."""
    names = list(KAZEMNEJAD_MRR)
    ok = df[(df["status"] == "ok") & (df["eval_scaling"] == "none")]
    ok = ok[ok["encoding"].isin(names) & (ok["eval_len"] == factor * ok["train_len"])]

    def table(rows: pd.DataFrame) -> pd.DataFrame:
        t = rows.groupby(["task", "encoding"])[metric].mean().unstack()
        t = t.reindex(index=[k for k in TASKS if k in t.index], columns=names)
        return t.dropna()

    mean = table(ok)
    if mean.empty:
        return pd.DataFrame()
    per_seed = pd.DataFrame({s: _mrr(table(g).reindex(mean.index)) for s, g in ok.groupby("seed")})
    out = pd.DataFrame(
        {
            "mrr": _mrr(mean),
            "seed_min": per_seed.min(axis=1),
            "seed_max": per_seed.max(axis=1),
            "published": pd.Series(KAZEMNEJAD_MRR),
        }
    )
    out = out.rename_axis("encoding").reset_index().sort_values("mrr", ascending=False)
    out.attrs["tasks"] = list(mean.index)
    return out


def _reciprocal_rank(df: pd.DataFrame) -> list[str]:
    r = reciprocal_rank(df)
    if r.empty:
        return []
    rows = [
        [e, f"{m:.2f}", f"{lo:.2f}-{hi:.2f}", f"{p:.2f}"]
        for e, m, lo, hi, p in r[["encoding", "mrr", "seed_min", "seed_max", "published"]].values
    ]
    tasks = ", ".join(r.attrs["tasks"])
    return [
        "## Aggregate rank as Kazemnejad et al. 2023 compute it",
        "",
        f"Mean reciprocal rank over {len(r.attrs['tasks'])} tasks ({tasks}): per task the five "
        "encodings ranked by per-token accuracy at twice the training length (ties share "
        "their mean rank), from the mean of seeds and from each seed alone; beside it, the "
        "paper's Figure 1 over its 10 tasks (exact match, lengths up to twice the training).",
        "",
        *markdown_table(["encoding", "MRR", "per seed", "paper"], rows),
        "",
    ]


DASHES = (":", "--", "-.", (0, (5, 1, 1, 1)), (0, (3, 1, 1, 1, 1, 1)))


def plot(df: pd.DataFrame, path: Path) -> None:
    s = summary(df)
    tasks = [t for t in TASKS if t in set(s["task"])]
    cols = min(3, len(tasks))  # rows of three panels: six in one row would be unreadable
    rows = -(-len(tasks) // cols)
    fig, axes = plt.subplots(
        rows, cols, figsize=(5 * cols, 4 * rows), squeeze=False, layout="constrained"
    )
    palette = [*map(plt.cm.tab10, range(10)), *map(plt.cm.Dark2, range(8))]
    colours = dict(zip(ENCODINGS, palette, strict=False))
    for ax, task in zip(axes.flat, tasks, strict=False):
        st = s[(s["task"] == task) & s["mean"].notna()]
        for line in _order(st["line"]):
            g = st[st["line"] == line].sort_values("eval_len")
            enc, _, schedule = line.partition("+")
            style = "-"  # an encoding as trained; an evaluation schedule a dash pattern each
            if schedule in SCHEDULES:
                style = DASHES[list(SCHEDULES).index(schedule) % len(DASHES)]
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
            xlabel=wrap("evaluation length (tokens; dashed: training length)", 40),
            ylabel="per-token accuracy" if _per_token(task) else "exact-match accuracy",
            ylim=(-0.03, 1.03),
        )
    for ax in axes.flat[len(tasks) :]:
        ax.axis("off")
    axes[0][-1].legend(fontsize=LEGEND_PT, loc="center left", bbox_to_anchor=(1.0, 0.5))
    save(fig, path, dpi=110)


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
