"""How a benchmark case is declared: data, not a script.

A Case names an encoding family, builds its inputs for a sweep point, computes the float64 truth
the correctness check compares against, lists named implementations, and models the bytes and
FLOPs of each mode. Each implementation is a factory: given the inputs it returns a zero-argument
closure (or a `Call`), so that everything the factory does (module construction, weight binding,
compilation handles, layout conversions its users would do once) stays outside the timed region.

Why this file is long: it is one schema (Case, Impl, Knob, Point and the registry that checks
them), whose parts change together.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import torch

from bench import exits
from bench.results import MODES

Inputs = dict[str, Any]  # tensors (and parameter dicts) built once per point
Output = torch.Tensor | tuple[torch.Tensor, ...]

BASE_AXES = ("batch", "seq_len", "d_model", "num_heads")


class Mode(str, Enum):
    """What a row times (bench/run/tasks.py). A str: the CSV keeps its values (bench.results
    declares them, for the reader of rows)."""

    FORWARD, BACKWARD, FORWARD_BACKWARD = MODES

    __str__ = str.__str__


class Status(str, Enum):
    OK = "ok"
    WRONG = "wrong"
    OOM = "oom"
    SKIPPED = "skipped"
    ERROR = "error"
    TIMEOUT = "timeout"  # no result within the row's time limit (bench/run/watchdog.py)
    UNCHECKED = "unchecked"  # timed, but its float64 truth could not be computed (the message)

    __str__ = str.__str__


class Level(str, Enum):
    ENCODER = "encoder"
    ATTENTION = "attention"
    LAYER = "layer"  # a whole decoder layer around the encoding (bench/cases/layer.py)

    __str__ = str.__str__


DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


@dataclass(frozen=True)
class Knob:
    """An axis only some cases have, declared once, by the case that reads it: its name (the
    config key and the row's `params` entry), its default (what a case that does not declare it
    sees), a line of help (`python -m bench --help`), and its check: (value, key) -> the values
    as a list, or ValueError naming the key (bench/checks.py). The config's key, its
    validation, the help and the plan's crossing all come from this declaration."""

    name: str
    default: Any
    help: str
    check: Callable[[Any, str], list]
    # A knob added to a case after its rows were recorded: at its default it is left out of the
    # `params` column, so that those rows keep their identity (resume, merges, comparisons).
    quiet_default: bool = False
    # What configuration and the run ask of a knob, so that neither names one (docs/
    # architecture.md): the knob whose set value decides this one (left out of such a row's
    # params, which carry that knob's `describe`); what a set value decides (`sets`, `expand`);
    # whether it runs only the cases that read it; the knob it needs set too; `fits`: why a
    # value does not fit a point's base axes, or None.
    set_by: str | None = None
    sets: tuple[str, ...] = ()
    expand: Callable[[Point], Point] | None = None
    describe: Callable[[Point], dict] | None = None
    exclusive: bool = False
    needs: str | None = None
    fits: Callable[[Any, Point], str | None] | None = None

    def is_set(self, value) -> bool:
        return value is not None and value != self.default


KNOBS: dict[str, Knob] = {}  # every knob of the registered cases, by name (register_case)


def _check_knob(knob: Knob) -> None:
    if knob.name in BASE_AXES or not knob.name.isidentifier():
        raise ValueError(f"knob {knob.name!r}: not a name a knob can have")
    if KNOBS.get(knob.name, knob) != knob:
        raise ValueError(f"knob {knob.name!r} is declared twice, differently")


class Point:
    """One point of a sweep: B, L, d_model, H, and the values of the knobs that differ from
    their defaults (any knob reads as an attribute: point.layout). head_dim = d_model / H."""

    __slots__ = ("batch", "seq_len", "d_model", "num_heads", "knobs")

    def __init__(self, batch: int, seq_len: int, d_model: int, num_heads: int, **knobs):
        for name in knobs:
            if name not in KNOBS:
                raise TypeError(f"Point: no knob {name!r} (declared: {', '.join(KNOBS)})")
        set_ = object.__setattr__
        set_(self, "batch", batch)
        set_(self, "seq_len", seq_len)
        set_(self, "d_model", d_model)
        set_(self, "num_heads", num_heads)
        set_(
            self, "knobs", tuple(sorted((k, v) for k, v in knobs.items() if v != KNOBS[k].default))
        )

    def __getattr__(self, name: str):
        if name in KNOBS:
            return dict(self.knobs).get(name, KNOBS[name].default)
        raise AttributeError(f"Point has no attribute or knob {name!r}")

    def __setattr__(self, name, value):
        raise AttributeError("Point is immutable")

    def _key(self) -> tuple:
        return (self.batch, self.seq_len, self.d_model, self.num_heads, self.knobs)

    def __eq__(self, other) -> bool:
        return isinstance(other, Point) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        extra = "".join(f", {k}={v!r}" for k, v in self.knobs)
        return f"Point({self.batch}, {self.seq_len}, {self.d_model}, {self.num_heads}{extra})"

    def __reduce__(self):  # picklable (multirun launchers)
        return (_point, (self.batch, self.seq_len, self.d_model, self.num_heads, self.knobs))

    @property
    def head_dim(self) -> int:
        return self.d_model // self.num_heads

    def params(self, knobs: tuple[str, ...]) -> str:
        """The `params` column: the case's knobs as JSON (keys sorted)."""
        return json.dumps({k: getattr(self, k) for k in sorted(knobs) if self._shown(k)})

    def _shown(self, knob: str) -> bool:
        declared = KNOBS[knob]
        if declared.set_by and getattr(self, declared.set_by, None):
            return False
        return not declared.quiet_default or getattr(self, knob) != declared.default

    def label(self, knobs: tuple[str, ...] = ()) -> str:
        extra = "".join(f" {k}={getattr(self, k)}" for k in knobs if self._shown(k))
        return f"B={self.batch} L={self.seq_len} d={self.d_model} H={self.num_heads}{extra}"


