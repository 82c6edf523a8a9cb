"""The report's share of the layer: its table, the savings it states (only past the noise), and
its plot, from rows alone."""

import pandas as pd

from bench.report import share


def _row(case, impl, p50, lo, hi, pe=None, pe_lo=None, pe_hi=None, prof=None, seq_len=512):
    return dict(
        case=case,
        impl=impl,
        mode="forward",
        dtype="float32",
        device="cpu",
        batch=1,
        seq_len=seq_len,
        params='{"num_kv_heads": 2, "rope_scaling": "none"}',
        status="ok",
        p50_ms=p50,
        p50_ci_lo_ms=lo,
        p50_ci_hi_ms=hi,
        pe_share=pe,
        pe_share_lo=pe_lo,
        pe_share_hi=pe_hi,
        pe_share_profiler=prof,
    )


def _rows():
    return pd.DataFrame(
        [
            _row("layer_t5", "nope", 10.0, 9.8, 10.2),
            _row("layer_t5", "reference", 20.0, 19.5, 20.5, 0.5, 0.48, 0.52, 0.49),
            _row("layer_t5", "sdpa", 12.5, 12.0, 13.0, 0.2, 0.16, 0.24, 0.19),
            _row("layer_rope", "nope", 10.0, 9.5, 10.5),
            _row("layer_rope", "reference", 10.3, 9.8, 10.8, 0.03, -0.02, 0.08, 0.04),
            _row("layer_rope", "compiled", 10.1, 9.6, 10.6, 0.01, -0.04, 0.06, 0.02),
        ]
    )


def test_the_table_shows_each_share_with_its_interval_and_the_profilers():
    text = "\n".join(share.section(_rows()))
    assert "## Share of the layer" in text
    assert "| t5 | 1 | 512 |" in text and "50% [48%, 52%]; prof. 49%" in text
    assert "| rope | 1 | 512 |" in text  # the default schedule left out of the label


def test_a_saving_is_stated_only_past_the_noise():
    lines = share.savings(_rows())
    assert lines == [
        "t5, L=512: sdpa makes the layer 38% faster than the eager reference "
        "(its encoding: 20% of the layer, from 50%)."
    ]  # RoPE's compiled layer is 2% faster within overlapping intervals: not a saving


def test_the_plot_is_written_per_mode(tmp_path):
    written = share.plot(_rows(), tmp_path)
    assert [p.name for p in written] == ["share_of_layer_forward_float32.png"]
    assert written[0].stat().st_size > 1000


def test_rows_without_shares_add_nothing(tmp_path):
    plain = _rows().drop(columns=["pe_share"])
    assert share.section(plain) == [] and share.plot(plain, tmp_path) == []


def test_a_share_below_zero_is_never_a_plain_negative_cost():
    rows = pd.concat(
        [_rows(), pd.DataFrame([_row("layer_alibi", "sdpa", 9.0, 8.9, 9.1, -0.1, -0.15, -0.05)])]
    )
    rows["pe_share_best"] = rows["pe_share"]
    text = "\n".join(share.section(rows))
    assert "-10% [-15%, -5%] (below 0: its partner read slower); best -10%" in text
    assert "50% [48%, 52%]; best 50%; prof. 49%" in text
