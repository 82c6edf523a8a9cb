"""RoPE as the tutorial uses it (section 5.2): one module applied to x (B, L, d_model), all of
d_model rotated as a single head: the encoder-level module case beside `rope`'s q and k.

Cost model: reads and writes x once, plus the (L, d_model/2) float32 tables; 3 FLOPs per element.
"""

from __future__ import annotations

import torch

import posenc
from bench.cases._common import (
    TRITON_DEVICES,
    TRITON_ELSEWHERE,
    TRITON_NOTE,
    compile_impl,
    native_impl,
    per_mode,
    triton_kernels,
)
from bench.registry import Case, Cost, Impl, Level, Point
from posenc import functional as F
from posenc import seed


def _build_x(point: Point, device, dtype):
    return {"x": torch.randn(point.batch, point.seq_len, point.d_model, device=device, dtype=dtype)}


def _module_truth(inputs):
    x = inputs["x"]
    cos, sin = F.rope_cos_sin(x.shape[1], x.shape[2], dtype=torch.float64, device=x.device)
    return F.apply_rope(x, cos, sin)


def _module_impl(factory):
    def make(inputs):
        x = inputs["x"]
        module = factory(x.shape[-1], x.shape[1]).to(x.device)
        return lambda: module(x)

    return make


def _module_seed_truth(inputs):
    x = inputs["x"]
    return seed.RoPEPositionalEncoding(x.shape[-1], x.shape[1]).to(x.device).double()(x)


def _module_out(inputs):
    x = inputs["x"]
    cos, sin = F.rope_cos_sin(x.shape[1], x.shape[2], device=x.device)
    out = torch.empty_like(x)
    return lambda: F.apply_rope(x, cos, sin, out=out)


def _module_compiled(inputs):
    x = inputs["x"]
    module = compile_impl(posenc.RoPEPositionalEncoding(x.shape[-1], x.shape[1]).to(x.device))
    return lambda: module(x)


def _module_cost(point: Point, dtype, mode: str) -> Cost:
    n = point.batch * point.seq_len * point.d_model
    one = Cost(2 * n * dtype.itemsize + 2 * point.seq_len * (point.d_model // 2) * 4, 3 * n)
    return per_mode(one, one, mode)


ROPE_MODULE = Case(
    name="rope_module",
    level=Level.ENCODER,
    build=_build_x,
    reference=_module_truth,
    impls={
        "seed": Impl(
            _module_impl(seed.RoPEPositionalEncoding),
            reference=_module_seed_truth,
            note="tutorial 4.5: not a rotation",
        ),
        "reference": Impl(_module_impl(posenc.RoPEPositionalEncoding)),
        "reference_out": Impl(_module_out, grad=False, note="out= preallocated"),
        "compiled": Impl(_module_compiled, compiled=True),
        "triton": Impl(
            _module_impl(lambda *a: triton_kernels().FusedRoPE(*a)),
            devices=TRITON_DEVICES,
            note=TRITON_NOTE,
            elsewhere=TRITON_ELSEWHERE,
        ),
        "native": native_impl(_module_impl(lambda *a: triton_kernels().FusedRoPE(*a))),
    },
    baseline="reference",
    cost=_module_cost,
    grad_inputs=("x",),
    batched=("x",),
    constraint=lambda p: None if p.d_model % 2 == 0 else f"d_model={p.d_model} is odd",
)
