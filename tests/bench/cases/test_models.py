"""python -m bench model=<preset|config.json>: the model's attention shapes and RoPE in place
of the knobs (d_model = heads x the rotated width, kv heads, schedule, partial rotary, pairs),
every implementation gated against float64 at them; the cases that take no model said once and
not run; bad models named in one line, exit 2."""

import json

import pytest

from tests.helpers import read_rows, run_bench

pytest.importorskip("transformers", reason="needs transformers (pip install -e '.[hf]')")

FAST = ["timing.warmup_s=0", "timing.min_reps=1", "timing.max_reps=1", "timing.budget_s=0"]


def test_models_set_the_shapes_and_the_rope(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    out = tmp_path / "m"
    args = [
        "model=[llama-3.1-8b,deepseek-v3,pythia-1.4b]",
        "impls=[reference,hf,triton]",
        "seq_len=[16]",
        "batch=1",
        "mode=forward+backward",
        "calibrate=false",
        *FAST,
    ]
    proc = run_bench(*args, f"hydra.run.dir={out}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "chosen cases take no model and are not run" in proc.stdout
    rows = read_rows(out / "results.csv")
    assert {r["case"] for r in rows} == {"rope"}
    by = {(json.loads(r["params"])["model"], r["impl"]): r for r in rows}
    shapes = {  # d_model (heads x rotated head), heads, kv heads
        "llama-3.1-8b": ("4096", "32", 8),
        "deepseek-v3": ("8192", "128", 1),  # MLA: a 64-d slice, one shared key head
        "pythia-1.4b": ("2048", "16", None),
    }
    for model, (d, h, kv) in shapes.items():
        for impl in ("reference", "triton"):
            row = by[(model, impl)]
            assert row["status"] == "ok", row
            assert (row["d_model"], row["num_heads"]) == (d, h)
            assert json.loads(row["params"])["num_kv_heads"] == kv
    assert by[("llama-3.1-8b", "hf")]["status"] == "ok"
    assert "interleaved" in by[("deepseek-v3", "hf")]["message"]
    assert "partial rotary" in by[("pythia-1.4b", "hf")]["message"]


@pytest.mark.parametrize(
    ("args", "text"),
    [
        (["model=no-such-model"], "model='no-such-model': not a preset"),
        (["model=llama-3.1-8b", "d_model=512"], "d_model: model= sets it"),
        (["model=llama-3.1-8b", "rope_theta=1e4"], "rope_theta: model= sets it"),
        (["model=llama-3.1-8b", "cases=[alibi_attention]"], "none of the chosen cases takes"),
        (["model=/no/such/config.json"], "no such file"),
    ],
)
def test_bad_models_are_one_line(tmp_path, args, text):
    out = tmp_path / "bad"
    proc = run_bench(*args, f"hydra.run.dir={out}")
    assert proc.returncode == 2
    lines = [ln for ln in proc.stderr.splitlines() if ln and not ln.startswith("[transformers]")]
    assert len(lines) == 1 and text in lines[0], proc.stderr
    assert not (out / "results.csv").exists()
