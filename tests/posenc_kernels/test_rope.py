"""posenc_kernels.rope against the float64 posenc reference (on the CPU under
TRITON_INTERPRET=1)."""

import os
from dataclasses import dataclass

import pytest
import torch
from torch.testing import assert_close
from torch.utils._python_dispatch import TorchDispatchMode

import posenc_kernels
from posenc import functional as F
from posenc_kernels import rope

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
# Inputs and references are built on the CPU in float64; only the kernel runs on DEVICE
# (a GPU when there is one, else the CPU under TRITON_INTERPRET=1, set in tests/conftest.py).
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def _on(*tensors):
    return [t.to(DEVICE) for t in tensors]


@dataclass(frozen=True)
class Case:
    name: str
    layout: str
    interleaved: bool
    b: int
    seq: int
    hq: int
    hk: int
    d: int
    r: int  # rotary dim (r < d: partial rotary)
    positions: str  # "none" | "int" | "per_seq" | "ids"


# A curated table (not a cartesian product): each row exercises something different.
CASES = [
    Case("llama-like gqa", "bshd", False, 2, 7, 4, 2, 64, 64, "none"),
    Case("bhsd offset D=80", "bhsd", False, 1, 5, 3, 3, 80, 80, "int"),
    Case("gptj per-seq D=96", "bshd", True, 3, 6, 4, 1, 96, 96, "per_seq"),
    Case("partial interleaved ids", "bhsd", True, 2, 9, 2, 2, 64, 32, "ids"),
    Case("one head partial D=80", "bshd", False, 2, 5, 1, 1, 80, 48, "ids"),
    Case("partial gptj offset", "bshd", True, 1, 3, 5, 1, 96, 64, "int"),
    Case("bhsd per-seq L=17", "bhsd", False, 2, 17, 8, 2, 32, 32, "per_seq"),
]


def _positions(case: Case):
    """(argument for apply_rope, (B, L) position ids for the reference)."""
    base = torch.arange(case.seq)
    if case.positions == "none":
        return None, base.expand(case.b, -1)
    if case.positions == "int":
        return 11, (11 + base).expand(case.b, -1)
    if case.positions == "per_seq":
        offs = torch.tensor([3, 0, 20][: case.b])
        return offs, offs[:, None] + base
    ids = torch.randint(0, 40, (case.b, case.seq))
    return ids, ids


def _make(case: Case, h: int, dtype):
    shape = (
        (case.b, case.seq, h, case.d) if case.layout == "bshd" else (case.b, h, case.seq, case.d)
    )
    return torch.randn(shape, dtype=torch.float64).to(dtype)


def _reference(x, ids, case: Case):
    """float64 posenc rotation of x (any dtype) at position ids (B, L)."""
    cos, sin = F.rope_cos_sin(ids, case.r, dtype=torch.float64)  # (B, L, R/2)
    x64 = x.double()
    if case.layout == "bshd":  # heads after L: tables broadcast over dim 2
        return F.apply_rope(
            x64.transpose(1, 2), cos[:, None], sin[:, None], interleaved=case.interleaved
        ).transpose(1, 2)
    return F.apply_rope(x64, cos[:, None], sin[:, None], interleaved=case.interleaved)


def _round(x32, dtype):
    """float32 -> dtype as the backend rounds: to nearest on a GPU; Triton 3.9's interpreter
    truncates float32 -> bfloat16 (round toward zero), which doubles the worst-case error."""
    if dtype == torch.bfloat16 and os.environ.get("TRITON_INTERPRET") == "1":
        return (x32.view(torch.int32) & ~0xFFFF).view(torch.float32).to(dtype)
    return x32.to(dtype)


