"""What the case files share: parameters built once per point and bound into every
implementation's module, and the cost of forward + backward."""

from __future__ import annotations

import os

import torch
from torch import nn

from bench.checks import positive_ints
from bench.registry import Cost, Impl, Knob, Point

# Where the Triton kernels run: a GPU, or also the CPU when Triton's interpreter is on (set
# before triton is imported): slow, for testing a sweep's plumbing (rows say so).
INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
TRITON_DEVICES = ("cpu", "cuda") if INTERPRET else ("cuda",)
TRITON_NOTE = "Triton's interpreter on the CPU" if INTERPRET else ""
TRITON_ELSEWHERE = (
    "on a CPU, TRITON_INTERPRET=1 (set before the run) runs it under Triton's "
    "interpreter: slowly, to check it, not to time it"
)


NATIVE_NOTE = "posenc_kernels' C kernel on the CPU: one pass"


def native_impl(make, grad: bool = True, note: str = "") -> Impl:
    """The kernels' CPU path (posenc_kernels/rope_cpu.py): make's call run within native_cpu(),
    so that it is the C kernel even under the interpreter; on the CPU only, and said skipped
    where the machine has no C compiler to build it at first use."""

    def make_native(inputs):
        from posenc_kernels._runtime import native_cpu

        with native_cpu():
            call = make(inputs)

        def native():
            with native_cpu():
                return call()

        return native

    note = f"{NATIVE_NOTE}; {note}" if note else NATIVE_NOTE
    return Impl(make_native, devices=("cpu",), note=note, grad=grad, supports=_compiler_problem)


def _compiler_problem(point) -> str | None:
    from posenc_kernels import rope_cpu

    try:
        rope_cpu.library()
    except RuntimeError as exc:
        return str(exc)
    return None


def triton_kernels():
    """The kernels package, imported when a triton implementation is built, never when the cases
    are: the cases, the reports and the references then run where Triton is absent (macOS)."""
    import posenc_kernels

    return posenc_kernels


# Grouped-query attention, shared by the rotary and the attention cases.
NUM_KV_HEADS = Knob(
    "num_kv_heads",
    None,
    "grouped-query attention: k (and v) with this many heads (null: num_heads; must divide it)",
    lambda value, key: positive_ints(value, key, allow_none=True),
    fits=lambda kv, point: (
        None if point.num_heads % kv == 0 else f"does not divide num_heads={point.num_heads}"
    ),
)


def kv_heads(point: Point) -> int:
    """The point's k and v heads: num_kv_heads, or num_heads where it is unset."""
    return point.num_kv_heads or point.num_heads


# The backend of every compiled implementation (tests swap in a counting one).
COMPILE_BACKEND = "inductor"


def compile_impl(fn):
    """torch.compile as every compiled implementation uses it: static shapes, so each point is
    compiled for its own shape as a user running that shape would get, whatever points came
    before it (with dynamic=None a code object's second shape turns it dynamic for the rest of
    the sweep, and rows would depend on the order of the plan). The runner raises Dynamo's
    recompile limit and turns a hit into a row error (bench/run/runner.py: RECOMPILE_LIMIT)."""
    return torch.compile(fn, dynamic=False, backend=COMPILE_BACKEND)


def parameters(module: nn.Module, device, dtype) -> dict[str, nn.Parameter]:
    """A module's parameters as new nn.Parameters in the row's dtype: built once per point (the
    same seeded weights for every implementation) and bound into each one's module."""
    return {
        name: nn.Parameter(p.detach().to(device=device, dtype=dtype))
        for name, p in module.named_parameters()
    }


def bind(module: nn.Module, params: dict[str, nn.Parameter]) -> nn.Module:
    """Make `module` use the given tensors as its parameters, by name, without a copy: every
    implementation of a point computes with, and differentiates, the same leaves."""
    names = {name for name, _ in module.named_parameters()}
    if names != set(params):
        raise ValueError(f"parameters differ: module has {sorted(names)}, given {sorted(params)}")
    for name, p in params.items():
        owner, _, leaf = name.rpartition(".")
        setattr(module.get_submodule(owner), leaf, p)
    return module


def gqa(inputs) -> bool:
    """SDPA's and FlexAttention's own switch for k and v with fewer heads than q (B, H, L, D)."""
    return inputs["k"].shape[1] != inputs["q"].shape[1]


def per_mode(forward: Cost, backward: Cost, mode: str) -> Cost:
    """forward+backward costs their sum (of the same tokens)."""
    if mode == "forward":
        return forward
    if mode == "backward":
        return backward
    return Cost(forward.bytes + backward.bytes, forward.flops + backward.flops, forward.tokens)


def itemsize(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()
