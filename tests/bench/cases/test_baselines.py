"""Baselines are called the way their own documentation calls them, with nothing in the timed
call that their users would not pay, on inputs they may overwrite."""

import pytest
import torch
from torch.nn.attention.flex_attention import flex_attention

from bench.cases import CASES
from bench.cases.families import FAMILIES
from bench.registry import Point
from posenc import functional as F
from tests.helpers import call_twice, fake_module


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
def test_flex_t5_score_mod_looks_the_bucket_up(monkeypatch):
    """T5's bucket of each j - i comes from a table built once: the score_mod computes no
    logarithm (and nothing in float64) per score, and gives posenc's bias."""
    point = Point(1, 40, 32, 2)
    inputs = CASES["t5_attention"].build(point, torch.device("cpu"), torch.float32)
    score_mod = FAMILIES["t5"].score_mod(inputs)

    def no_bucket(*args, **kwargs):
        raise AssertionError("t5_relative_bucket called per score")

    monkeypatch.setattr(F, "t5_relative_bucket", no_bucket)
    q, k, v = inputs["q"], inputs["k"], inputs["v"]
    got = flex_attention(q, k, v, score_mod=score_mod)  # eager: correctness, not speed
    monkeypatch.undo()
    want = CASES["t5_attention"].reference(inputs)
    torch.testing.assert_close(got, want, atol=2e-5, rtol=2e-5)
    i, j = torch.tensor(3, dtype=torch.int32), torch.tensor(39, dtype=torch.int32)
    assert score_mod(torch.tensor(0.0), 0, torch.tensor(1), i, j).dtype == torch.float32


class _FakeLiger(torch.autograd.Function):
    """Stands in for liger_kernel.ops.rope.LigerRopeFunction (CUDA-only): records what it is
    given and rotates q and k in place, as Liger does."""

    calls: list = []

    @staticmethod
    def forward(ctx, q, k, cos, sin):
        _FakeLiger.calls.append(
            {
                "bshd_memory": q.transpose(1, 2).is_contiguous(),
                "q_ptr": q.data_ptr(),
                "cos_id": id(cos),
                "cos_shape": tuple(cos.shape),
            }
        )
        half = cos.shape[-1] // 2
        for x in (q, k):
            x.copy_(F.apply_rope(x, cos[0, :, :half], sin[0, :, :half]))
        return q, k


def test_liger_gets_its_native_layout_its_own_inputs_and_tables_built_once(monkeypatch):
    fake_module(monkeypatch, "liger_kernel.ops.rope", LigerRopeFunction=_FakeLiger)
    _FakeLiger.calls = []
    rope = CASES["rope"]
    point = Point(2, 8, 64, 4, num_kv_heads=2, layout="bshd")
    inputs, before, call = call_twice(rope, point, "liger")
    first, second = _FakeLiger.calls
    assert first["bshd_memory"], "a (B, L, H, D) memory view: no .contiguous() inside Liger"
    assert first["q_ptr"] != inputs["q"].data_ptr()  # its own copy, which it may overwrite
    assert first["cos_id"] == second["cos_id"] and first["cos_shape"] == (1, 8, 16)
    assert all(torch.equal(inputs[n], before[n]) for n in "qk")  # shared inputs untouched
    assert set(call.leaves) == {"q", "k"} and call.leaves["q"].data_ptr() == first["q_ptr"]
    assert rope.impls["liger"].supports(point) is None
    bhsd = Point(2, 8, 64, 4, layout="bhsd")
    assert "liger_copy" in rope.impls["liger"].supports(bhsd)  # a conversion is its own row
    assert rope.impls["liger_copy"].supports(bhsd) is None
