"""bench.tutorial_5_2: argument checks and the report built from rows alone."""

import pytest
import torch

from bench import tutorial_5_2 as t52


def test_bad_arguments_name_the_flag(capsys):
    with pytest.raises(SystemExit):
        t52.main(["--long-len", "256"])
    assert "--long-len" in capsys.readouterr().err
    if not torch.cuda.is_available():
        with pytest.raises(SystemExit):
            t52.main(["--device", "cuda"])
        assert "--device cuda" in capsys.readouterr().err


def test_tutorial_timing_counts_100_calls():
    calls = []
    ms = t52.tutorial_timing(lambda x: calls.append(x), torch.zeros(1))
    assert len(calls) == 100 and ms >= 0


def test_report_from_rows():
    enc = dict(batch=32, seq_len=512, d_model=512, num_heads="", p20_ms=1.0, p80_ms=3.0,
               n_samples=10, peak_mem_bytes=2**20, max_abs_err=0.0, status="ok")  # fmt: skip
    rows = [
        dict(enc, case="rope", impl="seed", p50_ms=20.0, tutorial_ms_per_100=2100.0),
        dict(enc, case="rope", impl="corrected out=", p50_ms=2.0, tutorial_ms_per_100=None),
        dict(enc, case="copy", impl="dst.copy_(x)", p50_ms=1.0, tutorial_ms_per_100=None),
        dict(
            case="relative_attention",
            impl="seed",
            seq_len=4096,
            num_heads=8,
            status="skipped",
            message="needs > 64.0 GiB",
        ),  # fmt: skip
    ]
    env = dict(device_name="cpu", threads=2, torch="x", python="y", timestamp="z")
    text = t52.report(rows, env)
    assert "| rope | corrected out= |  | 2.000 [1.000, 3.000] | 2.00 | 10.0x |" in text
    assert "| 4096 | seed | | | skipped | needs > 64.0 GiB |" in text


def test_plot_writes_png(tmp_path):
    row = dict(case="rope", impl="seed", num_heads="", p20_ms=1.0, p50_ms=2.0, p80_ms=3.0,
               status="wrong")  # fmt: skip
    t52.plot([row, dict(row, impl="corrected", status="ok")], tmp_path / "p.png", "t")
    assert (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"
