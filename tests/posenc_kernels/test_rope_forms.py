"""The rotation's 2026 forms in posenc_kernels.apply_rope, on both kernels (Triton, under the
interpreter on a CPU; the C kernel), against explicit float64 rotation matrices (tests/posenc/
naive.py): the rotated slice at the end of the head (rotary_start = D - R, DeepSeek-V4's heads,
[no position | rotary]), the inverse rotation (DeepSeek-V4 turns its attention output back),
q alone (k=None: an indexer's queries). Forward, backward and in place; float32 and bfloat16."""

import contextlib

import pytest
import torch
from torch.testing import assert_close

import posenc_kernels
from posenc import functional as F
from posenc_kernels import rope_cpu
from posenc_kernels._runtime import native_cpu
from tests.posenc import naive
from tests.posenc_kernels._device import DEVICE

B, L, HQ, HK = 2, 7, 3, 1


def _matrices(d: int, r: int, start: int, interleaved: bool, inverse: bool):
    """(L, D, D): at each position the rotation of dims start .. start + R - 1, the identity
    elsewhere; transposed for the inverse."""
    mats = torch.stack([torch.eye(d, dtype=torch.float64) for _ in range(L)])
    for p in range(L):
        block = naive.rotation_matrix(p, r, r, interleaved)
        mats[p, start : start + r, start : start + r] = block.T if inverse else block
    return mats


def _turn(x, mats):
    """x (B, L, H, D) -> each token's row times its position's matrix."""
    return torch.einsum("lij,blhj->blhi", mats, x.double())


def _backends():
    native = [] if _no_compiler() else ["native"]
    return ["triton", *native]


def _no_compiler() -> bool:
    try:
        rope_cpu._compiler()
    except RuntimeError:
        return True
    return False


def _on(backend: str):
    return native_cpu() if backend == "native" else contextlib.nullcontext()


def _device(backend: str) -> str:
    return "cpu" if backend == "native" else DEVICE


FORMS = [  # (d, r, start, interleaved, inverse, q_only)
    (16, 4, 12, True, False, False),  # DeepSeek-V4's q and kv: interleaved, the last R dims
    (16, 4, 12, True, True, False),  # its output turned back
    (16, 6, 10, False, False, True),  # half-split, the last R dims, q alone
    (16, 8, 3, False, False, False),  # a slice in the middle: dims before and after pass
    (12, 12, 0, False, True, True),  # the whole head, inverse, q alone
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("form", FORMS, ids=str)
@pytest.mark.parametrize("backend", _backends())
def test_forward_and_backward_against_rotation_matrices(backend, form, dtype):
    d, r, start, pairs, inverse, q_only = form
    dev = _device(backend)
    mats = _matrices(d, r, start, pairs, inverse)
    q0 = torch.randn(B, L, HQ, d, dtype=torch.float64).to(dtype)
    k0 = torch.randn(B, L, HK, d, dtype=torch.float64).to(dtype)
    q, k = (t.to(dev).requires_grad_() for t in (q0, k0))
    cos, sin = (t.to(dev) for t in F.rope_cos_sin(L, r))
    kwargs = dict(interleaved=pairs, rotary_start=start, inverse=inverse)
    with _on(backend):
        qo, ko = posenc_kernels.apply_rope(q, None if q_only else k, cos, sin, **kwargs)
    assert (ko is None) == q_only
    tol = dict(atol=3e-6, rtol=3e-6) if dtype == torch.float32 else dict(atol=2e-2, rtol=1e-2)
    assert_close(qo.detach().cpu().double(), _turn(q0, mats), **tol)
    if not q_only:
        assert_close(ko.detach().cpu().double(), _turn(k0, mats), **tol)
    # the gradient of <w, M x> is M^T w
    w = torch.randn(qo.shape, dtype=torch.float64)
    with _on(backend):
        (qo * w.to(dev, dtype)).sum().backward()
    back = torch.einsum("lji,blhj->blhi", mats, w.to(dtype).double())
    assert_close(q.grad.cpu().double(), back, **tol)


@pytest.mark.parametrize("form", FORMS, ids=str)
@pytest.mark.parametrize("backend", _backends())
def test_in_place(backend, form):
    d, r, start, pairs, inverse, q_only = form
    dev = _device(backend)
    mats = _matrices(d, r, start, pairs, inverse)
    q0 = torch.randn(B, L, HQ, d, dtype=torch.float32)
    k0 = torch.randn(B, L, HK, d, dtype=torch.float32)
    q, k = q0.clone().to(dev), k0.clone().to(dev)
    cos, sin = (t.to(dev) for t in F.rope_cos_sin(L, r))
    kwargs = dict(interleaved=pairs, rotary_start=start, inverse=inverse, inplace=True)
    with _on(backend):
        qo, ko = posenc_kernels.apply_rope(q, None if q_only else k, cos, sin, **kwargs)
    assert qo is q
    assert_close(q.cpu().double(), _turn(q0, mats), atol=3e-6, rtol=3e-6)
    want_k = k0.double() if q_only else _turn(k0, mats)
    assert_close(k.cpu().double(), want_k, atol=3e-6, rtol=3e-6)


@pytest.mark.parametrize("start", [-1, 13, 2.0, True])
def test_a_start_outside_the_head_is_refused(start):
    q = torch.zeros(1, 2, 1, 16)
    cos, sin = F.rope_cos_sin(2, 4)
    with pytest.raises(ValueError, match=r"^rotary_start must be an int in 0 \.\. D - R = 12"):
        posenc_kernels.apply_rope(q, q, cos, sin, rotary_start=start)
