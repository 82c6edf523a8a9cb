"""bench.report.build and bench.report.compare: tables and plots from saved rows; runs compared."""

import csv
from pathlib import Path

import pandas as pd

from bench.registry import CASES, Impl, Point
from bench.report import build as report
from bench.report import compare, markdown, plots
from bench.report import rows as report_rows
from tests.helpers import run_toy, toy_case


def test_report_from_a_saved_run_and_a_merge(tmp_path, monkeypatch):
    case = toy_case(
        {
            "good": Impl(lambda i: lambda: 2 * i["x"]),
            "slow": Impl(lambda i: lambda: (2 * i["x"]).clone().mul(1.0)),
        }
    )
    monkeypatch.setitem(CASES, "toy", case)
    run_a, run_b = tmp_path / "a", tmp_path / "b"
    run_a.mkdir()
    run_b.mkdir()
    run_toy(run_a, case, monkeypatch, points=(Point(1, 8, 4, 2), Point(1, 16, 4, 2)))
    run_toy(run_b, case, monkeypatch, points=(Point(2, 8, 4, 2),))
    out = report.build([run_a, run_b], tmp_path / "merged")
    text = (out / "report.md").read_text()
    assert "## toy / forward / float32" in text and "good @ cpu" in text
    assert "Precision: the median's 95% interval" in text and "of 12 ok rows" in text
    with open(out / "merged.csv") as f:
        assert len(list(csv.DictReader(f))) == 2 * 2 * 2 + 2 * 2  # both runs, every row
    assert (out / "pct_copy_bw_forward_float32.png").exists()
    for plot in ("time_vs_seq_len", "speedup"):
        assert (out / f"{plot}_forward_float32.png").read_bytes()[:4] == b"\x89PNG"


def test_report_compare_two_runs_into_a_new_directory(tmp_path, monkeypatch, capsys):
    case = toy_case({"good": Impl(lambda i: lambda: 2 * i["x"])})
    monkeypatch.setitem(CASES, "toy", case)
    runs = [tmp_path / "a", tmp_path / "b"]
    for run in runs:
        run.mkdir()
        run_toy(run, case, monkeypatch, points=(Point(1, 8, 4, 2),), modes=("forward",))
    out = report.main([*map(str, runs), "--compare", "--out", str(tmp_path / "new" / "cmp")])
    text = (out / "compare.md").read_text()
    assert "1 rows in common" in text and "| toy | good | forward |" in text


def _write_run(path, slow, fast_ms=0.5):
    import pandas as pd

    path.mkdir()
    shape = dict(batch=1, seq_len=8, d_model=4, num_heads=2)
    rows = [
        dict(
            case="toy",
            level="encoder",
            baseline="good",  # the toy case's (tests/helpers.py), as a run writes it
            impl=impl,
            mode="forward",
            device="cpu",
            device_name="cpu",
            dtype="float32",
            **shape,
            p50_ms=ms * slow,
            status="ok",
            pct_copy_bw=100 * 0.25 * slow / (ms * slow),  # its group's copy: 0.25 ms
            timestamp="2026-11-29T00:00:00",
        )
        for impl, ms in (("good", 1.0), ("fast", fast_ms))
    ]
    pd.DataFrame(rows).to_csv(path / "results.csv", index=False)


def test_report_states_how_well_the_medians_are_known(tmp_path):
    """report.md's precision line: half-widths 1%, 4% and 10% (the larger side counts) -> 1 of
    3 within 2%, 2 within 5%, 4.0% at the median row; rows of runs without the columns: none."""
    import pandas as pd

    rows = [
        dict(p50_ms=10.0, p50_ci_lo_ms=lo, p50_ci_hi_ms=hi, status="ok")
        for lo, hi in [(9.9, 10.05), (9.8, 10.4), (9.9, 11.0)]
    ]
    rows.append(dict(p50_ms=None, p50_ci_lo_ms=None, p50_ci_hi_ms=None, status="wrong"))
    (line,) = [x for x in markdown.precision(pd.DataFrame(rows)) if x]
    assert (
        "within +-2% of it for 1 of 3 ok rows and within +-5% for 2; its larger "
        "half-width is 4.0% at the median row"
    ) in line
    assert markdown.precision(pd.DataFrame([dict(p50_ms=1.0, status="ok")])) == []


