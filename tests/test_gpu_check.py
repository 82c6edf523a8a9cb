"""bench.gpu_check runs end to end in --smoke mode (CPU interpreter or GPU, tiny shape)."""

import csv

from bench import gpu_attention, gpu_check


def test_smoke_run_writes_csv_and_markdown(tmp_path):
    out = gpu_check.main(["--smoke", "--out", str(tmp_path / "run"), "--budget-s", "0.05"])
    with open(out / "rope.csv") as f:
        rows = list(csv.DictReader(f))
    by = {(r["impl"], r["mode"]): r for r in rows}
    for mode in ("forward", "forward+backward"):
        assert by[("triton", mode)]["status"] == "ok"
        assert by[("eager", mode)]["status"] == "ok"
        assert by[("copy", mode)]["status"] == "ok"
        assert float(by[("triton", mode)]["max_abs_err"]) < 0.05
        assert float(by[("triton", mode)]["gbps"]) > 0
    assert "| forward | triton |" in (out / "rope.md").read_text()
    with open(out / "attention.csv") as f:
        rows = list(csv.DictReader(f))
    by = {(r["case"], r["impl"], r["mode"], r["causal"]): r for r in rows}
    for case in ("alibi_attention", "t5_attention", "shaw_attention"):
        for mode in ("forward", "forward+backward"):
            for causal in ("False", "True"):
                row = by[(case, "triton", mode, causal)]
                assert row["status"] == "ok", row
                assert float(row["max_abs_err"]) < 0.04 and float(row["tflops"]) > 0
    assert by[("alibi_attention", "sdpa_bias", "forward", "True")]["status"] == "ok"
    assert by[("shaw_attention", "eager", "forward", "False")]["status"] == "ok"
    assert (
        "| shaw_attention | True | forward+backward | triton |"
        in (out / "attention.md").read_text()
    )
    with open(out / "tiles.csv") as f:  # tuning rows (smoke: two candidates per mode)
        rows = list(csv.DictReader(f))
    tiles = {(r["case"], r["impl"], r["mode"]): r["status"] for r in rows if "[" in r["impl"]}
    assert len(tiles) == 2 * 4 and set(tiles.values()) == {"ok"}, tiles
    label = gpu_attention._label(gpu_attention.BWD_TILES[1])
    assert tiles[("shaw_attention", label, "forward+backward")] == "ok"
    summary = (out / "tiles.md").read_text().split("| default / fastest |")[1]
    assert summary.count("| alibi_attention |") == summary.count("| shaw_attention |") == 2


def test_unknown_part_is_refused(tmp_path, capsys):
    try:
        gpu_check.main(["--smoke", "--out", str(tmp_path / "run"), "--parts", "rope,flash"])
    except SystemExit as exc:
        assert exc.code == 2 and "--parts" in capsys.readouterr().err
        assert not (tmp_path / "run").exists()
        return
    raise AssertionError("an unknown part was accepted")


def test_refuses_to_overwrite_a_run(tmp_path):
    (tmp_path / "run").mkdir()
    try:
        gpu_check.main(["--smoke", "--out", str(tmp_path / "run")])
    except FileExistsError:
        return
    raise AssertionError("an existing run directory was reused")


def test_deadline_leaves_later_shapes_out_and_still_writes(tmp_path):
    out = gpu_check.main(["--smoke", "--out", str(tmp_path / "run"), "--deadline-s", "0",
                          "--parts", "rope"])  # fmt: skip
    assert not (out / "rope.md").exists()  # no shape started after the deadline
    assert (out / "tests.txt").read_text().startswith("not run")
