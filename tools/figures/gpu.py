"""The GPU figures README.md and docs/ quote (docs/gpu.md's measured runs, the timing note of
docs/harness.md), written from the committed rows they name (results/gpu/<run>/: the harness
parts' results.csv, the independent audit's audit.csv): each entry is a quoted text and the way
to write it from the rows (tests/test_gpu_figures.py checks each)."""

from __future__ import annotations

import json
from functools import cache

import pandas as pd

from tools.figures.sources import ROOT

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


FIGURES = {  # the text as the page quotes it -> the same text written from the rows
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