def _point(batch, seq_len, d_model, num_heads, knobs):
    return Point(batch, seq_len, d_model, num_heads, **dict(knobs))


@dataclass(frozen=True)
class Cost:
    """What one call of a mode must move and compute at least: the model behind GB/s, TFLOP/s
    and the same-size copy timed beside it; `tokens`, the tokens one call processes (a layer
    case's: its tokens_per_s column)."""

    bytes: int
    flops: int
    tokens: int = 0


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
      torch.compile falls back to eager and can break later compiles) is not run for them, and
      a run with one raises Dynamo's recompile limits (bench/run/runner.py): say it of any
      implementation that calls torch.compile.
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
    share_base: the implementation that is the same computation without the positional
      encoding (a layer's `nope`): timed in each group, it gives every row its
      `pe_share_best` (against the fastest such row) and, without a partner of its own, its
      `pe_share` (bench/run/share.py).
    share_partners: an implementation -> its own partner without the encoding (the same
      attention path: SDPA's `nope_sdpa`), timed beside it: its `pe_share`.
    """

    name: str
    level: Level
    build: Callable[[Point, torch.device, torch.dtype], Inputs]
    reference: Callable[[Inputs], Output]
    impls: dict[str, Impl]
    baseline: str
    cost: Callable[[Point, torch.dtype, str], Cost]
    grad_inputs: tuple[str, ...] = ()
    batched: tuple[str, ...] = ()
    knobs: tuple[Knob, ...] = ()
    constraint: Callable[[Point], str | None] = field(default=lambda p: None)
    truth_holds: int = 0
    share_base: str | None = None
    share_partners: dict[str, str] = field(default_factory=dict)

    def partner(self, impl: str) -> str | None:
        """The implementation impl's share is measured against (None: no share)."""
        return self.share_partners.get(impl, self.share_base)

    @property
    def knob_names(self) -> tuple[str, ...]:
        return tuple(k.name for k in self.knobs)

    def check(self, point: Point) -> str | None:
        """Why this point does not apply to the case (None if it does)."""
        if point.d_model % point.num_heads:
            return f"d_model={point.d_model} not divisible by num_heads={point.num_heads}"
        return self.constraint(point)


CASES: dict[str, Case] = {}  # every declared case by name: the built-in ones, then plugins'


def register_case(case: Case) -> Case:
    """Adds a case (its knobs are declared with it). A plugin's new case is measured, checked
    and reported like the built-in ones."""
    if not isinstance(case, Case):
        raise TypeError(f"register_case: expected a bench.registry.Case, got {type(case).__name__}")
    if case.name in CASES:
        raise ValueError(f"register_case: a case named {case.name!r} exists already")
    if case.baseline not in case.impls:
        raise ValueError(
            f"register_case: {case.name}: baseline {case.baseline!r} is not one of "
            f"its impls ({', '.join(case.impls)})"
        )
    for partner in (case.share_base, *case.share_partners.values()):
        if partner is not None and partner not in case.impls:
            raise ValueError(
                f"register_case: {case.name}: share partner {partner!r} is not one of its impls"
            )
    for knob in case.knobs:  # all checked before any is declared: a refused case adds none
        _check_knob(knob)
    CASES[case.name] = case
    KNOBS.update((k.name, k) for k in case.knobs)
    return case


def register_impl(case_name: str, impl_name: str, impl: Impl) -> Impl:
    """Adds an implementation to a declared case: it gets the case's inputs, its check against
    the float64 truth (outputs and gradients), timing, metrics and report, like the built-ins."""
    if case_name not in CASES:
        raise ValueError(f"register_impl: no case {case_name!r}; cases: {', '.join(CASES)}")
    if not isinstance(impl, Impl):
        raise TypeError(f"register_impl: expected a bench.registry.Impl, got {type(impl).__name__}")
    if not impl_name.isidentifier() or impl_name in CASES[case_name].impls:
        raise ValueError(
            f"register_impl: {case_name} has an impl {impl_name!r} already, or that is not a name"
        )
    impl = dataclasses.replace(impl, make=_guarded_make(impl.make))
    CASES[case_name].impls[impl_name] = impl
    return impl


def _guarded_make(make: Callable) -> Callable:
    """A plugin's factory and the call it makes, each guarded (bench/exits.py)."""

    def guarded_make(inputs):
        call = as_call(exits.guarded(make)(inputs))
        return dataclasses.replace(call, fn=exits.guarded(call.fn))

    return guarded_make


def as_tuple(out: Output) -> tuple[torch.Tensor, ...]:
    return out if isinstance(out, tuple) else (out,)


def as_call(made) -> Call:
    return made if isinstance(made, Call) else Call(made)
