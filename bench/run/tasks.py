"""One row's task, and the calls the runner makes of an implementation: once for the check
(outputs and gradients), then the timed call of each mode.

What a mode times is what the implementation's users pay:
  forward           the call under torch.no_grad();
  backward          torch.autograd.grad of a graph built once, outside the timed region;
  forward+backward  the call, then torch.autograd.grad.
The gradients are asked with torch.autograd.grad for every leaf the users would train (the
case's grad inputs, tables and parameters included), so no sample also adds into `.grad`.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

import torch
from torch import Tensor

from bench.registry import KNOBS, Call, Case, Impl, Point, as_call, as_tuple
from bench.run import check


@dataclass(frozen=True, eq=False)  # hashed by identity: a dict key per row
class Task:
    """What one row measures."""

    case: Case
    impl: str
    mode: str
    point: Point
    device: torch.device
    dtype: torch.dtype

    @property
    def grad(self) -> bool:
        return self.mode != "forward"

    @property
    def spec(self) -> Impl:
        return self.case.impls[self.impl]

    def row(self, run_id: str) -> dict:
        """The row's identity and provenance columns."""
        p, dev = self.point, self.device
        return dict(
            run_id=run_id,
            case=self.case.name,
            level=self.case.level,
            baseline=self.case.baseline,
            impl=self.impl,
            mode=self.mode,
            device=dev.type,
            device_name=torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
            dtype=str(self.dtype).removeprefix("torch."),
            batch=p.batch,
            seq_len=p.seq_len,
            d_model=p.d_model,
            num_heads=p.num_heads,
            head_dim=p.head_dim,
            params=row_params(p, self.case.knob_names),
            model=(p.model or "") if "model" in self.case.knob_names else "",
            threads=torch.get_num_threads(),
            timestamp=time.strftime("%Y-%m-%dT%H:%M:%S"),
        )


def row_params(point, knobs: tuple[str, ...]) -> str:
    """The `params` column: the point's knobs as JSON; where a set knob decides others of the
    case (Knob.set_by: a model= point of a RoPE case), what it describes in their place (the
    schedule its tables were built with, the model's)."""
    if not knobs:
        return json.dumps({})
    deciders = {KNOBS[k].set_by for k in knobs} - {None}
    extra = {}
    for name in sorted(deciders & set(knobs)):
        knob = KNOBS[name]
        if knob.describe is not None and knob.is_set(getattr(point, name)):
            extra.update(knob.describe(point))
    if not extra:
        return point.params(knobs)
    return json.dumps(dict(sorted({**json.loads(point.params(knobs)), **extra}.items())))


def leaves_of(call: Call, inputs: dict, case: Case) -> dict[str, Tensor]:
    """The tensors the call differentiates: its own (an impl with private inputs) or the case's
    grad inputs, the ones that require grad."""
    named = call.leaves if call.leaves is not None else check.leaves(inputs, case.grad_inputs)
    return {k: v for k, v in named.items() if v.requires_grad}


def run_for_check(call: Call, leaves: dict[str, Tensor], grad: bool, upstream):
    """-> (outputs, gradients by leaf name or None): one call, with autograd in the backward
    modes (the upstream gradients of the check: zero outside its rows)."""
    if not grad:
        with torch.no_grad():
            return call.fn(), None
    with torch.enable_grad():
        out = as_tuple(call.fn())
    pairs = [(o, _like(g, o)) for o, g in zip(out, upstream, strict=True) if o.requires_grad]
    if not pairs:
        raise RuntimeError("no output requires grad: cannot run backward")
    found = torch.autograd.grad(
        [o for o, _ in pairs], list(leaves.values()), [g for _, g in pairs], allow_unused=True
    )
    return tuple(o.detach() for o in out), {
        k: g for k, g in zip(leaves, found, strict=True) if g is not None
    }


def _like(g: Tensor, out: Tensor) -> Tensor:
    """g laid out with out's strides (the upstream gradient an autograd user passes is shaped
    like the output: the same for the check as for the timing)."""
    return g if g.stride() == out.stride() else torch.empty_like(out).copy_(g)


def timed_call(call: Call, leaves: dict[str, Tensor], mode: str, seed: int = 0):
    """The zero-argument call that `mode` times (see the module docstring). Its upstream
    gradients are random and full (the check's are zero outside its rows), made here, once."""
    fn = call.fn
    if mode == "forward":

        def forward():
            with torch.no_grad():
                return fn()

        return forward
    if not leaves:
        raise RuntimeError("nothing requires grad: cannot time backward")
    targets = list(leaves.values())
    with torch.enable_grad():
        outs = [o for o in as_tuple(fn()) if o.requires_grad]
    gen = torch.Generator(device=outs[0].device).manual_seed(seed)
    # with each output's own strides (empty_like keeps them): a gradient in another layout
    # would make an implementation that needs its output's copy it inside the timed call
    grads = [torch.empty_like(o).normal_(generator=gen) for o in outs]
    if mode == "backward":  # the forward graph is built once, outside the timed region
        return _backward(outs, targets, grads)
    del outs

    def forward_backward():
        out = [o for o in as_tuple(fn()) if o.requires_grad]
        return torch.autograd.grad(out, targets, grads, allow_unused=True)

    return forward_backward


def _backward(outs, targets, grads):
    def backward():
        return torch.autograd.grad(outs, targets, grads, retain_graph=True, allow_unused=True)

    return backward


def make_call(task: Task, inputs: dict) -> Call:
    return as_call(task.spec.make(inputs))