def test_compare_separates_machine_drift_from_speedup_drift(tmp_path, monkeypatch):
    """Run B is 20% slower everywhere (a slower phase of the machine): every time moves by 20%,
    the speedup measured side by side within each run does not move."""
    monkeypatch.setitem(CASES, "toy", toy_case({"good": Impl(lambda i: None)}))
    _write_run(tmp_path / "a", 1.0)
    _write_run(tmp_path / "b", 1.2)
    text = compare.compare(tmp_path / "a", tmp_path / "b")
    assert "|B/A - 1| median 20.0%, max 20.0%; within 5%: 0 of 2" in text
    assert "Speedups vs the baseline (1 rows besides the baselines): |B/A - 1| median 0.0%" in text
    assert "copy timed alongside, pct_copy_bw (2 rows): |B/A - 1| median 0.0%, max 0.0%" in text
    row = "| toy | fast | forward | B=1 L=8 d=4 H=2 | 0.500 | 0.600 | 1.200 | 2.00x | 2.00x |"
    assert row + " 50.0 | 50.0 |" in text


def test_compare_runs_made_before_the_copy_column(tmp_path, monkeypatch):
    """Results written before pct_copy_bw existed still compare; the copy lines are left out."""
    import pandas as pd

    monkeypatch.setitem(CASES, "toy", toy_case({"good": Impl(lambda i: None)}))
    for name, slow in (("a", 1.0), ("b", 1.1)):
        _write_run(tmp_path / name, slow)
        df = pd.read_csv(tmp_path / name / "results.csv")
        df.drop(columns="pct_copy_bw").to_csv(tmp_path / name / "results.csv", index=False)
    text = compare.compare(tmp_path / "a", tmp_path / "b")
    assert "|B/A - 1| median 10.0%" in text and "copy timed alongside" not in text
    assert "| 0.500 | 0.550 | 1.100 | 2.00x | 2.00x |  |  |" in text
    many = compare.compare_all([tmp_path / "a", tmp_path / "b", tmp_path / "a"])
    assert "| 1 vs 2 | 2 | 10.0%, 10.0% | 0 of 2 | 0.0%, 0.0% | 1 of 1 |  |  |" in many
    assert "Time vs the copy" not in many


def test_compare_many_runs_tables_every_pair(tmp_path, monkeypatch):
    monkeypatch.setitem(CASES, "toy", toy_case({"good": Impl(lambda i: None)}))
    # r2: the whole machine 2% slower; r3: only `fast` got faster (0.5 -> 0.4 ms)
    for name, slow, fast in (("r1", 1.0, 0.5), ("r2", 1.02, 0.5), ("r3", 1.0, 0.4)):
        _write_run(tmp_path / name, slow, fast)
    monkeypatch.chdir(tmp_path)  # the default --out: a new results/reports/<time>-compare
    out = report.main([*(str(tmp_path / n) for n in ("r1", "r2", "r3")), "--compare"])
    text = (out / "repeatability.md").read_text()
    assert out.parent == Path("results/reports") and out.name.endswith("-compare")
    assert not (tmp_path / "r3" / "repeatability.md").exists()  # never into a run
    assert (
        "| 1 vs 2 | 2 | 2.0%, 2.0% | 2 of 2 | 0.0%, 0.0% | 1 of 1 | 0.0%, 0.0% | 2 of 2 |" in text
    )
    assert (
        "| 1 vs 3 | 2 | 10.0%, 20.0% | 1 of 2 | 25.0%, 25.0% | 0 of 1 | 12.5%, 25.0% | 1 of 2 |"
        in text
    )
    assert (
        "ranged from 2.0% to 11.8% (middle pair 10.0%; 1 of 3 pairs within 5%; row by row, "
        "4 of 6 row pairs within 5%, the largest 21.6%)"
    ) in text  # r3's fast vs r2's 0.51
    assert "Speedups: 0.0% to 25.0% (middle pair 25.0%; 1 of 3 pairs within 5%)" in text
    assert "Time vs the copy: 0.0% to 12.5% (middle pair 12.5%; 1 of 3 pairs within 5%)" in text


