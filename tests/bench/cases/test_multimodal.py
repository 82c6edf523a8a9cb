"""The multimodal cases (mrope, rope_2d) and RoPE's variants (xpos, p_rope) through the harness:
every implementation gated against float64 and recorded with its knobs; Liger's M-RoPE called as
transformers' patch calls it; the sequence the mrope case builds."""

import json

import torch

from bench.cases import CASES
from bench.cases.multimodal import mrope_section, mrope_segments
from bench.registry import Point, as_call
from posenc import functional as F
from tests.helpers import FAST_ARGS, call_twice, fake_module, read_rows, run_bench


def test_multimodal_sweep_gates_every_form(tmp_path):
    out = tmp_path / "mm"
    grids = (  # each style in one layout (both layouts in each: tests/posenc_kernels/test_rope.py)
        "grids=[{cases:[mrope],batch:3,seq_len:[20],d_model:128,num_heads:2,num_kv_heads:1,"
        "layout:bshd,mrope_style:qwen2_vl},"
        "{cases:[mrope],batch:3,seq_len:[20],d_model:128,num_heads:2,num_kv_heads:1,"
        "layout:bhsd,mrope_style:qwen3_vl},"
        "{cases:[rope_2d],batch:2,seq_len:[16,20],d_model:64,num_heads:2,rope_2d_split:pixtral},"
        "{cases:[rope_2d],batch:2,seq_len:[16],d_model:64,num_heads:2,rope_2d_split:axial_xy},"
        "{cases:[rope],batch:1,seq_len:[16],d_model:64,num_heads:2,num_kv_heads:1,"
        "rope_variant:[xpos,p_rope]}]"
    )
    args = [
        "sweep=multimodal",
        grids,
        "impls=[reference,triton]",
        "mode=forward+backward",  # outputs and gradients, both checked
        "calibrate=false",
        *FAST_ARGS,
    ]
    proc = run_bench(*args, f"hydra.run.dir={out}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = read_rows(out / "results.csv")
    by = {}
    for r in rows:
        p = json.loads(r["params"])
        key = p.get("mrope_style") or p.get("rope_2d_split") or p.get("rope_variant")
        by.setdefault((r["case"], key, r["impl"], int(r["seq_len"])), []).append(r)
    for style in ("qwen2_vl", "qwen3_vl"):  # gated, each in its layout
        assert [r["status"] for r in by[("mrope", style, "triton", 20)]] == ["ok"]
        assert [r["status"] for r in by[("mrope", style, "reference", 20)]] == ["ok"]
    for split in ("pixtral", "axial_xy"):
        assert {r["status"] for r in by[("rope_2d", split, "triton", 16)]} == {"ok"}
    skipped = by[("rope_2d", "pixtral", "triton", 20)]
    assert {r["status"] for r in skipped} == {"skipped"}
    assert "not a square grid" in skipped[0]["message"]
    for variant in ("xpos", "p_rope"):
        assert {r["status"] for r in by[("rope", variant, "triton", 16)]} == {"ok"}


def test_mrope_sequence_is_text_image_text():
    for seq_len in (16, 256, 1024, 4096):
        segments = mrope_segments(seq_len)
        text, (t, h, w), rest = segments
        assert text + t * h * w + rest == seq_len and rest >= 0 and h == w and t == 1
        assert 0.6 < h * w / seq_len <= 0.75 or seq_len < 64
    assert mrope_section("qwen2_vl", 128) == ([16, 24, 24], False)
    assert mrope_section("qwen3_vl", 128) == ([24, 20, 20], True)


class _FakeLigerMRope(torch.autograd.Function):
    """Stands in for Liger's Qwen2-VL M-RoPE (CUDA-only): records what it gets and rotates q
    and k in place by the sections' mix of its per-axis tables."""

    calls: list = []

    @staticmethod
    def forward(ctx, q, k, cos, sin, section):
        _FakeLigerMRope.calls.append(
            {
                "bshd_memory": q.transpose(1, 2).is_contiguous(),
                "q_ptr": q.data_ptr(),
                "cos_id": id(cos),
                "cos_shape": tuple(cos.shape),
                "section": list(section),
            }
        )
        half = cos.shape[-1] // 2
        axes = F.mrope_axes(half, section, False)
        idx = torch.arange(half)
        mixed = [t[axes, :, :, idx].permute(1, 2, 0)[:, None] for t in (cos, sin)]
        for x in (q, k):
            x.copy_(F.apply_rope(x, *mixed))
        return q, k


def test_liger_mrope_gets_per_axis_tables_built_once_and_its_own_copies(monkeypatch):
    fake_module(
        monkeypatch, "liger_kernel.ops.qwen2vl_mrope", LigerQwen2VLMRopeFunction=_FakeLigerMRope
    )
    _FakeLigerMRope.calls = []
    case = CASES["mrope"]
    point = Point(2, 24, 256, 2, num_kv_heads=1, layout="bshd")  # D = 128
    inputs, before, _ = call_twice(case, point, "liger")
    first, second = _FakeLigerMRope.calls
    assert first["bshd_memory"] and first["q_ptr"] != inputs["q"].data_ptr()
    assert first["cos_id"] == second["cos_id"] and first["cos_shape"] == (3, 2, 24, 128)
    assert first["section"] == [16, 24, 24]
    assert all(torch.equal(inputs[n], before[n]) for n in "qk")
    want = case.reference({n: v.double() if n in "qk" else v for n, v in inputs.items()})
    # the copies were rotated twice (two calls in place): compare one call on fresh copies
    fresh = as_call(case.impls["liger"].make(inputs)).fn()
    torch.testing.assert_close(fresh[0].double(), want[0], atol=1e-5, rtol=1e-5)
    assert case.impls["liger"].supports(Point(2, 24, 256, 2, mrope_style="qwen3_vl")) is not None
