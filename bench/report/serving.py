"""The serving cases' section of report.md (bench/cases/serving.py): per row, the tokens of the
step, tokens per second, and the bytes it moves against a copy of the same bytes timed beside it
(pct_copy_bw: the share of that copy's speed the call reaches)."""

from __future__ import annotations

import pandas as pd

from bench.report.rows import knobs
from bench.tables import markdown_table


def _ms(row) -> str:
    text = f"{row['p50_ms']:.3g}"
    if pd.notna(row.get("p50_ci_lo_ms")) and pd.notna(row.get("p50_ci_hi_ms")):
        text += f" [{row['p50_ci_lo_ms']:.3g}, {row['p50_ci_hi_ms']:.3g}]"
    return text


def _number(value, fmt: str) -> str:
    return "" if pd.isna(value) else format(value, fmt)


def section(df: pd.DataFrame) -> list[str]:
    # the serving cases' rows: tokens per second outside a layer (bench/cases/serving.py)
    serving = df["tokens_per_s"].notna() & (df["level"] != "layer") if "level" in df else False
    rows = df[serving & (df["status"] == "ok")]
    if rows.empty:
        return []
    header = ["case", "impl", "device", "dtype", "knobs", "ms [95% CI]", "tokens/s", "GB/s"]
    header += ["% of copy", "marks"]
    body = []
    for _, r in rows.iterrows():
        marks = [m for m in ("contended", "interpreted") if bool(r.get(m, False))]
        body.append(
            [
                r["case"], r["impl"], r["device"], r["dtype"], knobs(r["params"]), _ms(r),
                _number(r.get("tokens_per_s"), ".3g"), _number(r.get("gbps"), ".3g"),
                _number(r.get("pct_copy_bw"), ".0f"), ", ".join(marks),
            ]
        )  # fmt: skip
    intro = (
        "A serving step's positional part: the fused RoPE + paged KV-cache write of a mixed "
        "batch (rope_cache: tokens = the step's prefill chunks and decode tokens) and a decode "
        "step's attention over paged caches ({family}_paged: tokens = the queries). `% of "
        "copy`: the time a copy of the row's modelled bytes took, timed beside it, over the "
        "row's (100%: the call moves its bytes as fast as a copy). Interpreted rows time "
        "Triton's interpreter, not the kernel."
    )
    return ["## Serving step", "", intro, "", *markdown_table(header, body), ""]
