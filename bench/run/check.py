"""The correctness check: before anything is timed, every implementation's outputs, and in the
backward modes the gradients of every input that requires grad (tables and parameters
included), are compared with float64 autograd of the case's reference. A wrong result is
recorded as status "wrong" with its error and is never timed.

One rule, in every dtype, forward and gradients: an implementation may not be worse than the
reference run in the row's dtype (the case's baseline implementation, the spec computed the way
a user would compute it in that precision) by more than FACTOR, tensor by tensor:

    ||got - truth|| / ||truth|| <= FACTOR * max(e_ref, FLOOR[dtype])

where e_ref = ||ref - truth|| / ||truth|| is the reference's own relative error in that dtype,
measured on the same inputs (2-norms over the tensor: a max over a few elements, the gradient
of a bias vector say, is too noisy to compare by a small factor), and FLOOR keeps the bound
meaningful where the reference happens to be exact (a copy, a lookup) or unusually lucky (in
float32, a table gradient summed over 2 B H L^2 scores by the tutorial's (B, H, L, L, D) path
reaches 3.9e-6 at L = 1024, 17x the reference's diagonal sums: a summation order, not an
error, hence FLOOR 1e-5 there). FACTOR = 3: measured
under the interpreter, legitimate implementations (SDPA, torch.compile, the tutorial's
formulas) reach 2.1x in float16 and bfloat16 gradients at small sizes; a 1% error in bfloat16
is 5x the reference's. The baseline itself is checked against the dtype's fixed
TOLERANCE (the same relative 2-norm): it defines the bound, so it cannot be held to it.
A tensor whose truth is zero up to float64 rounding (max |truth| under ZERO times the largest
compared tensor's, e.g. the gradient of a key bias, which softmax cancels) has no relative
error to speak of: it must be within TOLERANCE of zero, relative to that largest tensor.

Only the first and last sequences of a batch are compared (`rows`): the upstream gradient of the
backward check is zero on the other sequences, so a table's or a parameter's gradient then
comes from the compared sequences alone and matches a truth computed on them.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from bench.registry import Case, Output, as_tuple

FACTOR = 3.0
FLOOR = {torch.float64: 1e-12, torch.float32: 1e-5, torch.float16: 1e-4, torch.bfloat16: 1e-3}
TOLERANCE = {torch.float64: 1e-9, torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 5e-2}
ZERO = 1e-6


@dataclass
class Truth:
    """The float64 answer for one point: outputs on the checked rows, and (backward modes) the
    gradient of every leaf for the upstream gradients `upstream` (full batch, the row's dtype,
    zero outside the checked rows)."""

    outputs: tuple[Tensor, ...]
    grads: dict[str, Tensor] | None = None
    upstream: tuple[Tensor, ...] | None = None


@dataclass
class Errors:
    """Per compared tensor ("out0", "out1", "d q", "d params.w_q.weight", ...): max |got - truth|
    and ||got - truth|| / ||truth||; `zero`: the tensors whose truth is zero up to rounding, with
    their max |got| relative to the largest tensor's max |truth|."""

    abs: dict[str, float]
    rel: dict[str, float]
    zero: dict[str, float]

    @property
    def worst(self) -> float:
        return max(self.abs.values(), default=0.0)


def leaves(inputs: dict, names: tuple[str, ...]) -> dict[str, Tensor]:
    """The tensors named in `names` that the inputs have, a dict entry (a module's parameters)
    flattened as "params.w_q.weight"."""
    out = {}
    for name in (n for n in names if n in inputs):  # a point may build only some of them
        value = inputs[name]
        if isinstance(value, dict):
            out.update({f"{name}.{k}": v for k, v in value.items()})
        else:
            out[name] = value
    return out


def select(inputs: dict, case: Case, rows: Tensor | None) -> dict:
    """The checked rows of the batched inputs (a dict of them, e.g. per-token parameters:
    each entry's rows)."""
    if rows is None:
        return inputs

    def pick(v):
        if isinstance(v, dict):
            return {name: t.index_select(0, rows) for name, t in v.items()}
        return v.index_select(0, rows)

    return {k: pick(v) if k in case.batched else v for k, v in inputs.items()}


def float64_inputs(inputs: dict, case: Case, rows: Tensor | None, grad: bool) -> dict:
    """The checked rows of every input in float64; with grad, the grad inputs as leaves
    (parameters as nn.Parameter, so a module can adopt them)."""

    def cast(value, leaf: bool):
        if isinstance(value, dict):
            return {k: cast(v, leaf) for k, v in value.items()}
        if not isinstance(value, Tensor) or not value.is_floating_point():
            return value
        t = value.detach().to(torch.float64)
        if isinstance(value, nn.Parameter):
            return nn.Parameter(t, requires_grad=leaf)
        return t.requires_grad_(leaf)

    picked = select(inputs, case, rows)
    return {k: cast(v, grad and k in case.grad_inputs) for k, v in picked.items()}