def read_rows(path, rows):
    path.mkdir(parents=True, exist_ok=True)
    base = dict(
        case="toy",
        level="encoder",
        baseline="good",  # the toy case's (tests/helpers.py), as a run writes it
        mode="forward",
        device="cpu",
        device_name="cpu",
        dtype="float32",
        batch=1,
        seq_len=8,
        d_model=4,
        num_heads=2,
        params="{}",
        status="ok",
    )
    rows = [dict(base, p20_ms=0.9 * r["p50_ms"], p80_ms=1.1 * r["p50_ms"], **r) for r in rows]
    pd.DataFrame(rows).to_csv(path / "results.csv", index=False)


def test_merging_runs_writes_a_new_directory_and_says_what_repeats(tmp_path, monkeypatch):
    """Two runs measured the same row: merged.csv keeps both, the report shows the latest and
    says so; a speedup is taken within one run, never from two runs' times."""
    monkeypatch.setitem(CASES, "toy", toy_case({"good": Impl(lambda i: None)}))
    read_rows(
        tmp_path / "a",
        [
            dict(run_id="a", impl="good", p50_ms=1.0, timestamp="2026-01-01"),
            dict(run_id="a", impl="fast", p50_ms=0.5, timestamp="2026-01-01"),
        ],
    )
    read_rows(tmp_path / "b", [dict(run_id="b", impl="good", p50_ms=4.0, timestamp="2026-01-02")])
    before = sorted(p.name for p in (tmp_path / "a").iterdir())
    monkeypatch.chdir(tmp_path)
    out = report.main([str(tmp_path / "a"), str(tmp_path / "b")])
    assert out.parent == Path("results/reports") and out.name.endswith("-merged")
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == before  # run a untouched
    assert len(pd.read_csv(out / "merged.csv")) == 3
    text = (out / "report.md").read_text()
    assert "Merged from 2 runs:" in text and str(tmp_path / "b") in text
    assert "1 rows were measured more than once" in text
    assert "| 1 | 8 | 4 | 2 |  | 0.5 | 4 (1.00x) |" in text  # fast: no speedup vs run b's good


def test_uncertain_and_contended_medians_are_marked(tmp_path, monkeypatch):
    """A median whose 95% interval is wider than +-10% shows with ~, a row timed while other
    processes held the CPU (here a row from before the contended column: its process got
    under half a core) with #, in the tables; hollow or hatched in the plots."""
    monkeypatch.setitem(CASES, "toy", toy_case({"good": Impl(lambda i: None)}))
    rows = [
        dict(
            run_id="a",
            impl="good",
            p50_ms=1.0,
            p50_ci_lo_ms=0.99,
            p50_ci_hi_ms=1.01,
            cpu_util=1.0,
            timestamp="t",
        ),
        dict(
            run_id="a",
            impl="wide",
            p50_ms=2.0,
            p50_ci_lo_ms=1.5,
            p50_ci_hi_ms=2.1,
            cpu_util=1.0,
            timestamp="t",
        ),
        dict(
            run_id="a",
            impl="busy",
            p50_ms=3.0,
            p50_ci_lo_ms=2.99,
            p50_ci_hi_ms=3.01,
            cpu_util=0.3,
            timestamp="t",
        ),
    ]
    read_rows(tmp_path / "a", rows)
    report.build([tmp_path / "a"])
    text = (tmp_path / "a" / "report.md").read_text()
    assert "| 1 | 8 | 4 | 2 |  | #3 (0.33x) | 1 (1.00x) | ~2 (0.50x) |" in text  # busy, good, wide
    assert "`~` uncertain (1 of 3 ok cells)" in text and "`#` contended (1 of 3)" in text


def _marked_rows(**extra):
    base = dict(
        run_id="a",
        case="toy",
        level="encoder",
        baseline="good",  # the toy case's (tests/helpers.py), as a run writes it
        device="cpu",
        device_name="cpu",
        dtype="float32",
        batch=1,
        seq_len=8,
        d_model=4,
        num_heads=2,
        params="{}",
        status="ok",
        timestamp="t",
    )
    return [dict(base, **row) for row in extra["rows"]]


