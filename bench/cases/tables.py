"""Building RoPE's cos and sin tables for L positions (L, D/2), with a long-context schedule
(knob `rope_scaling`): what a model pays once per length, and how accurate the tables are at
its largest positions (the check's max_abs_err against float64, over every position).

Implementations:
  reference       posenc.functional.rope_cos_sin: angles p * theta_i in float64, one cast;
  float32_angles  the common float32 way (positions and frequencies in float32, as models'
                  code computes them): its angle error grows with the position, about
                  p * 2^-24 rad, so at long contexts its rows are wrong where the reference's
                  are not (the check says by how much).

Cost model: writes the two tables (4 bytes each) and evaluates 2 trig functions per entry.
"""

from __future__ import annotations

import torch

from bench.cases._common import per_mode
from bench.cases._schedule import ROPE_SCALING, SCALINGS, SCHEDULE, scaling_of
from bench.registry import Case, Cost, Impl, Level, Point
from posenc import functional as F


def _build(point: Point, device, dtype):
    return {
        "positions": torch.arange(point.seq_len, device=device),
        "head_dim": point.head_dim,
        "scaling": scaling_of(point),
        "theta": float(point.rope_theta),
    }


def _reference(inputs):
    pos, dim, scaling = inputs["positions"], inputs["head_dim"], inputs["scaling"]
    theta = inputs["theta"]
    return lambda: F.rope_cos_sin(pos, dim, theta, scaling=scaling, seq_len=len(pos))


def _float32_angles(inputs):
    pos, dim, scaling = inputs["positions"], inputs["head_dim"], inputs["scaling"]
    inv_freq, factor = F.rope_frequencies(
        dim, inputs["theta"], scaling=scaling, seq_len=len(pos), device=pos.device
    )
    inv32 = inv_freq.float()

    def build():
        angles = pos.float()[:, None] * inv32  # (L, D/2) in float32
        return factor * angles.cos(), factor * angles.sin()

    return build


def _truth(inputs):
    pos = inputs["positions"]
    return F.rope_cos_sin(
        pos,
        inputs["head_dim"],
        inputs["theta"],
        scaling=inputs["scaling"],
        seq_len=len(pos),
        dtype=torch.float64,
    )


def _cost(point: Point, dtype, mode: str) -> Cost:
    entries = point.seq_len * (point.head_dim // 2)
    one = Cost(2 * entries * 4, 2 * entries)
    return per_mode(one, Cost(0, 0), mode)


ROPE_TABLES = Case(
    name="rope_tables",
    level=Level.ENCODER,
    build=_build,
    reference=_truth,
    impls={
        "reference": Impl(_reference, grad=False, note="float64 angles"),
        "float32_angles": Impl(_float32_angles, grad=False, note="float32 angles"),
    },
    baseline="reference",
    cost=_cost,
    knobs=(ROPE_SCALING, *SCHEDULE),
    constraint=lambda p: None if p.head_dim % 2 == 0 else f"head_dim={p.head_dim} is odd",
)

__all__ = ["ROPE_TABLES", "SCALINGS"]
