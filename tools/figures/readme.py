"""README.md's figures: the default run, the layer share, the probe, the conformance count and
make test's record, each written from the committed files that hold it."""

from __future__ import annotations

import json
import re
from functools import cache

import pandas as pd

from tools.figures import sources
from tools.figures.sources import REF, ROOT, _cpu, _json, _minutes, _pct, _rows, pct_span

# The layer share: the README's rows (label, case, seq_len) and columns (impl, heading).
LAYER = "layer-cpu"
LAYER_ROWS = [
    ("RoPE", "layer_rope", 2048),
    ("RoPE, decode step", "layer_rope_decode", 2048),
    ("ALiBi", "layer_alibi", 512),
    ("ALiBi", "layer_alibi", 2048),
    ("T5", "layer_t5", 2048),
    ("T5, decode step", "layer_t5_decode", 2048),
    ("Shaw key+value", "layer_shaw_kv", 2048),
]
LAYER_IMPLS = [
    ("reference", "eager"),
    ("compiled", "compiled"),
    ("sdpa", "SDPA (bias materialized)"),
    ("flex", "FlexAttention"),
]


def _shares(case: str, seq_len: int | None = None, impls=None) -> pd.DataFrame:
    """The forward rows of a layer case that carry a share, without a RoPE schedule."""
    df = _rows(LAYER)
    df = df[(df["case"] == case) & (df["mode"] == "forward") & df["pe_share"].notna()]
    plain = df["params"].map(lambda p: json.loads(p).get("rope_scaling", "none") == "none")
    df = df[plain & ((df["seq_len"] == seq_len) if seq_len else True)]
    return df[df["impl"].isin(impls)] if impls else df


