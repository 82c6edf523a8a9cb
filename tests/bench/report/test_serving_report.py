"""The report's serving section and the interpreter's mark, from rows alone."""

import pandas as pd

from bench.report import flags, serving
from bench.report.markdown import cell

INTERPRETED = "posenc_kernels.apply_rope_with_cache; Triton's interpreter on the CPU"


def _row(case, impl, p50, message="", tokens=None, pct=None, status="ok"):
    return dict(
        case=case, impl=impl, mode="forward", dtype="float32", device="cpu", batch=16,
        level="encoder" if case == "rope_cache" else "attention",
        seq_len=2048, params='{"chunk": 64, "prefill": 2, "rope_form": "mrope"}', status=status,
        p50_ms=p50, p50_ci_lo_ms=p50 and 0.9 * p50, p50_ci_hi_ms=p50 and 1.1 * p50,
        tokens_per_s=tokens, gbps=1.5, pct_copy_bw=pct, message=message,
    )  # fmt: skip


def _rows():
    return pd.DataFrame(
        [
            _row("rope_cache", "eager", 1.0, "posenc rotation, then index_copy_", 142e3, 20.0),
            _row("rope_cache", "triton", 2000.0, INTERPRETED, 71.0, 0.01),
            _row("t5_paged", "reference", 5.0, tokens=800.0, pct=3.0),
            _row("t5_attention", "reference", 5.0),  # not a serving case: no tokens
            _row("rope_cache", "compiled", None, status="error"),
        ]
    )


def test_the_serving_section_gives_tokens_per_second_and_the_share_of_a_copy():
    df = _rows()
    df["interpreted"] = flags.interpreted(df)
    text = "\n".join(serving.section(df))
    assert "## Serving step" in text
    assert "| rope_cache | eager | cpu | float32 | chunk=64 prefill=2 rope_form=mrope |" in text
    assert "| 1 [0.9, 1.1] | 1.42e+05 | 1.5 | 20 |" in text
    assert "| 2e+03 [1.8e+03, 2.2e+03] | 71 | 1.5 | 0 | interpreted |" in text
    assert "t5_paged" in text and "t5_attention" not in text and "compiled" not in text


def test_an_interpreted_kernel_is_marked_not_read_as_a_speed():
    df = _rows()
    df["interpreted"] = flags.interpreted(df)
    assert df["interpreted"].tolist() == [False, True, False, False, False]
    cells = [cell(r) for _, r in df.assign(speedup=float("nan")).iterrows()]
    assert cells[1] == "i2e+03" and cells[0] == "1" and cells[4] == "error"
