"""The GPU figures README.md and docs/ quote (docs/gpu.md's measured runs, the timing note of
docs/harness.md), written from the committed rows they name (results/gpu/<run>/: the harness
parts' results.csv, the independent audit's audit.csv): each entry is a quoted text and the way
to write it from the rows (tests/test_gpu_figures.py checks each)."""

from __future__ import annotations

import json
import os
import re
from functools import cache

import pandas as pd

from tools.figures.sources import ROOT, jit_stdout, parts, span

FIRST, SECOND = "2026-12-04-h200", "2026-12-04-h200-2"


@cache
def _csv(path: str) -> pd.DataFrame:
    return pd.read_csv(ROOT / "results" / "gpu" / path)


def audit(run: str, impl: str) -> float:
    """The audit's median ms of one implementation."""
    df = _csv(f"{run}/audit/audit.csv")
    (ms,) = df.loc[df["impl"] == impl, "ms"]
    return float(ms)


def row(run: str, part: str, case: str, impl: str, mode: str = "forward", **want) -> float:
    """p50_ms of the one row of a harness part with these fields and knobs (ok unless a
    status is named)."""
    df = _csv(f"{run}/{part}/results.csv")
    df = df[(df["case"] == case) & (df["impl"] == impl) & (df["mode"] == mode)]
    df = df[df["status"] == want.pop("status", "ok")]
    columns = {k: v for k, v in want.items() if k in df.columns}
    knobs = {k: v for k, v in want.items() if k not in df.columns}
    for key, value in columns.items():
        df = df[df[key] == value]
    params = df["params"].map(json.loads)
    df = df[params.map(lambda p: all(p.get(k) == v for k, v in knobs.items()))]
    assert len(df) == 1, (run, part, case, impl, mode, want, len(df))
    return float(df["p50_ms"].iloc[0])


def ratio(a: float, b: float, digits: int = 2) -> str:
    return f"{a / b:.{digits}f}x"


ROPE = dict(seq_len=4096, batch=8, layout="bshd")
ATTN = dict(seq_len=4096, causal=False)
DECODE = dict(seq_len=32768, batch=64)


SHAW_EAGER, SHAW_OURS = "eager Shaw key+value (posenc)", "project Shaw key+value fwd"


def _a(name: str, run: str = FIRST) -> float:
    return audit(run, name)


def _alibi_fb(part: str, impl: str) -> float:
    return row(FIRST, part, "alibi_attention", impl, "forward+backward", **ATTN)


def _decode(run: str, case: str, impl: str) -> float:
    return row(run, "sweep-sequences", case, impl, **DECODE)


def _t5_first() -> tuple[float, float]:  # the kernel after the recheck, Flex's own part
    return row(FIRST, "recheck", "t5_attention", "triton"), row(
        FIRST, "sweep-flex", "t5_attention", "flex", **ATTN
    )


def _shaw_first() -> tuple[float, float]:
    return row(FIRST, "recheck", "shaw_kv_attention", "triton"), row(
        FIRST, "recheck", "shaw_kv_attention", "reference"
    )