def upstream(
    outputs: tuple[Tensor, ...], batch: int, rows: Tensor | None, dtype, generator: torch.Generator
) -> tuple[Tensor, ...]:
    """Random upstream gradients in the row's dtype, full batch, zero outside the checked rows
    (outputs: the truth's, on the checked rows)."""
    grads = []
    for o in outputs:
        g = torch.randn(o.shape, dtype=torch.float32, generator=generator).to(o.device, dtype)
        if rows is not None:
            full = torch.zeros((batch, *o.shape[1:]), dtype=dtype, device=o.device)
            g = full.index_copy_(0, rows, g)
        grads.append(g)
    return tuple(grads)


def truth(
    reference,
    inputs: dict,
    case: Case,
    rows: Tensor | None,
    batch: int,
    dtype,
    grad: bool,
    seed: int = 0,
) -> Truth:
    """float64 outputs (and, with grad, gradients) of `reference` on the checked rows."""
    x64 = float64_inputs(inputs, case, rows, grad)
    if not grad:
        with torch.no_grad():
            return Truth(tuple(t.detach() for t in as_tuple(reference(x64))))
    with torch.enable_grad():
        outs = as_tuple(reference(x64))
    gen = torch.Generator().manual_seed(seed)
    up = upstream(outs, batch, rows, dtype, gen)
    sel = [g if rows is None else g.index_select(0, rows) for g in up]
    named = {k: v for k, v in leaves(x64, case.grad_inputs).items() if v.requires_grad}
    found = torch.autograd.grad(
        outs, list(named.values()), [g.double() for g in sel], allow_unused=True
    )
    grads = {k: g for k, g in zip(named, found, strict=True) if g is not None}
    return Truth(tuple(t.detach() for t in outs), grads, up)


def measure_errors(
    got: Output,
    want: Truth,
    grads: dict[str, Tensor] | None,
    rows: Tensor | None,
    batched: tuple[str, ...],
) -> Errors | str:
    """Errors of an implementation's outputs (all batch rows, compared on the checked ones) and
    gradients against the truth; or why they cannot be compared (shape, count, NaN, missing)."""
    got_t = as_tuple(got)
    if rows is not None:
        got_t = tuple(o.index_select(0, rows) for o in got_t)
    pairs = {f"out{i}": (g, w) for i, (g, w) in enumerate(zip(got_t, want.outputs, strict=False))}
    if len(got_t) != len(want.outputs):
        return f"{len(got_t)} outputs, expected {len(want.outputs)}"
    if want.grads is not None:
        for name, w in want.grads.items():
            g = (grads or {}).get(name)
            if g is None:
                return f"no gradient for {name}"
            if rows is not None and name.split(".")[0] in batched:
                g = g.index_select(0, rows)
            pairs[f"d {name}"] = (g, w)
    errs = Errors({}, {}, {})
    scales = {n: w.abs().max().item() if w.numel() else 0.0 for n, (_, w) in pairs.items()}
    largest = max(scales.values(), default=0.0)
    for name, (g, w) in pairs.items():
        if g.shape != w.shape:
            return f"{name}: shape {tuple(g.shape)}, want {tuple(w.shape)}"
        g64 = g.detach().to(device=w.device, dtype=torch.float64)
        if not torch.isfinite(g64).all():
            return f"{name} has non-finite values"
        err = (g64 - w).abs().max().item() if w.numel() else 0.0
        errs.abs[name] = err
        if scales[name] <= ZERO * largest:
            errs.zero[name] = g64.abs().max().item() / largest if largest > 0 else 0.0
        else:
            errs.rel[name] = ((g64 - w).norm() / w.norm()).item()
    return errs


def verdict(errs: Errors, ref: Errors | None, dtype) -> tuple[bool, float | None, str]:
    """(passed, worst ratio of this error to the bound's reference error, message). ref None:
    this is the reference (or it did not run): the dtype's fixed TOLERANCE."""
    tol = TOLERANCE[dtype]
    for name, size in errs.zero.items():
        if size > tol:
            return False, None, f"{name}: {size:.2e} of the largest tensor where the truth is 0"
    if ref is None:
        bad = [n for n, r in errs.rel.items() if r > tol]
        msg = f"{bad[0]}: relative error {errs.rel[bad[0]]:.2e} > {tol:g}" if bad else ""
        return not bad, None, msg
    worst, why = 0.0, ""
    for name, rel in errs.rel.items():
        base = max(ref.rel.get(name, 0.0), FLOOR[dtype])
        ratio = rel / base
        if ratio > worst:
            worst = ratio
        if ratio > FACTOR and not why:
            why = (
                f"{name}: relative error {rel:.2e}, {ratio:.1f}x the reference's "
                f"{ref.rel.get(name, 0.0):.2e} in this dtype (limit {FACTOR:g}x)"
            )
    return not why, worst, why
