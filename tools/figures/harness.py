"""docs/harness.md's figures: the committed runs behind its sweep table, the decode, packed,
serving and layer-share sections, and the threads-under-contention table
(results/reference/threads-cpu/)."""

from __future__ import annotations

import json
import os
import re
from functools import cache

import pandas as pd

from tools.figures import gpu, performance
from tools.figures.readme import LAYER
from tools.figures.sources import (
    _cpu,
    _json,
    _minutes,
    _rows,
    contended,
    g3,
    jit_stdout,
    parts,
    pct_span,
    pick,
    report_rows,
    span,
)


def sweep_time(run: str) -> str:
    """A sweep's committed run: its rows and wall time, its commit and folder."""
    env, summary = _json(run, "env.json"), _json(run, "timing_summary.json")
    return (
        f"{len(_rows(run))} rows in {_minutes(summary['wall_s'])} at {env['git_sha'][:7]} "
        f"(results/reference/{run}/)"
    )


GPU_SWEEPS = ("quick_gpu", "gpu", "gpu_tiles", "cpu_vs_cuda")


@cache
def gpu_minutes() -> dict[str, float]:
    """Each GPU sweep's minutes as tools.gpurun's model estimates them from the plan and the
    compile audit (docs/gpu.md)."""
    if os.environ.get("TRITON_INTERPRET") == "1":
        code = "import json; from tools.figures import harness as h; "
        return json.loads(jit_stdout(code + "print(json.dumps(h.gpu_minutes()))"))
    from tools.gpurun.estimate import compile_seconds, sweep_estimate
    from tools.gpurun.parts import Part

    seconds = compile_seconds()
    parts = {s: Part(s, 600, 0, ("-m", "bench", f"sweep={s}")) for s in GPU_SWEEPS}
    return {s: sweep_estimate(part, seconds).seconds / 60 for s, part in parts.items()}


def gpu_time(sweep: str) -> str:
    return f"about {max(1, round(gpu_minutes()[sweep]))} min by tools.gpurun's estimate"


SWEEPS = {  # the sweep table's time cells
    "quick": lambda: sweep_time("quick-cpu"),
    "seed_5_2": lambda: sweep_time("seed_5_2-cpu"),
    "long_context": lambda: sweep_time("long_context-cpu"),
    "layer": lambda: sweep_time(LAYER),
    "cpu_rope": lambda: sweep_time("cpu_rope-cpu"),
    "quick_gpu": lambda: gpu_time("quick_gpu"),
    "gpu": lambda: gpu_time("gpu"),
    "gpu_tiles": lambda: gpu_time("gpu_tiles"),
    "cpu_vs_cuda": lambda: gpu_time("cpu_vs_cuda"),
}


# Decoding and packed documents.
DECODE, PACKED = "decode-cpu", "packed-cpu"
BIAS_IMPLS = ("reference", "sdpa", "sdpa_nobias", "flex")
SEQUENCE_ROWS = [  # label, point in words, run, what picks the rows
    ("alibi_decode, full", "B=16, one query, caches of 4096, H=16, Hk=4", DECODE,
     dict(case="alibi_decode", kv_cache="full", batch=16)),
    ("alibi_decode, ragged", "the same, lengths in [2048, 4096]", DECODE,
     dict(case="alibi_decode", kv_cache="ragged", batch=16)),
    ("t5_packed, causal", "8 documents in 2048 tokens, H=8, Hk=2", PACKED,
     dict(case="t5_packed", documents=8, causal=True)),
    ("t5_packed, causal", "1 document of 2048", PACKED,
     dict(case="t5_packed", documents=1, causal=True)),
]  # fmt: skip


def _run_line(run: str) -> str:
    wall = _json(run, "timing_summary.json")["wall_s"]
    took = f"{round(wall)} s" if wall < 100 else f"{wall / 60:.1f} min"
    return f"`results/reference/{run}/` ({len(_rows(run))} rows, {took})"


def sequences_run() -> str:
    d, p = (_json(r, "env.json") for r in (DECODE, PACKED))
    return (
        f"`python -m bench sweep=decode` at commit {d['git_sha'][:7]} and `sweep=packed` at "
        f"{p['git_sha'][:7]}, committed in\n{_run_line(DECODE)} and {_run_line(PACKED)}, "
        f"{_cpu(d).removeprefix('2-core ')}, float32, "
        f"{contended(DECODE) if contended(DECODE) == contended(PACKED) else 'some contended'}"
    )