QUOTES = {  # the text as the page quotes it -> the same text written from the rows
    "0.171 ms vs the copy's 0.165 ms: 96%": lambda: (
        f"{_a('project fwd'):.3f} ms vs the copy's {_a('copy of the same bytes'):.3f} ms: "
        f"{100 * _a('copy of the same bytes') / _a('project fwd'):.0f}%"
    ),
    "0.171 vs 0.201 ms (1.17x)": lambda: (
        f"{_a('project fwd'):.3f} vs {_a('torch.compile(eager)'):.3f} ms "
        f"({ratio(_a('torch.compile(eager)'), _a('project fwd'))})"
    ),
    "audit: Liger 0.617 ms in place in bhsd memory": lambda: (
        f"audit: Liger {_a('liger-kernel fwd (in place, bhsd)'):.3f} ms in place in bhsd memory"
    ),
    "harness: Liger 0.221 ms in bshd, the kernel 0.272 ms": lambda: (
        f"harness: Liger {row(FIRST, 'sweep-gpu', 'rope', 'liger', **ROPE):.3f} ms in bshd, "
        f"the kernel {row(FIRST, 'sweep-gpu', 'rope', 'triton', **ROPE):.3f} ms"
    ),
    "1.454 vs 1.272 ms: 0.87x": lambda: (
        f"{_a('project ALiBi fwd'):.3f} vs {_a('FlexAttention alibi (score_mod)'):.3f} ms: "
        f"{ratio(_a('FlexAttention alibi (score_mod)'), _a('project ALiBi fwd'))}"
    ),
    "0.911 / 1.454: 0.63x": lambda: (
        f"{_a('SDPA without bias (ceiling)'):.3f} / {_a('project ALiBi fwd'):.3f}: "
        f"{ratio(_a('SDPA without bias (ceiling)'), _a('project ALiBi fwd'))}"
    ),
    "harness: 12.8 vs 5.33 ms: 0.42x": lambda: (
        f"harness: {_alibi_fb('sweep-gpu', 'triton'):.1f} vs "
        f"{_alibi_fb('sweep-flex', 'flex'):.2f} ms: "
        f"{ratio(_alibi_fb('sweep-flex', 'flex'), _alibi_fb('sweep-gpu', 'triton'))}"
    ),
    "2.23 vs 3.31 ms (1.5x)": lambda: (
        f"{_t5_first()[0]:.2f} vs {_t5_first()[1]:.2f} ms ({ratio(*_t5_first()[::-1], 1)})"
    ),
    "harness (K=16) 5.43 vs 35.6 ms: 6.5x": lambda: (
        f"harness (K=16) {_shaw_first()[0]:.2f} vs {_shaw_first()[1]:.1f} ms: "
        f"{ratio(*_shaw_first()[::-1], 1)}"
    ),
    "the audit's 7.9x (K=64, 21.5 vs 170 ms)": lambda: (
        f"the audit's {ratio(_a(SHAW_EAGER), _a(SHAW_OURS), 1)}"
        f" (K=64, {_a(SHAW_OURS):.1f} vs {_a(SHAW_EAGER):.0f} ms)"
    ),
    "after the fix, 21.6 vs 36.2 ms, 1.7x (second run)": lambda: (
        f"after the fix, {_a(SHAW_OURS, SECOND):.1f} vs "
        f"{_a(SHAW_EAGER, SECOND):.1f} ms, "
        f"{ratio(_a(SHAW_EAGER, SECOND), _a(SHAW_OURS, SECOND), 1)}"
        " (second run)"
    ),
    "paged cache write of a serving step 0.341 ms vs `torch.compile` of the eager step 0.991 ms": (
        lambda: (
            "paged cache write of a serving step "
            f"{row(FIRST, 'sweep-serving', 'rope_cache', 'triton'):.3f} ms vs `torch.compile` of "
            f"the eager step {row(FIRST, 'sweep-serving', 'rope_cache', 'compiled'):.3f} ms"
        )
    ),
    "ALiBi 4.74 ms vs FlexAttention's paged\nattention 4.54 ms, T5 5.75 vs 5.82 ms": lambda: (
        f"ALiBi {row(FIRST, 'sweep-serving', 'alibi_paged', 'triton'):.2f} ms vs FlexAttention's "
        f"paged\nattention {row(FIRST, 'sweep-serving', 'alibi_paged', 'flex_paged'):.2f} ms, "
        f"T5 {row(FIRST, 'sweep-serving', 't5_paged', 'triton'):.2f} vs "
        f"{row(FIRST, 'sweep-serving', 't5_paged', 'flex_paged'):.2f} ms"
    ),
    "ALiBi 4.55 ms vs\nSDPA with the mask materialized 2.06 ms": lambda: (
        f"ALiBi {_decode(FIRST, 'alibi_decode', 'triton'):.2f} ms vs\nSDPA with the mask "
        f"materialized {_decode(FIRST, 'alibi_decode', 'sdpa'):.2f} ms"
    ),
    "1.14 ms forward vs SDPA's 6.97 ms": lambda: (
        f"{row(FIRST, 'sweep-sequences', 'alibi_packed', 'triton', status='unchecked'):.2f} ms "
        "forward vs SDPA's "
        f"{row(FIRST, 'sweep-sequences', 'alibi_packed', 'sdpa', status='unchecked'):.2f} ms"
    ),
    "the attention backward (2.4x slower than FlexAttention's)": lambda: (
        "the attention backward ("
        f"{ratio(_alibi_fb('sweep-gpu', 'triton'), _alibi_fb('sweep-flex', 'flex'), 1)} slower "
        "than FlexAttention's)"
    ),
    "decode over long caches (2.2x slower than SDPA)": lambda: (
        "decode over long caches ("
        f"{ratio(*(_decode(FIRST, 'alibi_decode', i) for i in ('triton', 'sdpa')), 1)}"
        " slower than SDPA)"
    ),
    "0.170-0.182 ms in the harness": lambda: (
        f"{row(SECOND, 'sweep-gpu', 'rope', 'triton', **ROPE):.3f}-"
        f"{row(SECOND, 'sweep-gpu', 'rope', 'triton', **dict(ROPE, layout='bhsd')):.3f} ms in the "
        "harness"
    ),
    "0.27 ms for a kernel that runs in 0.17 ms": lambda: (
        f"{row(FIRST, 'sweep-gpu', 'rope', 'triton', **ROPE):.2f} ms for a kernel that runs in "
        f"{_a('project fwd'):.2f} ms"
    ),
    "the audit's 5.8x": lambda: (
        f"the audit's {ratio(_a('FlexAttention t5 (score_mod)'), _a('project T5 fwd'), 1)}"
    ),
    "forward (0.87x FlexAttention)": lambda: (
        f"forward ({ratio(_a('FlexAttention alibi (score_mod)'), _a('project ALiBi fwd'))} "
        "FlexAttention)"
    ),
    "first run's harness said 0.27 ms": lambda: (
        f"first run's harness said {row(FIRST, 'sweep-gpu', 'rope', 'triton', **ROPE):.2f} ms"
    ),
    "RoPE forward was 0.27 ms in the harness and 0.17 ms in the audit": lambda: (
        f"RoPE forward was {row(FIRST, 'sweep-gpu', 'rope', 'triton', **ROPE):.2f} ms in the "
        f"harness and {_a('project fwd'):.2f} ms in the audit"
    ),
    "against the audit's 0.172 ms": lambda: (
        f"against the audit's {_a('project fwd', SECOND):.3f} ms"
    ),
    "the kernel is 0.047 ms beside Liger's 0.045 ms": lambda: (
        "the kernel is "
        f"{row(SECOND, 'sweep-gpu', 'rope', 'triton', **dict(ROPE, seq_len=1024)):.3f} ms beside "
        f"Liger's {row(SECOND, 'sweep-gpu', 'rope', 'liger', **dict(ROPE, seq_len=1024)):.3f} ms"
    ),
    "4.34 ms (ALiBi),\n  3.92 ms (T5), 5.94 ms (Shaw k+v)": lambda: (
        f"{_decode(SECOND, 'alibi_decode', 'triton'):.2f} ms (ALiBi),\n  "
        f"{_decode(SECOND, 't5_decode', 'triton'):.2f} ms (T5), "
        f"{_decode(SECOND, 'shaw_kv_decode', 'triton'):.2f} ms (Shaw k+v)"
    ),
    "SDPA without a bias at 1.92-1.98 ms": lambda: (
        "SDPA without a bias at "
        f"{min(_decode(SECOND, c, 'sdpa_nobias') for c in DECODES):.2f}-"
        f"{max(_decode(SECOND, c, 'sdpa_nobias') for c in DECODES):.2f} ms"
    ),
    "T5's bias materialized at 20.6 ms": lambda: (
        f"T5's bias materialized at {_decode(SECOND, 't5_decode', 'sdpa'):.1f} ms"
    ),
    "the harness's 4.36 ms against the audit's 1.86 ms": lambda: (
        f"the harness's {row(SECOND, 'sweep-gpu', 'alibi_attention', 'sdpa', **ATTN):.2f} ms "
        f"against the audit's {_a('SDPA + materialized ALiBi', SECOND):.2f} ms"
    ),
}
DECODES = ("alibi_decode", "t5_decode", "shaw_kv_decode")


