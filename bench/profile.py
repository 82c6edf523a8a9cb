"""`python -m bench profile=true cases=<case> impls=<impl> ...`: profile one point.

Takes the first point, dtype, device and mode of the plan and the first selected case and impl;
writes a Chrome/Perfetto trace (trace.json), a top-operators table (top_ops.md), and on CUDA
kernels.md: every GPU kernel launch in the trace with its grid, block, registers per thread and
shared memory (as the profiler recorded them), then the registers, spills and warps of each
compiled Triton kernel of the `kernels` package.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from bench.cases import CASES
from bench.config import DTYPES, Plan
from bench.runner import timed_call


def run(plan: Plan, cfg, out_dir: Path) -> None:
    case = CASES[plan.cases[0]]
    impl_name = plan.impls[0] if plan.impls else case.baseline
    if impl_name not in case.impls:
        raise SystemExit(f"impls: {impl_name!r} is not an implementation of {case.name}")
    device = torch.device(plan.devices[0])
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("device=cuda: CUDA is not available on this machine")
    point, dtype, mode = plan.points[0], DTYPES[plan.dtypes[0]], plan.modes[0]
    torch.manual_seed(cfg.seed)
    inputs = case.build(point, device, dtype)
    for name in case.grad_inputs:
        inputs[name].requires_grad_(mode != "forward")
    call = timed_call(case.impls[impl_name].make(inputs), mode)
    for _ in range(3):  # warm-up: compilation and allocator outside the trace
        call()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities, record_shapes=True, profile_memory=True) as prof:
        for _ in range(5):
            call()
        if device.type == "cuda":
            torch.cuda.synchronize()
    prof.export_chrome_trace(str(out_dir / "trace.json"))
    sort = "self_cuda_time_total" if device.type == "cuda" else "self_cpu_time_total"
    title = f"{case.name} / {impl_name} / {mode} / {plan.dtypes[0]} / {device.type} / {point}"
    table = prof.key_averages().table(sort_by=sort, row_limit=25)
    (out_dir / "top_ops.md").write_text(f"# {title}\n\n```\n{table}\n```\n")
    if device.type == "cuda":
        launches = kernel_launches(out_dir / "trace.json")
        (out_dir / "kernels.md").write_text(launches + "\n" + _triton_kernels())
    print(f"profile of {title} -> {out_dir}/trace.json, top_ops.md")


def kernel_launches(trace: Path) -> str:
    """A table of the distinct GPU kernel launches in a Chrome trace: name, grid, block,
    registers per thread, shared memory, count (from the profiler's kernel events' args)."""
    import json

    events = json.loads(Path(trace).read_text()).get("traceEvents", [])
    seen: dict[tuple, int] = {}
    for e in events:
        if e.get("cat") != "kernel":
            continue
        args = e.get("args", {})
        key = (e.get("name", "?")[:60], str(args.get("grid")), str(args.get("block")),
               args.get("registers per thread"), args.get("shared memory"))  # fmt: skip
        seen[key] = seen.get(key, 0) + 1
    lines = ["| kernel | grid | block | registers/thread | shared bytes | launches |",
             "|---|---|---|---|---|---|"]  # fmt: skip
    lines += [f"| {k[0]} | {k[1]} | {k[2]} | {k[3]} | {k[4]} | {n} |" for k, n in seen.items()]
    return "\n".join(lines) + "\n"


def _triton_kernels() -> str:
    """Registers, spills and warps of every compiled Triton kernel of the `kernels` package."""
    import kernels.relbias
    import kernels.rope

    lines = ["| kernel | registers | spills | warps | shared bytes |", "|---|---|---|---|---|"]
    relbias = kernels.relbias
    for fn in (kernels.rope._rope_kernel, relbias._relbias_fwd_kernel,
               relbias._relbias_bwd_dkdv_kernel, relbias._relbias_bwd_dq_kernel):  # fmt: skip
        for caches in getattr(fn, "device_caches", {}).values():
            for compiled in caches[0].values():
                meta = compiled.metadata
                lines.append(f"| {fn.__name__} | {getattr(compiled, 'n_regs', '?')} | "
                             f"{getattr(compiled, 'n_spills', '?')} | {meta.num_warps} | "
                             f"{meta.shared} |")  # fmt: skip
    return "\n".join(lines) + "\n"
