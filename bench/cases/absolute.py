"""Absolute encodings added to (B, L, d_model) activations: sinusoidal and learned."""

from __future__ import annotations

import torch

import posenc
from bench.registry import Case, Impl, Point
from posenc import functional as F
from posenc import seed


def _x(point: Point, device, dtype):
    return torch.randn(point.batch, point.seq_len, point.d_model, device=device, dtype=dtype)


def _add_bytes(point: Point, dtype) -> int:
    """read x, write x + PE (the table rows, L x d_model, are counted once)."""
    n = point.batch * point.seq_len * point.d_model
    return (2 * n + point.seq_len * point.d_model) * dtype.itemsize


def _add_flops(point: Point) -> int:
    return point.batch * point.seq_len * point.d_model


def _module(cls, inputs):
    return cls(inputs["d_model"], inputs["max_len"]).to(inputs["x"].device)


def _build_sinusoidal(point: Point, device, dtype):
    return {"x": _x(point, device, dtype), "d_model": point.d_model, "max_len": point.seq_len}


def _sinusoidal_truth(inputs):
    x = inputs["x"]
    table = F.sinusoidal_table(x.shape[1], x.shape[2], dtype=torch.float64, device=x.device)
    return x.double() + table


def _forward(cls, compiled: bool = False):
    def make(inputs):
        module = _module(cls, inputs)
        if "weight" in inputs:
            module.pos_embedding.weight.data.copy_(inputs["weight"])
        fn = torch.compile(module) if compiled else module
        return lambda: fn(inputs["x"])

    return make


def _case(name, seed_cls, reference_cls, build, truth, seed_note=""):
    """The two absolute encodings are declared alike: seed, reference, compiled reference."""
    return Case(
        name=name, level="encoder", build=build, reference=truth,
        impls={
            "seed": Impl(_forward(seed_cls), note=seed_note),
            "reference": Impl(_forward(reference_cls)),
            "compiled": Impl(_forward(reference_cls, compiled=True), compiled=True),
        },
        baseline="reference", bytes_moved=_add_bytes, flops=_add_flops, grad_inputs=("x",),
        batched=("x",),
    )  # fmt: skip


SINUSOIDAL = _case(
    "sinusoidal", seed.SinusoidalPositionalEncoding, posenc.SinusoidalPositionalEncoding,
    _build_sinusoidal, _sinusoidal_truth, seed_note="float32 angles",
)  # fmt: skip


def _build_learnable(point: Point, device, dtype):
    inputs = _build_sinusoidal(point, device, dtype)
    inputs["weight"] = torch.randn(point.seq_len, point.d_model, device=device)
    return inputs


def _learnable_truth(inputs):
    return inputs["x"].double() + inputs["weight"].double()


LEARNABLE = _case(
    "learnable", seed.LearnablePositionalEncoding, posenc.LearnablePositionalEncoding,
    _build_learnable, _learnable_truth,
)  # fmt: skip