# docs/gpu.md's run plan: the estimates table (tools/gpurun/estimate.py) and what it was
# calibrated on (the first H200 run's status.txt, run.log, tests.xml and rows).
def plan_table() -> str:
    """`python -m tools.gpurun --plan`'s table; the estimate records the JIT's launches, so under
    Triton's interpreter (the tests') it runs in a process without it."""
    if os.environ.get("TRITON_INTERPRET") == "1":
        code = "from tools.gpurun import estimate as e; print(e.markdown(e.estimates()))"
        return jit_stdout(code).strip()
    from tools.gpurun import estimate

    return estimate.markdown(estimate.estimates()).strip()


def _first(name: str) -> str:
    return (ROOT / "results" / "gpu" / FIRST / name).read_text()


def calibration() -> tuple[str, ...]:
    from tools.gpurun import estimate

    flex = re.search(r"^(\d+) rows in ([\d.]+) s .*sweep-flex$", _first("run.log"), re.M)
    tests = re.search(r'tests="(\d+)" time="([\d.]+)"', _first("recheck/tests.xml"))
    status = _first("status.txt")
    audit_s = re.search(r"^== audit: exit \d+ after (\d+)s", status, re.M)[1]
    sweep_s = re.search(r"^== sweep: exit \d+ after (\d+)s", status, re.M)[1]
    carried = re.search(r"(\d+) kernels carried in cache.tgz", status)[1]
    rows = _csv(f"{FIRST}/sweep-gpu/results.csv")
    t5 = rows[(rows.case == "t5_attention") & (rows.impl == "reference")]
    t5 = t5[(t5["mode"] == "forward+backward") & (t5.seq_len == 4096) & (t5.status == "ok")]
    return (
        f"(the flex part: {flex[1]} rows in {flex[2]} s, its compiled graphs included; "
        f"{estimate.INDUCTOR_S} s a graph assumed), the kernel tests in "
        f"{float(tests[2]):.0f} s on {estimate.TEST_WORKERS} workers ({estimate.TEST_CALL_S} s "
        f"per test beside its compiles, fitted)",
        f"The audit took {audit_s} s",
        f"The sweep outran its estimate ({len(rows)} of its rows in {sweep_s} s): an eager T5 "
        f"forward+backward at L=4096 takes {span(t5.p50_ms / 1e3, '{:.1f}')} s a call",
        f"({carried} kernels",
    )


