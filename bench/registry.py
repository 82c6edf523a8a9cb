"""How a benchmark case is declared: data, not a script.

A Case names an encoding family, builds its inputs for a sweep point, computes the float64 truth
the correctness check compares against, lists named implementations, and models the bytes and
FLOPs of each mode. Each implementation is a factory: given the inputs it returns a zero-argument
closure (or a `Call`), so that everything the factory does (module construction, weight binding,
compilation handles, layout conversions its users would do once) stays outside the timed region.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

import torch

Inputs = dict[str, Any]  # tensors (and parameter dicts) built once per point
Output = torch.Tensor | tuple[torch.Tensor, ...]

# Knobs: axes that only some cases have. A case declares the ones it reads; the plan crosses a
# case's points with the values of its own knobs only, and the row's `params` column records them.
KNOBS = ("num_kv_heads", "layout", "causal", "fwd_tiles", "bwd_tiles", "rope_scaling")


@dataclass(frozen=True)
class Point:
    """One point of a sweep. head_dim = d_model / num_heads; knobs keep their defaults in the
    cases that do not declare them."""

    batch: int
    seq_len: int
    d_model: int
    num_heads: int
    num_kv_heads: int | None = None  # grouped-query attention: k has this many heads (None: H)
    layout: str = "bhsd"  # memory order of (B, H, L, D) tensors: "bhsd" or "bshd"
    causal: bool = False
    fwd_tiles: str = "default"  # the Triton attention kernel's tiles, "MxNxWARPSxSTAGES"
    bwd_tiles: str = "default"
    rope_scaling: str = "none"  # a long-context RoPE schedule (bench/cases/rope.py: SCALINGS)

    @property
    def head_dim(self) -> int:
        return self.d_model // self.num_heads

    @property
    def kv_heads(self) -> int:
        return self.num_kv_heads or self.num_heads

    def params(self, knobs: tuple[str, ...]) -> str:
        """The `params` column: the case's knobs as JSON (keys sorted)."""
        return json.dumps({k: getattr(self, k) for k in sorted(knobs)})

    def label(self, knobs: tuple[str, ...] = ()) -> str:
        extra = "".join(f" {k}={getattr(self, k)}" for k in knobs)
        return f"B={self.batch} L={self.seq_len} d={self.d_model} H={self.num_heads}{extra}"


POINT_FIELDS = tuple(f.name for f in fields(Point))


@dataclass(frozen=True)
class Cost:
    """What one call of a mode must move and compute at least: the model behind GB/s, TFLOP/s
    and the same-size copy timed beside it."""

    bytes: int
    flops: int


@dataclass
class Call:
    """What an implementation's factory returns: the call, and the tensors its users would
    differentiate (by the case's names) when they are its own rather than the shared inputs'
    (an implementation that writes into its inputs gets private copies)."""

    fn: Callable[[], Output]
    leaves: dict[str, torch.Tensor] | None = None


@dataclass(frozen=True)
class Impl:
    """A named implementation of a case.

    make: inputs -> zero-argument closure returning the output (tensor or tuple), or a Call.
    devices: where it can run ("cpu", "cuda").
    needs: import name that must be available (e.g. "liger_kernel"), else the row is skipped.
    reference: the float64 truth for this impl when it computes something else than the case's
      (the tutorial's code, attention without its bias); its rows say so in `message`.
    grad: False if the impl cannot run backward.
    compiled: True for torch.compile'd impls: the CPU memory probe (a dispatch mode, under which
      torch.compile falls back to eager and can break later compiles) is not run for them.
    supports: point -> None, or why this impl does not apply there (e.g. a layout it lacks).
    holds: how many (B, H, L, L) tensors its call holds at once (eager attention; twice that
      with a backward graph): the runner skips it, saying so, where they would not fit in memory.
    elsewhere: how to run it on a device it lacks (said in the row that skips it).
    """

    make: Callable[[Inputs], Callable[[], Output] | Call]
    devices: tuple[str, ...] = ("cpu", "cuda")
    needs: str | None = None
    reference: Callable[[Inputs], Output] | None = None
    note: str = ""
    grad: bool = True
    compiled: bool = False
    supports: Callable[[Point], str | None] = field(default=lambda p: None)
    holds: int = 0
    elsewhere: str = ""


@dataclass(frozen=True)
class Case:
    """An encoding family with its implementations; see the module docstring.

    build: (point, device, dtype) -> inputs; `grad_inputs` names the ones that get
      requires_grad in the backward modes (a dict of tensors, e.g. a module's parameters, counts
      as all of its entries: "params.w_q.weight").
    reference: float64 inputs -> float64 outputs, differentiable in the grad inputs.
    cost: (point, dtype, mode) -> Cost, per mode.
    batched: inputs with a leading batch dim whose outputs are computed per sequence: the check
      compares the first and last sequences only (float64 truths cost as much as the timing).
    truth_holds: (B, H, L, L) float64 tensors the truth holds at once (attention), for the
      memory guard: a truth that would not fit is not computed, and its rows say so.
    """

    name: str
    level: str  # "encoder" or "attention"
    build: Callable[[Point, torch.device, torch.dtype], Inputs]
    reference: Callable[[Inputs], Output]
    impls: dict[str, Impl]
    baseline: str
    cost: Callable[[Point, torch.dtype, str], Cost]
    grad_inputs: tuple[str, ...] = ()
    batched: tuple[str, ...] = ()
    knobs: tuple[str, ...] = ()
    constraint: Callable[[Point], str | None] = field(default=lambda p: None)
    truth_holds: int = 0

    def check(self, point: Point) -> str | None:
        """Why this point does not apply to the case (None if it does)."""
        if point.d_model % point.num_heads:
            return f"d_model={point.d_model} not divisible by num_heads={point.num_heads}"
        return self.constraint(point)


def as_tuple(out: Output) -> tuple[torch.Tensor, ...]:
    return out if isinstance(out, tuple) else (out,)


def as_call(made) -> Call:
    return made if isinstance(made, Call) else Call(made)
