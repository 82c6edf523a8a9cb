"""docs/tutorial.md's figures: section 5.2 extended, from the committed `sweep=seed_5_2` run."""

from __future__ import annotations

from tools.figures.sources import g3, parts, pick, report_rows, run_line

RUN = "seed_5_2-cpu"
ENCODERS = [("sinusoidal", "seed"), ("sinusoidal", "reference"), ("learnable", "seed"),
            ("learnable", "reference"), ("rope_module", "seed"), ("rope_module", "reference"),
            ("rope_module", "reference_out")]  # fmt: skip
SHAW_NOTES = {
    (512, "seed"): "the tutorial's 3.6: no value term, a (B, H, L, L, D) tensor",
    (512, "reference"): "with the value term",
}


def _row(case: str, impl: str, **eq):
    return pick(report_rows(RUN), case=case, impl=impl, **eq)


def _vs_seed(case: str, impl: str) -> float:
    """The tutorial's code's median over this implementation's, timed side by side."""
    return _row(case, "seed")["p50_ms"] / _row(case, impl)["p50_ms"]


def run() -> str:
    return f"[`results/reference/{RUN}/`](../results/reference/{RUN}/) ({run_line(RUN)})"


def encoders() -> str:
    lines = [
        "| case | impl | the tutorial's timing: ms per 100 calls | median ms per call [p20, p80] "
        "| speedup vs the tutorial's |",
        "|---|---|---|---|---|",
    ]
    for case, impl in ENCODERS:
        r = _row(case, impl)
        lines.append(
            f"| {case} | {impl} | {r.tutorial_ms_per_100:.1f} | {g3(r.p50_ms)} "
            f"[{g3(r.p20_ms)}, {g3(r.p80_ms)}] | {_vs_seed(case, impl):.1f}x |"
        )
    return "\n".join(lines)


def shaw() -> str:
    lines = ["| L | impl | median ms [95% interval] | peak MiB | note |", "|---|---|---|---|---|"]
    for length in (512, 4096):
        for impl in ("seed", "reference"):
            r = _row("shaw_attention", impl, seq_len=length)
            note = SHAW_NOTES.get((length, impl), "")
            if r.status != "ok":
                lines.append(f"| {length} | {impl} | | | {r.status}: {r.message} |")
                continue
            lines.append(
                f"| {length} | {impl} | {g3(r.p50_ms)} [{g3(r.p50_ci_lo_ms)}, "
                f"{g3(r.p50_ci_hi_ms)}] | {r.peak_mem_bytes / 2**20:.0f} | {note} |"
            )
    return "\n".join(lines)


def naive_timing() -> str:
    """How far the tutorial's own timing of its own code reads from the proper median."""
    ratios = {
        case: _row(case, "seed").tutorial_ms_per_100 / 100 / _row(case, "seed").p50_ms
        for case, _ in ENCODERS
    }
    r = _row("sinusoidal", "seed")
    return (
        f"reads {min(ratios.values()):.1f} to {max(ratios.values()):.1f} times the properly "
        f"timed median here ({r.tutorial_ms_per_100 / 100:.1f} ms against {g3(r.p50_ms)} for "
        "its sinusoidal encoding)"
    )


def speedups() -> tuple[str, ...]:
    f = {(c, i): f"{_vs_seed(c, i):.1f}x" for c, i in ENCODERS}
    return (
        f"The corrected learnable encoding is {f['learnable', 'reference']} the tutorial's",
        f"the same work as the tutorial's ({f['sinusoidal', 'reference']}, within the intervals)",
        f"the corrected module is {f['rope_module', 'reference']} faster, "
        f"{f['rope_module', 'reference_out']} with a preallocated output",
    )


def shaw_prose() -> str:
    seed, ref = (_row("shaw_attention", i, seq_len=512) for i in ("seed", "reference"))
    long = _row("shaw_attention", "reference", seq_len=4096)
    return (
        f"is {seed.p50_ms / ref.p50_ms:.1f}x faster with "
        f"{seed.peak_mem_bytes / ref.peak_mem_bytes:.0f}x less peak memory; at L=4096 it takes "
        f"{long.p50_ms / 1e3:.1f} s and {long.peak_mem_bytes / 2**30:.1f} GiB"
    )


def precision() -> str:
    ok = report_rows(RUN).query("status == 'ok'")
    half = ((ok.p50_ci_hi_ms - ok.p50_ms).combine(ok.p50_ms - ok.p50_ci_lo_ms, max)) / ok.p50_ms
    return f"know the medians to +-{100 * half.median():.0f}% at the median row"


SETTINGS = ()  # the page states no setting that reads like a measurement

FIGURES = {
    "run": run,
    "encoders": encoders,
    "shaw": shaw,
    "naive_timing": naive_timing,
    **parts(speedups, 3),
    "shaw_prose": shaw_prose,
    "precision": precision,
}
