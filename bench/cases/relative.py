"""Shaw relative-position tables: the tutorial's RelativePositionEncoding API, (L, L, D) x 2."""

from __future__ import annotations

import torch

import posenc
from bench.registry import Case, Impl, Point
from posenc import seed

CLIP = 16  # K: max relative position


def _build(point: Point, device, dtype):
    d = point.head_dim
    return {
        "query": torch.randn(point.batch, point.seq_len, d, device=device, dtype=dtype),
        "emb_k": torch.randn(2 * CLIP + 1, d, device=device),
        "emb_v": torch.randn(2 * CLIP + 1, d, device=device),
    }


def _module(cls, inputs):
    module = cls(inputs["emb_k"].shape[1], CLIP).to(inputs["emb_k"].device)
    module.relative_position_k.weight.data.copy_(inputs["emb_k"])
    module.relative_position_v.weight.data.copy_(inputs["emb_v"])
    return module


def _truth(inputs):
    seq_len = inputs["query"].shape[1]
    i = torch.arange(seq_len, device=inputs["emb_k"].device)
    idx = (i[None, :] - i[:, None]).clamp(-CLIP, CLIP) + CLIP
    return inputs["emb_k"].double()[idx], inputs["emb_v"].double()[idx]


def _forward(cls):
    def make(inputs):
        module, query = _module(cls, inputs), inputs["query"]
        return lambda: module(query, query, query)

    return make


def _bytes(point: Point, dtype) -> int:
    return 2 * point.seq_len * point.seq_len * point.head_dim * 4  # two float32 (L, L, D) tables


RELATIVE_TABLES = Case(
    name="relative_tables",
    level="encoder",
    build=_build,
    reference=_truth,
    impls={
        "seed": Impl(
            _forward(seed.RelativePositionEncoding),
            devices=("cpu",),
            note="index matrix built on the CPU (erratum 6)",
        ),  # fmt: skip
        "reference": Impl(_forward(posenc.RelativePositionEncoding)),
    },
    baseline="reference",
    bytes_moved=_bytes,
    flops=lambda p: 0,
)