def test_figures_past_a_ceiling_or_out_of_order_are_suspect_not_results(tmp_path, monkeypatch):
    """Faster than the copy timed beside it, past the run's matmul rate, or forward+backward
    faster than forward: marked ! with the reason listed, and a speedup on such a row too."""
    monkeypatch.setitem(CASES, "toy", toy_case({"good": Impl(lambda i: None)}))
    rows = _marked_rows(
        rows=[
            dict(impl="good", mode="forward", p50_ms=1.0, pct_copy_bw=50.0, pct_peak_flops=10.0),
            dict(impl="good", mode="forward+backward", p50_ms=3.0, pct_copy_bw=40.0),
            dict(impl="copyfast", mode="forward", p50_ms=0.1, pct_copy_bw=140.0),
            dict(impl="copyfast", mode="forward+backward", p50_ms=2.0, pct_copy_bw=60.0),
            dict(impl="matfast", mode="forward", p50_ms=0.5, pct_peak_flops=223.0),
            dict(impl="inverted", mode="forward", p50_ms=108.0),
            dict(impl="inverted", mode="forward+backward", p50_ms=16.8),
        ]
    )
    read_rows(tmp_path / "a", rows)
    report.build([tmp_path / "a"])
    text = (tmp_path / "a" / "report.md").read_text()
    assert (
        "| 1 | 8 | 4 | 2 |  | !0.1 (!10.00x) | 1 (1.00x) | !108 (!0.01x) | !0.5 (!2.00x) |" in text
    )
    assert "## Suspect figures" in text
    assert "pct_copy_bw 140%: faster than a same-size copy timed beside it" in text
    assert "pct_peak_flops 223%: faster than the run's measured matmul rate" in text
    assert text.count("forward+backward faster than forward") == 2  # both of the pair
    assert "`!` suspect (4 of 7)" in text


def test_rows_not_ok_are_grouped_with_their_knobs_count_and_shapes(tmp_path, monkeypatch):
    monkeypatch.setitem(CASES, "toy", toy_case({"good": Impl(lambda i: None)}))
    skipped = [
        dict(
            impl="good",
            mode="forward",
            status="skipped",
            p50_ms=float("nan"),
            seq_len=n,
            params=f'{{"rope_scaling": "{s}"}}',
            message="runs on cuda only",
        )
        for n in (128, 256, 512, 1024)
        for s in ("none", "yarn")
    ]
    ok = [dict(impl="good", mode="forward", p50_ms=1.0, seq_len=8, params="{}")]
    read_rows(tmp_path / "a", _marked_rows(rows=skipped + ok))
    report.build([tmp_path / "a"])
    text = (tmp_path / "a" / "report.md").read_text()
    assert (
        "| toy | good | forward | cpu | rope_scaling=yarn | 4 | B=1 L=128..1024 (4) d=4 H=2 "
        "| skipped | runs on cuda only |"
    ) in text
    assert "| rope_scaling=none | 4 |" in text


def test_plots_colour_an_implementation_alike_and_match_each_case_to_its_bound():
    """One colour per impl @ device in every panel; the encoders' efficiency against a copy,
    the attention cases' against the matmul rate; the speedup bars leave the baseline out."""
    df = pd.DataFrame(
        [
            dict(
                case=c,
                level="encoder" if c == "rope" else "attention",
                baseline="reference",
                impl=i,
                device="cpu",
                device_name="cpu",
                mode="forward",
                dtype="float32",
                batch=1,
                seq_len=n,
                d_model=16,
                num_heads=2,
                params="{}",
                status="ok",
                p50_ms=1.0 + n,
                p20_ms=1.0,
                p80_ms=2.0 + n,
                speedup=1.0,
                pct_copy_bw=50.0,
                pct_peak_flops=20.0,
                uncertain=False,
            )
            for c in ("rope", "alibi_attention")
            for i in ("reference", "sdpa")
            for n in (8, 16)
        ]
    )
    assert (
        plots._colors(df)["sdpa @ cpu"]
        == plots._colors(df[df["case"] == "rope"].iloc[::-1])["sdpa @ cpu"]
    )
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        names = sorted(p.name for p in plots.write_all(df, Path(d)))
    assert names == [
        "headline_forward_float32.png",
        "pct_copy_bw_forward_float32.png",
        "pct_matmul_forward_float32.png",
        "speedup_forward_float32.png",
        "time_vs_seq_len_forward_float32.png",
    ]


