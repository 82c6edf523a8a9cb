"""Every figure README.md quotes, and docs/kernels.md's compile and host tables, written from what
holds it: the reference runs' rows (results/reference/<run>/: results.csv or
probe.csv, env.json, timing_summary.json), docs/models.md's conformance section (written by
`python -m bench.conformance --markdown`), the record of the last full `make test`
(results/reference/tests.json), the compile audit's tables (results/gpu-compile/*.csv) and the
host audit's counts (`python -m tools.audit.host`, machine-independent).

    python -m tools.figures                  # each figure as the README must quote it
    python -m tools.figures --check          # the ones a page does not quote so (exit 1)
    python -m tools.figures --record-tests   # after `make test` on a clean tree: its record

tests/test_figures.py checks that each page quotes each as written here, and that the README
holds no other measured figure. A new run: commit its folder, point the figure at it, paste.
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import re
import sys
from functools import cache
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
REF = ROOT / "results" / "reference"
README = ROOT / "README.md"
LAST_RUN = ROOT / ".pytest_cache" / "v" / "posenc-bench" / "run"  # written by tests/_record.py
TESTS = REF / "tests.json"


@cache
def _rows(run: str) -> pd.DataFrame:
    return pd.read_csv(REF / run / "results.csv")


def _json(run: str, name: str) -> dict:
    return json.loads((REF / run / name).read_text())


def _minutes(seconds: float) -> str:
    return f"{int(seconds // 60)}:{round(seconds % 60):02d}"


def _pct(x: float) -> str:
    return f"{round(100 * x)}"


def _cpu(env: dict) -> str:
    """The machine as the README names it: 2-core AMD EPYC VM."""
    name = env["cpu"].replace("Intel(R) ", "").replace("(R)", "").replace(" Processor", "")
    return f"{env['cpu_count']}-core {name} VM"


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


def _span(values) -> str:
    lo, hi = (round(100 * v) for v in (min(values), max(values)))
    return f"{lo}%" if lo == hi else f"{lo} to {hi}%" if lo < 0 else f"{lo}-{hi}%"


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
    return f"RoPE is {_span(decode)} of a decode step at 2048, {_span(prefill)} of prefill"


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
        f"(SDPA: {_span(sdpa)} at 2048), {_span(per_call)} where it computes the bias\n"
        f"per call (T5, Shaw, Flex's score_mod); against the fastest NoPE layer (SDPA's fused "
        f"causal path)\nit takes {_span(best)} of prefill at 2048 (decode {_span(best_decode)})"
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
    r = json.loads(TESTS.read_text())
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


# docs/kernels.md: the compile audit's table at what `sweep=gpu` runs.
AUDIT = ROOT / "results" / "gpu-compile"
TRITONS = ("3.9.0", "3.6.0")
FAMILY_NAMES = {
    "alibi": "ALiBi",
    "t5": "T5",
    "shaw_bias": "Shaw scalar",
    "shaw_kv": "Shaw key + value",
    "fox": "FoX",
}
COMPILE_GROUPS = [  # (label, kernel, families)
    ("forward", "_relbias_fwd_kernel", ("alibi", "t5", "shaw_bias", "fox")),
    ("forward", "_relbias_fwd_kernel", ("shaw_kv",)),
    ("delta (backward's row term)", "_relbias_bwd_delta_kernel", None),
    ("dk/dv", "_relbias_bwd_dkdv_kernel", ("alibi",)),
    ("dk/dv", "_relbias_bwd_dkdv_kernel", ("t5", "shaw_bias", "shaw_kv", "fox")),
    ("dq", "_relbias_bwd_dq_kernel", ("alibi", "fox")),
    ("dq", "_relbias_bwd_dq_kernel", ("t5", "shaw_bias")),
    ("dq", "_relbias_bwd_dq_kernel", ("shaw_kv",)),
]


@cache
def _audit(triton: str) -> pd.DataFrame:
    df = pd.read_csv(AUDIT / f"triton-{triton}.csv", keep_default_na=False, na_values=[""])
    at = (df["target"] == "sm_90a") & (df["dtype"] == "bfloat16") & (df["head_dim"] == 128)
    return df[at & (df["variant"] == "default") & df["default_tiles"]]


def _one(values) -> str:
    """A value the rows share, or every value they hold, in order of first appearance."""
    return " / ".join(dict.fromkeys(str(v) for v in values))


def _loops(rows: pd.DataFrame) -> str:
    def of(r) -> str:
        nested = f" +{r.nested_loops}" if r.nested_loops else ""
        return f"{r.pipelined_loops} of {r.dot_loops}{nested}"

    full = _one(of(r) for r in rows[~rows["causal"]].itertuples())
    causal = _one(of(r) for r in rows[rows["causal"]].itertuples())
    if not full or causal in (full, ""):
        return full or causal
    return f"{full} (causal {causal})"


def _span_of(values: pd.Series) -> str:
    lo, hi = values.min(), values.max()
    return f"{lo}" if lo == hi else f"{lo}-{hi}"


def _narrowest(shapes) -> str:
    every = {s for v in shapes if isinstance(v, str) for s in v.split()}
    return min(every, key=lambda s: int(s.split("n")[1])) if every else "-"


def _tiles(r) -> str:
    m, n = r.tiles.split("x")
    return (
        f"{m} rows ({r.num_warps})" if n == "None" else f"{m} x {n} ({r.num_warps}, {r.num_stages})"
    )


def compile_table() -> str:
    head = [
        "kernel",
        "tiles (warps, stages)",
        f"registers ({' / '.join(t.rsplit('.', 1)[0] for t in TRITONS)})",
        "spills",
        "key loops pipelined",
        "dots on wgmma",
        "score products",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for label, kernel, families in COMPILE_GROUPS:
        parts = []
        for triton in TRITONS:
            df = _audit(triton)
            df = df[df["kernel"] == kernel]
            parts.append(df[df["family"].isin(families)] if families else df)
        both = pd.concat(parts)
        if families:
            label = f"{label}, {' / '.join(FAMILY_NAMES[f] for f in families)}"
        tiles = _one(_tiles(r) for r in both.itertuples())
        regs = " / ".join(_span_of(p["registers"]) for p in parts)
        dots = both["dots"].sum()
        wgmma = "no dots" if not dots else "all" if both["wgmma_dots"].sum() == dots else "some"
        loops = "no dots" if not dots else _one(_loops(p) for p in parts)
        cells = [
            label,
            tiles,
            regs,
            str(both["spill_stores"].max()),
            loops,
            wgmma if dots else "-",
            _narrowest(both["loop_wgmma"]),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    lines.append(_rope_row())
    return "\n".join(lines)


def narrow_count() -> str:
    """How many sm_90a attention kernels at default tiles keep an m64n16 product in a key loop."""
    counts = []
    for triton in TRITONS:
        df = pd.read_csv(AUDIT / f"triton-{triton}.csv", keep_default_na=False, na_values=[""])
        df = df[(df["target"] == "sm_90a") & df["kernel"].str.startswith("_relbias")]
        df = df[df["default_tiles"]]
        counts.append(f"{(df['narrow_wgmma'] > 0).sum()} of the {len(df)}")
    return f"{_one(counts)} sm_90a attention kernels at default tiles hold m64n16 products"


def host_table() -> str:
    """docs/kernels.md's host work per call: the counts of `python -m tools.audit.host` (its
    launches stubbed under Triton's interpreter, which this process turns on if it can)."""
    os.environ.setdefault("TRITON_INTERPRET", "1")
    from tools.audit.host import measure

    head = ["call", "part", "Triton kernels", "torch operations besides them", "allocations"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in measure(reps=2):  # the counts; its timings (a CPU proxy) are not quoted
        cells = [r["call"], r["part"], r["kernels"], r["launches"], r["allocs"]]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines)