def layer_table() -> str:
    head = ["encoding", "L"] + [h for _, h in LAYER_IMPLS]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for label, case, length in LAYER_ROWS:
        rows = _shares(case, length).set_index("impl")
        cells = []
        for impl, _ in LAYER_IMPLS:
            if impl not in rows.index:
                cells.append("")
                continue
            r = rows.loc[impl]
            cells.append(
                f"{_pct(r.pe_share)}% [{_pct(r.pe_share_lo)}, {_pct(r.pe_share_hi)}]"
                f" / {_pct(r.pe_share_best)}%"
            )
        lines.append(f"| {label} | {length} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _bias_cases(decode: bool) -> list[str]:
    bias = [c for _, c, _ in LAYER_ROWS if "rope" not in c]
    return [c for c in bias if c.endswith("_decode") == decode]


def layer_run() -> str:
    env, summary, df = _json(LAYER, "env.json"), _json(LAYER, "timing_summary.json"), _rows(LAYER)
    threads = set(df["threads"].dropna())
    contended = int(df["contended"].fillna(False).astype(bool).sum())
    return (
        f"`python -m bench sweep=layer` at {env['git_sha'][:7]}"
        f" ([`results/reference/{LAYER}/`](results/reference/{LAYER}/report.md);\n"
        f"{_cpu(env)}, torch {env['torch']}, "
        f"{'one thread' if threads == {1} else 'threads ' + str(sorted(threads))}, "
        f"{len(df)} rows in {summary['wall_s'] / 60:.1f} min, "
        f"{contended or 'none'} contended)"
    )


def layer_rope() -> str:
    decode = _shares("layer_rope_decode", 2048, ["reference", "compiled"])["pe_share"]
    prefill = _shares("layer_rope", None, ["reference", "compiled"])["pe_share"]
    return f"RoPE is {pct_span(decode)} of a decode step at 2048, {pct_span(prefill)} of prefill"


def _at_2048(impls, cases) -> pd.DataFrame:
    return pd.concat([_shares(c, 2048, impls) for c in cases])


def layer_bias() -> str:
    """A bias's share on its own path, and against the fastest layer without one."""
    prefill, decode = _bias_cases(False), _bias_cases(True)
    sdpa = _at_2048(["sdpa"], prefill)["pe_share"]
    per_call = pd.concat(  # the paths that compute the bias per call: eager T5 and Shaw, Flex
        [
            _at_2048(["reference", "compiled"], ["layer_t5", "layer_shaw_kv"]),
            _at_2048(["flex"], prefill),
        ]
    )["pe_share"]
    best, best_decode = (_at_2048(None, c)["pe_share_best"] for c in (prefill, decode))
    return (
        f"(SDPA: {pct_span(sdpa)} at 2048), {pct_span(per_call)} where it computes the bias\n"
        f"per call (T5, Shaw, Flex's score_mod); against the fastest NoPE layer (SDPA's fused "
        f"causal path)\nit takes {pct_span(best)} of prefill at 2048 "
        f"(decode {pct_span(best_decode)})"
    )


NAMES = {"alibi": "ALiBi", "t5": "T5", "rope": "RoPE", "sdpa": "SDPA", "flex": "Flex"}


def layer_below_zero() -> str:
    """The forward shares whose whole interval lies below 0, as "ALiBi decode, SDPA, L=512"."""
    df = _rows(LAYER)
    below = df[(df["mode"] == "forward") & (df["pe_share_hi"] < 0)]
    cells = []
    for case, impl, length in below[["case", "impl", "seq_len"]].values:
        family = case.removeprefix("layer_").removesuffix("_decode")
        step = " decode" if case.endswith("_decode") else ""
        cells.append(f"{NAMES.get(family, family)}{step}, {NAMES.get(impl, impl)}, L={length}")
    count = {0: "No share", 1: "One share"}.get(len(cells), f"{len(cells)} shares")
    return f"{count} lies wholly below 0 ({'; '.join(cells)})"


# The probe: results/reference/probe-cpu and probe-modern.
PROBE, MODERN = "probe-cpu", "probe-modern"
TUTORIAL_5_1 = {  # the tutorial's comparison table, section 5.1, by our encoding's name
    "sinusoidal": "absolute: poor on long sequences",
    "learnable": "absolute: poor on long sequences",
    "shaw": "relative: better generalization",
    "rope": "perfect length extrapolation",
}
PROBE_LINES = ["sinusoidal", "learnable", "shaw", "rope", "rope+yarn", "alibi", "t5", "nope"]


@cache
def _probe(run: str) -> pd.DataFrame:
    from bench.probe.report import load, summary

    return summary(load(REF / run)).set_index(["task", "line", "eval_len"])


def _score(run: str, task: str, line: str, length: int) -> str:
    r = _probe(run).loc[(task, line, length)]
    if pd.notna(r.get("na")) and pd.isna(r["mean"]):
        return "n/a"
    return "0" if round(r["mean"], 2) == 0 else f"{r['mean']:.2f}"


def probe_table() -> str:
    lines = [
        "| encoding | tutorial 5.1 | lookback (offset) | recall (distance) | copy (order) |",
        "|---|---|---|---|---|",
    ]
    for line in PROBE_LINES:
        cells = [
            f"{_score(PROBE, t, line, 32)} -> {_score(PROBE, t, line, 256)}"
            for t in ("lookback", "recall", "copy")
        ]
        name = "nope (none)" if line == "nope" else line
        lines.append(f"| {name} | {TUTORIAL_5_1.get(line, '')} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def probe_run() -> str:
    env = _json(PROBE, "env.json")
    seeds = _rows_probe(PROBE)["seed"].nunique()
    wall = env["wall_s"]
    return (
        f"(`python -m bench.probe` at {env['git_sha'][:7]}, {_cpu(env)}, "
        f"{int(wall // 60)} min {round(wall % 60)} s), mean of {seeds} seeds at 1x -> 8x"
    )


@cache
def _rows_probe(run: str) -> pd.DataFrame:
    return pd.read_csv(REF / run / "probe.csv")


def probe_modern() -> str:
    env = _json(MODERN, "env.json")
    shas = [e["git_sha"][:7] for e in env.get("earlier", [])][::-1]
    first, later = (shas[0], [*shas[1:], env["git_sha"][:7]]) if shas else (env["git_sha"][:7], [])
    s = lambda task, line, n: _score(MODERN, task, line, n)  # noqa: E731
    return (
        f"{first}; 2025's schemes at {', '.join(later)}) adds the encodings since 2022 and "
        "Ruoss et al.'s\nstring tasks: at 8x KERPLE holds lookback "
        f"({s('lookback', 'kerple', 256)}) "
        f"and recall ({s('recall', 'kerple', 256)}), and FoX's forget gate started\nopen, with no "
        f"positions, holds both ({s('lookback', 'fox_open', 256)}, {s('recall', 'fox_open', 256)}) "
        f"and copies best at 2x ({s('copy', 'fox_open', 64)}; KERPLE {s('copy', 'kerple', 64)})"
    )


def probe_ranks() -> str:
    from bench.probe.report import load, reciprocal_rank

    names = {"nope": "NoPE", "alibi": "ALiBi", "t5": "T5", "rope": "RoPE"}
    ranks = reciprocal_rank(load(REF / MODERN))  # best first
    return ", ".join(
        f"{names.get(e, e)} {m:.2f} ({p:.2f})"
        for e, m, p in ranks[["encoding", "mrr", "published"]].values
    )


# The commands and the tests.
def quick_run() -> str:
    run = "quick-cpu"
    env, summary = _json(run, "env.json"), _json(run, "timing_summary.json")
    return (
        f"the default sweep, {len(_rows(run))} rows in {_minutes(summary['wall_s'])} on "
        f"{env['cpu_count']} CPU cores"
    )


def probe_minutes() -> str:
    return (
        f"past its training length (below), {_json(PROBE, 'env.json')['wall_s'] / 60:.1f} minutes"
    )


def conformance() -> str:
    text = (ROOT / "docs" / "models.md").read_text()
    m = re.search(
        r"transformers (\d+\.\d+)\.\d+: (\d+) model types rotate .*? reproduces (\d+) "
        r"\([\d.]+%\), refuses \d+ in one line, and is wrong on (\d+)",
        text,
    )
    version, total, ok, wrong = m.groups()
    verdict = "none wrongly" if wrong == "0" else f"{wrong} wrongly"
    return f"{ok} of {total} RoPE model types of transformers {version} reproduced, {verdict}"


def tests_line() -> str:
    r = json.loads(sources.TESTS.read_text())
    return f"{r['passed']} in {_minutes(r['seconds'])} on {r['cores']} cores at {r['commit']}"


README_FIGURES = {
    "quick_run": quick_run,
    "probe_minutes": probe_minutes,
    "conformance": conformance,
    "layer_run": layer_run,
    "layer_table": layer_table,
    "layer_rope": layer_rope,
    "layer_bias": layer_bias,
    "layer_below_zero": layer_below_zero,
    "probe_run": probe_run,
    "probe_table": probe_table,
    "probe_modern": probe_modern,
    "probe_ranks": probe_ranks,
    "tests_line": tests_line,
}


# Numbers the README states that are settings, not measurements: each as the code or the run's
# configuration gives it (tests/test_figures.py checks each against its source).
def _factor() -> str:
    from bench.run.check import FACTOR

    return f"{FACTOR:g}"


def _level() -> str:
    import inspect

    from bench.run.samples import Timing

    return f"{inspect.signature(Timing.median_ci).parameters['level'].default:.0%}"


def _rank_factor() -> str:
    import inspect

    from bench.probe.report import reciprocal_rank

    return f"{inspect.signature(reciprocal_rank).parameters['factor'].default}"


def _decode_batch() -> int:
    df = _rows(LAYER)
    return int(df.loc[df["case"].str.endswith("_decode"), "batch"].max())


def _probe_factor() -> int:
    df = _rows_probe(PROBE)
    return int(df["eval_len"].max() // df["train_len"].min())


README_SETTINGS = {
    "at most 3x the reference's own": lambda: f"at most {_factor()}x the reference's own",
    "with its 95% interval": lambda: f"with its {_level()} interval",
    "medians come with their 95% interval": lambda: f"medians come with their {_level()} interval",
    "(decode: 8 rows": lambda: f"(decode: {_decode_batch()} rows",
    "RoPE falls by 8x": lambda: f"RoPE falls by {_probe_factor()}x",
    "Ranked at 2x": lambda: f"Ranked at {_rank_factor()}x",
}
