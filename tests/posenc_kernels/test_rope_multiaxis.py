"""posenc_kernels.apply_rope with per-token tables (M-RoPE, any gathered table), 2D RoPE grids, xPos
and p-RoPE against the float64 posenc reference, forward, backward and in place (on the CPU
under TRITON_INTERPRET=1)."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

import posenc_kernels
from posenc import functional as F
from tests.posenc_kernels._device import on_device
from tests.posenc_kernels.test_rope import DEVICE, _round

SEGMENTS = [3, (1, 3, 4), 2, (2, 2, 2, 5), 1]  # 3 + 12 + 2 + 8 + 1 = 26 tokens


def _x(b, seq, h, d, layout, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(b, seq, h, d, generator=g, dtype=torch.float64)
    return x.to(dtype) if layout == "bshd" else x.transpose(1, 2).contiguous().to(dtype)


def _rotate64(x, cos, sin, layout, interleaved):
    """float64 reference: cos/sin (B | 1, L, F) per-token rows, broadcast over heads."""
    xb = x.double() if layout == "bhsd" else x.double().transpose(1, 2)  # (B, H, L, D)
    out = F.apply_rope(xb, cos[:, None], sin[:, None], interleaved=interleaved)
    return out if layout == "bhsd" else out.transpose(1, 2)


def _close(got, x, cos, sin, layout, interleaved):
    """float32 within 2e-6; half precision no worse than the float32 reference rounded once."""
    want = _rotate64(x, cos, sin, layout, interleaved)
    if x.dtype == torch.float32:
        assert_close(got.double(), want, atol=2e-6, rtol=2e-6)
        return
    ref = _round(_rotate64(x, cos, sin, layout, interleaved).float(), x.dtype)
    err, err_ref = (got.double() - want).abs().max(), (ref.double() - want).abs().max()
    assert err <= err_ref * 1.01 + 1e-6, (err, err_ref)


def _run(q, k, cos, sin, tables64, layout, interleaved, **kwargs):
    """Forward against the reference, then the backward's gradients against autograd's;
    tables64: ((cos, sin) of q, (cos, sin) of k) in float64, per-token (B | 1, L, F)."""
    (cq, sq), (ck, sk) = tables64
    qd, kd = (t.clone().to(DEVICE).requires_grad_() for t in (q, k))
    qo, ko = posenc_kernels.apply_rope(
        qd, kd, cos.to(DEVICE), sin.to(DEVICE), layout=layout, interleaved=interleaved, **kwargs
    )
    _close(qo.detach().cpu(), q, cq, sq, layout, interleaved)
    _close(ko.detach().cpu(), k, ck, sk, layout, interleaved)
    wq, wk = torch.randn(qo.shape, dtype=q.dtype), torch.randn(ko.shape, dtype=q.dtype)
    (qo * wq.to(DEVICE)).sum().add((ko * wk.to(DEVICE)).sum()).backward()
    q64, k64 = q.double().requires_grad_(), k.double().requires_grad_()
    ref_q = _rotate64(q64, cq, sq, layout, interleaved)
    ref_k = _rotate64(k64, ck, sk, layout, interleaved)
    (ref_q * wq.double()).sum().add((ref_k * wk.double()).sum()).backward()
    tol = {torch.float32: 2e-6, torch.bfloat16: 3e-2}[q.dtype]
    assert_close(qd.grad.cpu().double(), q64.grad, atol=4 * tol, rtol=tol)
    assert_close(kd.grad.cpu().double(), k64.grad, atol=4 * tol, rtol=tol)


MROPE = [  # (name, section, interleaved pairs, M-RoPE interleaving, layout, D, R, Hq, Hk)
    ("qwen2-vl-like gqa", [4, 6, 6], False, False, "bshd", 32, 32, 4, 1),
    ("qwen3-vl-like bhsd", [6, 5, 5], False, True, "bhsd", 32, 32, 3, 3),
    ("interleaved pairs, partial rotary", [2, 3, 3], True, False, "bshd", 40, 16, 2, 2),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("spec", MROPE, ids=lambda s: s[0])
def test_per_token_mrope_tables(spec, dtype):
    _, section, pairs, mixing, layout, d, r, hq, hk = spec
    ids = F.mrope_position_ids(SEGMENTS)
    pos = torch.stack((ids, ids + 7), dim=1)  # (3, B=2, L)
    cos, sin = F.mrope_cos_sin(pos, r, section, interleaved=mixing)  # (B, L, R/2)
    t64 = F.mrope_cos_sin(pos, r, section, interleaved=mixing, dtype=torch.float64)
    b, seq = 2, ids.shape[1]
    q, k = _x(b, seq, hq, d, layout, dtype, 0), _x(b, seq, hk, d, layout, dtype, 1)
    _run(q, k, cos, sin, (t64, t64), layout, pairs)


def test_per_token_tables_of_one_row_broadcast_over_the_batch():
    pos = F.mrope_position_ids(SEGMENTS)[:, None]  # (3, 1, L)
    cos, sin = F.mrope_cos_sin(pos, 32, [4, 6, 6])  # (1, L, F)
    t64 = F.mrope_cos_sin(pos, 32, [4, 6, 6], dtype=torch.float64)
    seq = pos.shape[-1]
    q, k = _x(3, seq, 2, 32, "bshd", torch.float32, 2), _x(3, seq, 1, 32, "bshd", torch.float32, 3)
    _run(q, k, cos, sin, (t64, t64), "bshd", False)


@pytest.mark.parametrize("split, pairs", [("pixtral", False), ("axial_xy", True)])
def test_2d_rope_grid_tables(split, pairs):
    h, w, d = 3, 5, 16
    cos, sin = F.rope_2d_cos_sin(h, w, d, split=split)  # (L, F): rows indexed by token
    c64, s64 = F.rope_2d_cos_sin(h, w, d, split=split, dtype=torch.float64)
    q, k = (
        _x(2, h * w, 4, d, "bhsd", torch.float32, 4),
        _x(2, h * w, 4, d, "bhsd", torch.float32, 5),
    )
    t64 = (c64[None], s64[None])
    _run(q, k, cos, sin, (t64, t64), "bhsd", pairs)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("per_token", [False, True], ids=["ids", "per-token"])
def test_xpos_scales_queries_up_and_keys_down(per_token, dtype):
    d, b, seq, max_len = 32, 2, 9, 40
    ids = torch.tensor([[0, 1, 2, 3, 4, 5, 6, 7, 8], [30, 31, 32, 33, 34, 35, 36, 37, 39]])
    c64, s64 = F.rope_cos_sin(ids, d, dtype=torch.float64)  # (B, L, F)
    x64 = F.xpos_scale(ids, d, 16.0, center=20, dtype=torch.float64)
    t64 = ((c64 * x64, s64 * x64), (c64 / x64, s64 / x64))
    q, k = _x(b, seq, 3, d, "bshd", dtype, 6), _x(b, seq, 1, d, "bshd", dtype, 7)
    if per_token:
        cos, sin = F.rope_cos_sin(ids, d)
        scale = F.xpos_scale(ids, d, 16.0, center=20)
        kwargs = {"xpos_scale": scale.to(DEVICE)}
    else:
        cos, sin = F.rope_cos_sin(max_len, d)
        scale = F.xpos_scale(max_len, d, 16.0, center=20)
        kwargs = {"xpos_scale": scale.to(DEVICE), "positions": ids.to(DEVICE)}
    _run(q, k, cos, sin, t64, "bshd", False, **kwargs)


@pytest.mark.parametrize("pairs", [False, True], ids=["half-split", "interleaved"])
def test_p_rope_narrow_tables_forward_backward_and_in_place(pairs):
    d, p, seq = 32, 0.25, 7
    n = F.rotating_frequencies(d, p)  # 4 of 16 frequencies turn
    full = F.rope_cos_sin(seq, d, rotate_fraction=p, dtype=torch.float64)  # identity columns
    cos, sin = (t[:, :n].contiguous() for t in F.rope_cos_sin(seq, d))  # only the 4 that turn
    t64 = (full[0][None], full[1][None])
    q, k = _x(2, seq, 2, d, "bshd", torch.float32, 8), _x(2, seq, 2, d, "bshd", torch.float32, 9)
    _run(q, k, cos, sin, (t64, t64), "bshd", pairs, rotary_dim=d)
    qi, ki = q.clone().to(DEVICE), k.clone().to(DEVICE)
    posenc_kernels.apply_rope(
        qi, ki, cos.to(DEVICE), sin.to(DEVICE), interleaved=pairs, inplace=True, rotary_dim=d
    )
    _close(qi.cpu(), q, *t64, "bshd", pairs)
    _close(ki.cpu(), k, *t64, "bshd", pairs)


@pytest.mark.parametrize(
    "kwargs, text",
    [
        (
            {"cos": torch.ones(2, 5, 8), "positions": torch.zeros(2, 5, dtype=torch.long)},
            "positions must be None",
        ),
        ({"cos": torch.ones(3, 5, 8)}, "per-token cos/sin"),
        ({"rotary_dim": 12}, "rotary_dim must lie"),
        ({"rotary_dim": 33}, "rotary_dim must be an even int"),
        ({"xpos_scale": torch.ones(5, 4)}, "xpos_scale"),
        ({"xpos_scale": torch.ones(64, 8, dtype=torch.float64)}, "xpos_scale"),
    ],
)
def test_bad_input_names_the_argument(kwargs, text):
    q, k = torch.zeros(2, 5, 2, 32).to(DEVICE), torch.zeros(2, 5, 1, 32).to(DEVICE)
    cos = kwargs.pop("cos", torch.ones(64, 8)).to(DEVICE)
    kwargs = on_device(kwargs)  # positions and xpos_scale too: the check under test comes first
    with pytest.raises((ValueError, TypeError), match=text):
        posenc_kernels.apply_rope(q, k, cos, cos.clone(), **kwargs)
