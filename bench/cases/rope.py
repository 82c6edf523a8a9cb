"""RoPE applied to q and k, each (B, H, L, D): the encoder-level rotary case."""

from __future__ import annotations

import torch

import kernels
import posenc
from bench.registry import Case, Impl, Point
from posenc import functional as F
from posenc import seed


def _build(point: Point, device, dtype):
    shape = (point.batch, point.num_heads, point.seq_len, point.head_dim)
    cos, sin = F.rope_cos_sin(point.seq_len, point.head_dim, device=device)
    return {
        "q": torch.randn(shape, device=device, dtype=dtype),
        "k": torch.randn(shape, device=device, dtype=dtype),
        "cos": cos,  # (L, D/2) float32
        "sin": sin,
    }


def _truth(inputs):
    q, k = inputs["q"], inputs["k"]
    cos, sin = F.rope_cos_sin(q.shape[-2], q.shape[-1], dtype=torch.float64, device=q.device)
    return F.apply_rope(q.double(), cos, sin), F.apply_rope(k.double(), cos, sin)


def _seed_module(inputs, dtype=None):
    q = inputs["q"]
    module = seed.RoPEPositionalEncoding(q.shape[-1], q.shape[-2]).to(q.device)
    return module.double() if dtype == torch.float64 else module


def _seed(inputs):
    rope = _seed_module(inputs)
    return lambda: (rope(inputs["q"]), rope(inputs["k"]))


def _seed_truth(inputs):
    rope = _seed_module(inputs, torch.float64)
    return rope(inputs["q"].double()), rope(inputs["k"].double())


def _reference_fn(q, k, cos, sin):
    return F.apply_rope(q, cos, sin), F.apply_rope(k, cos, sin)


def _reference(inputs):
    q, k, cos, sin = inputs["q"], inputs["k"], inputs["cos"], inputs["sin"]
    return lambda: _reference_fn(q, k, cos, sin)


def _reference_out(inputs):
    q, k, cos, sin = inputs["q"], inputs["k"], inputs["cos"], inputs["sin"]
    q_out, k_out = torch.empty_like(q), torch.empty_like(k)  # preallocated: not timed
    return lambda: (F.apply_rope(q, cos, sin, out=q_out), F.apply_rope(k, cos, sin, out=k_out))


def _compiled(inputs):
    fn = torch.compile(_reference_fn)
    q, k, cos, sin = inputs["q"], inputs["k"], inputs["cos"], inputs["sin"]
    return lambda: fn(q, k, cos, sin)


def _triton(inputs):
    q, k, cos, sin = inputs["q"], inputs["k"], inputs["cos"], inputs["sin"]
    return lambda: kernels.apply_rope(q, k, cos, sin, layout="bhsd")


def _liger(inputs):
    from liger_kernel.ops.rope import LigerRopeFunction

    q, k = inputs["q"], inputs["k"]
    cos = torch.cat((inputs["cos"], inputs["cos"]), -1)[None]  # (1, L, D): Liger's layout
    sin = torch.cat((inputs["sin"], inputs["sin"]), -1)[None]
    return lambda: LigerRopeFunction.apply(q, k, cos, sin)


def _bytes(point: Point, dtype) -> int:
    """Read q and k once, write them once: the copy bound (tables are L x D/2, ignored)."""
    return 4 * point.batch * point.seq_len * point.d_model * dtype.itemsize


def _flops(point: Point) -> int:
    return 2 * 3 * point.batch * point.seq_len * point.d_model  # 4 mul + 2 add per pair


ROPE = Case(
    name="rope",
    level="encoder",
    build=_build,
    reference=_truth,
    impls={
        "seed": Impl(_seed, reference=_seed_truth, note="tutorial 4.5: not a rotation"),
        "reference": Impl(_reference),
        "reference_out": Impl(_reference_out, grad=False, note="out= preallocated"),
        "compiled": Impl(_compiled, compiled=True),
        "triton": Impl(_triton, devices=("cuda",)),
        "liger": Impl(_liger, devices=("cuda",), needs="liger_kernel"),
    },
    baseline="reference",
    bytes_moved=_bytes,
    flops=_flops,
    grad_inputs=("q", "k"),
    batched=("q", "k"),
    constraint=lambda p: None if p.head_dim % 2 == 0 else f"head_dim={p.head_dim} is odd",
)


# The tutorial's own usage (section 5.2): one module applied to x (B, L, d_model), all of d_model
# rotated as a single head.


def _build_x(point: Point, device, dtype):
    return {"x": torch.randn(point.batch, point.seq_len, point.d_model, device=device, dtype=dtype)}


def _module_truth(inputs):
    x = inputs["x"]
    cos, sin = F.rope_cos_sin(x.shape[1], x.shape[2], dtype=torch.float64, device=x.device)
    return F.apply_rope(x.double(), cos, sin)


def _module_impl(factory):
    def make(inputs):
        x = inputs["x"]
        module = factory(x.shape[-1], x.shape[1]).to(x.device)
        return lambda: module(x)

    return make


def _module_seed_truth(inputs):
    x = inputs["x"]
    return seed.RoPEPositionalEncoding(x.shape[-1], x.shape[1]).to(x.device).double()(x.double())


def _module_out(inputs):
    x = inputs["x"]
    cos, sin = F.rope_cos_sin(x.shape[1], x.shape[2], device=x.device)
    out = torch.empty_like(x)
    return lambda: F.apply_rope(x, cos, sin, out=out)


def _module_compiled(inputs):
    x = inputs["x"]
    module = torch.compile(posenc.RoPEPositionalEncoding(x.shape[-1], x.shape[1]).to(x.device))
    return lambda: module(x)


ROPE_MODULE = Case(
    name="rope_module",
    level="encoder",
    build=_build_x,
    reference=_module_truth,
    impls={
        "seed": Impl(
            _module_impl(seed.RoPEPositionalEncoding),
            reference=_module_seed_truth,
            note="tutorial 4.5: not a rotation",
        ),  # fmt: skip
        "reference": Impl(_module_impl(posenc.RoPEPositionalEncoding)),
        "reference_out": Impl(_module_out, grad=False, note="out= preallocated"),
        "compiled": Impl(_module_compiled, compiled=True),
        "triton": Impl(_module_impl(kernels.FusedRoPE), devices=("cuda",)),
    },
    baseline="reference",
    bytes_moved=lambda p, dtype: 2 * p.batch * p.seq_len * p.d_model * dtype.itemsize,
    flops=lambda p: 3 * p.batch * p.seq_len * p.d_model,
    grad_inputs=("x",),
    batched=("x",),
    constraint=lambda p: None if p.d_model % 2 == 0 else f"d_model={p.d_model} is odd",
)
