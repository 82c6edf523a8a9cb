"""Randomized position ids: Ruoss et al. 2023, "Randomized Positional Encodings Boost Length
Generalization of Transformers" (ACL 2023), section 3.

A sequence of L tokens gets L positions drawn from a range 0 .. M - 1 much longer than any
sequence it will meet (M >> L), without replacement and sorted, so the order survives and a
model trained on short sequences has already seen the large positions a long one needs. The
authors draw them for training and for evaluation alike (as their repository's first bug report
confirms).
"""

from __future__ import annotations

import torch
from torch import Tensor

from posenc._checks import check_positive


def randomized_positions(
    batch: int,
    length: int,
    max_position: int,
    *,
    generator: torch.Generator | None = None,
    device: torch.device | str | None = None,
) -> Tensor:
    """(B, L) int64: per row, L distinct positions drawn uniformly from 0 .. max_position - 1,
    ascending. Every L-subset is equally likely (the L largest of M uniform scores); the
    authors draw one subset per batch, this draws one per row. generator: a torch.Generator
    on `device` (None: the global one, as dropout does)."""
    check_positive("batch", batch)
    check_positive("length", length)
    check_positive("max_position", max_position)
    if length > max_position:
        raise ValueError(
            f"length ({length}) must be <= max_position ({max_position}): positions are drawn "
            "without replacement"
        )
    scores = torch.rand(batch, max_position, generator=generator, device=device)  # (B, M)
    return scores.topk(length, dim=1, sorted=False).indices.sort(dim=1).values  # (B, L)
