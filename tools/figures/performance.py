"""docs/performance.md's figures: five back-to-back runs of RoPE at Llama-3.1-8B's shapes and
one with the C library's heap (results/reference/rope-copy-cpu/), every RoPE preset
(`sweep=cpu_rope`) and the default sweep (`quick-cpu`), each a time over a same-size copy timed
in the same group."""

from __future__ import annotations

import json

import pandas as pd

from tools.figures.sources import _json, _rows, parts, pick, span

FIVE = [f"rope-copy-cpu/run{i}" for i in range(1, 6)]
SYSTEM = "rope-copy-cpu/heap-system"
PRESETS = "cpu_rope-cpu"
IMPLS = [  # the table's rows: impl, what it is
    ("native_inplace", "C, in place"),
    ("native", "C, out of place"),
    ("compiled", "`torch.compile` of the reference"),
    ("reference_out", "the eager formula into preallocated outputs"),
    ("reference", "posenc, eager"),
    ("hf", "transformers' `apply_rotary_pos_emb`"),
]
MODES = ("forward", "forward+backward")


def _over_copy(run: str, impl: str, mode: str, **eq) -> float | None:
    df = _rows(run)
    try:
        r = pick(df[df.status == "ok"], impl=impl, mode=mode, **eq)
    except LookupError:
        return None
    return r.p50_ms / r.copy_ms


def _each(impl: str, mode: str) -> list[float]:
    """The five runs' ratios (none where the implementation has no such mode)."""
    ratios = [_over_copy(run, impl, mode) for run in FIVE]
    return [r for r in ratios if r is not None]


def _fmt(values: list[float]) -> str:
    return span(values, "{:.2f}" if max(values) < 2.5 else "{:.1f}")


def runs() -> str:
    env = _json(FIVE[0], "env.json")
    flagged = sum(int(_rows(r)["contended"].fillna(False).astype(bool).sum()) for r in FIVE)
    return (
        f"Five runs at {env['git_sha'][:7]}, one after another on the idle VM "
        f"({flagged or 'no'} row{'s' if flagged > 1 else ''} marked contended)"
    )


def table() -> str:
    lines = ["| impl | forward | forward+backward |", "|---|---|---|"]
    for impl, what in IMPLS:
        cells = []
        for mode in MODES:
            ratios = _each(impl, mode)
            if not ratios:
                cells.append("(not differentiable)")
            elif impl == "native":  # the kernel: every run's ratio
                cells.append(", ".join(f"{r:.2f}" for r in sorted(ratios)))
            else:
                cells.append(_fmt(ratios))
        lines.append(f"| {impl} ({what}) | {cells[0]} | {cells[1]} |")
    return "\n".join(lines)


def kernel() -> tuple[str, ...]:
    fwd, both = _each("native", MODES[0]), _each("native", MODES[1])
    inplace, hf = _each("native_inplace", MODES[0]), _each("hf", MODES[0])
    per_run = [
        _over_copy(run, "hf", MODES[0]) / _over_copy(run, "native", MODES[0]) for run in FIVE
    ]
    return (
        f"({_fmt(fwd)}x forward, {_fmt(both)}x forward and backward)",
        f"faster than the copy in place ({_fmt(inplace)}x)",
        f"transformers' code takes {_fmt(hf)}x the copy forward: {_fmt(per_run)}x the C kernel in "
        "each run",
    )


def heap() -> str:
    """The same point with the C library's heap defaults (timing.cpu_heap=system), one run."""
    f = {(i, m): _over_copy(SYSTEM, i, m) for i in ("native", "hf", "reference", "compiled")
         for m in MODES}  # fmt: skip
    return (
        f"native {f['native', MODES[0]]:.1f}x the copy forward and {f['native', MODES[1]]:.1f}x "
        f"forward and backward, hf {f['hf', MODES[0]]:.1f}x and {f['hf', MODES[1]]:.1f}x, the "
        f"eager reference {f['reference', MODES[0]]:.1f}x and {f['reference', MODES[1]]:.1f}x, "
        f"compiled {f['compiled', MODES[0]]:.1f}x and {f['compiled', MODES[1]]:.1f}x"
    )