def _low_precision_reference(x, ids, case: Case):
    """The float32 posenc rotation (float32 tables), rounded once to x's dtype like the backend."""
    cos, sin = F.rope_cos_sin(ids, case.r)
    xt = x.float().transpose(1, 2) if case.layout == "bshd" else x.float()
    out = F.apply_rope(xt, cos[:, None], sin[:, None], interleaved=case.interleaved)
    return _round(out.transpose(1, 2) if case.layout == "bshd" else out, x.dtype)


def _check_against_reference(got, x, ids, case, dtype):
    want = _reference(x, ids, case)
    if dtype == torch.float32:
        assert_close(got.double(), want, atol=2e-6, rtol=2e-6)
        return
    # Low precision: the kernel may not do worse than the reference's own rounding error.
    ref_lp = _low_precision_reference(x, ids, case)
    err_kernel = (got.double() - want).abs().max()
    err_ref = (ref_lp.double() - want).abs().max()
    assert err_kernel <= err_ref * 1.01 + 1e-6, (err_kernel, err_ref)
    eps = torch.finfo(dtype).eps
    assert_close(got.double(), want, atol=4 * eps, rtol=2 * eps)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_forward_and_backward_match_reference(case, dtype):
    pos_arg, ids = _positions(case)
    q, k = _make(case, case.hq, dtype), _make(case, case.hk, dtype)
    q0, k0 = q.clone(), k.clone()
    cos, sin = _on(*F.rope_cos_sin(64, case.r))  # L_max = 64 rows
    q, k = (t.to(DEVICE).requires_grad_() for t in (q, k))
    if isinstance(pos_arg, torch.Tensor):
        pos_arg = pos_arg.to(DEVICE)
    qo, ko = posenc_kernels.apply_rope(
        q, k, cos, sin, positions=pos_arg, interleaved=case.interleaved, layout=case.layout
    )
    assert qo.shape == q.shape and ko.shape == k.shape and qo.dtype == dtype
    assert torch.equal(q.detach().cpu(), q0) and torch.equal(k.detach().cpu(), k0)  # untouched
    _check_against_reference(qo.detach().cpu(), q0, ids, case, dtype)
    _check_against_reference(ko.detach().cpu(), k0, ids, case, dtype)

    # Backward: d<w, R x>/dx = R^T w, the inverse rotation of the upstream gradient.
    wq, wk = torch.randn(qo.shape, dtype=dtype), torch.randn(ko.shape, dtype=dtype)
    (qo * wq.to(DEVICE)).sum().add((ko * wk.to(DEVICE)).sum()).backward()
    q64 = q0.double().requires_grad_()
    k64 = k0.double().requires_grad_()
    (_reference(q64, ids, case) * wq.double()).sum().add(
        (_reference(k64, ids, case) * wk.double()).sum()
    ).backward()
    tol = {torch.float32: 2e-6, torch.float16: 4e-3, torch.bfloat16: 3e-2}[dtype]
    assert_close(q.grad.cpu().double(), q64.grad, atol=tol * 4, rtol=tol)
    assert_close(k.grad.cpu().double(), k64.grad, atol=tol * 4, rtol=tol)


@pytest.mark.parametrize("case", CASES[:4], ids=lambda c: c.name)
def test_inplace_writes_into_the_inputs(case):
    pos_arg, ids = _positions(case)
    q, k = _make(case, case.hq, torch.float32), _make(case, case.hk, torch.float32)
    want_q, want_k = _reference(q, ids, case), _reference(k, ids, case)
    cos, sin = _on(*F.rope_cos_sin(64, case.r))
    q, k = _on(q, k)
    if isinstance(pos_arg, torch.Tensor):
        pos_arg = pos_arg.to(DEVICE)
    qo, ko = posenc_kernels.apply_rope(
        q,
        k,
        cos,
        sin,
        positions=pos_arg,
        interleaved=case.interleaved,
        layout=case.layout,
        inplace=True,
    )
    assert qo is q and ko is k
    assert_close(q.cpu().double(), want_q, atol=2e-6, rtol=2e-6)
    assert_close(k.cpu().double(), want_k, atol=2e-6, rtol=2e-6)


