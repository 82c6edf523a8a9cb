"""How a benchmark case is declared: data, not a script.

A Case names an encoding family, builds its inputs for a sweep point, computes the float64 truth
the correctness gate compares against, and lists named implementations. Each implementation is a
factory: given the inputs it returns a zero-argument closure, so that everything the factory does
(module construction, weight loading, compilation handles) stays outside the timed region.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

Inputs = dict[str, Any]  # tensors (and modules' shared state) built once per point
Output = torch.Tensor | tuple[torch.Tensor, ...]


@dataclass(frozen=True)
class Point:
    """One point of a sweep. head_dim = d_model / num_heads."""

    batch: int
    seq_len: int
    d_model: int
    num_heads: int

    @property
    def head_dim(self) -> int:
        return self.d_model // self.num_heads


@dataclass(frozen=True)
class Impl:
    """A named implementation of a case.

    make: inputs -> zero-argument closure returning the output (tensor or tuple of tensors).
    devices: where it can run ("cpu", "cuda").
    needs: import name that must be available (e.g. "liger_kernel"), else the row is skipped.
    reference: the float64 truth for this impl when it computes something else than the case's
      (the tutorial's code: not the corrected encoding); its rows say so in `message`.
    grad: False if the impl cannot run backward.
    compiled: True for torch.compile'd impls: the CPU memory probe (a dispatch mode, under which
      torch.compile falls back to eager and can break later compiles) is not run for them.
    """

    make: Callable[[Inputs], Callable[[], Output]]
    devices: tuple[str, ...] = ("cpu", "cuda")
    needs: str | None = None
    reference: Callable[[Inputs], Output] | None = None
    note: str = ""
    grad: bool = True
    compiled: bool = False


@dataclass(frozen=True)
class Case:
    """An encoding family with its implementations; see the module docstring."""

    name: str
    level: str  # "encoder" or "attention"
    build: Callable[[Point, torch.device, torch.dtype], Inputs]
    reference: Callable[[Inputs], Output]
    impls: dict[str, Impl]
    baseline: str
    bytes_moved: Callable[[Point, torch.dtype], int]
    flops: Callable[[Point], int]
    grad_inputs: tuple[str, ...] = ()  # input names that get requires_grad in backward modes
    # Inputs with a leading batch dim whose outputs are computed per sequence: the gate then
    # checks the first and last sequences only (float64 truths cost as much as the timing).
    batched: tuple[str, ...] = ()
    constraint: Callable[[Point], str | None] = field(default=lambda p: None)

    def check(self, point: Point) -> str | None:
        """Why this point does not apply to the case (None if it does)."""
        if point.d_model % point.num_heads:
            return f"d_model={point.d_model} not divisible by num_heads={point.num_heads}"
        return self.constraint(point)


def as_tuple(out: Output) -> tuple[torch.Tensor, ...]:
    return out if isinstance(out, tuple) else (out,)