PASSES = {
    "_relbias_fwd_kernel": "forward",
    "_relbias_bwd_dkdv_kernel": "dk/dv",
    "_relbias_bwd_dq_kernel": "dq",
}


def _per_score(loop: str, scores: float) -> str:
    insts, fp32, mufu, _ = (int(n) for n in loop.split("/"))
    return f"{insts / scores:.1f} / {fp32 / scores:.1f} / {mufu / scores:.2f}"


def loop_table() -> str:
    """What one key loop's iteration issues per score, per pass and family (Triton 3.9, not
    causal where the family is defined so): its instructions, FP32 and MUFU instructions over
    the scores a thread holds."""
    df = _audit(TRITONS[0])
    df = df[df["kernel"].isin(PASSES)].sort_values("causal", kind="stable")
    df = df.drop_duplicates(["kernel", "family"])  # the first: not causal where there is one
    head = ["pass", "family", "tile (warps)", "scores a thread", "outside the band", "the band"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for kernel, name in PASSES.items():
        for r in df[df["kernel"] == kernel].itertuples():
            m, n = (int(x) for x in r.tiles.split("x"))
            scores = m * n / (32 * r.num_warps)
            loops = r.loop_sass.split()
            cells = [name, FAMILY_NAMES[r.family], f"{m} x {n} ({r.num_warps})", f"{scores:g}"]
            cells += [_per_score(loops[0], scores), _per_score(loops[-1], scores)]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _makespan(work: list[int], slots: int) -> int:
    """The last program's end when each program starts on the first slot to free (a slot: one
    of the programs an SM holds at once), in grid order."""
    free = [0] * slots
    for w in work:
        heapq.heapreplace(free, free[0] + w)
    return max(free)


def _causal_work(heads: int, blocks: int, block_m: int, block_n: int, grouped: bool) -> list[int]:
    """Each query block's key blocks under a causal mask, in the grid's order: a head's blocks
    adjacent (NATURAL), or heaviest first eight heads at a time (LAST_FIRST, HEAD_GROUP 8)."""
    cost = [-(-(i + 1) * block_m // block_n) for i in range(blocks)]
    if not grouped:
        return cost * heads
    order = []
    for g0 in range(0, heads, 8):
        order += [cost[i] for i in reversed(range(blocks)) for _ in range(min(8, heads - g0))]
    return order


def grid_order() -> str:
    """The causal forward's waves under both orders (128 x 64 tiles, 132 SMs): the makespan
    over the ideal (total work / slots), per shape and programs an SM."""
    head = ["B x H", "L", "slots", "a head's blocks adjacent", "heaviest first", "gain"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for b, h, length in ((4, 16, 4096), (1, 32, 8192), (8, 32, 2048), (1, 16, 4096)):
        for slots in (132, 264):
            natural, grouped = (
                _causal_work(b * h, length // 128, 128, 64, g) for g in (False, True)
            )
            ideal = sum(natural) / slots
            a, c = _makespan(natural, slots), _makespan(grouped, slots)
            cells = [f"{b} x {h}", str(length), str(slots), f"{a / ideal:.2f}", f"{c / ideal:.2f}"]
            lines.append("| " + " | ".join(cells + [f"{100 * (a / c - 1):.0f}%"]) + " |")
    return "\n".join(lines)


def alibi_fp32() -> str:
    """The float instructions of ALiBi's forward at the default tile, per Triton."""
    counts = []
    for triton in TRITONS:
        df = _audit(triton)
        at = (df["kernel"] == "_relbias_fwd_kernel") & (df["family"] == "alibi") & ~df["causal"]
        counts.append(
            f"{_one(df.loc[at, 'fp32_insts'])} under {'Triton ' if not counts else ''}"
            f"{triton.rsplit('.', 1)[0]}"
        )
    return f"(`fp32_insts`, static): {' and '.join(counts)} at the default tile"


def _rope_row() -> str:
    """RoPE's kernel as sweep=gpu runs it: bshd, 32 query and 8 kv heads, forward and backward."""
    parts = []
    for triton in TRITONS:
        df = pd.read_csv(AUDIT / f"triton-{triton}.csv", keep_default_na=False, na_values=[""])
        at = (df["target"] == "sm_90a") & (df["dtype"] == "bfloat16") & (df["head_dim"] == 128)
        at &= df["kernel"].str.startswith("_rope_kernel") & (df["tiles"] == "heads 32+8")
        parts.append(df[at & (df["variant"] == "bshd half-split full pos=none")])
    both = pd.concat(parts)
    cells = [
        f"RoPE forward and backward (bshd, GQA 32/8: {_one(both['vector_global_insts'])} 128-bit"
        " accesses)",
        f"one token per program ({_one(both['num_warps'])} warps)",
        " / ".join(_span_of(p["registers"]) for p in parts),
        str(both["spill_stores"].max()),
        "no dots",
        "-",
        "-",
    ]
    return "| " + " | ".join(cells) + " |"


def record_tests() -> str:
    """results/reference/tests.json from the last `make test`: refused in one line unless it
    ran every test of the suite, all passed, on a tree with no change."""
    if not LAST_RUN.exists():
        return f"no record of a test run ({LAST_RUN.relative_to(ROOT)}): run make test first"
    run = json.loads(LAST_RUN.read_text())
    why = (
        "it did not run the whole suite as make test does"
        if not run["whole_suite"]
        else f"{run['failed']} tests failed"
        if run["failed"]
        else "its tree had uncommitted changes"
        if run["dirty"]
        else ""
    )
    if why:
        return f"not recorded: {why}"
    keep = ("commit", "passed", "seconds", "cores", "python", "torch")
    TESTS.write_text(json.dumps({k: run[k] for k in keep}, indent=2) + "\n")
    return f"recorded {TESTS.relative_to(ROOT)}: {tests_line()}"


PAGES = {  # each page -> its figures
    "README.md": README_FIGURES,
    "docs/kernels.md": {
        "compile_table": compile_table,
        "narrow_count": narrow_count,
        "host_table": host_table,
        "alibi_fp32": alibi_fp32,
        "loop_table": loop_table,
        "grid_order": grid_order,
    },
}


def flat(text: str) -> str:
    """Text with its line breaks and runs of spaces as single spaces: a figure may wrap."""
    return " ".join(text.split())


def misquoted(text: str, page: str = "README.md") -> list[str]:
    """The figures of `page` that `text` (its contents) does not quote as written here."""
    text = flat(text)
    return [name for name, figure in PAGES[page].items() if flat(figure()) not in text]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.figures", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--check", action="store_true", help="list what the README misquotes")
    parser.add_argument("--record-tests", action="store_true", help="record the last make test")
    args = parser.parse_args(argv)
    if args.record_tests:
        message = record_tests()
        print(message)
        return 0 if message.startswith("recorded") else 1
    wrong = 0
    for page, figures in PAGES.items():
        bad = misquoted((ROOT / page).read_text(), page)
        wrong += len(bad)
        for name, figure in figures.items():
            if not args.check or name in bad:
                print(f"--- {page}: {name}{' (not quoted as written)' if name in bad else ''}")
                print(figure())
    return 1 if args.check and wrong else 0


if __name__ == "__main__":
    sys.exit(main())