def _presets(impl: str, mode: str) -> pd.Series:
    """model -> impl's time over the copy at every preset of the committed cpu_rope run."""
    df = _rows(PRESETS)
    df = df[(df.impl == impl) & (df["mode"] == mode) & (df.status == "ok")]
    models = df.params.map(lambda p: json.loads(p)["model"])
    return pd.Series((df.p50_ms / df.copy_ms).to_numpy(), index=models.to_numpy())


OUTLIERS = ("gemma-4", "qwen3.5-27b")  # the presets not yet at the copy
PARTIAL = {"pythia-1.4b": "Pythia's", "deepseek-v4-flash": "DeepSeek-V4's"}


def presets_run() -> str:
    env, summary = _json(PRESETS, "env.json"), _json(PRESETS, "timing_summary.json")
    return (
        f"{len(_rows(PRESETS))} rows in {summary['wall_s'] / 60:.1f} minutes) times\nthe rope "
        f"case at each RoPE preset's heads, head dim, rotary width, pairing and schedule\n"
        f"(docs/models.md), L=2048, one thread, beside a same-size copy. Committed at "
        f"{env['git_sha'][:7]}"
    )


def presets() -> tuple[str, ...]:
    fwd, both = (_presets("native", m).drop(list(OUTLIERS)) for m in MODES)
    hf = (_presets("hf", MODES[0]) / _presets("native", MODES[0])).dropna()
    whole = hf.drop([*PARTIAL, "llama-4-scout", *OUTLIERS], errors="ignore")
    partial = " and ".join(f"{hf[m]:.1f}x" for m in PARTIAL)
    g = {(i, m): _presets(i, m)["gemma-4"] for i in ("native", "native_inplace") for m in MODES
         if not (i == "native_inplace" and m == MODES[1])}  # fmt: skip
    q = [_presets("native", m)["qwen3.5-27b"] for m in MODES]
    return (
        f"`native` runs {_fmt(fwd)}x the copy forward and {_fmt(both)}x forward and backward at "
        f"the\n  {len(fwd)} models other than gemma-4 and Qwen3.5",
        f"is {span(whole)}x slower than it forward on whole heads "
        f"({' and '.join(PARTIAL.values())} partial heads: {partial}; Llama 4's complex multiply "
        f"{hf['llama-4-scout']:.2f}x",
        f"(512-d heads, p-RoPE: {g['native', MODES[0]]:.2f}x forward, "
        f"{g['native_inplace', MODES[0]]:.2f}x in\n  place, {g['native', MODES[1]]:.2f}x forward "
        f"and backward) and Qwen3.5's partial rotary ({q[0]:.2f}x, {q[1]:.2f}x)",
    )


def default_sweep() -> str:
    """The default sweep's rope rows at L=2048: the kernel's share of a copy's bandwidth and its
    speedup over the eager reference."""
    df = _rows("quick-cpu")
    at = df[(df.case == "rope") & (df.seq_len == 2048) & (df.status == "ok")]
    pct = [pick(at, impl="native", mode=m).pct_copy_bw for m in MODES]
    up = [pick(at, impl="reference", mode=m).p50_ms / pick(at, impl="native", mode=m).p50_ms
          for m in MODES]  # fmt: skip
    return (
        f"`native` runs\nRoPE at L=2048 at {pct[0]:.0f}% of the copy's bandwidth forward and "
        f"{pct[1]:.0f}% forward+backward,\n{up[0]:.1f}x and {up[1]:.1f}x faster than the eager "
        "reference"
    )


SETTINGS = ()
FIGURES = {
    "runs": runs,
    "table": table,
    **parts(kernel, 3),
    "heap": heap,
    "presets_run": presets_run,
    **parts(presets, 3),
    "default_sweep": default_sweep,
}
