"""Which of SDPA's paths the attention cases time: a bias passed as a mask SDPA's fused kernels
take (2-D or 4-D, not needing grad), so a row measures SDPA as a user calling it well would get
it. torch reports its choice for the arguments (torch._fused_sdp_choice); on the CPU its flash
kernel takes masks by the same shape rule as the CUDA ones (check_attn_mask_shape), so the
choice is checkable without a GPU."""

import pytest
import torch
from torch.nn.attention import SDPBackend

from bench.cases import bias as B
from bench.cases import sequences as S
from bench.cases.families import FAMILIES, NO_BIAS
from bench.registry import Point

MASKED = [name for name, f in FAMILIES.items() if f.module is not None] + [NO_BIAS.name]
FAMILY = dict(FAMILIES, **{NO_BIAS.name: NO_BIAS})


def _forward(inputs: dict) -> dict:
    """The inputs as a forward row has them: no leaf needs grad (bench/run/point.py)."""
    for t in list(inputs.get("params", {}).values()) + [inputs[n] for n in "qkv"]:
        t.requires_grad_(False)
    return inputs


def _choices(monkeypatch, call) -> list:
    """The backend torch picks for each SDPA call `call` makes."""
    sdpa, picked = torch.nn.functional.scaled_dot_product_attention, []

    def spy(q, k, v, attn_mask=None, is_causal=False, enable_gqa=False, **kw):
        choice = torch._fused_sdp_choice(
            q, k, v, attn_mask, is_causal=is_causal, enable_gqa=enable_gqa
        )
        picked.append(SDPBackend(choice))
        return sdpa(q, k, v, attn_mask=attn_mask, is_causal=is_causal, enable_gqa=enable_gqa)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    call()
    return picked


@pytest.mark.parametrize("family", MASKED)
@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_rows_take_a_fused_kernel(monkeypatch, family, causal):
    point = Point(2, 32, 64, 4, causal=causal)
    inputs = B.build_inputs(FAMILY[family])(point, torch.device("cpu"), torch.float32)
    inputs = dict(_forward(inputs), causal=causal)
    picked = _choices(monkeypatch, B.on_qkv(B._sdpa(FAMILY[family]))(inputs))
    assert picked and SDPBackend.MATH not in picked, picked


@pytest.mark.parametrize("family", [n for n in MASKED if n != NO_BIAS.name])
def test_packed_and_decode_sdpa_rows_take_a_fused_kernel(monkeypatch, family):
    for packed in (True, False):
        case = S._case(FAMILY[family], packed)
        point = Point(1, 32, 64, 4, causal=True, q_len=1, documents=3)
        inputs = _forward(case.build(point, torch.device("cpu"), torch.float32))
        picked = _choices(monkeypatch, case.impls["sdpa"].make(inputs))
        assert picked and SDPBackend.MATH not in picked, (packed, picked)


@pytest.mark.parametrize("family", [n for n in MASKED if n != NO_BIAS.name])
def test_a_mask_that_trains_takes_the_math_path_and_says_so(monkeypatch, family):
    """A learned table in training makes a mask that needs grad, which no fused kernel takes:
    torch picks its math path there, and the row's note says so (only) for those families."""
    point = Point(2, 32, 64, 4)
    inputs = B.build_inputs(FAMILY[family])(point, torch.device("cpu"), torch.float32)
    params = list(inputs.get("params", {}).values())
    for t in params:
        t.requires_grad_(True)  # as the backward modes set the leaves users train
    picked = _choices(monkeypatch, B.on_qkv(B._sdpa(FAMILY[family]))(dict(inputs, causal=False)))
    trains = FAMILY[family].trains and bool(params)
    assert (SDPBackend.MATH in picked) == trains, picked
    assert ("math path" in B._sdpa_note(FAMILY[family])) == trains
