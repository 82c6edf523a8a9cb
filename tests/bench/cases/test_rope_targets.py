"""The rope case's 2026 forms through the command line: what turns (rope_targets: q and k, q
alone, q and k then an output turned back) and DeepSeek-V4's heads (interleaved pairs on the
last R dims, read from its code in transformers), every implementation gated against float64
in every mode, transformers' own DeepSeek-V4 code among them."""

import json

import pytest

from tests.helpers import FAST_ARGS, read_rows, run_bench

pytest.importorskip("transformers", reason="needs transformers (pip install -e '.[hf]')")

# DeepSeek-V4 at a test's size: heads of 32 dims, the last 8 turn (transformers' config class
# and modeling code; the preset configs/models/deepseek-v4-flash.json has the real sizes)
TINY_V4 = {
    "model_type": "deepseek_v4",
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 32,
    "partial_rotary_factor": 0.25,
    "q_lora_rank": 16,
    "o_lora_rank": 16,
    "o_groups": 2,
    "layer_types": ["compressed_sparse_attention", "heavily_compressed_attention"],
}
IMPLS = "impls=[reference,reference_out,compiled,hf,triton,native,native_inplace,liger]"


def _rows(tmp_path, *args):
    out = tmp_path / "run"
    proc = run_bench(*args, "calibrate=false", *FAST_ARGS, f"hydra.run.dir={out}")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return read_rows(out / "results.csv")


def test_deepseek_v4s_forms_are_gated_in_every_mode(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    config = tmp_path / "deepseek_v4" / "config.json"
    config.parent.mkdir()
    config.write_text(json.dumps(TINY_V4))
    rows = _rows(
        tmp_path,
        f"model={config}",
        "cases=[rope]",
        IMPLS,
        "rope_targets=[qk,q,qk_out]",
        "seq_len=[12]",
        "batch=2",
        "mode=[forward,forward+backward]",
        "dtype=[float32,bfloat16]",
    )
    ran = {}
    for r in rows:
        params = json.loads(r["params"])
        assert params["rope"] == "default, base 160000, the last 8 of 32 dims, interleaved"
        targets = params.get("rope_targets", "qk")  # the default is left out
        ran.setdefault(r["status"], set()).add((targets, r["impl"], r["mode"]))
    assert set(ran) == {"ok", "skipped"}, [r["message"] for r in rows if r["status"] != "ok"]
    for targets in ("qk", "q", "qk_out"):
        for impl in ("reference", "compiled", "hf", "triton", "native"):
            for mode in ("forward", "forward+backward"):
                assert (targets, impl, mode) in ran["ok"]
        for impl in ("reference_out", "native_inplace"):
            assert (targets, impl, "forward") in ran["ok"]
    liger = [r for r in rows if r["impl"] == "liger"]
    assert {r["status"] for r in liger} == {"skipped"}


def test_the_forms_without_a_model(tmp_path, monkeypatch):
    """Without model=: every form on whole heads, with p-RoPE too; xPos turns q and k apart
    and is said not to take the other forms."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    rows = _rows(
        tmp_path,
        "cases=[rope]",
        "impls=[reference,compiled,hf,triton,native,seed]",
        "rope_targets=[q,qk_out]",
        "rope_variant=[plain,p_rope,xpos]",
        "seq_len=[12]",
        "batch=1",
        "d_model=64",
        "num_heads=2",
        "mode=[forward+backward]",
    )
    by = {}
    for r in rows:
        params = json.loads(r["params"])
        by[(params["rope_targets"], params.get("rope_variant", "plain"), r["impl"])] = r
    for targets in ("q", "qk_out"):
        for variant in ("plain", "p_rope"):
            for impl in ("reference", "compiled", "triton", "native"):
                assert by[(targets, variant, impl)]["status"] == "ok"
        assert "turns q and k together" in by[(targets, "plain", "hf")]["message"]
        assert "turns q and k" in by[(targets, "plain", "seed")]["message"]
        assert "xPos scales q and k apart" in by[(targets, "xpos", "reference")]["message"]