def test_plots_give_each_knob_combination_a_panel_and_name_the_speedups_baseline():
    rows = [
        dict(
            case="rope",
            impl=i,
            device="cpu",
            batch=1,
            seq_len=n,
            d_model=16,
            num_heads=2,
            params=f'{{"rope_scaling": "{sc}"}}',
        )
        for sc in ("none", "yarn", "llama3")
        for i in ("reference", "triton")
        for n in (8, 16)
    ]
    df = pd.DataFrame(rows)
    assert [p[1][3] for p in plots._panels(df)] == [
        '{"rope_scaling": "none"}',
        '{"rope_scaling": "yarn"}',
        '{"rope_scaling": "llama3"}',
    ]
    top = plots._largest_points(df)
    assert len(top) == 6 and set(top["seq_len"]) == {16}
    label = plots.bar_label(dict(rows[-1], baseline="reference"))
    assert label == "rope / triton @ cpu vs reference (B=1, L=16, rope_scaling=llama3)"


def test_unchecked_rows_show_their_median_marked_and_are_not_ok(tmp_path, monkeypatch):
    """A row timed without its float64 truth (it did not fit): its median behind `?`, no
    speedup, counted in the marks, and listed under 'Rows not ok' with its message."""
    monkeypatch.setitem(CASES, "toy", toy_case({"good": Impl(lambda i: None)}))
    why = "not checked: the float64 truth failed: MemoryError: needs 128 GiB"
    rows = [
        dict(impl="good", mode="forward", p50_ms=1.0),
        dict(impl="wide", mode="forward", p50_ms=2.0, status="unchecked", message=why),
    ]
    read_rows(tmp_path / "a", _marked_rows(rows=rows))
    report.build([tmp_path / "a"])
    text = (tmp_path / "a" / "report.md").read_text()
    assert "| 1 (1.00x) | ?2 |" in text
    assert "`?` unchecked (1 rows)" in text
    assert f"| unchecked | {why} |" in text


def test_cuda_rows_show_their_wall_time_beside_the_gpu_time(tmp_path, monkeypatch):
    """A CUDA row's wall_ms (a call with one sync, host work included) beside its GPU-time
    median, and their ratio: where the host sets the pace."""
    monkeypatch.setitem(CASES, "toy", toy_case({"good": Impl(lambda i: None)}))
    rows = [
        dict(impl="good", mode="forward", p50_ms=0.05, wall_ms=0.2, device="cuda"),
        dict(impl="cpu_row", mode="forward", p50_ms=1.0),
    ]
    read_rows(tmp_path / "a", _marked_rows(rows=rows))
    report.build([tmp_path / "a"])
    text = (tmp_path / "a" / "report.md").read_text()
    assert "## Host-inclusive time (CUDA)" in text
    assert "| toy | good | forward |  | B=1 L=8 | 0.05 | 0.2 | 4.00 |" in text
    assert "cpu_row | forward |  | B=1 L=8" not in text


def test_rows_timed_on_a_held_gpu_are_marked_throttled(tmp_path, monkeypatch):
    """A row whose GPU NVML said was held down while it was timed (gpu_held) shows with t and
    the legend names the reasons; a row of the same run with nothing held ("") is plain."""
    monkeypatch.setitem(CASES, "toy", toy_case({"good": Impl(lambda i: None)}))
    rows = [
        dict(run_id="a", impl="good", p50_ms=1.0, gpu_held="", timestamp="t"),
        dict(run_id="a", impl="held", p50_ms=2.0, gpu_held="power_violation", timestamp="t"),
    ]
    read_rows(tmp_path / "a", rows)
    report.build([tmp_path / "a"])
    text = (tmp_path / "a" / "report.md").read_text()
    assert "| 1 (1.00x) | t2 (0.50x) |" in text
    assert "`t` throttled (1 of 2): NVML said the GPU held its clocks down" in text
    assert "(power_violation; results.csv's gpu_held)" in text


