"""The rope_scaling knob in the harness: sweep=long_context end to end at two lengths (each
schedule recorded in params; float32 angles pass at a short length and are caught wrong at a
long one, the float64 reference never), the tutorial's RoPE skipped under a schedule, and an
unknown schedule rejected by name."""

import json

from tests.helpers import read_rows, run_bench

FAST = [
    "timing.warmup_s=0",
    "timing.min_reps=1",
    "timing.max_reps=1",
    "timing.budget_s=0",
    "calibrate=false",
]


def test_long_context_sweep_compares_the_schedules(tmp_path):
    out = tmp_path / "long"
    # triton is left to tests/posenc_kernels: under the interpreter L=16384 takes minutes
    args = [
        "sweep=long_context",
        "seq_len=[64,16384]",
        "d_model=256",
        "num_heads=2",
        "rope_scaling=[none,yarn,llama3]",
        "impls=[reference,float32_angles,reference_out]",
    ]
    proc = run_bench(*args, *FAST, f"hydra.run.dir={out}")
    # float32 angles are wrong at long lengths: the run says so in its exit status
    assert proc.returncode == 3, proc.stderr[-2000:]
    assert (
        proc.stdout.strip()
        .splitlines()[-1]
        .startswith("3 rows wrong, in error, timed out, out of memory or unchecked")
    )
    rows = read_rows(out / "results.csv")
    tables = [r for r in rows if r["case"] == "rope_tables"]
    assert len(tables) == 2 * 3 * 2  # lengths x schedules x impls
    status = {
        (json.loads(r["params"])["rope_scaling"], int(r["seq_len"]), r["impl"]): r["status"]
        for r in tables
    }
    for scaling in ("none", "yarn", "llama3"):
        assert status[(scaling, 64, "float32_angles")] == "ok"
        assert status[(scaling, 16384, "float32_angles")] == "wrong"
        assert status[(scaling, 64, "reference")] == status[(scaling, 16384, "reference")] == "ok"
    rope = [r for r in rows if r["case"] == "rope"]
    assert len(rope) == 2 * 3 * 2
    assert {r["status"] for r in rope} == {"ok"}
    assert {json.loads(r["params"])["rope_scaling"] for r in rope} == {"none", "yarn", "llama3"}


def test_the_tutorials_rope_has_no_schedule(tmp_path):
    out = tmp_path / "seed"
    proc = run_bench(
        "cases=[rope]",
        "impls=[seed,reference]",
        "seq_len=16",
        "d_model=32",
        "num_heads=2",
        "mode=[forward]",
        "rope_scaling=[none,dynamic]",
        *FAST,
        f"hydra.run.dir={out}",
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = {
        (r["impl"], json.loads(r["params"])["rope_scaling"]): (r["status"], r["message"])
        for r in read_rows(out / "results.csv")
    }
    assert got[("seed", "none")][0] == got[("reference", "dynamic")][0] == "ok"
    assert got[("seed", "dynamic")] == ("skipped", "the tutorial's RoPE has no scaling")


def test_an_unknown_schedule_is_named(tmp_path):
    out = tmp_path / "bad"
    proc = run_bench("cases=[rope]", "rope_scaling=ntk", *FAST, f"hydra.run.dir={out}")
    assert proc.returncode == 2
    assert "rope_scaling" in proc.stderr and "yarn" in proc.stderr
    assert not out.exists()


def test_the_knob_offers_every_schedule_and_builds_its_extension():
    """rope_scaling's values are posenc's schedule table (posenc/_scaling.py: a schedule added
    there reaches the knob), each point's dict the schedule's extension of its context."""
    from bench.cases._schedule import ROPE_SCALING, SCALINGS, scaling_of
    from bench.registry import Point
    from posenc._scaling import SCHEDULES, extension

    assert ("none", *SCHEDULES) == SCALINGS
    for kind in SCHEDULES:
        assert ROPE_SCALING.check(kind, "rope_scaling") == [kind]
        point = Point(1, 16, 64, 2, rope_scaling=kind, rope_factor=4.0, rope_original=1024)
        assert scaling_of(point) == extension(kind, 4.0, 1024, 32)
    assert scaling_of(Point(1, 16, 64, 2)) is None
