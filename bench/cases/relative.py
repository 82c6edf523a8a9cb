"""Shaw relative-position tables: the tutorial's RelativePositionEncoding API, (L, L, D) x 2.

Cost model: forward gathers two (L, L, D) tensors from the (2K + 1, D) tables (writes 2 L^2 D
elements, reads the small tables); backward scatter-adds the two (L, L, D) gradients into the
tables (reads 2 L^2 D, writes 2 (2K + 1) D, 2 L^2 D adds).
"""

from __future__ import annotations

import torch

import posenc
from bench.cases._common import bind, parameters, per_mode
from bench.registry import Case, Cost, Impl, Level, Point
from posenc import seed

CLIP = 16  # K: max relative position


def _build(point: Point, device, dtype):
    d = point.head_dim
    tables = posenc.RelativePositionEncoding(d, CLIP)
    return {
        "query": torch.randn(point.batch, point.seq_len, d, device=device, dtype=dtype),
        "params": parameters(tables, device, dtype),
    }


def _truth(inputs):
    seq_len = inputs["query"].shape[1]
    params = inputs["params"]
    emb_k, emb_v = params["relative_position_k.weight"], params["relative_position_v.weight"]
    i = torch.arange(seq_len, device=emb_k.device)
    idx = (i[None, :] - i[:, None]).clamp(-CLIP, CLIP) + CLIP
    return emb_k[idx], emb_v[idx]


def _forward(cls):
    def make(inputs):
        query = inputs["query"]
        module = bind(cls(query.shape[2], CLIP).to(query.device), inputs["params"])
        return lambda: module(query, query, query)

    return make


def _cost(point: Point, dtype, mode: str) -> Cost:
    gathered = 2 * point.seq_len**2 * point.head_dim
    table = 2 * (2 * CLIP + 1) * point.head_dim
    forward = Cost((gathered + table) * dtype.itemsize, 0)
    return per_mode(forward, Cost((gathered + table) * dtype.itemsize, gathered), mode)


RELATIVE_TABLES = Case(
    name="relative_tables",
    level=Level.ENCODER,
    build=_build,
    reference=_truth,
    impls={
        "seed": Impl(
            _forward(seed.RelativePositionEncoding),
            devices=("cpu",),
            note="index matrix built on the CPU (erratum 6)",
        ),
        "reference": Impl(_forward(posenc.RelativePositionEncoding)),
    },
    baseline="reference",
    cost=_cost,
    grad_inputs=("params",),
)
