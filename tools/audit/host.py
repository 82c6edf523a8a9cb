"""Host work per kernel call, measured on the CPU: what a GPU call spends before its kernels run.

The kernels' launches are stubbed (Triton's interpreter runs nothing), so what is left is the
launcher's Python and the torch operations it dispatches around the kernels: argument checks,
index tables, temporaries, casts. On a GPU each of those torch operations is one more launch
(about 5 us of host time) and one more pass over its bytes; here they are counted (aten
operations and allocations per call, machine-independent) and timed (microseconds per call on
this CPU, a proxy: medians of repeated calls at a small shape, where the kernels' work would not
hide the host's).

    TRITON_INTERPRET=1 python -m tools.audit.host [--reps 200]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from bench.tables import markdown_table

# metadata-only operations: no kernel launch on a GPU
_FREE = {
    "view",
    "t",
    "transpose",
    "permute",
    "expand",
    "as_strided",
    "detach",
    "alias",
    "_unsafe_view",
    "unsqueeze",
    "squeeze",
    "select",
    "slice",
    "reshape",
}
_ALLOC = {"empty", "empty_strided", "empty_like", "zeros", "zeros_like", "new_empty"}


class _Count(TorchDispatchMode):
    """aten operations dispatched: launches (those that run a kernel) and allocations."""

    def __init__(self):
        super().__init__()
        self.launches, self.allocs, self.names = 0, 0, []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if name in _ALLOC:
            self.allocs += 1
        if name not in _FREE and name not in _ALLOC:
            self.launches += 1
            self.names.append(name)
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def stubbed_launches():
    """Every Triton kernel launch does nothing (under TRITON_INTERPRET=1); yields a list that
    each launch appends its kernel's name to. The JIT's own launch cost (binding the arguments,
    some microseconds a launch on a GPU) is not in the times: count the launches instead."""
    from triton.runtime.interpreter import InterpretedFunction

    run, names = InterpretedFunction.run, []
    InterpretedFunction.run = lambda self, *a, **k: names.append(self.fn.__name__)
    try:
        yield names
    finally:
        InterpretedFunction.run = run


def _families():
    from bench.cases.families import FAMILIES

    return FAMILIES.values()


def _calls(shape=(1, 2, 64, 64)):
    """name -> (forward call, backward call or None) at a small shape, float32 on the CPU."""
    import posenc_kernels
    from posenc_kernels import relbias

    b, h, n, d = shape
    g = torch.Generator().manual_seed(0)

    def rand(*s, grad=True, dtype=torch.float32):
        return torch.randn(*s, generator=g).to(dtype).requires_grad_(grad)

    half = dict(dtype=torch.bfloat16)  # the GPU's usual dtype: its casts are copies

    q, k, v = (rand(b, h, n, d, **half) for _ in range(3))
    torch.manual_seed(0)  # the learned tables' initialization
    tables = {  # every family as the cases declare it, its learned tables trained
        f.name: f.kernel_args(f.inputs(h, d, "cpu", torch.float32, batch=b, keys=n))
        for f in _families()
    }
    needs_causal = {f.name: f.needs_causal for f in _families()}
    out = {}
    for family, kw in tables.items():
        for causal in (True,) if needs_causal[family] else (False, True):

            def fwd(kw=kw, causal=causal):
                return relbias.relative_attention(q, k, v, causal=causal, **kw)

            out[f"attention {family}{' causal' if causal else ''}"] = fwd
    k1, v1 = (rand(b, 1, n, d, **half) for _ in range(2))  # grouped-query: one kv head
    alibi = tables["alibi"]
    out["attention alibi gqa"] = lambda: relbias.relative_attention(q, k1, v1, **alibi)
    x, y = rand(b, n, h, d, **half), rand(b, n, h, d, **half)
    cos, sin = torch.randn(n, d // 2, generator=g), torch.randn(n, d // 2, generator=g)
    out["rope"] = lambda: posenc_kernels.apply_rope(x, y, cos, sin)
    return out


def _backward_of(fn):
    """The backward alone: torch.autograd.grad of one forward's graph (kept), into fresh
    tensors (no accumulation into .grad, which a training step would add anyway)."""
    outs = fn()
    outs = outs if isinstance(outs, tuple) else (outs,)
    grads = [torch.ones_like(o) for o in outs]
    leaves = [t for t in _leaves(outs) if t.requires_grad]
    return lambda: torch.autograd.grad(outs, leaves, grads, retain_graph=True)


def _leaves(outs) -> list:
    """The leaf tensors a graph reaches (the inputs and tables that require grad)."""
    seen, found, stack = set(), [], [o.grad_fn for o in outs]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        if hasattr(node, "variable"):
            found.append(node.variable)
        stack += [n for n, _ in node.next_functions]
    return found


def measure(reps: int = 200) -> list[dict]:
    """A row per call and pass: aten launches, allocations, median microseconds (and IQR)."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        raise RuntimeError("run with TRITON_INTERPRET=1 (the launches are stubbed there)")
    rows = []
    with stubbed_launches() as triton_launches:
        for name, fwd in _calls().items():
            for part, fn in (("forward", fwd), ("backward", _backward_of(fwd))):
                fn()  # warm: first-call caches
                del triton_launches[:]
                with _Count() as c:
                    fn()
                kernels = len(triton_launches)
                times = []
                for _ in range(reps):
                    t0 = time.perf_counter()
                    fn()
                    times.append((time.perf_counter() - t0) * 1e6)
                q1, med, q3 = statistics.quantiles(times, n=4)
                rows.append(
                    dict(
                        call=name,
                        part=part,
                        kernels=kernels,
                        launches=c.launches,
                        allocs=c.allocs,
                        us=med,
                        iqr=(q1, q3),
                        ops=" ".join(sorted(set(c.names))),
                    )
                )
    return rows


def markdown(rows: list[dict]) -> str:
    header = [
        "call",
        "part",
        "Triton kernels",
        "torch launches",
        "allocations",
        "host us (IQR)",
        "torch ops",
    ]
    body = [
        [
            r["call"],
            r["part"],
            r["kernels"],
            r["launches"],
            r["allocs"],
            f"{r['us']:.0f} ({r['iqr'][0]:.0f}-{r['iqr'][1]:.0f})",
            r["ops"],
        ]
        for r in rows
    ]
    return "\n".join(markdown_table(header, body)) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=200)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    print(markdown(measure(args.reps)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
