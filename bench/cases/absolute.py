"""Absolute encodings added to (B, L, d_model) activations: sinusoidal and learned.

Cost model (bytes in the row's dtype): forward reads x and the L table rows and writes the sum,
B L d adds. Backward: dx = dy is autograd's pass-through (no work); the learned table's
gradient sums dy over the batch (reads B L d, writes L d, B L d adds).
"""

from __future__ import annotations

import torch

import posenc
from bench.cases._common import bind, compile_impl, parameters, per_mode
from bench.registry import Case, Cost, Impl, Level, Point
from posenc import functional as F
from posenc import seed


def _x(point: Point, device, dtype):
    return torch.randn(point.batch, point.seq_len, point.d_model, device=device, dtype=dtype)


def _forward_cost(point: Point, dtype) -> Cost:
    n, table = point.batch * point.seq_len * point.d_model, point.seq_len * point.d_model
    return Cost((2 * n + table) * dtype.itemsize, n)


def _sinusoidal_cost(point: Point, dtype, mode: str) -> Cost:
    return per_mode(_forward_cost(point, dtype), Cost(0, 0), mode)


def _learnable_cost(point: Point, dtype, mode: str) -> Cost:
    n, table = point.batch * point.seq_len * point.d_model, point.seq_len * point.d_model
    return per_mode(_forward_cost(point, dtype), Cost((n + table) * dtype.itemsize, n), mode)


def _module(cls, inputs):
    x = inputs["x"]
    module = cls(x.shape[2], x.shape[1]).to(device=x.device, dtype=x.dtype)
    return bind(module, inputs["params"]) if "params" in inputs else module


def _forward(cls, compiled: bool = False):
    def make(inputs):
        module = _module(cls, inputs)
        fn = compile_impl(module) if compiled else module
        return lambda: fn(inputs["x"])

    return make


def _case(name, seed_cls, reference_cls, build, truth, cost, grads, seed_note="", seed_truth=None):
    """The two absolute encodings are declared alike: seed, reference, compiled reference."""
    return Case(
        name=name,
        level=Level.ENCODER,
        build=build,
        reference=truth,
        impls={
            "seed": Impl(_forward(seed_cls), note=seed_note, reference=seed_truth),
            "reference": Impl(_forward(reference_cls)),
            "compiled": Impl(_forward(reference_cls, compiled=True), compiled=True),
        },
        baseline="reference",
        cost=cost,
        grad_inputs=grads,
        batched=("x",),
    )


def _sinusoidal_truth(inputs):
    x = inputs["x"]
    return x + F.sinusoidal_table(x.shape[1], x.shape[2], dtype=torch.float64, device=x.device)


def _seed_sinusoidal_truth(inputs):
    """The tutorial's table as it builds it (float32 angles: its erratum, kept), added in
    float64: the seed is checked against its own formula, not held to float64 angles."""
    x = inputs["x"]
    table = seed.SinusoidalPositionalEncoding(x.shape[2], x.shape[1]).pe[0]
    return x + table.to(device=x.device, dtype=torch.float64)


SINUSOIDAL = _case(
    "sinusoidal",
    seed.SinusoidalPositionalEncoding,
    posenc.SinusoidalPositionalEncoding,
    lambda p, device, dtype: {"x": _x(p, device, dtype)},
    _sinusoidal_truth,
    _sinusoidal_cost,
    ("x",),
    seed_note="float32 angles",
    seed_truth=_seed_sinusoidal_truth,
)


def _build_learnable(point: Point, device, dtype):
    table = posenc.LearnablePositionalEncoding(point.d_model, point.seq_len)
    return {"x": _x(point, device, dtype), "params": parameters(table, device, dtype)}


def _learnable_truth(inputs):
    x = inputs["x"]
    return x + inputs["params"]["pos_embedding.weight"][: x.shape[1]]


LEARNABLE = _case(
    "learnable",
    seed.LearnablePositionalEncoding,
    posenc.LearnablePositionalEncoding,
    _build_learnable,
    _learnable_truth,
    _learnable_cost,
    ("x", "params"),
)
