"""The mla_rope case: DeepSeek's decoupled rotary slice of each query head and the latent's shared
rotary key head, gated against float64 for the eager split-rotate-cat, transformers' own lines
(their pairs de-interleaved, gated in that order) and the kernel in place on the strided
slices, with a tiny MLA config.json (interleaved, as V3) and without a model (half-split)."""

import json

import pytest
import torch

from bench.cases import CASES
from bench.cases.mla import _truth, dims
from bench.registry import Point
from tests.helpers import FAST_ARGS, read_rows, run_bench

pytest.importorskip("transformers", reason="needs transformers (pip install -e '.[hf]')")

TINY_MLA = {  # DeepSeek-V3's form at a tenth of its size
    "model_type": "deepseek_v3",
    "hidden_size": 64,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "qk_nope_head_dim": 16,
    "qk_rope_head_dim": 8,
    "v_head_dim": 16,
    "kv_lora_rank": 32,
    "q_lora_rank": None,
    "rope_interleave": True,
    "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
}


def test_every_implementation_is_gated_on_the_slices(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    config = tmp_path / "config.json"
    config.write_text(json.dumps(TINY_MLA))
    for model in (str(config), None):
        out = tmp_path / ("model" if model else "plain")
        shape = [f"model={model}"] if model else ["d_model=32", "num_heads=4"]
        args = ["cases=[mla_rope]", "impls=[reference,hf,triton]", "seq_len=[12]", "batch=2"]
        proc = run_bench(
            *args, *shape, "mode=forward", "calibrate=false", *FAST_ARGS, f"hydra.run.dir={out}"
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        rows = read_rows(out / "results.csv")
        assert {(r["impl"], r["status"]) for r in rows} == {
            ("reference", "ok"),
            ("hf", "ok"),
            ("triton", "ok"),
        }, [r["message"] for r in rows]
        assert all(r["model"] == (model or "") for r in rows)


def test_the_shapes_and_transformers_order(tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps(TINY_MLA))
    point = Point(1, 6, 32, 4, model=str(config))
    assert dims(point) == (16, 8, 32, True)
    inputs = CASES["mla_rope"].build(point, "cpu", torch.float32)
    assert inputs["q"].shape == (1, 6, 4, 24) and inputs["latent"].shape == (1, 6, 40)
    (q, k), (q_hf, k_hf) = _truth(inputs), _truth(inputs, deinterleave=True)
    torch.testing.assert_close(q[..., :16], inputs["q"][..., :16].double())  # passes unturned
    torch.testing.assert_close(q_hf[..., :16], q[..., :16])
    assert not torch.allclose(k, k_hf)  # the same values in transformers' order
    torch.testing.assert_close(k.sort(-1).values, k_hf.sort(-1).values)
    assert "no MLA" in CASES["mla_rope"].constraint(Point(1, 6, 4096, 32, model="llama-3.1-8b"))