def _cell(r: pd.Series) -> str:
    """The report's cell, its median in three digits (1220, not 1.22e+03)."""
    return re.sub(r"\d\.\d+e\+\d+", g3(r.p50_ms), r.cell, count=1)


def sequences() -> str:
    lines = [
        "| case | point | eager | SDPA (bias + mask) | SDPA, mask only | FlexAttention |",
        "|---|---|---|---|---|---|",
    ]
    for label, point, run, eq in SEQUENCE_ROWS:
        df = report_rows(run)
        df = df[df["mode"] == "forward"]
        cells = [_cell(pick(df, impl=i, **eq)) for i in BIAS_IMPLS]
        cells[0] = cells[0].removesuffix(" (1.00x)")
        lines.append(f"| {label} | {point} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


# The serving step.
SERVING = "serving-cpu"
SERVING_ROWS = [  # label, point in words, case, what picks the rows
    ("rope_cache, half-split", "16 sequences, 2 prefilling 64 tokens (142 tokens), H=8, Hk=2, "
     "D=128", "rope_cache", dict(rope_form="half_split", batch=16)),
    ("rope_cache, interleaved", "the same", "rope_cache", dict(rope_form="interleaved", batch=16)),
    ("rope_cache, partial (R = D/2)", "the same", "rope_cache",
     dict(rope_form="partial", batch=16)),
    ("rope_cache, M-RoPE tables", "the same", "rope_cache", dict(rope_form="mrope", batch=16)),
    ("t5_paged", "8 sequences, one query, caches of 512-1024 in blocks of 16", "t5_paged",
     dict(batch=8)),
    ("shaw_bias_paged", "the same", "shaw_bias_paged", dict(batch=8)),
]  # fmt: skip
SERVING_IMPLS = ("eager", "compiled", "flex_paged")  # the columns (paged: eager is `reference`)


def _serving_cell(r: pd.Series, speedup: bool) -> str:
    text = g3(r.p50_ms)
    inner = [f"{r.speedup:.2f}x"] if speedup else []
    inner += [f"{r.pct_copy_bw:.0f}%"] if r.case == "rope_cache" else []
    return f"{text} ({'; '.join(inner)})" if inner else text


def serving_run() -> str:
    env = _json(SERVING, "env.json")
    return (
        f"`python -m bench sweep=serving` (with TRITON_INTERPRET=1) at commit "
        f"{env['git_sha'][:7]},\n{_run_line(SERVING)}; {_cpu(env).removeprefix('2-core ')}, "
        f"float32, one thread, {contended(SERVING)}"
    )


def serving() -> str:
    df = report_rows(SERVING)
    df = df[(df["mode"] == "forward") & (df.status == "ok")]
    lines = [
        "| case | point | eager | torch.compile | FlexAttention (paged) |",
        "|---|---|---|---|---|",
    ]
    for label, point, case, eq in SERVING_ROWS:
        cells = []
        for impl in SERVING_IMPLS:
            impl = "reference" if impl == "eager" and case != "rope_cache" else impl
            try:
                r = pick(df, case=case, impl=impl, **eq)
            except LookupError:
                cells.append("")
                continue
            cells.append(_serving_cell(r, impl not in ("eager", "reference")))
        lines.append(f"| {label} | {point} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def serving_prose() -> tuple[str, ...]:
    df = report_rows(SERVING)
    compiled = df[(df.case == "rope_cache") & (df.impl == "compiled") & (df.status == "ok")]
    interpreted = df[df.interpreted.astype(bool) & (df.status == "ok")]
    return (
        f"cost {span(compiled.speedup)}x what one compiled graph does",
        f"(their rows are marked `i`: {span(interpreted.p50_ms, '{:.0f}')} ms a call of "
        "interpretation",
    )


# The encoding's share of a layer (the README quotes the table).
def layer_run() -> str:
    env, summary, df = _json(LAYER, "env.json"), _json(LAYER, "timing_summary.json"), _rows(LAYER)
    decode = int(df.loc[df.case.str.endswith("_decode"), "batch"].max())
    return (
        f"`python -m bench sweep=layer` at {env['git_sha'][:7]}, `results/reference/{LAYER}/` "
        f"({_cpu(env)},\none thread, {len(df)} rows in {summary['wall_s'] / 60:.1f} min, "
        f"{contended(LAYER)}, at least {int(df.n_samples.min())} samples a row; d_model 512, 8\n"
        f"query and 2 kv heads, SwiGLU 1792, float32, B=1; decode: {decode} rows, ragged caches)"
    )


def _forward(case: str, impls=None, length=None) -> pd.DataFrame:
    """A layer case's forward rows that carry a share (of impls, at length, where given)."""
    df = _rows(LAYER)
    df = df[(df.case == case) & df.pe_share.notna() & (df["mode"] == "forward")]
    df = df[df.impl.isin(impls)] if impls else df
    return df[df.seq_len == length] if length else df


def layer_rope() -> str:
    df = _rows(LAYER)
    prefill = df[df.case.isin(["layer_rope", "layer_mrope"]) & df.pe_share.notna()]
    prefill = prefill[prefill.impl.isin(["reference", "compiled"])]
    step = _forward("layer_rope_decode", ["reference"])
    compiled = _forward("layer_rope_decode", ["compiled"])
    lo, hi = round(100 * prefill.pe_share_lo.min()), round(100 * prefill.pe_share_hi.max())
    return (
        f"is {pct_span(prefill.pe_share)} of a prefill layer, forward and\n  forward+backward "
        f"(intervals {lo} to +{hi} points), and {pct_span(step.pe_share)} of an eager decode step, "
        f"whose\n  projections and attention are small (compiled: {pct_span(compiled.pe_share)})"
    )


def layer_absolute() -> str:
    r = _forward("layer_sinusoidal", ["reference"], 2048).iloc[0]
    return (
        f"(sinusoidal {r.pe_share:.0%} [{100 * r.pe_share_lo:.0f}, {100 * r.pe_share_hi:.0f}] "
        "at 2048)"
    )


BIAS = ["layer_alibi", "layer_t5", "layer_shaw_bias", "layer_shaw_kv"]


def layer_bias() -> str:
    own = {n: pd.concat([_forward(c, length=n) for c in BIAS]) for n in (512, 2048)}
    return (
        f"takes {pct_span(own[512].pe_share)} of the layer at L=512 and "
        f"{pct_span(own[2048].pe_share)} at 2048\n  (forward); against the fastest layer without "
        "an encoding, "
        f"{pct_span(own[512].pe_share_best)} and {pct_span(own[2048].pe_share_best)}"
    )


def _saving(case: str, impl: str, length: int) -> str:
    """How much faster impl makes the layer than eager, from one side-by-side group."""
    df = _rows(LAYER)
    df = df[(df.case == case) & (df["mode"] == "forward") & (df.seq_len == length)]
    plain = df.params.map(lambda p: json.loads(p).get("rope_scaling", "none") == "none")
    df = df[plain]
    ref, other = (pick(df, impl=i) for i in ("reference", impl))
    return f"{1 - other.p50_ms / ref.p50_ms:.0%}"


def layer_savings() -> str:
    s = _saving
    return (
        f"SDPA makes T5's layer {s('layer_t5', 'sdpa', 2048)} faster than eager at 2048 (Shaw's "
        f"bias layer {s('layer_shaw_bias', 'sdpa', 2048)}, ALiBi's "
        f"{s('layer_alibi', 'sdpa', 2048)}), `torch.compile` T5's "
        f"{s('layer_t5', 'compiled', 2048)}, FlexAttention ALiBi's "
        f"{s('layer_alibi', 'flex', 512)} at 512"
    )


def layer_decode() -> str:
    alibi = {n: _forward("layer_alibi_decode", ["sdpa"], n).iloc[0] for n in (512, 2048)}
    others = pd.concat([_forward(c, ["sdpa"]) for c in ("layer_t5_decode",
                                                          "layer_shaw_bias_decode")])  # fmt: skip
    a = {
        n: f"{r.pe_share:.0%} [{100 * r.pe_share_lo:.0f}, {100 * r.pe_share_hi:.0f}]"
        for n, r in alibi.items()
    }
    return (
        f"is {a[512]} of the step at caches of 512",
        f"and {a[2048]} at 2048; T5's and Shaw's biases take {pct_span(others.pe_share)} of the "
        "step with SDPA",
    )


def profiler() -> str:
    df = _rows(LAYER)
    df = df[(df["mode"] == "forward") & df.pe_share_profiler.notna()]
    inside = df.pe_share_profiler.between(df.pe_share_lo, df.pe_share_hi)
    gap = (df.pe_share_profiler - df.pe_share).abs() * 100
    nope = df.share_partner == "nope"
    return (
        f"agrees within the removal's interval for {int(inside[nope].sum())} of the "
        f"{int(nope.sum())} forward rows measured against\n`nope` (median difference "
        f"{gap[nope].median():.1f} points) and for {int(inside[~nope].sum())} of the "
        f"{int((~nope).sum())} with a partner of their own (median\ndifference "
        f"{gap[~nope].median():.1f} points)"
    )


def heap() -> str:
    """What glibc's heap defaults cost transformers' RoPE at Llama-3.1-8B's shapes."""
    kept = performance._each("hf", "forward")
    system = performance._over_copy(performance.SYSTEM, "hf", "forward")
    return f"cost transformers' RoPE at\n  Llama-3.1-8B's shapes {system / max(kept):.1f}x"


# Threads beside busy neighbours: results/reference/threads-cpu/neighbours<N>-threads<T>.
THREADS = "threads-cpu"


def _threads(n: int, t: int, length: int) -> pd.Series:
    return pick(_rows(f"{THREADS}/neighbours{n}-threads{t}"), seq_len=length)


def threads_table() -> str:
    lines = [
        "| neighbours | 1 thread, L=128 | 1 thread, L=512 | 2 threads, L=128 | 2 threads, L=512 |",
        "|---|---|---|---|---|",
    ]
    for n in (0, 1, 2):
        cells = [
            f"{g3(r.p50_ms)} [{g3(r.p50_ci_lo_ms)}, {g3(r.p50_ci_hi_ms)}]"
            for t in (1, 2)
            for r in (_threads(n, t, 128), _threads(n, t, 512))
        ]
        lines.append(f"| {n} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def threads_prose() -> tuple[str, ...]:
    ratio = {
        (n, t, length): _threads(n, t, length).p50_ms / _threads(0, t, length).p50_ms
        for n in (1, 2) for t in (1, 2) for length in (128, 512)
    }  # fmt: skip
    worst = [ratio[2, 2, length] for length in (128, 512)]
    one = [v for (n, t, _), v in ratio.items() if t == 1]
    busy = [_threads(n, t, length) for n in (1, 2) for t in (1, 2) for length in (128, 512)]
    idle = [_threads(0, t, length) for t in (1, 2) for length in (128, 512)]
    marked = lambda rows: sum(bool(r.contended) for r in rows)  # noqa: E731
    return (
        f"{marked(busy)} of the {len(busy)} rows beside a neighbour were marked contended, "
        f"{marked(idle)} of the {len(idle)} idle ones",
        f"the medians are {span(worst, '{:.0f}')}x the idle ones",
        f"One thread stays within {span(one)}x of its idle time",
    )


SETTINGS = (
    "an 8x extension",  # configs: rope_factor
    "at most 3x the reference implementation's",  # bench/run/check.py FACTOR
    "spins for 1.5x the call's",  # bench/run/timing.py
    "within +-`timing.rel_ci` (2%)",  # configs/bench.yaml
    "2.5x its forward FLOPs",  # the attention cost model (bench/cases)
    "median ms [95% interval]",
    "(`pct_copy_bw` over 100%)", "(`pct_peak_flops` over 100%)", "(`pct_peak_bw` over 100%)",
    "120 s plus 20 times", "within +-2% and +-5%", "(95% interval wider than +-10%)",
    "the median's 95% distribution-free interval", "marked above 0.25",
    "medians' 95% intervals", "the median's 95% interval", "the counters tick every 10 ms",
)  # fmt: skip
LAUNCH = "0.27 ms for a kernel that runs in 0.17 ms"  # the first H200 run (tools/figures/gpu.py)
FIGURES = {
    **{f"sweep_{name}": figure for name, figure in SWEEPS.items()},
    "gpu_launch": gpu.QUOTES[LAUNCH],
    "sequences_run": sequences_run,
    "sequences": sequences,
    "serving_run": serving_run,
    "serving": serving,
    **parts(serving_prose, 2),
    "layer_run": layer_run,
    "layer_rope": layer_rope,
    "layer_absolute": layer_absolute,
    "layer_bias": layer_bias,
    "layer_savings": layer_savings,
    **parts(layer_decode, 2),
    "profiler": profiler,
    "heap": heap,
    "threads_table": threads_table,
    **parts(threads_prose, 3),
}