def launches() -> str:
    from tools.gpurun import estimate

    counted = json.loads(estimate.TEST_LAUNCHES.read_text())
    return (
        f"{sum(counted['kernels'].values())} kernels in {counted['tests']} tests), plus the "
        f"GPU-only long tests' {estimate.LONG_TEST_KERNELS} at most"
    )


SETTINGS = (
    "a budget of 540 s", "every 15 s", "--time=00:10:00", "| RoPE forward >= 90%",
    "| ALiBi forward >= 0.7x SDPA", "limits five times as long", "limit s | estimate s",
    "Dynamo's default limit of 8 recompiles", "raises the limit to 512",
    ">= 90% of the copy's bandwidth", "(goal 1.2x)", ">= 0.7x of SDPA", ">= 10x the eager",
)  # fmt: skip


def assumed() -> str:
    from tools.gpurun import estimate

    return (
        f"Still assumed: {estimate.START_S} s to start a part's process, {estimate.TRUTH_S} s per "
        "float64 truth"
    )


def recheck_tests() -> str:
    """The first run's kernel tests (recheck/tests.xml)."""
    t = re.search(r'errors="(\d+)" failures="(\d+)" skipped="\d+" tests="(\d+)" time="([\d.]+)"',
                  _first("recheck/tests.xml"))  # fmt: skip
    passed = int(t[3]) - int(t[1]) - int(t[2])
    return f"{passed} of {t[3]} passed in {float(t[4]):.0f} s"


def second_cut() -> str:
    """The second run's parts cut at their limits (its status.txt)."""
    status = (ROOT / "results" / "gpu" / SECOND / "status.txt").read_text()
    cut = dict(re.findall(r"^== (\w+): exit 124 after (\d+)s", status, re.M))
    return (
        f"tests ({cut['tests']} s) and sweep ({cut['sweep']} s) were cut at their limits, "
        f"sequences at {cut['sequences']} s"
    )


PLAN_FIGURES = {
    "assumed": assumed,
    "recheck_tests": recheck_tests,
    "second_cut": second_cut,
    "plan_table": plan_table,
    **parts(calibration, 4),
    "launches": launches,
}


def _quoted_in(page: str) -> dict:
    """The GPU figures a page quotes (the run plan's and the measured runs')."""
    text = " ".join((ROOT / page).read_text().split())
    return {quote: f for quote, f in QUOTES.items() if " ".join(quote.split()) in text}


FIGURES = {**PLAN_FIGURES, **_quoted_in("docs/gpu.md")}  # docs/gpu.md's
