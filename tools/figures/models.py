"""docs/models.md's figures: the committed `sweep=models` run (its conformance section is
`python -m bench.conformance --markdown`'s, checked by tests/bench/test_conformance.py)."""

from __future__ import annotations

import json

from tools.figures.sources import _json, _rows, contended, span

RUN = "models-cpu"
INTERLEAVED = ("deepseek-v3", "deepseek-v4-flash", "llama-4-scout")
QUARTER = {"qwen3.5-27b": "Qwen3.5", "gemma-4": "Gemma 4"}  # a quarter of each head turns
PARTIAL = ("pythia-1.4b",)  # a quarter too, but transformers' code costs it apart


def _over_copy(impl: str, targets: str | None = None) -> dict[str, float]:
    """model -> RoPE's forward time at L=2048 over the same-size copy timed beside it."""
    df = _rows(RUN)
    df = df[(df.case == "rope") & (df.impl == impl) & (df["mode"] == "forward")]
    df = df[(df.seq_len == 2048) & (df.status == "ok")]
    params = df.params.map(json.loads)
    df = df[params.map(lambda p: p.get("rope_targets") == targets)]
    models = params[df.index].map(lambda p: p["model"])
    return dict(zip(models, df.p50_ms / df.copy_ms, strict=True))


def _whole(ratios: dict[str, float]) -> list[float]:
    """The half-split models that turn whole heads."""
    return [r for m, r in ratios.items() if m not in (*INTERLEAVED, *QUARTER, *PARTIAL)]


def run() -> str:
    env, summary, df = _json(RUN, "env.json"), _json(RUN, "timing_summary.json"), _rows(RUN)
    return (
        f"`python -m bench sweep=models` at {env['git_sha'][:7]} ([`results/reference/{RUN}/`]"
        f"(../results/reference/{RUN}/report.md):\n{env['cpu']} VM, {env['cpu_count']} cores, "
        f"torch {env['torch']}, one thread, {len(df)} rows ({int((df.status == 'ok').sum())} "
        f"timed, the rest said and\nskipped) in {summary['wall_s'] / 60:.1f} min, {contended(RUN)})"
    )


def per_copy() -> str:
    ref, hf, compiled = (_over_copy(i) for i in ("reference", "hf", "compiled"))
    quarter = " and ".join(f"{ref[m]:.1f}x" for m in QUARTER)
    pythia = f"{ref[PARTIAL[0]]:.1f}x, `hf` {hf[PARTIAL[0]]:.1f}x"
    return (
        f"the eager half-split reference {span(_whole(ref))}x on\nwhole heads ({quarter} where a "
        f"quarter of the head turns: {', '.join(QUARTER.values())}; Pythia's\nquarter {pythia}), "
        "`hf` "
        f"{span(_whole(hf))}x, `torch.compile` {span(_whole(compiled))}x "
        f"({span([compiled[m] for m in INTERLEAVED])}x on the DeepSeek models' interleaved "
        f"slices and\nLlama 4 Scout); the interleaved models' eager path (DeepSeek-V3, "
        f"DeepSeek-V4, Llama 4 Scout)\nruns at {span([ref[m] for m in INTERLEAVED])}x, and "
        f"transformers' Llama 4 code (a complex multiply) at {hf['llama-4-scout']:.2f}x"
    )


def deepseek_forms() -> str:
    q, out = (_over_copy("reference", t)["deepseek-v4-flash"] for t in ("q", "qk_out"))
    return f"q alone {q:.2f}x, q and k then the output turned back {out:.2f}x (eager)"


def shares() -> str:
    df = _rows(RUN)
    df = df[df.case.str.startswith("layer_rope") & df.pe_share.notna()]
    half = ((df.pe_share_hi - df.pe_share_lo) / 2).median()
    furthest = max(df.pe_share_lo.abs().max(), df.pe_share_hi.abs().max())
    return (
        f"(shares of {span(df.pe_share, '{:.0%}', ' to ')}, intervals of "
        f"+-{half:.0%} typically, up to {furthest:.0%}); the profiler\nattributes at most "
        f"{df.pe_share_profiler.max():.1%} of the call to it"
    )


SETTINGS = ()
ELSEWHERE = ("conformance",)  # the page's sections written and checked by their own test
FIGURES = {"run": run, "per_copy": per_copy, "deepseek_forms": deepseek_forms, "shares": shares}
