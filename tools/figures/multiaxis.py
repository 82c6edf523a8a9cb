"""docs/multiaxis_rope.md's figures: the committed `sweep=multimodal` run."""

from __future__ import annotations

from tools.figures.sources import _cpu, _json, contended, pick, report_rows, span

RUN = "multimodal-cpu"
QWEN = "B=1, L=1024, Hq=28, Hk=4, D=128"
ROWS = [  # label, the point in words, mode, what picks the rows
    ("mrope, qwen2_vl", QWEN, "forward+backward", dict(mrope_style="qwen2_vl", seq_len=1024)),
    ("mrope, qwen3_vl", "the same", "forward+backward", dict(mrope_style="qwen3_vl", seq_len=1024)),
    ("rope_2d, pixtral", "B=2, 32x32 patches, H=16, D=64", "forward",
     dict(rope_2d_split="pixtral", seq_len=1024)),
    ("rope_2d, axial_xy", "the same", "forward", dict(rope_2d_split="axial_xy", seq_len=1024)),
    ("rope_2d, axial_xy", "B=2, 24x24 patches", "forward",
     dict(rope_2d_split="axial_xy", seq_len=576)),
    ("rope, xpos", "B=1, L=1024, Hq=8, Hk=2, D=128", "forward", dict(rope_variant="xpos")),
    ("rope, p_rope", "the same", "forward", dict(rope_variant="p_rope")),
]  # fmt: skip


def run() -> str:
    env, summary = _json(RUN, "env.json"), _json(RUN, "timing_summary.json")
    return (
        f"`python -m bench sweep=multimodal` at commit {env['git_sha'][:7]}, committed in\n"
        f"`results/reference/{RUN}/` ({_cpu(env)}, float32, {env['torch_threads']} threads, "
        f"{round(summary['wall_s'])} s, {contended(RUN)})"
    )


def table() -> str:
    df = report_rows(RUN)
    lines = ["| case | point | mode | eager | compiled |", "|---|---|---|---|---|"]
    for label, point, mode, eq in ROWS:
        eager, compiled = (
            pick(df, impl=i, mode=mode, **eq).cell for i in ("reference", "compiled")
        )
        lines.append(
            f"| {label} | {point} | {mode} | {eager.removesuffix(' (1.00x)')} | {compiled} |"
        )
    return "\n".join(lines)


def half_split() -> str:
    """What the half-split 2D layouts lose eagerly against torch.compile at 24x24 and more."""
    df = report_rows(RUN)
    rows = df[(df.case == "rope_2d") & (df.impl == "compiled") & (df["mode"] == "forward")]
    rows = rows[(rows.seq_len >= 576) & ~rows.params.str.contains("axial_xy")]
    return f"the half-split pairs take three passes and lose {span(rows.speedup, '{:.0f}')}x"


SETTINGS = ("zeta_0 = 0.29",)  # 0.4 / 1.4: xPos's smallest scale, a constant of its paper
FIGURES = {"run": run, "table": table, "half_split": half_split}