def test_the_report_opens_with_the_answer(tmp_path, monkeypatch):
    """The headline: per case and mode at its longest length, the fastest checked implementation
    that computes the encoding (not SDPA without a bias, whose semantics are its own, nor a
    wrong row), with its speedup and its time over that floor; a GPU's rows first."""
    monkeypatch.setitem(CASES, "toy", toy_case({"good": Impl(lambda i: None)}))
    own = "no bias: the ceiling; own semantics"
    rows = [
        dict(run_id="a", impl="good", p50_ms=4.0, seq_len=8, timestamp="t"),
        dict(run_id="a", impl="fast", p50_ms=2.0, seq_len=8, timestamp="t"),
        dict(run_id="a", impl="fast", p50_ms=0.1, seq_len=4, timestamp="t"),  # not the longest
        dict(run_id="a", impl="broken", p50_ms=0.5, seq_len=8, status="wrong", timestamp="t"),
        dict(run_id="a", impl="sdpa_nobias", p50_ms=1.0, seq_len=8, message=own, timestamp="t"),
        dict(run_id="a", impl="good", p50_ms=0.4, seq_len=8, device="cuda", timestamp="t"),
    ]
    rows[-1]["device_name"] = "H200"
    read_rows(tmp_path / "a", rows)
    report.build([tmp_path / "a"])
    text = (tmp_path / "a" / "report.md").read_text()
    head = text[text.index("## Headline") : text.index("## Tables")]
    lines = [x for x in head.splitlines() if x.startswith("| toy")]
    assert lines[0].startswith("| toy | forward | float32 | H200 | 8 | good | 0.4 |"), lines
    fields = "| toy | forward | float32 | cpu | 8 | fast | 2 | good 4 | 2.00x |"
    assert lines[1] == f"{fields} 2.00x SDPA without a bias |", lines
    assert text.index("## Headline") < text.index("## toy")
    assert (tmp_path / "a" / "headline_forward_float32.png").is_file()  # the same, plotted
    from bench.report.headline import fastest

    best = fastest(report_rows.load([tmp_path / "a"]))
    assert sorted(zip(best["device"], best["seq_len"], best["impl"], strict=True)) == [
        ("cpu", 4, "fast"), ("cpu", 8, "fast"), ("cuda", 8, "good")
    ]  # fmt: skip
    assert best.loc[best["seq_len"] == 8, "floor_ms"].dropna().tolist() == [1.0]


def test_a_run_on_both_devices_sets_them_side_by_side(tmp_path, monkeypatch):
    """CPU against CUDA: each implementation checked on both devices with CUDA's speedup, then
    the fastest checked implementation of each device (a wrong row is neither)."""
    monkeypatch.setitem(CASES, "toy", toy_case({"good": Impl(lambda i: None)}))
    gpu = dict(device="cuda", device_name="H200", timestamp="t", run_id="a")
    rows = [
        dict(run_id="a", impl="good", p50_ms=8.0, timestamp="t"),
        dict(run_id="a", impl="native", p50_ms=4.0, timestamp="t"),
        dict(run_id="a", impl="fast", p50_ms=0.1, status="wrong", timestamp="t"),
        dict(impl="good", p50_ms=0.5, **gpu),
        dict(impl="triton", p50_ms=0.1, **gpu),
    ]
    read_rows(tmp_path / "a", rows)
    report.build([tmp_path / "a"])
    text = (tmp_path / "a" / "report.md").read_text()
    part = text[text.index("## CPU against CUDA") : text.index("## Tables")]
    assert "| 1 | 8 |  | good | 8 | 0.5 | 16.0x |" in part, part
    assert "| 1 | 8 |  | best: native / triton | 4 | 0.1 | 40.0x |" in part, part