def test_strided_views_of_a_fused_qkv_projection():
    """q and k split out of (B, L, 3, H, D) are strided views: no copy is made, outputs match."""
    b, seq, h, d = 2, 6, 3, 32
    qkv = torch.randn(b, seq, 3, h, d, device=DEVICE)
    q, k = qkv[:, :, 0], qkv[:, :, 1]
    assert not q.is_contiguous()
    cos, sin = _on(*F.rope_cos_sin(seq, d))
    qo, ko = posenc_kernels.apply_rope(q, k, cos, sin)
    case = Case("qkv", "bshd", False, b, seq, h, h, d, d, "none")
    ids = torch.arange(seq).expand(b, -1)
    assert_close(qo.cpu().double(), _reference(q.cpu(), ids, case), atol=2e-6, rtol=2e-6)
    v_before = qkv[:, :, 2].clone()
    posenc_kernels.apply_rope(q, k, cos, sin, inplace=True)  # writes through the views into qkv
    assert torch.equal(qkv[:, :, 0], qo) and torch.equal(qkv[:, :, 1], ko)
    assert torch.equal(qkv[:, :, 2], v_before)  # v, between q and k in memory, untouched


def test_offsets_beyond_int32():
    """Element offsets past 2**31 (b * stride_b) must not wrap: the kernel indexes in int64."""
    # 4 GiB of address space; on the CPU the untouched pages cost nothing.
    storage = torch.empty(2**31 + 64, dtype=torch.bfloat16, device=DEVICE)
    q = storage.as_strided((3, 1, 1, 8), (2**30, 8, 8, 1))
    k = storage.as_strided((3, 1, 1, 8), (2**30, 8, 8, 1), 16)
    q.copy_(torch.randn(3, 1, 1, 8))
    k.copy_(torch.randn(3, 1, 1, 8))
    cos, sin = _on(*F.rope_cos_sin(4, 8))
    positions = torch.tensor([0, 1, 2], device=DEVICE)
    qo, ko = posenc_kernels.apply_rope(q, k, cos, sin, positions=positions)
    case = Case("big", "bshd", False, 3, 1, 1, 1, 8, 8, "per_seq")
    ids = torch.tensor([[0], [1], [2]])
    _check_against_reference(qo.cpu(), q.cpu(), ids, case, torch.bfloat16)
    _check_against_reference(ko.cpu(), k.cpu(), ids, case, torch.bfloat16)


def test_torch_compile_of_a_function_calling_apply_rope():
    cos, sin = _on(*F.rope_cos_sin(8, 16))

    def block(q, k):
        qo, ko = posenc_kernels.apply_rope(q, k, cos, sin)
        return (qo * 2).sum(-1), ko

    q, k = _on(torch.randn(2, 8, 2, 16), torch.randn(2, 8, 1, 16))
    compiled = torch.compile(block, fullgraph=True)
    want = block(q, k)
    got = compiled(q, k)
    assert_close(got[0], want[0])
    assert_close(got[1], want[1])


@pytest.mark.parametrize("interleaved", [False, True])
def test_fused_module_is_a_drop_in_for_the_reference(interleaved):
    import posenc

    ref = posenc.RoPEPositionalEncoding(16, 32, interleaved=interleaved).to(DEVICE)
    fused = rope.FusedRoPE(16, 32, interleaved=interleaved).to(DEVICE)
    cos, sin = posenc.functional.rope_cos_sin(32, 16)  # the default tables' one definition
    assert torch.equal(fused.cos_cached.cpu(), cos) and torch.equal(fused.sin_cached.cpu(), sin)
    x3, x4 = _on(torch.randn(2, 5, 16), torch.randn(2, 3, 5, 16))
    ids = torch.tensor([[0, 3, 6, 9, 12], [31, 0, 1, 2, 3]], device=DEVICE)
    for x in (x3, x4):
        assert_close(fused(x), ref(x), atol=1e-6, rtol=1e-6)
        assert_close(fused(x, positions=4), ref(x, positions=4), atol=1e-6, rtol=1e-6)
        assert_close(fused(x, positions=ids), ref(x, positions=ids), atol=1e-6, rtol=1e-6)


