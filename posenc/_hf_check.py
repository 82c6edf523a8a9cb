"""posenc's rotation of a model checked against the model's own code in transformers
(posenc._hf_rotation finds and reads that code): the attention scores q_m . k_n after both, at
a few positions, on whole heads where the model's function takes them. posenc.models.load runs
`verify`; bench.conformance runs the same comparison over every model type.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from posenc._hf_rotation import Rotation, find, rope_keys

# Positions at which load compares posenc's rotation with the model's: past most original
# contexts and scaling ramps; `positions` adds one past the original context of a schedule
# that switches by length (LongRoPE's long factors, dynamic NTK).
CHECK_POSITIONS = (0, 1, 2, 3, 7, 100, 511, 1000, 2047, 3001, 4095)
LENGTH_TYPES = ("dynamic", "longrope")


def positions(params: dict, max_positions: int) -> Tensor:
    """The positions to compare a layer type's rotation at (below max_positions when known)."""
    limit = max_positions or max(CHECK_POSITIONS) + 1
    out = [p for p in CHECK_POSITIONS if p < limit]
    if params.get("rope_type") in LENGTH_TYPES:
        original = params.get("original_max_position_embeddings") or max_positions
        if original and original + 1 not in out:
            out.append(int(original) + 1)  # the schedule's other side (transformers' switch)
    return torch.tensor(out)


def tolerance(positions: Tensor) -> float:
    """transformers rounds p * inv_freq in float32, posenc in float64: up to p 2^-24 rad apart
    at position p (2.4e-4 at 4095), so the scores agree to about that relative to the largest;
    a wrong pair layout, direction or frequency is off by 10% to 100%."""
    return 2e-3 + 8 * int(positions.max()) * 2.0**-24


def score_error(
    rotation: Rotation, tables, interleaved: bool, layer_type, at: Tensor, head=(0, 0)
) -> float:
    """Largest difference of the scores q_m . k_n, rotated by posenc (tables(at) ->
    cos, sin; apply_rope from dim start) and by the model, over the largest score; random
    float64 q and k of the width the model's function takes: whole heads, head = (head_dim,
    start), where it takes them (so that the rotated slice's place is checked too), else the
    rotated part. inf where posenc's tables do not fit in that."""
    from posenc.functional import apply_rope

    head_dim, start = head
    whole = bool(head_dim) and rotation.takes(head_dim, layer_type)
    width, start = (head_dim, start) if whole else (rotation.width(layer_type), 0)
    gen = torch.Generator().manual_seed(0)
    q, k = (torch.randn(1, 1, len(at), width, dtype=torch.float64, generator=gen) for _ in range(2))
    qt, kt = rotation(q, k, at, layer_type)
    theirs = qt[0, 0] @ kt[0, 0].T
    cos, sin = tables(at, layer_type)
    if start + 2 * cos.shape[-1] > width:
        return math.inf
    kwargs = dict(interleaved=interleaved, rotary_start=start)
    qo, ko = (apply_rope(x, cos.double(), sin.double(), **kwargs) for x in (q, k))
    return float((qo[0, 0] @ ko[0, 0].T - theirs).abs().max() / theirs.abs().max())


def verify(spec, config) -> None:
    """posenc's rotation of this model against the model's own code in transformers, on the
    attention scores at a few positions (`score_error`): a model posenc would turn
    otherwise is refused in one line, never run with other tables."""
    rotation = find(config) if spec.rope_parameters else None
    if rotation is None:
        return
    for key in rope_keys(spec.rope_parameters, spec.layer_types):
        at = positions(spec.parameters(key), spec.max_position_embeddings)
        head = spec.base_dim(key), spec.rotary_start
        error = score_error(rotation, spec.rope_tables, spec.interleaved, key, at, head)
        if error > tolerance(at):
            where = f"{key} layers" if key else "its layers"
            raise ValueError(
                f"{spec.name}: posenc's rotation of {where} differs from the model's own code "
                f"in transformers ({error:.0%} of the largest score): not reproduced"
            )