class _Ops(TorchDispatchMode):
    """Records every aten op a call dispatches."""

    def __init__(self):
        super().__init__()
        self.names = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.add(str(func))
        return func(*args, **(kwargs or {}))


def test_tensor_positions_need_no_host_sync():
    """Decoding with per-sequence offsets: apply_rope with tensor positions reads no value back
    to the host (no aten._local_scalar_dense, what int(positions.max()) dispatches), compiles
    with fullgraph=True and, on a GPU, is captured in a CUDA graph and replayed."""
    cos, sin = _on(*F.rope_cos_sin(64, 16))
    q, k = _on(torch.randn(3, 1, 4, 16), torch.randn(3, 1, 2, 16))
    offsets = torch.tensor([5, 0, 40], device=DEVICE)

    def step(q, k, offsets):
        return posenc_kernels.apply_rope(q, k, cos, sin, positions=offsets)

    with _Ops() as ops:
        want = step(q, k, offsets)
    assert "aten._local_scalar_dense.default" not in ops.names, sorted(ops.names)
    got = torch.compile(step, fullgraph=True)(q, k, offsets)
    assert_close(got[0], want[0])
    assert_close(got[1], want[1])
    case = Case("decode", "bshd", False, 3, 1, 4, 2, 16, 16, "per_seq")
    _check_against_reference(want[0].cpu(), q.cpu(), offsets.cpu()[:, None], case, torch.float32)
    if DEVICE == "cuda":
        graph = torch.cuda.CUDAGraph()
        step(q, k, offsets)  # warm-up: compiles the kernel outside the capture
        with torch.cuda.graph(graph):
            out = step(q, k, offsets)
        offsets.copy_(torch.tensor([1, 2, 3], device=DEVICE))  # new offsets, same graph
        graph.replay()
        assert_close(out[0], step(q, k, offsets)[0])


@pytest.mark.parametrize(
    "scaling",
    [
        {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16},
        {"type": "llama3", "factor": 8.0, "original_max_position_embeddings": 16},
        {
            "type": "longrope",
            "short_factor": [1.0, 1.5, 2.0, 3.0],
            "long_factor": [2.0, 3.0, 5.0, 9.0],
            "original_max_position_embeddings": 16,
            "factor": 2.0,
        },
    ],
    ids=lambda s: s["type"],
)
def test_the_kernel_takes_any_schedules_tables(scaling):
    """A long-context variant changes the tables (and scales them by its attention factor);
    the kernel consumes them unchanged: FusedRoPE over posenc's tables against posenc's module,
    partial rotary."""
    import posenc

    ref = posenc.RoPEPositionalEncoding(16, 32, scaling=scaling, rotary_dim=8).to(DEVICE)
    tables = F.rope_cos_sin(32, 8, scaling=scaling, seq_len=32)  # posenc's schedule, once
    fused = rope.FusedRoPE(16, 32, tables=tables).to(DEVICE)
    assert fused.rotary_dim == 8
    assert_close(fused.cos_cached, ref.cos_cached, atol=2e-7, rtol=0)
    x = torch.randn(2, 3, 32, 16, device=DEVICE)
    assert_close(fused(x), ref(x), atol=1e-6, rtol=1e-6)
    q, k = _on(torch.randn(2, 32, 4, 16), torch.randn(2, 32, 2, 16))
    cos, sin = _on(*F.rope_cos_sin(32, 8, scaling=scaling, seq_len=32))
    qo, _ = posenc_kernels.apply_rope(q, k, cos, sin)
    assert_close(qo, F.apply_rope(q.transpose(1, 2), cos, sin).transpose(1, 2))
